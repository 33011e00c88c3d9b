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


def _tuned(folder: Path, command: str) -> None:
    """KERNEL tuned (ptxas -O only, 2 trials) from a compilation database holding `command`: k.acf.toml."""
    (folder / "k.cu").write_text(KERNEL)
    (folder / "compile_commands.json").write_text(json.dumps([{"directory": str(folder), "command": command,
                                                               "file": "k.cu"}]))
    tuned = run_cli(["tune", "k.cu", "--workers", "local", "--db", f"sqlite:///{folder / 't.db'}", "--budget", "2",
                     "--compile-commands", "compile_commands.json", "--only", "ptxas.opt_level", "--out", "k.acf.toml"],
                    cwd=folder)
    assert tuned.returncode == 0, tuned.describe()


def _ptxas_options(cubin: Path) -> set[str]:
    """The options ptxas records in the cubin it wrote (the words after the toolchain's build line)."""
    parts = cubin.read_bytes().split(b"\x00")
    build = next(i for i, part in enumerate(parts) if part.startswith(b"Build cuda"))
    return set(next(part for part in parts[build + 1:] if part).decode().split())


def test_a_split_build_from_the_stages_flags_gives_ptxas_what_nvcc_does(tmp_path: Path) -> None:
    _tuned(tmp_path, "nvcc -arch=sm_90 --fmad=false -lineinfo -w -c k.cu -o k.o")

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


def test_the_ptxas_stage_says_what_only_all_adds(tmp_path: Path) -> None:
    """User report (this round): `flags --stage ptxas` of a build shipped with -maxrregcount=64 printed no
    cap and no note, where the other stages name the base flags --all adds: a build driving ptxas
    itself shipped uncapped."""
    _tuned(tmp_path, "nvcc -arch=sm_90 -maxrregcount=64 -lineinfo -c k.cu -o k.o")
    bare = run_cli(["flags", "k.acf.toml", "--stage", "ptxas"], cwd=tmp_path)
    assert bare.returncode == 0 and "--maxrregcount=64" not in bare.stdout, bare.describe()
    assert "--all adds them" in bare.stderr and "--maxrregcount=64" in bare.stderr, bare.describe()
    assert "--generate-line-info" in bare.stderr, bare.describe()
    full = run_cli(["flags", "k.acf.toml", "--stage", "ptxas", "--all"], cwd=tmp_path)
    assert "--maxrregcount=64" in full.stdout.split() and "note:" not in full.stderr, full.describe()
