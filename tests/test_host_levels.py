"""The host -O level of a command whose -Xcompiler options are given apart (fix-hostlv fault 1).

nvcc hands the host compiler every -Xcompiler item in the command's order, then its own last
-O1..-O3 (nvcc 13.0 -dryrun: `nvcc -O1 -Xcompiler -O3 -Xcompiler -Os` hands gcc `-O3 -Os -O1`), and
the host compiler takes its last -O. `-Xcompiler -O3 -Xcompiler -Os` builds at -Os (no __OPTIMIZE__
without __OPTIMIZE_SIZE__), as `-Xcompiler -O3,-Os` does; compileiq read each option alone, dropped
the later -Os (no level) and applied -O3: a 72-register build called "your build" where the command
builds 10, and a gate that took such a command for one at -O3."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from compileiq.core.toolchain import find_toolchain
from compileiq.source.host_levels import command_level, level_of
from compileiq.source.preprocessor import MAY_CHANGE_MACROS
from compileiq.source.spec import FixedFlag
from tests.helpers import CliResult, run_cli

# -O1..-O3 take the local-array path (many registers); -Os, -Og... none, or another path: a plain copy
READS_OPTIMIZE_NOT_SIZE = """extern "C" __global__ void k(float* y, const float* x, int n) {
#if defined(__OPTIMIZE__) && !defined(__OPTIMIZE_SIZE__)
  float buf[64];
  for (int i = 0; i < 64; i++) buf[i] = x[i * n + threadIdx.x];
  y[threadIdx.x] = buf[n & 63];
#else
  y[threadIdx.x] = x[threadIdx.x];
#endif
}
"""

LATER_NO_LEVEL = ["-Xcompiler -O3 -Xcompiler -Os", "-Xcompiler -O3 -Xcompiler=-Os", "-Xcompiler -O3 --compiler-options -Os",
                  "-Xcompiler -O3 -Xcompiler -O0", "-Xcompiler -O3 -Xcompiler -Ofast",
                  "-Xcompiler -O3 -Xcompiler -Oz", "-Xcompiler -fPIC,-O3 -Xcompiler -Os", "-O0 -Xcompiler -O3 -Xcompiler -Os"]


def _given(flags: str) -> tuple[str, ...]:
    """The options as a command's reading sets them aside (`CompileCommand.stripped`): one each."""
    words = flags.split()
    out: list[str] = []
    while words:
        word = words.pop(0)
        out.append(f"{word} {words.pop(0)}" if word in ("-Xcompiler", "--compiler-options") else word)
    return tuple(out)


@pytest.mark.parametrize("flags", LATER_NO_LEVEL)
def test_a_later_host_O_item_of_another_option_leaves_no_level(flags: str) -> None:
    assert level_of(_given(flags)) == 0
    fixed = tuple(FixedFlag(given, False, MAY_CHANGE_MACROS) for given in _given(flags) if given != "-O0")
    found = command_level(fixed)
    assert found.effective is None
    assert found.decided_by is not None and found.decided_by.flag.flag == fixed[-1].flag  # the last -O item


@pytest.mark.parametrize(("flags", "level"), [
    ("-Xcompiler -Os -Xcompiler -O3", 3), ("-Xcompiler -O3 -Xcompiler -O2", 2), ("-Xcompiler=-Os --compiler-options -O1", 1),
    ("-O1 -Xcompiler -O3 -Xcompiler -Os", 1),  # nvcc's own -O1 comes after every -Xcompiler item
    ("-O0 -Xcompiler -Os -Xcompiler -O2", 2), ("-Xcompiler -O3,-Os -Xcompiler -O2", 2),
    # review (this round): gcc's -O and -Og predefine what -O1 does (__OPTIMIZE__): read as no level,
    # the baseline lacked the __OPTIMIZE__ the shipped build has
    ("-Xcompiler -O3 -Xcompiler -Og", 1), ("-Xcompiler -O3,-O", 1), ("-Xcompiler -Os -Xcompiler -O", 1),
    # red team (this round): gcc reads any number, -O4 and -O03 as -O3 (the same macros); read as no level
    ("-Xcompiler -O4", 3), ("-Xcompiler -O3 -Xcompiler -O03", 3), ("-Xcompiler -Os,-O02", 2),
])
def test_the_last_host_O_item_of_the_whole_command_decides(flags: str, level: int) -> None:
    assert level_of(_given(flags)) == level


