"""What the views say of a build as shipped (user 49): a baseline that is the project's own build is
never called "compiler defaults", and the ACF accounts for every token of the shipped command."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tests.helpers import LOOP_KERNEL, CliResult, run_cli

CMAKE_COMMAND = ("nvcc -forward-unknown-to-host-compiler -O3 -DNDEBUG -arch=sm_90 -maxrregcount=64 -lineinfo "
                 "-x cu -c k.cu -o k.o")


def _project(tmp_path: Path, command: str) -> None:
    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    (tmp_path / "compile_commands.json").write_text(
        json.dumps([{"directory": str(tmp_path), "command": command, "file": "k.cu"}]))


def _tune(tmp_path: Path, out: str, *args: str) -> str:
    done = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--workers", "local",
                    "--budget", "3", "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", str(tmp_path / out), *args],
                   cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    return done.stdout + done.stderr


def test_a_choice_that_keeps_the_shipped_build_is_not_called_the_compiler_defaults(tmp_path: Path) -> None:
    """user49 F4: tune printed "best flags: (compiler defaults)" and `report --compare` "Defaults." for
    studies whose baseline is the shipped build (-maxrregcount, -lineinfo, -DNDEBUG): both now say
    what the ACF's vs_defaults.against says."""
    _project(tmp_path, CMAKE_COMMAND)
    first = _tune(tmp_path, "a.acf.toml")
    against = tomllib.loads((tmp_path / "a.acf.toml").read_text())["evidence"]["vs_defaults"]["against"]
    assert against == "your build as shipped (compile_commands.json)"
    assert f"best flags: ({against})" in first and "(compiler defaults)" not in first, first
    _project(tmp_path, CMAKE_COMMAND.replace("-maxrregcount=64", "-maxrregcount=128"))  # another shipped build
    _tune(tmp_path, "b.acf.toml")
    db = f"sqlite:///{tmp_path / 't.db'}"
    names = [tomllib.loads((tmp_path / f"{x}.acf.toml").read_text())["provenance"]["study"] for x in "ab"]
    assert names[0] != names[1]
    for fmt in ("md", "html"):
        page = run_cli(["report", "--compare", *names, "--db", db, "--format", fmt, "-o", f"c.{fmt}"], cwd=tmp_path)
        text = (tmp_path / f"c.{fmt}").read_text()
        assert page.returncode == 0, page.describe()
        assert f"Both choices keep their baseline: {against}." in text, text
        assert "Defaults." not in text and "both chose the compiler defaults" not in text


def test_every_token_of_the_shipped_command_is_recorded_applied_or_not(tmp_path: Path) -> None:
    """user49 F8: for CMake's `-forward-unknown-to-host-compiler -O3 -DNDEBUG ...`, [baseline]
    shipped_flags and the "fixed, applied to every build" line left out -DNDEBUG (in [base]
    nvcc_flags and `flags --all` all the same), and -forward-unknown-to-host-compiler was listed
    neither as applied nor as not applied."""
    _project(tmp_path, CMAKE_COMMAND)
    said = _tune(tmp_path, "k.acf.toml")
    [applied] = [line for line in said.splitlines() if line.startswith("baseline: your build")]
    assert applied.endswith("fixed, applied to every build: -DNDEBUG -maxrregcount=64 -lineinfo -arch=sm_90"), applied
    [skipped] = [line for line in said.splitlines() if line.startswith("not applied: ")]
    assert "-forward-unknown-to-host-compiler (nvcc hands the options it does not know to the host compiler" in skipped
    document = tomllib.loads((tmp_path / "k.acf.toml").read_text())
    table = document["baseline"]
    assert set(table["shipped_flags"]) == {"-forward-unknown-to-host-compiler", "-O3", "-DNDEBUG", "-arch=sm_90",
                                           "-maxrregcount=64", "-lineinfo"}, table["shipped_flags"]
    fixed = {f["flag"]: f["applied"] for f in table["fixed"]}
    assert set(fixed) == set(table["shipped_flags"]) and not fixed["-forward-unknown-to-host-compiler"], fixed
    assert all(fixed[f] for f in document["base"]["nvcc_flags"]), (fixed, document["base"])
    every = run_cli(["flags", "k.acf.toml", "--all"], cwd=tmp_path)
    assert every.returncode == 0 and "-DNDEBUG" in every.stdout.split(), every.describe()
    assert "-forward-unknown-to-host-compiler" in every.stderr  # named as left out, as -O3 is


