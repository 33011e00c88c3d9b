"""A tuned macro that changes neither the device code nor the host code is refused before any build
(found by preprocessing the kernel at its values); one that changes only the host's launch, or only
some of its values, is tuned as before."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import run_cli

# Rodinia's srad_v2 (srad.h, srad_kernel.cu), cut down: the build's -DRD_WG_SIZE_0 takes precedence.
SRAD_H = """\
#ifdef RD_WG_SIZE_0_0
        #define BLOCK_SIZE RD_WG_SIZE_0_0
#elif defined(RD_WG_SIZE_0)
        #define BLOCK_SIZE RD_WG_SIZE_0
#elif defined(RD_WG_SIZE)
        #define BLOCK_SIZE RD_WG_SIZE
#else
        #define BLOCK_SIZE 16
#endif
"""
SRAD_KERNEL = """\
#include "srad.h"
__global__ void srad_cuda_1(float *E_C, float *J_cuda, int cols) {
  int bx = blockIdx.x, by = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y;
  int index = cols * BLOCK_SIZE * by + BLOCK_SIZE * bx + cols * ty + tx;
  __shared__ float temp[BLOCK_SIZE][BLOCK_SIZE];
  temp[ty][tx] = J_cuda[index];
  __syncthreads();
  E_C[index] = temp[(ty + 1) % BLOCK_SIZE][tx] - temp[ty][tx];
}
"""
SRAD_TOML = """\
arch = "sm_90"
[tune.defines]
RD_WG_SIZE = [16, 8, 32]
[launch.srad_cuda_1]
block_size = "RD_WG_SIZE*RD_WG_SIZE"
"""


def _srad(tmp_path: Path) -> None:
    (tmp_path / "srad.h").write_text(SRAD_H)
    (tmp_path / "srad_kernel.cu").write_text(SRAD_KERNEL)
    (tmp_path / "tune.toml").write_text(SRAD_TOML)
    (tmp_path / "compile_commands.json").write_text(json.dumps([{
        "directory": str(tmp_path), "file": "srad_kernel.cu",
        "arguments": ["nvcc", "-arch=sm_90", "-DRD_WG_SIZE_0=16", "-Xptxas", "-O2,-v", "-c", "srad_kernel.cu"]}]))


REFUSAL = ("tune.defines.RD_WG_SIZE: its values 16, 8, 32 preprocess to the same device and host code, so "
           "-DRD_WG_SIZE has no effect (the build's -DRD_WG_SIZE_0=16 may take precedence): tune a macro the code "
           "reads, or take it out of [tune.defines]")


def test_a_macro_the_build_shadows_is_refused_before_any_build(tmp_path: Path) -> None:
    """srad: every RD_WG_SIZE built the same code, and occupancy was scored at 64, 256 and 1024
    threads per block from launch facts the program never launches, without a word."""
    _srad(tmp_path)
    db = tmp_path / "t.db"
    tuned = run_cli(["tune", "srad_kernel.cu", "--compile-commands", "compile_commands.json", "--objective",
                     "occupancy", "--only", "define.RD_WG_SIZE,ptxas.opt_level", "--strategy", "exhaustive",
                     "--budget", "16", "--workers", "local", "--db", f"sqlite:///{db}", "--out", "x.acf.toml"],
                    cwd=tmp_path)
    assert tuned.returncode == 2 and REFUSAL in tuned.stderr, tuned.describe()
    assert "Traceback" not in tuned.output and "#0" not in tuned.output and not (tmp_path / "x.acf.toml").exists()
    listed = run_cli(["space", "srad_kernel.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 0 and any(REFUSAL in line for line in listed.stderr_lines), listed.describe()
    # built without the shadowing macro, RD_WG_SIZE is the block size again
    (tmp_path / "compile_commands.json").write_text(json.dumps([{
        "directory": str(tmp_path), "file": "srad_kernel.cu", "arguments": ["nvcc", "-arch=sm_90", "-c", "srad_kernel.cu"]}]))
    listed = run_cli(["space", "srad_kernel.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 0 and "preprocess to the same" not in listed.stderr, listed.describe()


# Rodinia's gaussian, cut down: the macro sizes the host's launch only; the kernels read blockDim.
GAUSSIAN = """\
#ifdef RD_WG_SIZE_0_0
        #define MAXBLOCKSIZE RD_WG_SIZE_0_0
#elif defined(RD_WG_SIZE_0)
        #define MAXBLOCKSIZE RD_WG_SIZE_0
#elif defined(RD_WG_SIZE)
        #define MAXBLOCKSIZE RD_WG_SIZE
#else
        #define MAXBLOCKSIZE 512