def _project(folder: Path, command: str, name: str = "compile_commands.json") -> None:
    (folder / "k.cu").write_text(READS_OPTIMIZE_NOT_SIZE)
    (folder / name).write_text(json.dumps([{"directory": str(folder), "command": command, "file": "k.cu"}]))


def _registers(folder: Path, flags: str) -> int:
    built = subprocess.run([find_toolchain().nvcc, *flags.split(), "-arch=sm_90", "-c", "k.cu", "-o", "k.o",
                            "-Xptxas", "-v"], cwd=folder, capture_output=True, text=True, check=True)
    return int(re.findall(r"Used (\d+) registers", built.stderr)[-1])


def _tune(folder: Path) -> tuple[str, dict[str, object]]:
    done = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--objective", "registers",
                    "--budget", "2", "--workers", "local", "--db", f"sqlite:///{folder / 't.db'}"], cwd=folder)
    assert done.returncode == 0, done.describe()
    return done.stderr, tomllib.loads((folder / "store" / "k.registers.acf.toml").read_text())


@pytest.mark.parametrize("flags", ["-Xcompiler -O3 -Xcompiler -Os", "-Xcompiler -O3 -Xcompiler=-Os",
                                   "-Xcompiler -O3 --compiler-options -Os"])
def test_a_later_Os_in_another_option_is_the_build_tune_baselines(tmp_path: Path, flags: str) -> None:
    _project(tmp_path, f"nvcc {flags} -arch=sm_90 -c k.cu -o k.o")
    said, acf = _tune(tmp_path)
    assert "applied: -O" not in said, said
    assert acf["base"]["nvcc_flags"] == []  # type: ignore[index]
    assert acf["evidence"]["baseline"]["registers"] == _registers(tmp_path, flags)  # type: ignore[index]
    overridden = [f for f in acf["baseline"]["fixed"] if f["flag"] == "-Xcompiler -O3"]  # type: ignore[index]
    assert [f["applied"] for f in overridden] == [False] and "overridden by " in overridden[0]["why"], overridden
    assert not any(re.fullmatch(r"-O[0-3]", f["flag"]) for f in acf["baseline"]["fixed"])  # type: ignore[index]
    flags_out = run_cli(["flags", "store/k.registers.acf.toml", "--all"], cwd=tmp_path)
    assert "-O3" not in flags_out.stdout.split(), flags_out.describe()
    gate = run_cli(["gate", "store/k.registers.acf.toml", "--static", "--compile-commands", "compile_commands.json"],
                   cwd=tmp_path)
    assert gate.returncode == 0 and "lowered-optimisation" not in gate.output, gate.describe()


def test_nvccs_own_level_still_overrides_a_later_host_Os(tmp_path: Path) -> None:
    _project(tmp_path, "nvcc -O1 -Xcompiler -O3 -Xcompiler -Os -arch=sm_90 -c k.cu -o k.o")
    said, acf = _tune(tmp_path)
    assert acf["base"]["nvcc_flags"] == ["-O1"], said  # type: ignore[index]
    assert acf["evidence"]["baseline"]["registers"] == _registers(tmp_path, "-O1 -Xcompiler -O3 -Xcompiler -Os")  # type: ignore[index]


def test_the_gate_reads_a_later_host_Os_as_dropping_an_applied_level(tmp_path: Path) -> None:
    _project(tmp_path, "nvcc -Xcompiler -O3 -arch=sm_90 -c k.cu -o k.o")
    said, acf = _tune(tmp_path)
    assert acf["base"]["nvcc_flags"] == ["-O3"], said  # type: ignore[index]
    _project(tmp_path, "nvcc -Xcompiler -O3 -Xcompiler -Os -arch=sm_90 -c k.cu -o k.o", "sized.json")
    gate = run_cli(["gate", "store/k.registers.acf.toml", "--static", "--compile-commands", "sized.json"], cwd=tmp_path)
    assert gate.returncode == 1 and "lowered-optimisation" in gate.output, gate.describe()
    assert "no host optimisation level, where the ACF applied -O3" in gate.output, gate.describe()


