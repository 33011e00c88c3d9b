"""A variant whose launch cannot run is a failed variant, said with the compiler's own error
(user56 on Rodinia's hotspot): a tuned tile whose block is larger than the kernel's
__launch_bounds__ (or ptxas's --maxntid) was chosen, its occupancy scored as if it ran, and the
gate passed it; a compile error was told by a line of source that a warning quoted."""

from __future__ import annotations

from pathlib import Path

from helpers import run_cli

from compileiq.core.records import Trial, TrialState
from compileiq.results import acf
from compileiq.store import Store

BOUNDED = """#ifndef TILE
#define TILE 16
#endif
__global__ void __launch_bounds__(256) k(float *o) {
  __shared__ float s[TILE][TILE];
  s[threadIdx.y][threadIdx.x] = 1.f; __syncthreads(); o[threadIdx.y * TILE + threadIdx.x] = s[0][threadIdx.x];
}
"""

UNBOUNDED = """__global__ void k(float *o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = 0; for (int j = 0; j < n; ++j) v += o[(i + j * 97) % n] * j;
  if (i < n) o[i] = v;
}
"""


def _tune(folder: Path, *extra: str) -> tuple[str, list[Trial]]:
    url = f"sqlite:///{folder / 'x.db'}"
    done = run_cli(["tune", "k.cu", "--objective", "static", "--workers", "local", "--db", url, "--out", "k.acf.toml",
                    *extra], cwd=folder)
    assert done.returncode == 0, done.describe()
    store = Store.open(url)
    try:
        return done.output, store.trials(store.find_study("1").id)
    finally:
        store.close()


def test_a_tile_whose_block_is_above_the_kernels_launch_bounds_is_a_failed_variant(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(BOUNDED)
    (tmp_path / "tune.toml").write_text('[tune.defines]\nTILE = [4, 32]\n[launch.k]\nblock_size = "TILE*TILE"\n')
    _, trials = _tune(tmp_path, "--budget", "2", "--only", "define.TILE")
    big = [t for t in trials if t.config.get("define.TILE") == 32]
    assert big and all(t.state is TrialState.FAILED for t in big), [(t.config, t.state, t.reason) for t in trials]
    assert "above the 256 threads per block its __launch_bounds__" in (big[0].reason or ""), big[0].reason
    assert acf.read(tmp_path / "k.acf.toml").controls.get("define.TILE") != 32


def test_a_ptxas_maxntid_below_the_launched_block_is_a_failed_variant(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(UNBOUNDED)
    (tmp_path / "tune.toml").write_text("block_size = 1024\n")
    _, trials = _tune(tmp_path, "--budget", "8", "--allow-semantics", "--only", "ptxas.maxntid",
                      "--strategy", "random", "--seed", "3")
    capped = [t for t in trials if isinstance(t.config.get("ptxas.maxntid"), int) and t.config["ptxas.maxntid"] < 1024]
    assert capped, [t.config for t in trials]
    for trial in capped:
        assert trial.state is TrialState.FAILED and "-Xptxas --maxntid=" in (trial.reason or ""), trial.reason
    chosen = acf.read(tmp_path / "k.acf.toml").controls.get("ptxas.maxntid", "default")
    assert chosen in ("default", 1024), chosen


def test_a_compile_error_is_told_by_the_error_not_by_a_line_a_warning_quotes(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text("""#ifndef TILE
#define TILE 32
#endif
void fatal(char *s) {}
void check() { fatal("bad input"); }
__global__ void k(float *o) { __shared__ float s[TILE]; s[threadIdx.x] = 1.f; __syncthreads(); o[threadIdx.x] = s[0]; }
""")
    (tmp_path / "tune.toml").write_text("[tune.defines]\nTILE = [32, 0]\n[launch.k]\nblock_size = 32\n")
    _, trials = _tune(tmp_path, "--budget", "2", "--only", "define.TILE")
    zero = next(t for t in trials if t.config.get("define.TILE") == 0)
    said = (zero.reason or "").splitlines()[0]  # what every view shows of it; the output follows
    assert zero.state is TrialState.FAILED and "zero-sized variable" in said, zero.reason
    assert "bad input" not in said, zero.reason


def test_the_progress_line_cuts_a_long_reason_at_a_word_and_says_so(tmp_path: Path) -> None:
    """user56 finding 4: the live line cut a reason mid-word ("...in this varian)") with no mark."""
    (tmp_path / "k.cu").write_text(BOUNDED.replace("__launch_bounds__(256) ", ""))
    (tmp_path / "tune.toml").write_text('[tune.defines]\nTILE = [16, 72]\n[launch.k]\nblock_size = "TILE*TILE"\n')
    output, trials = _tune(tmp_path, "--budget", "2", "--only", "define.TILE")
    failed = next(t for t in trials if t.config.get("define.TILE") == 72)
    assert len(failed.reason or "") > 120, failed.reason  # long enough to be cut on the line
    line = next(line for line in output.splitlines() if f"#{failed.number} FAILED (" in line)
    shown = line.split("FAILED (", 1)[1].split(")  ", 1)[0]
    assert shown.endswith("...") and (failed.reason or "").startswith(shown[:-3].rstrip()), line
    assert (failed.reason or "")[len(shown) - 3] in " .", line  # at a word's end
