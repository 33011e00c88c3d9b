"""A shipped host -O level that changes the device code (user finding 1): nvcc preprocesses the
device pass with the host compiler and its options, so `nvcc -O3` defines __OPTIMIZE__ there. tune
checks it (one front end with and without) instead of setting it aside on a guess: where the PTX
differs it is a base flag of every build, the ACF's and the gate's alike; where it does not, it
stays set aside, said as checked, and the study keeps its identity."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from compileiq.core.toolchain import find_toolchain
from tests.helpers import run_cli

READS_OPTIMIZE = """__global__ void k(float *x) {
#ifdef __OPTIMIZE__
  float s = 0; for (int i = 0; i < 64; i++) s += x[i * threadIdx.x] * x[i]; x[threadIdx.x] = s;
#else
  x[threadIdx.x] = 1.0f;
#endif
}
"""


def _project(folder: Path, source: str, command: str, name: str = "compile_commands.json") -> None:
    (folder / "k.cu").write_text(source)
    (folder / name).write_text(json.dumps([{"directory": str(folder), "command": command, "file": "k.cu"}]))


def _tune(folder: Path) -> tuple[subprocess.CompletedProcess[str] | object, dict[str, object]]:
    done = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--objective", "registers",
                    "--budget", "4", "--workers", "local", "--db", f"sqlite:///{folder / 't.db'}"], cwd=folder)
    assert done.returncode == 0, done.describe()
    return done, tomllib.loads((folder / "store" / "k.registers.acf.toml").read_text())


def _registers(folder: Path, *flags: str) -> int:
    built = subprocess.run([find_toolchain().nvcc, *flags, "-c", "k.cu", "-o", "k.o", "-Xptxas", "-v"], cwd=folder,
                           capture_output=True, text=True, check=True)
    return int(re.findall(r"Used (\d+) registers", built.stderr)[-1])


def _gate(folder: Path, database: str) -> str:
    done = run_cli(["gate", "store/k.registers.acf.toml", "--static", "--compile-commands", database], cwd=folder)
    assert done.returncode == 0, done.describe()
    return done.stdout + done.stderr


def test_a_shipped_O3_the_kernel_reads_is_applied_and_the_gate_agrees(tmp_path: Path) -> None:
    _project(tmp_path, READS_OPTIMIZE, "nvcc -O3 -arch=sm_90 -c k.cu -o k.o")
    done, acf = _tune(tmp_path)
    assert "applied: -O3 changes k.cu's device code (__OPTIMIZE__): its PTX differs without it" in done.stderr
    assert acf["base"]["nvcc_flags"] == ["-O3"]
    assert acf["evidence"]["baseline"]["registers"] == _registers(tmp_path, "-O3", "-arch=sm_90")  # as shipped
    flags = run_cli(["flags", "store/k.registers.acf.toml", "--all"], cwd=tmp_path)
    assert "-O3" in flags.stdout.split(), flags.describe()
    assert "stale-settings" not in _gate(tmp_path, "compile_commands.json")  # the gate reads the command alike
    _project(tmp_path, READS_OPTIMIZE, "nvcc -arch=sm_90 -c k.cu -o k.o", "without.json")
    dropped = run_cli(["gate", "store/k.registers.acf.toml", "--static", "--compile-commands", "without.json"],
                      cwd=tmp_path)  # a build without it is other code: it fails, as a lowered ptxas level does
    assert dropped.returncode == 1 and "(drops -O3)" in dropped.output, dropped.describe()
    assert "error lowered-optimisation" in dropped.output, dropped.describe()


def test_a_shipped_O3_that_leaves_the_device_code_as_it_is_stays_set_aside(tmp_path: Path) -> None:
    _project(tmp_path, "__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n",
             "nvcc -O3 -arch=sm_90 -c k.cu -o k.o")
    done, acf = _tune(tmp_path)
    assert ("not applied: -O3 (host optimisation level (nvcc -O): the device code is the same without it "
            "(checked))") in done.stderr
    assert acf["base"]["nvcc_flags"] == []  # no base flag: the study keeps its identity


def test_a_host_compiler_option_of_the_command_is_never_run_by_the_check(tmp_path: Path) -> None:
    """review55 finding 1: the check handed the command's -Xcompiler options to nvcc, and a host
    compiler option runs programs (`-wrapper,PROG`: gcc runs PROG in place of cc1plus). An untrusted
    compile database made `tune` run its program. Only nvcc's own -O level is checked; a host
    compiler option stays set aside on the command's reading."""
    marker = tmp_path / "ran"
    wrapper = tmp_path / "wrap.sh"
    wrapper.write_text(f'#!/bin/sh\ntouch "{marker}"\nexec "$@"\n')
    wrapper.chmod(0o755)
    _project(tmp_path, READS_OPTIMIZE, f"nvcc -O3 -arch=sm_90 -Xcompiler -wrapper,{wrapper} -c k.cu -o k.o")
    done = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--objective", "registers",
                    "--budget", "2", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}"], cwd=tmp_path)
    assert not marker.exists(), done.describe()
    assert "Traceback" not in done.output, done.describe()


