"""A new user's first hour: finding the parameters, the names --only takes, the version, usage."""

from __future__ import annotations

import json
import time
import tomllib
from pathlib import Path

import pytest

from tests.helpers import TINY_KERNEL, run_cli, tune_in

ROOT = Path(__file__).resolve().parent.parent


def test_space_lists_every_parameter_with_values_default_risk_and_help(tmp_path: Path) -> None:
    result = run_cli(["space", "--json"], cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    rows = {row["name"]: row for row in json.loads(result.stdout)["parameters"]}
    for path in (ROOT / "search_spaces").glob("*-13.0.toml"):
        for parameter in tomllib.loads(path.read_text())["parameter"]:
            row = rows[parameter["name"]]
            assert row["default"] == parameter["default"] and row["risk"] == parameter["risk"]
            assert row["help"] == parameter["help"]
    assert rows["ptxas.maxrregcount"]["values"][:2] == ["default", 24]


def test_space_of_a_kernel_adds_its_macros(tmp_path: Path) -> None:
    result = run_cli(["space", str(ROOT / "kernels/reduction/reduction.cu")], cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    assert "define.BLOCK" in result.stdout and "ptxas.maxrregcount" in result.stdout


def test_a_tuned_macro_is_never_called_safe(tmp_path: Path) -> None:
    """A user's first hour (HeCBench stencil1d): `space` called the stencil's RADIUS "safe", and
    --objective instructions chose a smaller radius, another result. compileiq cannot tell what a
    macro changes: its risk is the word of tune.toml, which lists the values as interchangeable."""
    listed = run_cli(["space", str(ROOT / "kernels/reduction/reduction.cu"), "--json"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()
    rows = {row["name"]: row for row in json.loads(listed.stdout)["parameters"]}
    assert rows["define.BLOCK"]["risk"] == "yours (tune.toml)"
    assert rows["ptxas.opt_level"]["risk"] == "safe"
    table = run_cli(["space", str(ROOT / "kernels/reduction/reduction.cu")], cwd=tmp_path)
    line = next(line for line in table.stdout.splitlines() if "define.BLOCK" in line)
    assert "yours" in line and "safe" not in line


def test_space_of_a_kernel_lists_its_macros_first_and_says_when_a_header_is_missing(tmp_path: Path) -> None:
    """Issue 25.6: `space KERNEL` shows the macros the kernel tunes (values, default) before the
    compiler's options, and one stderr line names a header the preprocessor cannot find (the run
    would stop there), with the folder that holds it; stdout stays the table."""
    kernel = tmp_path / "sub" / "k.cu"
    (tmp_path / "sub" / "inc").mkdir(parents=True)
    kernel.write_text('#include "deep.cuh"\n#ifndef TILE\n#define TILE 8\n#endif\n'
                      "__global__ void k(float* x) { x[0] = TILE * D; }\n")
    (tmp_path / "sub" / "inc" / "deep.cuh").write_text("const int D = 1;\n")
    (tmp_path / "sub" / "tune.toml").write_text("[tune.defines]\nTILE = [8, 16, 32]\n")
    listed = run_cli(["space", str(kernel), "--json"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()
    first = json.loads(listed.stdout)["parameters"][0]
    assert (first["name"], first["values"], first["default"]) == ("define.TILE", [8, 16, 32], 8)
    assert listed.stderr_lines == [('note: k.cu: the preprocessor failed: k.cu:1:10: fatal error: deep.cuh: No such '
                                   'file or directory (found in inc: add include_dirs = ["inc"] to tune.toml)')], listed.describe()
    (tmp_path / "sub" / "tune.toml").write_text('include_dirs = ["inc"]\n[tune.defines]\nTILE = [8, 16, 32]\n')
    table = run_cli(["space", str(kernel)], cwd=tmp_path)
    assert table.returncode == 0 and table.stderr == "", table.describe()
    assert table.stdout.index("define.TILE") < table.stdout.index("nvcc.use_fast_math")
    assert table.stdout.splitlines()[0].endswith(" with the macros of k.cu"), table.stdout


def test_space_of_a_kernel_without_macros_says_how_to_add_them(tmp_path: Path) -> None:
    result = run_cli(["space", str(ROOT / "kernels/spill_heavy/spill_heavy.cu")], cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    assert result.stderr_lines == [("note: spill_heavy.cu: no tuned macros ([tune.defines] in tune.toml adds them "
                                   "to the search)")], result.describe()
    # the title claimed "with the macros of spill_heavy.cu" above that note (a user's pathfinder.cu)
    title = result.stdout.splitlines()[0]
    assert title.endswith(" for spill_heavy.cu") and "macros" not in title, result.stdout


@pytest.mark.parametrize("given, suggested", [
    ("maxrregcount", "did you mean ptxas.maxrregcount?"),
    ("ptxas.maxregcount", "did you mean ptxas.maxrregcount"),
    ("opt_level", "did you mean ptxas.opt_level?"),
    ("zzz", "`compileiq space` lists the parameters"),
])
def test_an_unknown_only_name_suggests_the_right_one(tmp_path: Path, given: str, suggested: str) -> None:
    result = run_cli(["tune", str(ROOT / "kernels/reduction/reduction.cu"), "--only", given, "--workers",
                      "local", "--db", f"sqlite:///{tmp_path / 'db.sqlite'}"], cwd=tmp_path)
    assert result.returncode == 2, result.describe()
    assert result.stderr_lines == [result.stderr_lines[-1]] and suggested in result.stderr


def test_only_takes_a_macro_by_its_define_name(tmp_path: Path) -> None:
    out = tmp_path / "reduction.acf.toml"
    result = run_cli(["tune", str(ROOT / "kernels/reduction/reduction.cu"), "--only", "define.BLOCK",
                      "--strategy", "exhaustive", "--budget", "10", "--workers", "local", "--objective", "static",
                      "--db", f"sqlite:///{tmp_path / 'db.sqlite'}", "--out", str(out), "--json"], cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    study = json.loads(result.stdout)["study"]["name"]
    shown = run_cli(["show", study, "--top", "100", "--json", "--db", f"sqlite:///{tmp_path / 'db.sqlite'}"],
                    cwd=tmp_path)
    assert shown.returncode == 0, shown.describe()
    configs = [t["config"] for t in json.loads(shown.stdout)["trials"]]
    assert {tuple(sorted(c)) for c in configs} == {("define.BLOCK",)}
    assert len({c["define.BLOCK"] for c in configs}) > 1


def test_version_flag_and_command_agree(tmp_path: Path) -> None:
    flag, command = run_cli(["--version"], cwd=tmp_path), run_cli(["version"], cwd=tmp_path)
    assert flag.returncode == command.returncode == 0
    assert flag.stdout.strip() == command.stdout.strip() != ""


def test_tune_without_a_kernel_prints_usage_and_fails(tmp_path: Path) -> None:
    result = run_cli(["tune"], cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.output
    assert "Missing argument" in result.stderr or "Usage" in result.output


def _tiny(tmp_path: Path) -> Path:
    kernel = tmp_path / "scale.cu"
    kernel.write_text(TINY_KERNEL)
    return kernel


def test_two_objectives_keep_two_default_acfs(tmp_path: Path) -> None:
    kernel = _tiny(tmp_path)
    for objective in ("registers", "instructions"):
        result = run_cli(["tune", str(kernel), "--objective", objective, "--budget", "2", "--workers", "local",
                          "--only", "ptxas.opt_level"], cwd=tmp_path)
        assert result.returncode == 0, result.describe()
        assert f"store/scale.{objective}.acf.toml" in result.output
    written = sorted(p.name for p in (tmp_path / "store").glob("*.acf.toml"))
    assert written == ["scale.instructions.acf.toml", "scale.registers.acf.toml"]


def test_db_export_to_stdout_is_the_file_and_imports(tmp_path: Path) -> None:
    kernel, db = _tiny(tmp_path), f"sqlite:///{tmp_path / 'a.db'}"
    tuned = run_cli(["tune", str(kernel), "--budget", "2", "--workers", "local", "--only", "ptxas.opt_level",
                     "--db", db], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    exported = run_cli(["db", "export", "1", "-o", "-", "--db", db], cwd=tmp_path)
    assert exported.returncode == 0, exported.describe()
    assert json.loads(exported.stdout)["format"] == "compileiq-study"
    assert "exported study" in exported.stderr
    (tmp_path / "copy.json").write_text(exported.stdout)
    imported = run_cli(["db", "import", "copy.json", "--db", f"sqlite:///{tmp_path / 'b.db'}"], cwd=tmp_path)
    assert imported.returncode == 0 and "2 trials added" in imported.stdout, imported.describe()


def test_ray_address_comes_from_the_environment_as_in_every_ray_tool(tmp_path: Path) -> None:
    kernel = _tiny(tmp_path)
    result = run_cli(["tune", str(kernel), "--budget", "2", "--db", f"sqlite:///{tmp_path / 'db.sqlite'}"],
                     cwd=tmp_path, env={"RAY_ADDRESS": "127.0.0.1:1"})
    assert result.returncode != 0 and "cannot reach Ray at 127.0.0.1:1" in result.stderr, result.describe()
    local = run_cli(["tune", str(kernel), "--budget", "2", "--workers", "local", "--only", "ptxas.opt_level",
                     "--db", f"sqlite:///{tmp_path / 'db.sqlite'}"], cwd=tmp_path, env={"RAY_ADDRESS": "127.0.0.1:1"})
    assert local.returncode == 0, local.describe()


def _ray_gcs_running() -> bool:
    """Whether a Ray cluster's GCS runs on this host: `auto` connects to any it finds (Ray's legacy
    rule), so a cluster another test runs beside this one would be joined."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if b"gcs_server" in cmdline.read_bytes():
                return True
        except OSError:
            continue
    return False


def test_ray_address_auto_without_a_cluster_is_one_line(tmp_path: Path) -> None:
    deadline = time.monotonic() + 180
    while _ray_gcs_running():  # a Ray test on another pytest worker: wait for it to end
        if time.monotonic() > deadline:
            pytest.skip("a Ray cluster kept running on this host: `auto` would join it, not fail")
        time.sleep(2)
    result = run_cli(["tune", str(_tiny(tmp_path)), "--budget", "2", "--ray-address", "auto",
                      "--db", f"sqlite:///{tmp_path / 'db.sqlite'}"], cwd=tmp_path, timeout=120)
    if "cannot start Ray at auto" not in result.stderr and _ray_gcs_running():  # another worker's Ray test
        pytest.skip("a Ray cluster started on this host during the run: `auto` found it")  # began meanwhile
    assert result.returncode != 0 and "Traceback" not in result.output
    assert "cannot start Ray at auto" in result.stderr_lines[-1], result.describe()


def test_show_prints_values_exactly_and_only_settings_that_differ(tmp_path: Path) -> None:
    from compileiq.core.readings import exact

    assert exact(0.1 + 0.2) != exact(0.3) and exact(672.0) == "672" and exact(0.125) == "0.125"
    kernel, db = _tiny(tmp_path), f"sqlite:///{tmp_path / 'db.sqlite'}"
    kernel.with_name("tune.toml").write_text('[tune.defines]\nK = [1, 2]\n')
    kernel.write_text(TINY_KERNEL.replace("1.0f", "(float)K"))
    tuned = run_cli(["tune", str(kernel), "--budget", "2", "--workers", "local", "--strategy", "exhaustive",
                     "--only", "ptxas.opt_level", "--db", db], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    shown = run_cli(["show", "1", "--db", db], cwd=tmp_path)
    assert "K=1" not in shown.stdout and "(as the baseline)" in shown.stdout, shown.describe()


def test_progress_on_a_terminal_is_a_bar_above_which_each_trial_is_listed(tmp_path: Path) -> None:
    import os
    import pty
    import subprocess

    from tests.helpers import clean_env, compileiq_command, strip_ansi

    kernel = _tiny(tmp_path)
    env = {k: v for k, v in clean_env({"TERM": "xterm-256color", "COLUMNS": "120"}).items() if k != "NO_COLOR"}
    master, slave = pty.openpty()
    process = subprocess.Popen([compileiq_command(), "tune", str(kernel), "--workers", "local", "--budget", "6",
                                "--only", "ptxas.opt_level,ptxas.maxrregcount", "--db",
                                f"sqlite:///{tmp_path / 'db.sqlite'}"], stdin=slave, stdout=slave, stderr=slave,
                               env=env, cwd=tmp_path)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the terminal closed: the command ended
            break
        if not data:
            break
        chunks.append(data)
    assert process.wait(timeout=120) == 0
    screen = strip_ansi(b"".join(chunks).decode(errors="replace"))
    assert "tuning" in screen and "━" in screen  # the bar (a spinner has no bar)
    assert "[1/6] #0" in screen and "[6/6]" in screen  # each trial's line above it
    assert "wrote store/scale.static.acf.toml" in screen


def test_help_shows_the_choices_and_no_value_for_switches(tmp_path: Path) -> None:
    result = run_cli(["tune", "--help"], cwd=tmp_path)
    assert result.returncode == 0
    for choices in ("[static|spills|registers|occupancy|instructions|time]", "[bayes|random|exhaustive]",
                    "[ET|RF|GP]", "[ray|local]"):
        assert choices in result.stdout, result.stdout
    switches = [line for line in result.stdout.splitlines() if "--resume" in line or "--json" in line]
    assert switches and not any("<bool>" in line for line in switches), switches


def _help(tmp_path: Path, *command: str) -> str:
    """A command's --help as one line of words (the table's borders and wrapping taken out)."""
    result = run_cli([*command, "--help"], cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    return " ".join(result.stdout.replace("│", " ").split())


def test_help_says_what_the_reference_says(tmp_path: Path) -> None:
    """doc51: --only said "others stay default" (a kernel's macros are searched, a shipped build's
    settings held at their shipped value), --seed had no caveat, --pick named --pareto alone,
    flags --all named nvcc_flags alone."""
    tune = _help(tmp_path, "tune")
    assert "a kernel's macros are searched too unless one is named; the others stay at the baseline (the default, " \
           "or the shipped build's value)" in tune, tune
    assert "names to keep at the baseline (the default, or the shipped build's value)" in tune, tune
    assert "others stay default" not in tune and "leave at default" not in tune, tune
    assert "reproduces a run in the same database" in tune and "--no-warm-start the seed alone" in tune, tune
    for command in ("show", "report"):
        assert "With --pareto, or for a study of several objectives: knee" in _help(tmp_path, command), command
    assert "nvcc_flags and include_dirs, or the compile command's" in _help(tmp_path, "flags")
    assert "(one ACF only)" in _help(tmp_path, "gate")
    assert "[default: 10]" in _help(tmp_path, "show")


def test_space_and_tune_say_when_a_tuned_macro_cannot_take_effect(tmp_path: Path) -> None:
    """A tuned macro the kernel never names was searched and written into the ACF without a word
    (then a note said its values likely build the same code; the preprocessor now says they do);
    one the kernel #defines itself passed `space` silently, then `tune` stopped on it."""
    (tmp_path / "k.cu").write_text('extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n')
    (tmp_path / "tune.toml").write_text("[tune.defines]\nFOO = [1, 2]\n")
    unread = (f"note: {tmp_path / 'tune.toml'}: tune.defines.FOO: its values 1, 2 preprocess to the same device and "
              "host code, so -DFOO has no effect: tune a macro the code reads, or take it out of [tune.defines]")
    listed = run_cli(["space", "k.cu"], cwd=tmp_path)
    assert listed.returncode == 0 and listed.stderr_lines == [unread], listed.describe()
    tuned = tune_in(tmp_path)
    assert tuned.returncode == 2 and tuned.stderr_lines == [f"error: {unread.removeprefix('note: ')}"], tuned.describe()
    (tmp_path / "k.cu").write_text('#define FOO 4\nextern "C" __global__ void k(float* x) { x[threadIdx.x] *= FOO; }\n')
    overridden = run_cli(["space", "k.cu"], cwd=tmp_path)
    assert overridden.returncode == 0, overridden.describe()
    assert [line for line in overridden.stderr_lines if "k.cu:1 #defines FOO itself" in line], overridden.describe()


def test_space_and_tune_name_a_misspelt_kernel_before_any_build(tmp_path: Path) -> None:
    """An `entries` or [launch.NAME] typo was seen only once the baseline had compiled (`space`
    never saw it); a mangled name, a template instance and a namespaced name are looked up by
    their plain name."""
    (tmp_path / "k.cu").write_text("namespace ops { template <int N> __global__ void scale(float* x) "
                                   "{ x[threadIdx.x] *= N; } }\ntemplate __global__ void ops::scale<2>(float*);\n")
    (tmp_path / "tune.toml").write_text('entries = ["ops::scale<2>", "_Z5otheri", "sacle"]\n'
                                        '[launch."scael"]\nblock_size = 64\n')
    listed = run_cli(["space", "k.cu"], cwd=tmp_path)
    says = [line for line in listed.stderr_lines if "misspelt" in line]
    assert listed.returncode == 0 and len(says) == 2, listed.describe()
    assert "entries: no file of k.cu names 'sacle'" in says[0] and says[1].startswith("note: launch.scael: "), says
    tuned = tune_in(tmp_path)
    lines = tuned.stdout.splitlines() + tuned.stderr_lines
    first_build = next(i for i, line in enumerate(lines) if "#0" in line)
    assert any("names 'sacle'" in line for line in lines[:first_build]), tuned.describe()
