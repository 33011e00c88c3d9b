"""The warm-start benchmark's counting (benchmarks/warm_start.py) on a made-up table: the prior's
proposals come right after the baseline, and a target reached inside a batch costs the batch."""

from __future__ import annotations

from compileiq.app import TuneOptions, tuning_space
from compileiq.core.space import Config
from compileiq.core.toolchain import find_toolchain
from compileiq.search import transfer
from compileiq.search.encoding import enumerate_space
from compileiq.source.kernel import load_spec
from tests.helpers import TINY_KERNEL, load_benchmark

warm_start = load_benchmark("warm_start")


def _metrics(config: Config) -> dict:
    cap = config["ptxas.maxrregcount"]
    registers = 40 if cap == "default" else min(40, max(int(cap), 32))  # caps under 32 spill
    spills = 0 if cap == "default" or int(cap) >= 32 else 64
    return {"spill_bytes": spills, "registers": registers, "occupancy": 1.0, "instructions": 100, "stack_bytes": 0}


def test_the_prior_comes_first_and_whole_batches_are_charged(tmp_path):
    (tmp_path / "scale.cu").write_text(TINY_KERNEL)
    (tmp_path / "tune.toml").write_text('arch = "sm_90"\nblock_size = 256\n')
    kernel = tmp_path / "scale.cu"
    space = tuning_space(load_spec(kernel), find_toolchain(),
                         TuneOptions(kernel=kernel, only=("ptxas.opt_level", "ptxas.maxrregcount")))
    entries = {c.key: _metrics(c) for c in enumerate_space(space)}
    table = warm_start.Table(entries, None)
    best = space.default_config().with_values({"ptxas.maxrregcount": 32})
    prior = transfer.Prior((best,), frozenset({("ptxas.opt_level", 0)}), 1)
    run = warm_start.replay_warm(space, table, prior, "registers", 0, 17)
    assert run.values[1] == 32 and run.evaluations_to(32) == 2  # first after the baseline
    assert warm_start.charged(run.evaluations_to(32)) == 9  # ... charged its whole batch of 8
    assert [warm_start.charged(n) for n in (None, 1, 2, 9, 10)] == [None, 1, 9, 9, 17]
    assert len(run.values) == 17  # the budget, the baseline included
