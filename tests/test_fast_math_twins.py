"""`--use_fast_math --ftz=true` builds what `--use_fast_math` alone builds (and likewise
`--prec-div=false`, `--prec-sqrt=false` beside it): nvcc hands cicc the same options. An
`--allow-numerics` search spent evaluations on such twins (fix51C finding 1); it now proposes and
counts each build once, with real nvcc."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from helpers import run_cli

from compileiq.core import implied
from compileiq.core.space_files import load_space

KERNEL = """\
extern "C" __global__ void scale(float* x, const float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = sqrtf(x[i]) / y[i] + x[i] * y[i];
}
"""
NUMERICS = ("nvcc.use_fast_math", "nvcc.ftz", "nvcc.prec_div", "nvcc.prec_sqrt")
TEMPORARY = re.compile(r"tmpxft_[0-9a-f]+_[0-9a-f]+")


def _commands(flags: tuple[str, ...], folder: Path) -> str:
    """Every command nvcc runs for these flags (`nvcc -dryrun`), its temporary files' names aside."""
    done = subprocess.run(["nvcc", "-dryrun", *flags, "-arch=sm_90", "-c", "k.cu"], cwd=folder,
                          capture_output=True, text=True, check=True)
    return TEMPORARY.sub("TMP", done.stderr)


@pytest.mark.parametrize("strategy", ["exhaustive", "bayes"])
def test_a_search_builds_each_fast_math_twin_once(tmp_path: Path, strategy: str) -> None:
    (tmp_path / "k.cu").write_text(KERNEL)
    tuned = run_cli(["tune", "k.cu", "--allow-numerics", "--only", ",".join(NUMERICS), "--strategy", strategy,
                     "--budget", "16", "--workers", "local", "--db", f"sqlite:///{tmp_path}/t.db", "--json"],
                    cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    assert "search space exhausted" in tuned.output, tuned.describe()
    (study,) = json.loads(run_cli(["show", "--json", "--db", f"sqlite:///{tmp_path}/t.db"], tmp_path).stdout)
    shown = run_cli(["show", str(study["id"]), "--json", "--db", f"sqlite:///{tmp_path}/t.db"], tmp_path)
    trials = json.loads(shown.stdout)["trials"]
    space = load_space("13.0")
    commands = [space.nvcc_args(space.default_config().with_values(t["config"])) for t in trials]
    built = [_commands(flags, tmp_path) for flags in commands]
    # 8 without fast math (2 x 2 x 2) and one with it: no two trials make nvcc run the same commands
    assert len(built) == 9 and len(set(built)) == 9, commands
    assert ("--use_fast_math",) in commands, commands  # the twin at the defaults: the shortest command


def test_the_space_counts_twins_once_unless_a_shipped_override_spells_them_out() -> None:
    space = load_space("13.0").select(allow_numerics=True, only=list(NUMERICS))
    assert space.size() == 16 and implied.distinct_size(space) == 9
    # beside a shipped `-ftz=false --use_fast_math`, `--ftz=false` is spelled out: ftz=false and true differ
    shipped = implied.build_space(space, {}, {"nvcc.use_fast_math": True, "nvcc.ftz": False})
    assert implied.distinct_size(shipped) == 10
    twin = {"nvcc.use_fast_math": True, "nvcc.ftz": True, "nvcc.prec_div": False, "nvcc.prec_sqrt": True}
    assert implied.canonical(space, twin) == {**twin, "nvcc.ftz": False, "nvcc.prec_div": True}
    assert implied.canonical(shipped, twin) == {**twin, "nvcc.prec_div": True}