# Faults found by testers (hostcheck): what compileiq builds is held to what the shipped command
# builds, the level read as nvcc and the host compiler read it (nvcc 13.0 -dryrun: -Xcompiler
# options first, then nvcc's own -O1..-O3, never -O0; each takes its last).


def _tune_or_not(folder: Path, budget: int = 2) -> tuple[Any, dict[str, Any] | None]:
    done = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--objective", "registers",
                    "--budget", str(budget), "--workers", "local", "--db", f"sqlite:///{folder / 't.db'}"], cwd=folder)
    path = folder / "store" / "k.registers.acf.toml"
    return done, tomllib.loads(path.read_text()) if path.is_file() else None


def test_a_level_tune_toml_gives_too_is_applied_and_said_so_never_checked_against_itself(tmp_path: Path) -> None:
    """Fault 1: tune.toml's -O3 was in both front ends, so the command's -O3 was 'the same without
    it (checked)' while the ACF's [base] held -O3: the views contradicted each other."""
    (tmp_path / "tune.toml").write_text('nvcc_flags = ["-O3", "-std=c++17"]\n')
    _project(tmp_path, READS_OPTIMIZE, "nvcc -O3 -arch=sm_90 -c k.cu -o k.o")
    done, acf = _tune(tmp_path)
    assert "(checked)" not in done.stderr, done.stderr
    assert "applied: -O3 the base flags (tune.toml's nvcc_flags) give it too" in done.stderr
    assert "-O3" in acf["base"]["nvcc_flags"]
    fixed = [f for f in acf["baseline"]["fixed"] if f["flag"] == "-O3"]
    assert [f["applied"] for f in fixed] == [True], fixed
    flags = run_cli(["flags", "store/k.registers.acf.toml", "--all"], cwd=tmp_path)
    assert "-O3" in flags.stdout.split() and "-O3" not in flags.stderr, flags.describe()


TM_DEFAULT = "#ifndef TM\n#define TM 1\n#endif\n"  # the shipped command gives no -DTM: the kernel's own is tune.toml's first
READS_TM_AND_OPTIMIZE = TM_DEFAULT + """__global__ void k(float *x) {
#if TM == 1 || defined(__OPTIMIZE__)
  float s = 0; for (int i = 0; i < 64; i++) s += x[i * threadIdx.x] * x[i]; x[threadIdx.x] = s + TM;
#else
  x[threadIdx.x] = 1.0f * TM;
#endif
}
"""


def test_a_level_with_tuned_macros_is_checked_at_each_of_their_values(tmp_path: Path) -> None:
    """Fault 2: only TM's first value was checked (the same PTX at TM=1), so -O3 was set aside
    '(checked)' though TM=2 builds other code with it: the ACF's gain never shipped. Each tuned
    value is checked now (stop 56's first answer, applying it unchecked wherever macros are tuned,
    moved every such study of an older release to a new identity)."""
    (tmp_path / "tune.toml").write_text("[tune.defines]\nTM = [1, 2]\n")
    _project(tmp_path, READS_TM_AND_OPTIMIZE, "nvcc -O3 -arch=sm_90 -c k.cu -o k.o")
    done, acf = _tune(tmp_path)
    assert "(checked)" not in done.stderr, done.stderr
    assert "applied: -O3 changes k.cu's device code at TM=2 (__OPTIMIZE__)" in done.stderr, done.stderr
    assert acf["base"]["nvcc_flags"] == ["-O3"]
    assert acf["evidence"]["baseline"]["registers"] == _registers(tmp_path, "-O3", "-arch=sm_90", "-DTM=1")
    assert "stale-settings" not in _gate(tmp_path, "compile_commands.json")


