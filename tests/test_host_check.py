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
    assert "(drops -O3)" in _gate(tmp_path, "without.json")  # a build without it is other code: drift


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
