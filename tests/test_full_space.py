"""The full-space benchmark's logic (benchmarks/full_space.py) on a tiny cached table: replay
without compiling, compile what the table lacks, the pooled reference and the censored counts."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest

from compileiq.app import TuneOptions, tuning_space
from compileiq.core.space import Config, SearchSpace
from compileiq.core.toolchain import find_toolchain
from compileiq.source.kernel import load_spec
from tests.helpers import TINY_KERNEL, load_benchmark

ONLY = ("ptxas.opt_level", "ptxas.maxrregcount")


full_space = load_benchmark("full_space")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("scale")
    (folder / "scale.cu").write_text(TINY_KERNEL)
    (folder / "tune.toml").write_text('arch = "sm_90"\nblock_size = 256\n')
    return folder / "scale.cu"


def _space(kernel: Path) -> SearchSpace:
    return tuning_space(load_spec(kernel), find_toolchain(), TuneOptions(kernel=kernel, only=ONLY))


def _metrics(config: Config) -> dict[str, Any] | None:
    """A made-up map: caps under 40 spill; -O0 fails; fewer registers with a lower cap."""
    level, cap = config["ptxas.opt_level"], config["ptxas.maxrregcount"]
    if level == 0:
        return None
    registers = 40 if cap == "default" else min(40, int(cap))
    spills = 0 if cap == "default" or int(cap) >= 40 else (40 - int(cap)) * 4
    return {"spill_bytes": spills, "registers": registers, "occupancy": 1.0, "instructions": 100,
            "stack_bytes": 0}


def _table(space: SearchSpace, leave_out: frozenset[str] = frozenset()) -> dict[str, Any]:
    names = [p.name for p in space.parameters]
    configs = [Config.of(dict(zip(names, values))) for values in
               itertools.product(*(p.values for p in space.parameters))]
    return {c.key: _metrics(c) for c in configs if c.key not in leave_out}


def test_a_full_table_replays_without_compiling_and_learns_what_the_tuner_would(kernel: Path) -> None:
    space = _space(kernel)
    table = full_space.Table(_table(space), None)
    run = full_space.replay(space, table, "compileiq", "registers", 0, 24)
    assert len(run.values) == 24 and run.values[0] == 40  # the baseline first
    assert run.batches[0] == 1 and sum(run.batches) == 24 and max(run.batches) == full_space.BATCH
    assert table.compiled == 0
    spilling = Config.of({"ptxas.opt_level": 3, "ptxas.maxrregcount": 24})
    baseline = table.entries[space.default_config().key]
    # fewer registers bought with spills may not win: the searcher learns it as a failure
    assert full_space.value("registers", spilling, _metrics(spilling), baseline, space.default_config()) is None
    assert full_space.reference_value(space, table, "registers") == 40  # no cap under 40 is allowed
    with pytest.raises(LookupError, match="not in the table"):
        full_space.Table({}, None).lookup([space.default_config()])


def test_a_config_missing_from_the_table_is_compiled_once_and_kept(kernel: Path) -> None:
    space = _space(kernel)
    missing = Config.of({"ptxas.opt_level": 2, "ptxas.maxrregcount": 64})
    asked: list[list[str]] = []
    saved: list[int] = []

    def compile_missing(configs: list[Config]) -> dict[str, Any]:
        asked.append([c.key for c in configs])
        return {c.key: _metrics(c) for c in configs}

    entries = _table(space, frozenset({missing.key}))
    table = full_space.Table(entries, compile_missing, lambda: saved.append(len(entries)))
    for seed in range(3):
        full_space.replay(space, table, "random", "static", seed, 10**3)  # the whole space
    assert asked == [[missing.key]] and table.compiled == 1 and saved == [len(entries)]
    assert entries[missing.key] == _metrics(missing)


def test_evaluations_to_the_reference_count_misses_as_censored() -> None:
    runs = [full_space.Run("compileiq", "static", 0, (5.0, None, 3.0)),
            full_space.Run("compileiq", "static", 1, (5.0, 4.0, 4.0)),
            full_space.Run("compileiq", "static", 2, (3.0,)),
            full_space.Run("random", "static", 0, (5.0, 5.0, 5.0))]
    assert [r.evaluations_to(3.0) for r in runs] == [3, None, 1, None]
    compileiq, random = full_space.summarise(runs, 3.0)
    assert (compileiq.reached, compileiq.runs, compileiq.median) == (2, 3, 3.0)
    assert compileiq.shown(40) == "3 (2/3)"
    assert math.isinf(random.median) and random.shown(40) == ">40 (0/1)"


def test_an_unmapped_config_is_compiled_through_the_tuner(kernel: Path, tmp_path: Path) -> None:
    space = _space(kernel)
    compile_missing = full_space.tuner_compiler(kernel, space, tmp_path / "full-space.db")
    capped = Config.of({"ptxas.opt_level": 3, "ptxas.maxrregcount": 24})
    found = compile_missing([space.default_config(), capped])
    assert set(found) == {space.default_config().key, capped.key}
    assert all(m is not None and m["registers"] > 0 for m in found.values())
    assert found[capped.key]["registers"] <= 24


def test_the_peer_proposes_only_unseen_configurations_so_repeats_cost_nothing(kernel: Path) -> None:
    pytest.importorskip("optuna")  # the `peers` extra
    space = _space(kernel)
    peer = full_space.STRATEGIES["optuna-tpe"](space, 0)
    default = space.default_config()
    peer.tell([full_space.Observation(default, 40.0)])  # told, never asked: as replay() starts
    proposed = [default.key]
    while batch := peer.ask(4, ()):
        proposed += [c.key for c in batch]
        peer.tell([full_space.Observation(c, full_space.value("registers", c, _metrics(c), _metrics(default), default))
                   for c in batch])
    assert len(proposed) == len(set(proposed))  # TPE repeats itself; the adapter never spends them
    assert len(proposed) > space.size() // 2
