"""The CI recipes in docs/ work as written: GitHub workflows pass actionlint, the GitLab job's
script and the plain-shell script run against a tuned kernel, and the pre-commit hook's entry
gates a real ACF."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import yaml
from helpers import TINY_KERNEL, clean_env, compileiq_command, run_cli, venv_tool

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
SHIPPED_ACTIONLINT_CONFIG = DOCS / "ci" / "actionlint.yaml"
_BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Block:
    page: str
    language: str
    text: str

    @property
    def data(self) -> Any:
        return yaml.safe_load(self.text)


def blocks(language: str, pages: list[Path] | None = None) -> list[Block]:
    found = []
    for page in pages or sorted(DOCS.glob("*.md")):
        for lang, text in _BLOCK.findall(page.read_text(encoding="utf-8")):
            if lang == language:
                found.append(Block(page.name, lang, text))
    return found


def is_workflow(block: Block) -> bool:
    data = block.data
    return isinstance(data, dict) and "jobs" in data and ("on" in data or True in data)  # YAML 1.1: on -> True


def actionlint_command() -> str:
    return venv_tool("actionlint", "pip install -e '.[test]' installs it")


# --- GitHub Actions --------------------------------------------------------------------------------


def test_every_yaml_block_of_the_github_recipe_is_a_whole_workflow() -> None:
    found = blocks("yaml", [DOCS / "ci-github-actions.md"])
    assert len(found) >= 2
    for block in found:
        assert is_workflow(block), f"{block.page}: not a whole workflow (actionlint cannot check it):\n{block.text}"


def test_every_workflow_in_docs_passes_actionlint(tmp_path: Path) -> None:
    workflows = [b for b in blocks("yaml") if is_workflow(b)]
    assert workflows
    config = SHIPPED_ACTIONLINT_CONFIG  # the file the recipe tells users to copy to .github/actionlint.yaml
    files = []
    for number, block in enumerate(workflows):
        path = tmp_path / f"{block.page.removesuffix('.md')}-{number}.yml"
        path.write_text(block.text)
        files.append(str(path))
    done = subprocess.run([actionlint_command(), "-no-color", "-oneline", "-shellcheck=", "-pyflakes=",
                           "-config-file", str(config), *files],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_shipped_actionlint_config_is_the_one_the_recipe_names() -> None:
    """Issue 25, item 4: the recipe named an actionlint config that nobody shipped."""
    data = yaml.safe_load(SHIPPED_ACTIONLINT_CONFIG.read_text())
    assert data == {"self-hosted-runner": {"labels": ["gpu"]}}
    gpu_jobs = [job for b in blocks("yaml", [DOCS / "ci-github-actions.md"]) for job in b.data["jobs"].values()
                if "gpu" in job.get("runs-on", [])]
    assert gpu_jobs, "the GPU workflow uses the label the config declares"
    assert "[ci/actionlint.yaml](ci/actionlint.yaml)" in (DOCS / "ci-github-actions.md").read_text()


def test_the_recipes_name_no_tag_that_does_not_exist() -> None:
    """A recipe pinned compileiq to `v0.1.0`, a tag this repository never had; `git clone --branch`
    cannot take the commit SHA instead. Every tag-like ref a CI page names must exist."""
    tags = set(subprocess.run(["git", "tag"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split())
    for page in sorted(DOCS.glob("ci*.md")):
        text = page.read_text()
        named = set(re.findall(r"(?<![\w.@/-])v\d+\.\d+(?:\.\d+)?\b", text))
        assert named <= tags, f"{page.name} names tags that do not exist: {sorted(named - tags)}"
        assert not re.search(r"clone [^\n]*--branch[^\n]*(REF|COMMIT)", text), f"{page.name}: --branch takes no commit SHA"


def test_the_gitlab_install_line_installs_a_commit(tmp_path: Path) -> None:
    """The before_script's `pip install` of `git+REPOSITORY@COMMIT`, run with this repository and its
    current commit (offline: no dependencies, no index, the build backend of this environment)."""
    (block,) = blocks("yaml", [DOCS / "ci-gitlab.md"])
    job = block.data["perf-gate"]
    [line] = [line for line in job["before_script"] if "pip install" in line]
    install = line.split("&&")[-1].strip()
    assert install == '/opt/ciq/bin/pip install "git+$COMPILEIQ_REPOSITORY@$COMPILEIQ_COMMIT"', install
    assert job["variables"]["COMPILEIQ_COMMIT"] == "REPLACE_WITH_THE_FULL_COMMIT_SHA"
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.strip()
    command = install.replace("/opt/ciq/bin/pip", f"{shlex.quote(sys.executable)} -m pip") + (
        f" --no-deps --no-index --no-build-isolation --target {shlex.quote(str(tmp_path / 'site'))}")
    env = clean_env({"COMPILEIQ_REPOSITORY": REPO.as_uri(), "COMPILEIQ_COMMIT": commit})
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    installed = tmp_path / "site" / "compileiq"
    assert (installed / "cli" / "__init__.py").is_file() and any((installed / "search_spaces").glob("*.toml"))


def test_actionlint_rejects_the_concurrency_expression_the_recipe_used_to_have(tmp_path: Path) -> None:
    old = ("on: [push]\njobs:\n  gate-gpu:\n    runs-on: ubuntu-24.04\n"
           "    concurrency: { group: gpu-${{ runner.name }}, cancel-in-progress: false }\n"
           "    steps:\n      - run: nvidia-smi -L\n")
    (tmp_path / "old.yml").write_text(old)
    done = subprocess.run([actionlint_command(), "-no-color", "-oneline", "-shellcheck=", "-pyflakes=",
                           str(tmp_path / "old.yml")], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1 and "could not parse as YAML" in done.stdout, done.stdout + done.stderr


def _pip_install_targets(text: str) -> list[list[str]]:
    """What each `pip install` in a page installs (options and comments left out)."""
    found = []
    for args in re.findall(r"pip install ([^`\n#;|&]*)", text):
        found.append([a.strip('"\'') for a in args.split() if not a.startswith("-")])
    return found


def test_no_recipe_installs_compileiq_from_the_package_index() -> None:
    """compileiq-tuner is not published: every recipe installs a checkout (a path)."""
    installs = [t for page in sorted(DOCS.glob("ci-*.md")) for t in _pip_install_targets(page.read_text())]
    assert len(installs) >= 5
    for targets in installs:
        assert targets and all(t == "." or t.startswith(("./", "/", "$", "git+$")) for t in targets), targets


# --- a tuned kernel in a git repository, as a user's CI sees it -------------------------------------


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("user-repo")
    (root / "kernels").mkdir()
    (root / "kernels" / "scale.cu").write_text(TINY_KERNEL)
    db = f"sqlite:///{root.parent / (root.name + '.db')}"  # outside the repository
    done = run_cli(["tune", "kernels/scale.cu", "--objective", "instructions", "--budget", "2",
                    "--strategy", "exhaustive", "--only", "ptxas.opt_level", "--workers", "local",
                    "--db", db, "--out", "kernels/scale.acf.toml"], cwd=root)
    assert done.returncode == 0, done.describe()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "kernels"], cwd=root, check=True)
    return root


def _env_with_compileiq() -> dict[str, str]:
    """compileiq on PATH (the install step of a recipe is what a test leaves out)."""
    bin_dir = str(Path(compileiq_command()).parent)
    return clean_env({"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"})


def _env_without_compileiq() -> dict[str, str]:
    bin_dir = str(Path(compileiq_command()).parent)
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != bin_dir and
            not (Path(p) / "compileiq").exists()]
    env = clean_env({"PATH": os.pathsep.join(path)})
    env.pop("COMPILEIQ_SRC", None)
    return env


def _fresh_reports(root: Path) -> None:
    for name in ("gate.xml", "gate.md"):
        (root / name).unlink(missing_ok=True)


def _shell_script(tmp_path: Path) -> Path:
    (found,) = blocks("bash", [DOCS / "ci-shell.md"])
    script = tmp_path / "compileiq-gate.sh"
    script.write_text(found.text)
    return script


def test_the_shell_recipe_gates_every_committed_acf(project: Path, tmp_path: Path) -> None:
    _fresh_reports(project)
    done = subprocess.run(["bash", str(_shell_script(tmp_path))], cwd=project, env=_env_with_compileiq(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "kernels/scale.acf.toml" in done.stdout and "PASS" in done.stdout
    assert "<testsuite" in (project / "gate.xml").read_text() and (project / "gate.md").read_text()


def test_the_shell_recipe_passes_the_gates_exit_status_on(project: Path, tmp_path: Path) -> None:
    broken = project / "kernels" / "broken.acf.toml"
    data = tomllib.loads((project / "kernels" / "scale.acf.toml").read_text())
    data["args"]["argv"].append("-Xcompiler=-fPIC")
    broken.write_text(tomli_w.dumps(data))
    subprocess.run(["git", "add", str(broken)], cwd=project, check=True)
    try:
        done = subprocess.run(["bash", str(_shell_script(tmp_path))], cwd=project, env=_env_with_compileiq(),
                              capture_output=True, text=True, timeout=300, check=False)
    finally:
        subprocess.run(["git", "rm", "-q", "-f", str(broken)], cwd=project, check=True)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "-Xcompiler=-fPIC" in done.stderr


def test_the_shell_recipe_without_compileiq_says_how_to_install_it(project: Path, tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(_shell_script(tmp_path))], cwd=project, env=_env_without_compileiq(),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr  # bad input: it exited 1, which CI reads as a regression
    assert "set COMPILEIQ_SRC to a checkout of compileiq" in done.stderr
    assert not (project / ".ciq").exists()


# --- GitLab CI ----------------------------------------------------------------------------------------


def test_the_gitlab_job_runs_its_script_as_written(project: Path) -> None:
    (block,) = blocks("yaml", [DOCS / "ci-gitlab.md"])
    job = block.data["perf-gate"]
    assert set(job) >= {"image", "before_script", "script", "artifacts"}
    assert job["artifacts"]["reports"]["junit"] == "gate.xml" and job["artifacts"]["when"] == "always"
    _fresh_reports(project)
    script = "set -e\n" + "\n".join(job["script"])  # as a GitLab runner runs them (bash, stop at the first failure)
    done = subprocess.run(["bash", "-c", script], cwd=project, env=_env_with_compileiq(), capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert all((project / name).is_file() for name in job["artifacts"]["paths"])


def _empty_repo(tmp_path: Path) -> Path:
    root = tmp_path / "no acf yet"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


def _run_gate_script(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, env=_env_with_compileiq(),
                          capture_output=True, text=True, timeout=300, check=False)


def _gitlab_script() -> str:
    (block,) = blocks("yaml", [DOCS / "ci-gitlab.md"])
    return "\n".join(block.data["perf-gate"]["script"])


def _github_gate_steps() -> list[str]:
    """The `run:` of each workflow step that runs `compileiq gate`."""
    return [step["run"] for b in blocks("yaml", [DOCS / "ci-github-actions.md"]) for job in b.data["jobs"].values()
            for step in job["steps"] if "compileiq gate" in step.get("run", "")]


def test_the_gate_steps_pass_with_no_acf_committed_and_say_so(tmp_path: Path) -> None:
    """Issue ci54 #3: `compileiq gate $(git ls-files '*.acf.toml')` with no ACF committed exited 2
    ("Missing argument 'ACF'") and wrote no gate.md, so the summary step failed too."""
    root = _empty_repo(tmp_path)
    steps = _github_gate_steps()
    assert len(steps) == 2
    for script in [*steps, _gitlab_script()]:
        for name in ("gate.md", "gate-gpu.md"):
            (root / name).unlink(missing_ok=True)
        done = _run_gate_script(script, root)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "nothing to check" in done.stdout
        assert any("nothing to check" in (root / n).read_text() for n in ("gate.md", "gate-gpu.md") if (root / n).exists())


def test_the_github_gate_step_gates_every_committed_acf_whatever_its_name(project: Path, tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(project / "kernels", root / "my kernels")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "."], cwd=root, check=True)
    done = _run_gate_script(_github_gate_steps()[0], root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "my kernels/scale.acf.toml" in done.stdout and "PASS" in done.stdout
    assert (root / "gate.xml").is_file() and (root / "gate.md").is_file()


# --- compileiq flags in Make and in a shell (docs/ci.md) -------------------------------------------


def _ci_block(language: str) -> str:
    (found,) = [b.text for b in blocks(language, [DOCS / "ci.md"]) if "compileiq flags" in b.text]
    return found


def _build_folder(project: Path, tmp_path: Path, acf_text: str) -> Path:
    """The doc's k.cu and k.acf.toml: the tuned kernel (its ACF names scale.cu beside it)."""
    folder = tmp_path / "build"
    folder.mkdir(parents=True)
    shutil.copy(project / "kernels" / "scale.cu", folder / "scale.cu")
    shutil.copy(project / "kernels" / "scale.cu", folder / "k.cu")
    (folder / "k.acf.toml").write_text(acf_text)
    return folder