@pytest.mark.parametrize(("flags", "base"), [
    ("-O3 -O0", []), ("-O3 --optimize 0", []),  # fault 3: nvcc takes the last -O
    ("-O3 -O0 -O3", ["-O3"]),  # a flag given twice was kept at its first place: read as -O0
    ("--optimize 3", ["-O3"]), ("--optimize=2", ["-O2"]), ("-O 3", ["-O3"]),  # fault 4: recorded as -O3
    ("-Xcompiler -O3", ["-O3"]), ("-Xcompiler=-O2", ["-O2"]), ("--compiler-options -O1", ["-O1"]),  # fault 6
    ("-O0 -Xcompiler -O3", ["-O3"]), ("-O3 -Xcompiler -O0", ["-O3"]), ("-Xcompiler -O3,-O0", []),
])
def test_the_baseline_is_the_build_the_command_ships_whatever_its_host_level_spelling(
        tmp_path: Path, flags: str, base: list[str]) -> None:
    """Faults 3, 4, 6: `-O3 -O0` applied -O3 (nvcc builds at -O0); `--optimize 3` ran and then
    wrote no ACF ('applied but not an allowed base flag'); `-Xcompiler -O3` stayed set aside
    unchecked. The baseline's registers are those of the command's own build (real nvcc)."""
    _project(tmp_path, READS_OPTIMIZE, f"nvcc {flags} -arch=sm_90 -c k.cu -o k.o")
    done, acf = _tune_or_not(tmp_path)
    assert acf is not None, done.describe()
    assert acf["base"]["nvcc_flags"] == base
    shipped = _registers(tmp_path, *flags.split(), "-arch=sm_90")
    assert acf["evidence"]["baseline"]["registers"] == shipped
    assert "stale-settings" not in _gate(tmp_path, "compile_commands.json")  # the gate reads it alike


def test_a_kernel_that_does_not_compile_at_the_shipped_level_is_one_error(tmp_path: Path) -> None:
    """Fault 5: the check's failed compile was silent, and the ACF called a build 'your build'
    that the shipped command cannot compile."""
    _project(tmp_path, "__global__ void k(float *x) {\n#ifdef __OPTIMIZE__\n#error no optimised builds\n#endif\n"
             "  x[threadIdx.x] = 1.0f;\n}\n", "nvcc -O3 -arch=sm_90 -c k.cu -o k.o")
    done, acf = _tune_or_not(tmp_path)
    assert done.returncode == 2 and acf is None, done.describe()
    assert "k.cu does not compile with the command's -O3" in done.stderr, done.describe()
    assert "no optimised builds" in done.stderr and "Traceback" not in done.output


@pytest.mark.parametrize("shipped", ["nvcc -arch=sm_90 -c k.cu -o k.o", "nvcc -O3 -O0 -arch=sm_90 -c k.cu -o k.o"])
def test_a_command_that_drops_the_applied_host_level_fails_the_gate(tmp_path: Path, shipped: str) -> None:
    """Fault 7: a command without the host -O3 the ACF applied (it changes the device code) got
    only a stale-settings warning and exit 0, where a lowered ptxas level fails."""
    _project(tmp_path, READS_OPTIMIZE, "nvcc -Xcompiler -O3 -arch=sm_90 -c k.cu -o k.o")
    _tune(tmp_path)
    (tmp_path / "without.json").write_text(json.dumps([{"directory": str(tmp_path), "command": shipped,
                                                         "file": "k.cu"}]))
    done = run_cli(["gate", "store/k.registers.acf.toml", "--static", "--json", "--compile-commands",
                    "without.json"], cwd=tmp_path)
    assert done.returncode == 1, done.describe()
    found = {f["rule"]: f for f in json.loads(done.stdout)["acfs"][0]["findings"]}
    assert found["lowered-optimisation"]["severity"] == "error", found
    assert "no host optimisation level, where the ACF applied -O3" in found["lowered-optimisation"]["message"]


