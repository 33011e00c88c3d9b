"""One .cu in two targets (user52 F1): a compile_commands.json with two commands for the kernel file,
as CMake writes it for `add_executable(fast k.cu)` and `add_executable(precise k.cu)` with different
options. The first was taken silently; the tuned flags then reached the other target through the
cmake snippet's source property, and the gate, reading the first entry too, passed."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from tests.helpers import LOOP_KERNEL, run_cli, tune_in

FAST = "CMakeFiles/fast.dir/k.cu.o"
PRECISE = "CMakeFiles/precise.dir/k.cu.o"
FAST_FLAGS = "-O3 -arch=sm_90 --use_fast_math -Xptxas=-O2"
PRECISE_FLAGS = "-O3 -arch=sm_90 -Xptxas=-O1 -maxrregcount=32"


def _project(tmp_path: Path, fast: str = FAST_FLAGS, precise: str = PRECISE_FLAGS) -> None:
    """k.cu and CMake's compile_commands.json for it in two targets (each entry with its `output`)."""
    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    entries = [{"directory": str(tmp_path), "command": f"/usr/local/cuda/bin/nvcc {flags} -x cu -c k.cu -o {output}",
                "file": "k.cu", "output": output} for flags, output in ((fast, FAST), (precise, PRECISE))]
    (tmp_path / "compile_commands.json").write_text(json.dumps(entries))


def test_two_different_commands_for_the_kernel_are_refused_naming_both(tmp_path: Path) -> None:
    _project(tmp_path)
    for args in (["space", "k.cu"], ["tune", "k.cu", "--workers", "local", "--budget", "2",
                                     "--db", f"sqlite:///{tmp_path / 't.db'}"]):
        done = run_cli([*args, "--compile-commands", "compile_commands.json"], cwd=tmp_path)
        assert done.returncode == 2, done.describe()
        [line] = done.stderr.strip().splitlines()
        assert "2 commands for k.cu build it differently" in line and FAST in line and PRECISE in line, line
        assert "--compile-output" in line and "Traceback" not in done.stderr, line
    unknown = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json", "--compile-output", "x.o"],
                      cwd=tmp_path)
    assert unknown.returncode == 2 and "no command for k.cu with output 'x.o'" in unknown.stderr, unknown.describe()
    chosen = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json", "--compile-output", PRECISE,
                      "--json"], cwd=tmp_path)
    assert chosen.returncode == 0, chosen.describe()
    baseline = {p["name"]: p.get("baseline") for p in json.loads(chosen.stdout)["parameters"]}
    assert baseline["ptxas.opt_level"] == 1, baseline  # the precise target's -Xptxas=-O1, not the fast one's -O2


def test_commands_that_read_the_same_are_one_build(tmp_path: Path) -> None:
    """Two targets with the same options (a static and an object library): nothing to choose."""
    _project(tmp_path, precise=FAST_FLAGS)
    done = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()


def test_the_chosen_command_is_recorded_gated_and_the_cmake_snippet_names_the_others(tmp_path: Path) -> None:
    _project(tmp_path)
    tuned = tune_in(tmp_path, "--compile-commands", "compile_commands.json", "--compile-output", PRECISE)
    assert tuned.returncode == 0, tuned.describe()
    baseline = tomllib.loads((tmp_path / "k.acf.toml").read_text())["baseline"]
    assert baseline["output"] == PRECISE and baseline["other_outputs"] == [FAST], baseline
    assert "-Xptxas=-O1" in baseline["shipped_flags"] and "--use_fast_math" not in baseline["shipped_flags"]
    cmake = run_cli(["flags", "k.acf.toml", "--format", "cmake"], cwd=tmp_path)
    assert cmake.returncode == 0, cmake.describe()
    [note] = [line for line in cmake.stdout.splitlines() if FAST in line]
    assert note.startswith("# compileiq: ") and "compileiq_apply(TARGET" in note and PRECISE in note, note
    # the gate reads the command the ACF records (the second), not the first: no stale-settings
    gated = run_cli(["gate", "k.acf.toml", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert gated.returncode == 0 and "stale-settings" not in gated.stdout + gated.stderr, gated.describe()


def test_commands_that_read_the_same_record_no_choice(tmp_path: Path) -> None:
    """Reviewer: with two identical commands and --compile-output, the ACF pinned the first's output
    and the cmake snippet called the other target's identical build "untuned and unchecked"; a
    renamed target then left the gate unable to read the build. One build: nothing to record."""
    _project(tmp_path, precise=FAST_FLAGS)
    tuned = tune_in(tmp_path, "--compile-commands", "compile_commands.json", "--compile-output", PRECISE)
    assert tuned.returncode == 0, tuned.describe()
    baseline = tomllib.loads((tmp_path / "k.acf.toml").read_text())["baseline"]
    assert "output" not in baseline and "other_outputs" not in baseline, baseline
    cmake = run_cli(["flags", "k.acf.toml", "--format", "cmake"], cwd=tmp_path)
    assert cmake.returncode == 0 and FAST not in cmake.stdout and "also compiles" not in cmake.stdout, cmake.describe()


def test_a_second_target_added_after_tuning_is_named_as_the_gate_s_reason(tmp_path: Path) -> None:
    """Reviewer: an ACF tuned from a database with one command for the file; the project then adds
    a second target compiling it otherwise. The gate cannot know which command ships: its warning
    said "no command … that compileiq reads", sending the user to `space`, which found nothing
    wrong. It names the cause now."""
    _project(tmp_path)
    entries = json.loads((tmp_path / "compile_commands.json").read_text())
    (tmp_path / "compile_commands.json").write_text(json.dumps(entries[:1]))
    tuned = tune_in(tmp_path, "--compile-commands", "compile_commands.json")
    assert tuned.returncode == 0, tuned.describe()
    (tmp_path / "compile_commands.json").write_text(json.dumps(entries))
    gated = run_cli(["gate", "k.acf.toml", "--static"], cwd=tmp_path)
    said = gated.stdout + gated.stderr
    assert "several commands for k.cu build it differently and the ACF records none" in said, gated.describe()
    assert "--compile-output" in said and "that compileiq reads" not in said, gated.describe()