@pytest.mark.parametrize("language", ["bash", "make"])
def test_the_documented_build_lines_pass_the_tuned_flags_and_stop_on_a_broken_acf(
        project: Path, tmp_path: Path, language: str) -> None:
    """Issue ci54 #2: `nvcc $(compileiq flags k.acf.toml) -c k.cu` built the untuned defaults with
    exit 0 when flags failed (a shell ignores it), and in a Makefile `$(...)` is an empty variable."""
    text = _ci_block(language)
    acf_text = (project / "kernels" / "scale.acf.toml").read_text()
    tuned = run_cli(["flags", "kernels/scale.acf.toml"], cwd=project)
    assert tuned.returncode == 0 and tuned.stdout.strip(), tuned.describe()
    for good in (True, False):
        folder = _build_folder(project, tmp_path / str(good), acf_text if good else "junk = [")
        if language == "make":
            (folder / "Makefile").write_text(text)
            command = ["make", "--no-print-directory"]
        else:
            command = ["bash", "-x", "-c", text]
        done = subprocess.run(command, cwd=folder, env=_env_with_compileiq(), capture_output=True, text=True,
                              timeout=300, check=False)
        if good:
            assert done.returncode == 0, done.stdout + done.stderr
            assert f"nvcc {tuned.stdout.strip()} -c k.cu -o k.o" in done.stdout + done.stderr
            assert (folder / "k.o").is_file()
        else:
            assert done.returncode != 0, done.stdout + done.stderr
            assert "not a readable ACF" in done.stderr and not (folder / "k.o").exists()


