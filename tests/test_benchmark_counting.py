"""How the search benchmarks count and encode (benchmarks/common.py, used by search_efficiency.py,
peers.py and full_space.py): whole batches are charged, and peers get no meaningless order."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from compileiq.app import TuneOptions, tuning_space
from compileiq.core.space import Config, SearchSpace
from compileiq.core.toolchain import find_toolchain
from compileiq.search.searcher import SearchSettings
from compileiq.source.kernel import load_spec
from tests.helpers import TINY_KERNEL, load_benchmark

ROOT = Path(__file__).resolve().parent.parent
ONLY = (
    "ptxas.opt_level",
    "ptxas.maxrregcount",
    "ptxas.override_directive_values",
    "ptxas.allow_expensive_optimizations",
)


common = load_benchmark("common")
full_space = load_benchmark("full_space")


@pytest.fixture(scope="module")
def space(tmp_path_factory: pytest.TempPathFactory) -> SearchSpace:
    folder = tmp_path_factory.mktemp("counting")
    (folder / "scale.cu").write_text(TINY_KERNEL)
    (folder / "tune.toml").write_text('arch = "sm_90"\nblock_size = 256\n\n[tune.defines]\nTILE = [32, 16, 64]\n')
    kernel = folder / "scale.cu"
    return tuning_space(load_spec(kernel), find_toolchain(), TuneOptions(kernel=kernel, only=ONLY))


def _case(space: SearchSpace, optimum: Config) -> object:
    names = [p.name for p in space.parameters]
    configs = [Config.of(dict(zip(names, v))) for v in itertools.product(*(p.values for p in space.parameters))]
    values = {c.key: (1.0 if c.key == optimum.key else 2.0) for c in configs}
    return common.Case("scale", "static", space, values)


def test_a_batch_that_reaches_the_optimum_is_charged_in_full(space: SearchSpace) -> None:
    optimum = Config.of({**space.default_config().as_dict(), "ptxas.opt_level": 1})
    case = _case(space, optimum)
    others = [k for k in case.values if k not in (optimum.key, space.default_config().key)]

    def optimum_first_in_the_batch(replay: object, seed: int) -> None:
        replay.evaluate_batch(others[:8])  # type: ignore[attr-defined]
        replay.evaluate_batch([optimum.key, *others[8:15]])  # type: ignore[attr-defined]

    # the baseline, a whole batch of 8, then the batch whose first configuration is the optimum
    assert common.evaluations_to_optimum(case, optimum_first_in_the_batch, 0) == 1 + 8 + 8

    def one_at_a_time(replay: object, seed: int) -> None:
        for key in [*others[:8], optimum.key, *others[8:15]]:
            replay.evaluate(key)  # type: ignore[attr-defined]

    assert common.evaluations_to_optimum(case, one_at_a_time, 0) == 1 + 8 + 1  # sequential peers
    assert common.evaluations_to_optimum(case, optimum_first_in_the_batch, 0, cap=12) == 12


def test_compileiq_is_charged_whole_batches_of_eight_after_the_baseline(space: SearchSpace) -> None:
    optimum = Config.of({**space.default_config().as_dict(), "ptxas.opt_level": 1, "ptxas.maxrregcount": 96})
    case = _case(space, optimum)
    for strategy in ("bayes", "random"):
        counts = [common.evaluations_to_optimum(case, common.compileiq_strategy(SearchSettings(strategy)), seed)
                  for seed in range(6)]
        assert all((count - 1) % common.BATCH == 0 for count in counts), counts


def test_peers_get_an_order_only_where_it_means_something(space: SearchSpace) -> None:
    axes = {a.name: a for a in common.PeerEncoding(space).axes}
    registers = axes["ptxas.maxrregcount"]
    assert registers.ordered and registers.values[0] == 24
    assert registers.values[-2:] == (255, "default")  # no cap at its true place, not beside 24
    assert axes["ptxas.opt_level"].ordered and axes["ptxas.opt_level"].values == (0, 1, 2, 3)
    assert axes["define.TILE"].ordered and axes["define.TILE"].values == (16, 32, 64)
    assert not axes["ptxas.override_directive_values"].ordered  # a flag
    assert not axes["ptxas.allow_expensive_optimizations"].ordered  # default / true / false
    encoding = common.PeerEncoding(space)
    for config in (space.default_config(), Config.of({**space.default_config().as_dict(), "ptxas.maxrregcount": 24})):
        assert encoding.config(encoding.indices(config)) == config


def test_optuna_gets_categorical_distributions_for_unordered_settings(space: SearchSpace) -> None:
    optuna = pytest.importorskip("optuna")  # the `peers` extra
    peers = load_benchmark("peers")
    distributions = peers.optuna_distributions(common.PeerEncoding(space))
    assert isinstance(distributions["ptxas.maxrregcount"], optuna.distributions.IntDistribution)
    assert isinstance(distributions["ptxas.allow_expensive_optimizations"], optuna.distributions.CategoricalDistribution)
    assert isinstance(distributions["ptxas.override_directive_values"], optuna.distributions.CategoricalDistribution)


def test_the_full_space_benchmark_charges_whole_batches(space: SearchSpace) -> None:
    run = full_space.Run("compileiq", "static", 0, (5.0, 4.0, 3.0, 4.0, None), (1, 4))
    assert run.evaluations_to(3.0) == 5  # reached third, inside the batch of 4 after the baseline
    assert run.evaluations_to(5.0) == 1 and run.evaluations_to(1.0) is None
    assert full_space.Run("kt", "static", 0, (5.0, 3.0, 4.0)).evaluations_to(3.0) == 2  # one at a time