# red team (this round): spellings of the host level that gcc takes inside -Xcompiler, read as none:
# the baseline lacked the __OPTIMIZE__ the shipped build's device pass has (nvcc 13.0 -E, gcc 12)
@pytest.mark.parametrize(("given", "level"), [
    (("-Xcompiler --optimize=3",), 3), (("-Xcompiler --optimize",), 1),  # gcc: --optimize=N is -ON, --optimize -O
    (("-Xcompiler=--optimize=2",), 2), (("--compiler-options -fPIC,--optimize=03",), 3),
    (("-Xcompiler -O3", "-Xcompiler --optimize=s"), 0), (("-Xcompiler -O3", "-Xcompiler --optimize=0"), 0),
    (("-Xcompiler=-O3 -fPIC",), 3), (("--compiler-options=-fPIC -O2",), 2),  # one word of the command, with a space
    (("-Xcompiler=-O3 -Os",), 0), (("-Xcompiler '-O3'",), 3),  # the shell takes the quotes off: -O3
    (("-O4",), 3), (("-O03",), 3), (("--optimize=03",), 3),  # nvcc hands the host compiler -O4, -O3
])
def test_gcc_and_nvcc_spellings_of_the_level_are_read(given: tuple[str, ...], level: int) -> None:
    assert level_of(given) == level


def _project_arguments(folder: Path, arguments: list[str]) -> None:
    (folder / "k.cu").write_text(READS_OPTIMIZE_NOT_SIZE)
    (folder / "compile_commands.json").write_text(json.dumps([{"directory": str(folder), "file": "k.cu",
                                                               "arguments": arguments}]))


@pytest.mark.parametrize("host", [["-Xcompiler", "--optimize=3"], ["-Xcompiler=-O3 -fPIC"], ["-Xcompiler", "'-O3'"]])
def test_a_host_level_spelled_as_gcc_takes_it_is_the_build_tune_baselines(tmp_path: Path, host: list[str]) -> None:
    _project_arguments(tmp_path, ["nvcc", *host, "-arch=sm_90", "-c", "k.cu", "-o", "k.o"])
    said, acf = _tune(tmp_path)
    assert acf["base"]["nvcc_flags"] == ["-O3"], said  # type: ignore[index]
    assert acf["evidence"]["baseline"]["registers"] == _registers(tmp_path, "-Xcompiler -O3")  # type: ignore[index]
    gate = run_cli(["gate", "store/k.registers.acf.toml", "--static", "--compile-commands", "compile_commands.json"],
                   cwd=tmp_path)
    assert gate.returncode == 0 and "lowered-optimisation" not in gate.output, gate.describe()


LONG = "9" * 5000  # over the 4,300 digits int() reads


@pytest.mark.parametrize(("given", "level"), [
    (("-O²",), 0), (("--optimize=²",), 0),  # "²" is a digit to str.isdigit, no number to nvcc or int()
    ((f"-O{LONG}",), 3), ((f"-Xcompiler -O{LONG}",), 3), ((f"-O000{LONG}",), 3),
    (("-O0000",), 0), (("-Xcompiler -O0000",), 0), (("-O0003",), 3), (("-O0002",), 2),
])
def test_a_level_of_unicode_or_thousands_of_digits_is_read_without_a_traceback(given: tuple[str, ...],
                                                                               level: int) -> None:
    assert level_of(given) == level


@pytest.mark.parametrize("flag", [f"-O{LONG}", f"-Xcompiler -O{LONG}"])
def test_space_reads_a_command_with_such_a_level_in_one_piece(tmp_path: Path, flag: str) -> None:
    """`space --compile-commands` printed a ValueError traceback for a command with -O² or an -O of
    5,000 digits: both pass the compile command's reading, set aside as a host level."""
    done = _space_of(tmp_path, flag)
    assert "Traceback" not in done.output and "ValueError" not in done.output, done.describe()
    assert done.returncode == 0, done.describe()


def _space_of(folder: Path, flag: str) -> CliResult:
    (folder / "k.cu").write_text(READS_OPTIMIZE_NOT_SIZE)
    (folder / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(folder), "file": "k.cu", "command": f"nvcc -arch=sm_90 {flag} -c k.cu -o k.o"}]))
    return run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=folder)


@pytest.mark.parametrize("flag", ["-Os", "-Ofast", "--optimize=s", "-O²", "--optimize fast"])
def test_nvccs_own_O_without_a_number_is_a_command_that_builds_nothing(tmp_path: Path, flag: str) -> None:
    """nvcc 13.0 stops on `-Os` ("nvcc fatal: 's': expected a number"): the command builds nothing,
    and compileiq set the flag aside as a host level and tuned a build no one ships."""
    done = _space_of(tmp_path, flag)
    assert done.returncode == 2 and len(done.stderr_lines) == 1, done.describe()
    assert "takes a number (0-3)" in done.stderr and "builds nothing" in done.stderr, done.stderr