def _fatbin_images(tmp_path: Path, args: list[str]) -> list[tuple[str, str]]:
    """What nvcc puts in the fat binary for these arch arguments (nvcc --dryrun: elf, ptx per arch)."""
    import re
    import subprocess

    dry = subprocess.run(["nvcc", "--dryrun", *args, "-c", "k.cu", "-o", "k.o"], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stderr
    return sorted(set(re.findall(r"image3=kind=(\w+),sm=(\d+)", dry)))


def test_flags_builds_the_arch_as_the_shipped_gencode_does(tmp_path: Path) -> None:
    """user49 F9: a shipped `-gencode arch=compute_80,code=sm_80` (machine code only) came out of
    `flags` as -arch=sm_80, which embeds compute_80 PTX as well. `flags` builds the arch tuned as
    the shipped flag does, in plain words (no bracket or space for a shell)."""
    import shlex

    shipped = "-gencode arch=compute_80,code=sm_80"
    _project(tmp_path, CMAKE_COMMAND.replace("-arch=sm_90", shipped))
    _tune(tmp_path, "k.acf.toml")
    assert tomllib.loads((tmp_path / "k.acf.toml").read_text())["kernel"]["arch"] == "sm_80"
    listed = run_cli(["flags", "k.acf.toml"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()
    words = listed.stdout.split()
    assert words[:2] == ["-arch=compute_80", "-code=sm_80"] and "-arch=sm_80" not in words, listed.stdout
    assert _fatbin_images(tmp_path, words[:2]) == _fatbin_images(tmp_path, shlex.split(shipped)) == [("elf", "80")]
    ptxas = run_cli(["flags", "k.acf.toml", "--stage", "ptxas"], cwd=tmp_path)  # ptxas takes -arch=sm_XY
    assert ptxas.returncode == 0 and ptxas.stdout.split()[:1] == ["-arch=sm_80"], ptxas.describe()
    # the same with PTX as well (CMake's code=[compute_90,sm_90]) is -arch=sm_90 itself
    _project(tmp_path, CMAKE_COMMAND.replace("-arch=sm_90", "--generate-code=arch=compute_90,code=[compute_90,sm_90]"))
    _tune(tmp_path, "both.acf.toml")
    both = run_cli(["flags", "both.acf.toml"], cwd=tmp_path)
    assert both.returncode == 0 and both.stdout.split()[:1] == ["-arch=sm_90"], both.describe()
    # [baseline] is untrusted: an applied arch flag for another arch is refused, and a flag's text is
    # never echoed into the build (the arch arguments are rendered from the numbers it names)
    import tomli_w

    document = tomllib.loads((tmp_path / "k.acf.toml").read_text())
    for flag, verdict in (("-gencode arch=compute_75,code=sm_75", "builds for sm_75, as applied"),
                          ("-gencode arch=compute_80,code=sm_80;touch${IFS}x", "")):
        edited = json.loads(json.dumps(document))
        for entry in edited["baseline"]["fixed"]:
            entry["flag"] = flag if entry["flag"] == shipped else entry["flag"]
        edited["baseline"]["shipped_flags"] = [flag if f == shipped else f for f in edited["baseline"]["shipped_flags"]]
        (tmp_path / "edited.acf.toml").write_text(tomli_w.dumps(edited))
        printed = run_cli(["flags", "edited.acf.toml"], cwd=tmp_path)
        if verdict:
            assert printed.returncode == 2 and verdict in printed.stderr, printed.describe()
        else:
            assert printed.returncode == 0 and printed.stdout.split()[:1] == ["-arch=sm_80"], printed.describe()
            assert "touch" not in printed.output, printed.describe()


@pytest.mark.parametrize(("shipped", "expected"), [
    ("-arch=compute_80 -code=sm_80", ["-arch=compute_80", "-code=sm_80"]),
    ("--gpu-architecture=compute_80 --gpu-code=sm_80", ["-arch=compute_80", "-code=sm_80"]),
    ("-code sm_80 -arch compute_80", ["-arch=compute_80", "-code=sm_80"]),
    # -arch=sm_80 builds the same, but appended to a command that gives -code nvcc stops ("must be a
    # virtual code architecture"): nvcc keeps every -code, so these words build it appended or alone
    ("-arch=compute_80 -code=sm_80,compute_80", ["-arch=compute_80", "-code=sm_80", "-code=compute_80"]),
    ("--gpu-architecture compute_80 --gpu-code=compute_80,sm_80", ["-arch=compute_80", "-code=sm_80", "-code=compute_80"]),
])
def test_flags_builds_the_arch_as_the_shipped_arch_and_code_flags_do(tmp_path: Path, shipped: str,
                                                                     expected: list[str]) -> None:
    """fix A: a shipped `-arch=compute_80 -code=sm_80` (two flags, machine code only) came out of
    `flags` and [baseline] as -arch=sm_80, which embeds compute_80 PTX as well: a fat binary other
    than the one that ships. nvcc's long forms and -code lists are read alike."""
    import shlex

    _project(tmp_path, CMAKE_COMMAND.replace("-arch=sm_90", shipped))
    _tune(tmp_path, "k.acf.toml")
    document = tomllib.loads((tmp_path / "k.acf.toml").read_text())
    assert document["kernel"]["arch"] == "sm_80"
    listed = run_cli(["flags", "k.acf.toml"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()
    words = [w for w in listed.stdout.split() if w.startswith(("-arch", "-code"))]
    assert words == expected, listed.stdout
    assert _fatbin_images(tmp_path, words) == _fatbin_images(tmp_path, shlex.split(shipped)), (words, shipped)
    arch_flags = [f for f in document["baseline"]["fixed"] if f["flag"].startswith(("-arch", "--gpu", "-code"))]
    assert len(arch_flags) == 2 and all(f["applied"] for f in arch_flags), arch_flags
    assert all(f["why"].endswith(f"flags gives it as {' '.join(expected)}") for f in arch_flags), arch_flags
    # [baseline] is untrusted: a -code flag's text is never echoed into the build
    import tomli_w

    edited = json.loads(json.dumps(document))
    code = next(f["flag"] for f in arch_flags if "code" in f["flag"])
    for entry in edited["baseline"]["fixed"]:
        entry["flag"] = code + ";touch${IFS}x" if entry["flag"] == code else entry["flag"]
    edited["baseline"]["shipped_flags"] = [code + ";touch${IFS}x" if f == code else f
                                           for f in edited["baseline"]["shipped_flags"]]
    (tmp_path / "edited.acf.toml").write_text(tomli_w.dumps(edited))
    printed = run_cli(["flags", "edited.acf.toml"], cwd=tmp_path)
    assert printed.returncode == 0 and "touch" not in printed.output, printed.describe()


ARCH_PROJECT = """\
cmake_minimum_required(VERSION 3.24)
project(demo LANGUAGES CUDA)
find_package(compileiq CONFIG REQUIRED PATHS "{cmake_dir}" NO_DEFAULT_PATH)
add_library(k OBJECT k.cu)
set_property(TARGET k PROPERTY CUDA_ARCHITECTURES 75)
compileiq_apply(TARGET k ACF {acf})
"""


def test_the_cmake_formats_build_machine_code_alone_as_the_shipped_gencode_does(tmp_path: Path) -> None:
    """rev50 5: for a shipped `-gencode arch=compute_90,code=sm_90` (machine code only) `flags` gave
    `-arch=compute_90 -code=sm_90`, but the CMake snippet, the JSON's cuda_architectures and
    compileiq_apply said CUDA_ARCHITECTURES 90, which CMake builds as code=[compute_90,sm_90]: PTX
    the shipped build never embedded. They now say 90-real; -arch=sm_90 (PTX too) stays 90."""
    import subprocess

    from helpers import clean_env, compileiq_command, venv_tool

    for shipped, name in (("-gencode arch=compute_90,code=sm_90", "real"), ("-arch=sm_90", "both")):
        _project(tmp_path, CMAKE_COMMAND.replace("-arch=sm_90", shipped))
        _tune(tmp_path, f"{name}.acf.toml")
    expected = {"real": ("90-real", "code=[sm_90]"), "both": ("90", "code=[compute_90,sm_90]")}
    cmake_dir = run_cli(["cmake-dir"], cwd=tmp_path).stdout.strip()
    for name, (architectures, code) in expected.items():
        snippet = run_cli(["flags", f"{name}.acf.toml", "--format", "cmake"], cwd=tmp_path)
        assert snippet.returncode == 0 and f"CUDA_ARCHITECTURES {architectures}\n" in snippet.stdout, snippet.describe()
        document = json.loads(run_cli(["flags", f"{name}.acf.toml", "--format", "json"], cwd=tmp_path).stdout)
        assert document["cuda_architectures"] == architectures, document
        (tmp_path / "CMakeLists.txt").write_text(ARCH_PROJECT.format(cmake_dir=cmake_dir, acf=f"{name}.acf.toml"))
        configured = subprocess.run(
            [venv_tool("cmake", "pip install -e '.[test]' installs it"), "-S", ".", "-B", f"build-{name}",
             "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", f"-DCOMPILEIQ_EXECUTABLE={compileiq_command()}"],
            cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=600, check=False)
        assert configured.returncode == 0, configured.stdout + configured.stderr
        assert f"CUDA_ARCHITECTURES 75 replaced by {architectures}" in configured.stdout, configured.stdout
        (command,) = [e["command"] for e in json.loads((tmp_path / f"build-{name}" / "compile_commands.json").read_text())]
        assert f"--generate-code=arch=compute_90,{code}" in command and "75" not in command, command


TEMPLATED = """\
template <typename T> __global__ void conv1d(T* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 2 + 1;
}
int main() {
  conv1d<short><<<1, 32>>>(nullptr, 32);
  conv1d<int><<<1, 32>>>(nullptr, 32);
  return 0;
}
"""


def _templated_project(tmp_path: Path, entry: str) -> None:
    (tmp_path / "main.cu").write_text(TEMPLATED)
    (tmp_path / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(tmp_path), "command": "nvcc -O3 -arch=sm_90 -x cu -c main.cu -o main.o", "file": "main.cu"}]))
    (tmp_path / "tune.toml").write_text(f'entries = ["{entry}"]\n')


def _tune_main(tmp_path: Path) -> CliResult:
    return run_cli(["tune", "main.cu", "--compile-commands", "compile_commands.json", "--budget", "2", "--workers",
                    "local", "--db", f"sqlite:///{tmp_path / 'x.db'}", "--out", "a.acf.toml", "--json"], cwd=tmp_path)


def test_a_run_its_baseline_stopped_names_the_build_it_started_from(tmp_path: Path) -> None:
    """A first-time user's tune.toml named no kernel of the build: the run stopped on its baseline
    (one line, exit 2), but `show` listed the study's baseline as "defaults" (the label is read from
    the run's recorded decision, which a stopped run never wrote) and its choice as a bare "-"."""
    _templated_project(tmp_path, "conv1d<float>")
    done = _tune_main(tmp_path)
    assert done.returncode == 2 and "conv1d<float>" in done.stderr, done.describe()  # one line: bad input
    db = f"sqlite:///{tmp_path / 'x.db'}"
    [listed] = json.loads(run_cli(["show", "--db", db, "--json"], cwd=tmp_path).stdout)
    assert listed["baseline"] == "your build (compile_commands.json)", listed
    assert listed["chosen"] is None and "stopped before it chose: its baseline failed" in listed["best_is"], listed
    table = run_cli(["show", "--db", db], cwd=tmp_path).stdout
    assert "your build (compile_commands.json)" in table and "none (its baseline failed)" in table, table
    study = json.loads(run_cli(["show", "1", "--db", db, "--json"], cwd=tmp_path).stdout)
    assert study["baseline_label"] == "baseline (your build: compile_commands.json)", study
    assert any("run 1 stopped before it chose: its baseline failed" in n for n in study["notes"]), study["notes"]


def test_a_later_run_that_stopped_before_it_chose_hides_no_earlier_choice(tmp_path: Path) -> None:
    """A run row that says it stopped before it chose (what a run its baseline stops records) is
    read only where no run chose: a later one, or a forged one, never hides a study's choice."""
    from tests.helpers import forge_run

    _project(tmp_path, CMAKE_COMMAND)
    _tune(tmp_path, "a.acf.toml")
    db = f"sqlite:///{tmp_path / 't.db'}"
    before = json.loads(run_cli(["show", "--db", db, "--json"], cwd=tmp_path).stdout)
    forge_run(tmp_path / "t.db", {"unchosen": "its baseline failed"})
    after = json.loads(run_cli(["show", "--db", db, "--json"], cwd=tmp_path).stdout)
    assert after == before and before[0]["best_is"] == "the chosen trial", (before, after)


PTY = "import pty, sys; pty.spawn(sys.argv[1:])"  # the command on a terminal: stdout and stderr as a user sees them


@pytest.mark.parametrize("options", [[], ["--all"], ["--format", "json"], ["--format", "json", "--all"]])
def test_flags_notes_start_on_a_line_of_their_own_on_a_terminal(tmp_path: Path, options: list[str]) -> None:
    """`flags --all` and `flags --format json` of a shipped build: a note on stderr must never run
    into the flags line (stdout ends with a newline, flushed, before any note), while stdout alone
    stays what `F=$(compileiq flags ...)` takes: the flags, no note (JSON: its `notes` hold them)."""
    import sys

    _project(tmp_path, CMAKE_COMMAND.replace("-arch=sm_90", "-arch=compute_90"))  # PTX only: a note in every format
    _tune(tmp_path, "k.acf.toml")
    piped = run_cli(["flags", "k.acf.toml", *options], cwd=tmp_path)
    assert piped.returncode == 0 and piped.stdout.endswith("\n") and piped.stderr_lines, piped.describe()
    if "json" in options:  # the JSON carries the notes as data (a consumer of stdout alone sees them too)
        assert json.loads(piped.stdout)["notes"] == piped.stderr_lines, piped.describe()
    else:
        assert not any(line in piped.stdout for line in piped.stderr_lines), piped.describe()  # the flags alone
    seen = run_cli(["flags", "k.acf.toml", *options], cwd=tmp_path, prefix=[sys.executable, "-c", PTY])
    lines = seen.stdout.replace("\r\n", "\n").splitlines()
    assert lines[:len(piped.stdout.splitlines())] == piped.stdout.splitlines(), seen.describe()  # the flags first
    notes = lines[len(piped.stdout.splitlines()):]
    assert all(line.startswith(("note:", "compileiq:")) for line in notes if line), seen.describe()
    assert [n for n in notes if n] == piped.stderr_lines, seen.describe()
