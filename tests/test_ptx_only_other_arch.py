"""A multi-arch compile command whose other arch is PTX only (CMake's `80-virtual`:
`--generate-code=arch=compute_80,code=[compute_80]`), user53 #3. No sm_80 machine code is built, so
ptxas never runs for it at build time and the tuned ptxas settings never reach it: the driver
JIT-compiles the PTX on GPUs without machine code of their own. `space`, the ACF's [baseline] and
`flags --format cmake` said it "builds for sm_80, not tuned" and "gets these flags unchecked", and
offered `--arch sm_80` as tuning what those GPUs run."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from tests.helpers import LOOP_KERNEL, run_cli

VIRTUAL = ("nvcc -O3 --generate-code=arch=compute_80,code=[compute_80] "
           "--generate-code=arch=compute_90,code=[sm_90] -Xptxas -O2 -x cu -c k.cu -o k.o")


def _project(tmp_path: Path, command: str = VIRTUAL) -> None:
    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    (tmp_path / "compile_commands.json").write_text(
        json.dumps([{"directory": str(tmp_path), "command": command, "file": "k.cu"}]))


def test_a_ptx_only_other_arch_is_named_as_ptx_that_ptxas_settings_do_not_reach(tmp_path: Path) -> None:
    _project(tmp_path)
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()
    assert "PTX for compute_80 (JIT-compiled by the driver on GPUs without their own code: ptxas settings do not " \
           "reach it)" in listed.stderr, listed.stderr
    assert "builds for sm_90, sm_80" not in listed.stderr and "--arch sm_80" not in listed.stderr, listed.stderr
    tuned = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--budget", "1", "--workers",
                     "local", "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", "k.acf.toml", "--no-simplify"],
                    cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    fixed = {f["flag"]: f for f in tomllib.loads((tmp_path / "k.acf.toml").read_text())["baseline"]["fixed"]}
    why = fixed["--generate-code=arch=compute_80,code=[compute_80]"]["why"]
    assert "builds for sm_80" not in why and "--arch sm_80" not in why, why
    assert "PTX for compute_80" in why and "ptxas settings do not reach it" in why, why
    cmake = run_cli(["flags", "k.acf.toml", "--format", "cmake"], cwd=tmp_path)
    assert cmake.returncode == 0, cmake.describe()
    assert "get these flags unchecked" not in cmake.stdout and "--arch sm_80" not in cmake.stdout, cmake.stdout
    assert "PTX for compute_80" in cmake.stdout and "ptxas settings do not reach it" in cmake.stdout, cmake.stdout
    assert "CUDA_ARCHITECTURES 90\n" not in cmake.stdout, cmake.stdout  # never an order to narrow the build


def test_machine_code_beside_ptx_for_the_same_arch_is_still_an_arch_left_out(tmp_path: Path) -> None:
    _project(tmp_path, VIRTUAL.replace("code=[compute_80]", "code=[compute_80,sm_80]"))
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()
    assert "sm_80 left out (the chosen settings are not checked there): --arch sm_80 tunes for sm_80" in listed.stderr
    assert "JIT" not in listed.stderr, listed.stderr
