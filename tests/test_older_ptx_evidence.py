"""A shipped build that makes sm_86 machine code from compute_80 PTX (`-arch=compute_80 -code=sm_86`,
its `-gencode`, or `-code=sm_80,sm_86` tuned for sm_86) is tuned, recorded and gated as that code
(rev51 #1): the trials, the "your build" baseline and the gate's rebuild compiled their PTX from
compute_86, so a kernel whose code depends on __CUDA_ARCH__ was recorded with 204 registers while
the flags `flags` printed (and the shipped build) give 8. Real nvcc/ptxas and SQLite: the evidence's
registers and code hash are an nvcc build's with the printed flags, whole and in two stages.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from compileiq.build.compile import code_hash
from compileiq.build.cubin import text_sections
from tests.helpers import compile_commands_file, run_cli, tune_in

# a big register tile where __CUDA_ARCH__ >= 860 (compute_86 PTX), a trivial body from compute_80
ARCH_KERNEL = """\
__global__ void k(float* a, int n) {
#if __CUDA_ARCH__ >= 860
  float acc[64];
  for (int i = 0; i < 64; i++) acc[i] = a[i * n + threadIdx.x];
  for (int r = 0; r < 4; r++) for (int i = 0; i < 64; i++) acc[i] = acc[(i * 7 + r) % 64] * 1.5f + acc[i];
  for (int i = 0; i < 64; i++) a[i * n + threadIdx.x] = acc[i];
#else
  a[threadIdx.x] = 1.f;
#endif
}
"""


def _nvcc(folder: Path, *argv: str) -> str:
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, check=False)
    assert done.returncode == 0, (argv, done.stderr)
    return done.stdout + done.stderr


def _built(folder: Path, cubin: str, report: str) -> tuple[int, str]:
    """Registers (from ptxas -v's report) and code hash of a cubin built in `folder`."""
    (registers,) = {int(r) for r in re.findall(r"Used (\d+) registers", report)}
    return registers, code_hash(text_sections((folder / cubin).read_bytes()))


def _flags(folder: Path, *args: str) -> list[str]:
    done = run_cli(["flags", "k.acf.toml", *args], cwd=folder)
    assert done.returncode == 0, done.describe()
    return done.stdout.split()


@pytest.mark.parametrize(("shipped", "printed"), [
    ("-arch=compute_80 -code=sm_86", ["-arch=compute_80", "-code=sm_86"]),
    ("-gencode arch=compute_80,code=sm_86", ["-arch=compute_80", "-code=sm_86"]),
    ("-arch=compute_80 -code=sm_80,sm_86", ["-arch=compute_80", "-code=sm_86"]),  # sm_80 left out
])
def test_evidence_is_the_code_the_printed_flags_build(tmp_path: Path, shipped: str, printed: list[str]) -> None:
    (tmp_path / "k.cu").write_text(ARCH_KERNEL)
    # the same kernel built -arch=sm_86 first, in the same database: its builds and study are not the shipped one's
    compile_commands_file(tmp_path, "nvcc -arch=sm_86 -c k.cu -o k.o")
    own = tune_in(tmp_path, "--compile-commands", "compile_commands.json", "--only", "ptxas.opt_level")
    assert own.returncode == 0, own.describe()
    own_study = re.search(r"study (k-static-[0-9a-f]+)", own.stdout + own.stderr)
    compile_commands_file(tmp_path, f"nvcc -O3 {shipped} -c k.cu -o k.o")
    tuned = tune_in(tmp_path, "--compile-commands", "compile_commands.json", "--arch", "sm_86",
                    "--only", "ptxas.opt_level")
    said = tuned.stdout + tuned.stderr
    assert tuned.returncode == 0, tuned.describe()
    assert own_study and own_study[1] not in said, said
    assert "sm_86 machine code from compute_80 PTX" in said and "compute_86" not in said, said

    words = _flags(tmp_path, "--all")
    assert [w for w in words if w.startswith(("-arch", "-code"))] == printed, words
    whole = _built(tmp_path, "whole.cubin", _nvcc(tmp_path, "nvcc", *words, "-cubin", "-Xptxas", "-v", "k.cu",
                                                   "-o", "whole.cubin"))
    assert _flags(tmp_path, "--stage", "frontend")[:1] == ["-arch=compute_80"]
    _nvcc(tmp_path, "nvcc", *_flags(tmp_path, "--stage", "frontend", "--all"), "-ptx", "k.cu", "-o", "k.ptx")
    ptxas = _flags(tmp_path, "--stage", "ptxas", "--all")
    assert "-arch=sm_86" in ptxas, ptxas
    split = _built(tmp_path, "split.cubin", _nvcc(tmp_path, "ptxas", "-v", *ptxas, "k.ptx", "-o", "split.cubin"))
    evidence = tomllib.loads((tmp_path / "k.acf.toml").read_text())["evidence"]
    for table in ("best", "baseline"):
        assert (evidence[table]["registers"], evidence[table]["code_hash"]) == whole == split, (evidence, whole)
    # the kernel tells them apart: compute_86 PTX gives the register tile
    assert _built(tmp_path, "own.cubin", _nvcc(tmp_path, "nvcc", "-arch=sm_86", "-cubin", "-Xptxas", "-v", "k.cu",
                                                "-o", "own.cubin"))[0] > whole[0]

    gated = run_cli(["gate", "k.acf.toml", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert gated.returncode == 0 and "gate PASS" in gated.stdout, gated.describe()
