"""The gate holds an ACF's baseline and best to one launch wherever one run scored both at one:
where both are built with the same macro values (tune.toml's launch is a function of its macros
alone), whether it tunes no macro or tunes one and chose the baseline's value."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tests.helpers import run_cli

KERNEL = """\
#ifndef BLOCK
#define BLOCK 256
#endif
__global__ void __launch_bounds__(BLOCK) scale(float* x, float a, int n){
  int i = blockIdx.x*blockDim.x+threadIdx.x; if(i<n) x[i] = x[i]*a + sinf(x[i]);
}
"""
TUNE_TOML = """\
arch = "sm_90"
block_size = "BLOCK"
dynamic_smem = 0
[tune.defines]
BLOCK = [256, 128, 512]
"""


def _edited(text: str, table: str, key: str, value: str) -> str:
    """`text` with `key` of the TOML `table` set to `value` (a TOML literal)."""
    edited, count = re.subn(rf"(\[{re.escape(table)}\]\n(?:(?!\[)[^\n]*\n)*?{key} = )[^\n]*", rf"\g<1>{value}", text,
                            count=1)
    assert count == 1, (table, key)
    return edited


def test_a_forged_baseline_launch_fails_where_best_keeps_the_baseline_macros(tmp_path: Path) -> None:
    """red5 #2: the ACF tunes BLOCK and chose 256, the baseline's value; its baseline occupancy forged
    to 25% at 100,000 B of dynamic shared memory (a gain over the best's 100%) under an edited
    settings hash passed the gate with a stale-settings warning: the one-launch check ran only where
    the ACF tunes no macro."""
    (tmp_path / "kk.cu").write_text(KERNEL)
    (tmp_path / "tune.toml").write_text(TUNE_TOML)
    tuned = run_cli(["tune", "kk.cu", "--objective", "static", "--arch", "sm_90", "--budget", "3", "--workers", "local",
                     "--no-simplify", "--only", "define.BLOCK", "--db", "sqlite:///t.db", "--out", "k.acf.toml"],
                    cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    text = (tmp_path / "k.acf.toml").read_text()
    data = tomllib.loads(text)
    assert data["controls"]["define.BLOCK"] == 256 and data["evidence"]["best"]["occupancy"] == 1.0, data
    honest = run_cli(["gate", "k.acf.toml"], cwd=tmp_path)
    assert honest.returncode == 0, honest.describe()
    text = _edited(text, "kernel", "settings_sha256", '"' + "0" * 64 + '"')
    text = _edited(text, "evidence.baseline", "occupancy", "0.25")
    text = _edited(text, "evidence.baseline", "dynamic_smem", "100000")
    text = _edited(text, "objective", "baseline", "750.0")
    text = _edited(text, "objective", "improved", "true")
    text = _edited(text, "evidence.vs_defaults.occupancy", "defaults", "0.25")
    (tmp_path / "f.acf.toml").write_text(text)
    gated = run_cli(["gate", "f.acf.toml"], cwd=tmp_path)
    assert gated.returncode != 0, gated.describe()
    assert ("the ACF records its [evidence.baseline] at 256 threads per block, 100,000 B dynamic shared memory and its "
            "[evidence.best] at 256 threads per block, 0 B dynamic shared memory, but builds both with the same macros"
            in gated.output), gated.describe()