def test_a_level_inside_a_host_compiler_list_keeps_the_gate_passing(tmp_path: Path) -> None:
    """review56 finding 4: `-Xcompiler -fPIC,-O3` hands the host compiler -O3 (__OPTIMIZE__ in the
    device pass), yet the gate read the list as no level and failed `lowered-optimisation` on a
    build that keeps the ACF's applied -O3."""
    _project(tmp_path, READS_OPTIMIZE, "nvcc -O3 -arch=sm_90 -c k.cu -o k.o")
    _tune(tmp_path)
    (tmp_path / "listed.json").write_text(json.dumps([{"directory": str(tmp_path), "file": "k.cu",
                                                        "command": "nvcc -Xcompiler -fPIC,-O3 -arch=sm_90 -c k.cu -o k.o"}]))
    done = run_cli(["gate", "store/k.registers.acf.toml", "--static", "--json", "--compile-commands",
                    "listed.json"], cwd=tmp_path)
    found = {f["rule"]: f for f in json.loads(done.stdout)["acfs"][0]["findings"]}
    assert "lowered-optimisation" not in found, found
    assert done.returncode == 0, done.describe()


READS_OPTIMIZE_ON_SM90 = READS_OPTIMIZE.replace("#ifdef __OPTIMIZE__",
                                                "#if defined(__OPTIMIZE__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900")


def test_the_gate_checks_the_host_level_at_the_arch_the_command_builds(tmp_path: Path) -> None:
    """review56 finding 5 (a guard: it passed before the gate's check was given the command's arch
    explicitly): tune checks a command's -O3 at the arch the command builds (sm_90), not tune.toml's
    (sm_80), where this kernel never reads __OPTIMIZE__; the gate must read the command alike and
    not call the ACF's applied -O3 dropped."""
    _project(tmp_path, READS_OPTIMIZE_ON_SM90, "nvcc -O3 -arch=sm_90 -c k.cu -o k.o")
    (tmp_path / "tune.toml").write_text('arch = "sm_80"\n')
    _, acf = _tune(tmp_path)
    assert acf["base"]["nvcc_flags"] == ["-O3"]  # it changes the sm_90 device code
    said = _gate(tmp_path, "compile_commands.json")
    assert "stale-settings" not in said, said


def test_a_level_no_tuned_value_reads_stays_set_aside_and_keeps_the_study(tmp_path: Path) -> None:
    """stop 56: a shipped -O3 was applied, unchecked, to every kernel with tuned macros, so a study
    of one that never reads __OPTIMIZE__ got a new identity (an older release's study and ACF were
    no longer its own). Checked at each tuned value, it stays set aside."""
    (tmp_path / "tune.toml").write_text("[tune.defines]\nTM = [1, 2]\n")
    _project(tmp_path, TM_DEFAULT + READS_OPTIMIZE.replace("#ifdef __OPTIMIZE__", "#if TM > 5").replace("1.0f;", "1.0f * TM;"),
             "nvcc -O3 -arch=sm_90 -c k.cu -o k.o")
    done, acf = _tune(tmp_path)
    assert "-O3 (host optimisation level (nvcc -O): the device code is the same without it at each tuned " \
        "macro value (checked))" in done.stderr, done.stderr
    assert acf["base"].get("nvcc_flags", []) == []


# The front ends of one check run at once (one per CPU), read in a fixed order: the verdict and
# its words are those of the check run one front end after another, whichever finishes first.

READS_OPTIMIZE_AT = TM_DEFAULT + "#ifndef TN\n#define TN 1\n#endif\n" + """__global__ void k(float *x) {
#if (%s) && defined(__OPTIMIZE__)
  float s = 0; for (int i = 0; i < 64; i++) s += x[i * threadIdx.x] * x[i]; x[threadIdx.x] = s + TM + TN;
#else
  x[threadIdx.x] = 1.0f * TM * TN;
#endif
}
"""
SEVERAL_VALUES = "[tune.defines]\nTM = [1, 2, 3, 4]\nTN = [1, 2, 3]\n"