#endif
__global__ void Fan1(float *m_cuda, float *a_cuda, int Size, int t) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= Size - 1 - t) return;
  m_cuda[Size * (i + t + 1) + t] = a_cuda[Size * (i + t + 1) + t] / a_cuda[Size * t + t];
}
void ForwardSub(float *m_cuda, float *a_cuda, int Size) {
  int block_size = MAXBLOCKSIZE;
  int grid_size = (Size / block_size) + (!(Size % block_size) ? 0 : 1);
  for (int t = 0; t < (Size - 1); t++) Fan1<<<grid_size, block_size>>>(m_cuda, a_cuda, Size, t);
}
"""


def test_a_macro_that_changes_only_the_host_launch_or_some_values_is_tuned(tmp_path: Path) -> None:
    """gaussian's RD_WG_SIZE leaves the device code as it is and changes the launch: the program
    differs, so it is searched; so are a macro only host code under #ifndef __CUDA_ARCH__ reads
    and one whose first two values take the same branch of an #if."""
    (tmp_path / "gaussian.cu").write_text(GAUSSIAN)
    (tmp_path / "tune.toml").write_text('[tune.defines]\nRD_WG_SIZE = [512, 256]\n[launch.Fan1]\nblock_size = "RD_WG_SIZE"\n')
    listed = run_cli(["space", "gaussian.cu", "--json"], cwd=tmp_path)
    assert listed.returncode == 0 and "preprocess to the same" not in listed.stderr, listed.describe()
    (tmp_path / "k.cu").write_text("""\
__global__ void k(float* x) {
#if TILE > 16
  x[threadIdx.x] *= 2.0f;
#endif
  x[threadIdx.x] += 1.0f;
}
#ifndef __CUDA_ARCH__
void run(float* x) { k<<<1, HOST_THREADS>>>(x); }
#endif
""")
    (tmp_path / "tune.toml").write_text("[tune.defines]\nTILE = [8, 4, 32]\nHOST_THREADS = [64, 128]\n")
    tuned = run_cli(["tune", "k.cu", "--budget", "2", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}",
                     "--out", "k.acf.toml"], cwd=tmp_path)
    assert tuned.returncode == 0 and "preprocess to the same" not in tuned.output, tuned.describe()


def test_a_one_value_macro_no_file_reads_is_refused_as_one_of_several_values_is(tmp_path: Path) -> None:
    """A misplaced `entries = ["nope"]` under [tune.defines] was tuned and printed by `flags`
    (-Dentries=nope): a one-value macro skipped the check, having no other value to compare with.
    It is compared with a value no code spells now; one the code reads stays tuned, at its own
    default too (UNROLL = [1] over #define UNROLL 1: a review run refused it as 'no effect')."""
    (tmp_path / "k.cu").write_text("#ifndef TM\n#define TM 2\n#endif\n"
                                   "__global__ void k(float *x) { x[threadIdx.x] *= TM; }\n")
    (tmp_path / "tune.toml").write_text('arch = "sm_90"\n[tune.defines]\nTM = [4]\nentries = ["nope"]\n')
    tuned = run_cli(["tune", "k.cu", "--objective", "registers", "--budget", "2", "--workers", "local",
                     "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", "x.acf.toml"], cwd=tmp_path)
    said = ("tune.defines.entries: its one value nope preprocesses to the same device and host code as any other "
            "value would: no code reads entries, so -Dentries has no effect: tune a macro the code reads, or take it "
            "out of [tune.defines]")
    assert tuned.returncode == 2 and said in tuned.stderr, tuned.describe()
    assert "Traceback" not in tuned.output and not (tmp_path / "x.acf.toml").exists()
    listed = run_cli(["space", "k.cu"], cwd=tmp_path)
    assert listed.returncode == 0 and any(said in line for line in listed.stderr_lines), listed.describe()
    (tmp_path / "tune.toml").write_text('arch = "sm_90"\n[tune.defines]\nTM = [4]\n')  # TM is read: tuned
    tuned = run_cli(["tune", "k.cu", "--objective", "registers", "--budget", "2", "--workers", "local",
                     "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", "x.acf.toml"], cwd=tmp_path)
    assert tuned.returncode == 0 and "-DTM=4" in run_cli(["flags", "x.acf.toml"], cwd=tmp_path).stdout.split(), \
        tuned.describe()
    (tmp_path / "tune.toml").write_text('arch = "sm_90"\n[tune.defines]\nTM = [2]\n')  # read, at its own default
    tuned = run_cli(["tune", "k.cu", "--objective", "registers", "--budget", "2", "--workers", "local",
                     "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", "y.acf.toml"], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