# --- pre-commit -----------------------------------------------------------------------------------------


def _hook() -> dict[str, Any]:
    (hook,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    return hook


def test_the_pre_commit_hook_selects_acf_files_only() -> None:
    hook = _hook()
    assert hook["id"] == "compileiq-gate" and hook["language"] == "python"
    files = re.compile(hook["files"])
    assert files.search("kernels/sgemm.acf.toml") and files.search("a/b/k.acf.toml")
    assert not files.search("kernels/tune.toml") and not files.search("kernels/k.acf.toml.bak")


def test_the_pre_commit_hook_entry_gates_a_changed_acf(project: Path) -> None:
    entry = shlex.split(_hook()["entry"])
    assert entry[0] == "compileiq" and "--static" in entry
    env = _env_with_compileiq()
    passed = subprocess.run([*entry, "kernels/scale.acf.toml"], cwd=project, env=env, capture_output=True,
                            text=True, timeout=300, check=False)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "PASS" in passed.stdout
    missing = subprocess.run([*entry, "kernels/gone.acf.toml"], cwd=project, env=env, capture_output=True,
                             text=True, timeout=60, check=False)
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        "error: ACF not found: kernels/gone.acf.toml"], missing.stderr


def test_the_local_hook_in_the_docs_matches_the_shipped_one() -> None:
    local = [b.data for b in blocks("yaml", [DOCS / "ci-shell.md"]) if b.data["repos"][0]["repo"] == "local"]
    (config,) = local
    (hook,) = config["repos"][0]["hooks"]
    shipped = _hook()
    assert {k: hook[k] for k in ("id", "entry", "files")} == {k: shipped[k] for k in ("id", "entry", "files")}