def _unchecked(folder: Path, condition: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The kernel's spec as `tune` reads the command, before its host level is checked."""
    from compileiq import app
    from compileiq.build import host_check

    (folder / "tune.toml").write_text(SEVERAL_VALUES)
    _project(folder, READS_OPTIMIZE_AT % condition, "nvcc -O3 -arch=sm_90 -c k.cu -o k.o")
    with monkeypatch.context() as patched:
        patched.setattr(host_check, "checked", lambda spec, nvcc: spec)
        return app.kernel_spec(folder / "k.cu", None, folder / "compile_commands.json")


@pytest.mark.parametrize(("condition", "why"), [
    ("TM >= 3 || TN == 3", "applied: changes k.cu's device code at TM=3 (__OPTIMIZE__): its PTX differs without it"),
    ("TN == 3", "applied: changes k.cu's device code at TN=3 (__OPTIMIZE__): its PTX differs without it"),
    ("TM == 9", ": the device code is the same without it at each tuned macro value (checked)"),
])
def test_the_check_at_several_tuned_values_says_what_one_run_after_another_says(
        tmp_path: Path, condition: str, why: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five other values, twelve front ends run at once: the first value in order that differs
    names the verdict (TM=3, not TM=4 or TN=3, whichever finished first), as one front end after
    another says it; the spec is the same with one worker as with one per CPU."""
    from compileiq.build.host_check import checked

    unchecked = _unchecked(tmp_path, condition, monkeypatch)
    spec = checked(unchecked, find_toolchain().nvcc)
    level = [f for f in spec.shipped.fixed if f.flag == "-O3"]
    assert len(level) == 1 and level[0].why.endswith(why), level
    assert ("-O3" in spec.nvcc_flags.flags) == why.startswith("applied"), spec.nvcc_flags
    assert checked(unchecked, find_toolchain().nvcc, workers=1) == spec  # one front end at a time: the same


def test_a_tuned_value_that_differs_says_so_through_tune(tmp_path: Path) -> None:
    (tmp_path / "tune.toml").write_text(SEVERAL_VALUES)
    _project(tmp_path, READS_OPTIMIZE_AT % "TM == 4 || TN >= 2", "nvcc -O3 -arch=sm_90 -c k.cu -o k.o")
    done, acf = _tune(tmp_path)
    assert "applied: -O3 changes k.cu's device code at TM=4 (__OPTIMIZE__): its PTX differs without it" \
        in done.stderr, done.stderr
    assert acf["base"]["nvcc_flags"] == ["-O3"]
    assert "stale-settings" not in _gate(tmp_path, "compile_commands.json")


def test_the_front_ends_of_one_check_run_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A check at tuned macro values ran its (up to 18) front ends one after another: seconds
    each on a large kernel, before the search starts and again in the gate. An nvcc that logs
    when it starts and ends shows them overlap (as many as there are CPUs)."""
    import os

    from compileiq.build.host_check import checked

    unchecked = _unchecked(tmp_path, "TM == 9", monkeypatch)  # the same at every value: all twelve run
    log = tmp_path / "runs.log"
    wrapper = tmp_path / "nvcc-logged"
    wrapper.write_text(f'#!/bin/sh\necho "+ $(date +%s.%N)" >> "{log}"\nsleep 1\n'
                       f'"{find_toolchain().nvcc}" "$@"\nstatus=$?\necho "- $(date +%s.%N)" >> "{log}"\n'
                       'exit $status\n')
    wrapper.chmod(0o755)
    spec = checked(unchecked, str(wrapper))
    assert "at each tuned macro value (checked)" in next(f.why for f in spec.shipped.fixed if f.flag == "-O3")
    events = sorted((float(t), s) for s, t in (line.split() for line in log.read_text().splitlines()))
    assert sum(1 for _, s in events if s == "+") == 12, events
    running = most = 0
    for _, sign in events:
        running += 1 if sign == "+" else -1
        most = max(most, running)
    assert min(2, os.cpu_count() or 1) <= most <= (os.cpu_count() or 1), events


# fix-misc fault 1: a host -O level inside a mixed -Xcompiler list (nvcc 13.0 -dryrun hands the host
# compiler `-fPIC -O3` for each spelling below) was recorded as not applied and never checked by
# tune, while the gate read it: the shipped build defines __OPTIMIZE__, compileiq's did not.

@pytest.mark.parametrize("listed", ["-Xcompiler -fPIC,-O3", "-Xcompiler=-fPIC,-O3", "-Xcompiler -O3,-fPIC",
                                    "-Xcompiler '-fPIC -O3'"])
def test_a_level_inside_a_host_compiler_list_is_checked_and_applied_as_a_plain_one(tmp_path: Path, listed: str) -> None:
    _project(tmp_path, READS_OPTIMIZE, f"nvcc -arch=sm_90 {listed} -c k.cu -o k.o")
    done, acf = _tune(tmp_path)
    assert "applied: -O3 changes k.cu's device code (__OPTIMIZE__): its PTX differs without it" in done.stderr, \
        done.stderr
    assert acf["base"]["nvcc_flags"] == ["-O3"]
    fixed = {f["flag"]: f["applied"] for f in acf["baseline"]["fixed"]}
    assert fixed["-O3"] is True and False in fixed.values(), fixed  # the list itself stays set aside (-fPIC)
    assert acf["evidence"]["baseline"]["registers"] == _registers(tmp_path, "-arch=sm_90", "-Xcompiler", "-fPIC,-O3")
    flags = run_cli(["flags", "store/k.registers.acf.toml", "--all"], cwd=tmp_path)
    assert "-O3" in flags.stdout.split() and "-fPIC" not in flags.stdout, flags.describe()
    said = _gate(tmp_path, "compile_commands.json")
    assert "stale-settings" not in said and "lowered-optimisation" not in said, said


def test_a_listed_level_the_kernel_does_not_read_stays_set_aside_as_checked(tmp_path: Path) -> None:
    _project(tmp_path, "__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n",
             "nvcc -arch=sm_90 -Xcompiler -fPIC,-O2 -c k.cu -o k.o")
    done, acf = _tune(tmp_path)
    assert "the device code is the same without it (checked)" in done.stderr, done.stderr
    assert acf["base"]["nvcc_flags"] == []
    assert [f["applied"] for f in acf["baseline"]["fixed"] if f["flag"] == "-O2"] == [False], acf["baseline"]


def test_a_listed_level_is_overridden_by_nvccs_own(tmp_path: Path) -> None:
    """nvcc puts its own -O1..-O3 after the -Xcompiler options (-dryrun: `-fPIC -O3 -O1`)."""
    _project(tmp_path, READS_OPTIMIZE, "nvcc -O1 -arch=sm_90 -Xcompiler -fPIC,-O3 -c k.cu -o k.o")
    done, acf = _tune(tmp_path)
    assert acf["base"]["nvcc_flags"] == ["-O1"], done.stderr
    assert "overridden by -O1" in done.stderr, done.stderr


def test_a_listed_level_check_runs_no_other_host_option(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    wrapper = tmp_path / "wrap.sh"
    wrapper.write_text(f'#!/bin/sh\ntouch "{marker}"\nexec "$@"\n')
    wrapper.chmod(0o755)
    _project(tmp_path, READS_OPTIMIZE, f"nvcc -arch=sm_90 -Xcompiler -wrapper,{wrapper},-O3 -c k.cu -o k.o")
    done, _ = _tune_or_not(tmp_path)
    assert not marker.exists(), done.describe()
    assert "Traceback" not in done.output, done.describe()


# fix-arch2 fault 2: the host compiler takes its last -O item, so `-Xcompiler -O3,-Os` builds at -Os
# (__OPTIMIZE_SIZE__ in the device pass), `-O2,-Ofast` at -Ofast (__FAST_MATH__): the list's -O3 was
# read and applied as the build's level. No level is read where the last -O item is no -O0..-O3 (nor
# gcc's -O or -Og, which are -O1): the list stays set aside as a plain `-Xcompiler -Os` does.

@pytest.mark.parametrize("listed", ["-Xcompiler -O3,-Os", "-Xcompiler -O2,-Ofast",
                                    "-Xcompiler '-O3 -Os'"])
def test_a_host_compiler_list_whose_last_O_item_is_no_level_reads_none(tmp_path: Path, listed: str) -> None:
    _project(tmp_path, READS_OPTIMIZE, f"nvcc -arch=sm_90 {listed} -c k.cu -o k.o")
    done, acf = _tune(tmp_path)
    assert "applied: -O" not in done.stderr, done.stderr
    assert acf["base"]["nvcc_flags"] == []
    fixed = {f["flag"]: f for f in acf["baseline"]["fixed"]}
    assert not any(re.fullmatch(r"-O[0-3]", flag) for flag in fixed), fixed  # no level recorded apart
    [given] = [f for flag, f in fixed.items() if flag.startswith("-Xcompiler")]
    assert given["applied"] is False and given["why"].startswith("host compiler option: may change the macros"), given
    said = _gate(tmp_path, "compile_commands.json")  # the gate reads no level either
    assert "stale-settings" not in said and "lowered-optimisation" not in said, said
