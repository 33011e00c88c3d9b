"""`flags --stage ptxas` gives what nvcc hands ptxas of the front end's options (user51, fault 3):
a shipped -lineinfo reaches ptxas as --generate-line-info (`nvcc -dryrun`), -w as -w (a tuned
--fmad=false as --fmad=false already did); `--stage ptxas --all` dropped the base flags' ones, so a build in two stages (nvcc
-ptx, then ptxas) lost the source-line table Nsight Compute reads. Real nvcc/ptxas: the options
ptxas records in the cubin (its .note.nv.tkinfo) are compared with nvcc's own build's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.helpers import run_cli

KERNEL = """\
__global__ void k(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float s = 0.f;
  for (int j = 0; j < n; ++j) s += x[(i + j) % n] * x[j] + 1.5f;
  if (i < n) y[i] = s;
}
"""


def _flags(folder: Path, *args: str) -> list[str]:
    done = run_cli(["flags", "k.acf.toml", *args], cwd=folder)
    assert done.returncode == 0, done.describe()
    return done.stdout.split()


def _ptxas_options(cubin: Path) -> set[str]:
    """The options ptxas records in the cubin it wrote (the words after the toolchain's build line)."""
    parts = cubin.read_bytes().split(b"\x00")
    build = next(i for i, part in enumerate(parts) if part.startswith(b"Build cuda"))
    return set(next(part for part in parts[build + 1:] if part).decode().split())


def test_a_split_build_from_the_stages_flags_gives_ptxas_what_nvcc_does(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(KERNEL)
    command = "nvcc -arch=sm_90 --fmad=false -lineinfo -w -c k.cu -o k.o"
    (tmp_path / "compile_commands.json").write_text(json.dumps([{"directory": str(tmp_path), "command": command,
                                                                 "file": "k.cu"}]))
    tuned = run_cli(["tune", "k.cu", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}", "--budget", "2",
                     "--compile-commands", "compile_commands.json", "--only", "ptxas.opt_level", "--out", "k.acf.toml"],
                    cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()

    ptxas = _flags(tmp_path, "--stage", "ptxas", "--all")
    assert {"--generate-line-info", "-w", "--fmad=false"} <= set(ptxas), ptxas
    assert "--fmad=false" in _flags(tmp_path, "--stage", "ptxas")  # a tuned setting: without --all too

    def run(*argv: str) -> None:
        done = subprocess.run(argv, check=False, cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, (argv, done.stderr)

    run("nvcc", *_flags(tmp_path, "--stage", "frontend", "--all"), "-ptx", "k.cu", "-o", "k.ptx")
    run("ptxas", *ptxas, "k.ptx", "-o", "split.cubin")
    run("nvcc", *_flags(tmp_path, "--all"), "-cubin", "k.cu", "-o", "nvcc.cubin")
    split, whole = _ptxas_options(tmp_path / "split.cubin"), _ptxas_options(tmp_path / "nvcc.cubin")
    assert "-lineinfo" in whole, whole
    assert split == whole - {"-m", "64"}, (split, whole)  # nvcc's -m64 is ptxas's default on a 64-bit host
