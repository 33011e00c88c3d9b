"""Search logic on a synthetic objective: no compiler needed (the compiler tests are elsewhere)."""

import math

import numpy as np
import pytest
from sklearn.base import clone
from skopt.learning import ExtraTreesRegressor, RandomForestRegressor

from compileiq.core.errors import UsageError
from compileiq.core.space import Parameter, SearchSpace
from compileiq.search.encoding import enumerate_space
from compileiq.search.initial_design import CORNER_RUNS
from compileiq.search.searcher import (
    FAILURE_RANK,
    Observation,
    Searcher,
    SearchSettings,
)
from compileiq.search.surrogate import OnePassForest, features_of, fresh_model, new_optimizer


def _space() -> SearchSpace:
    def choice(name, values, default, stage="ptxas"):
        return Parameter(
            name, stage, "choice", tuple(values), default, f"--{name}={{value}}", "safe", ""
        )

    return SearchSpace(
        "test",
        "13.0",
        (
            Parameter("ptxas.level", "ptxas", "int", (0, 1, 2, 3), 3, "-O{value}", "safe", ""),
            choice("ptxas.cap", ["default", 32, 64, 128, 255], "default"),
            choice("ptxas.cache", ["default", "ca", "cg", "cs"], "default"),
            choice("nvcc.vec", [False, True], False, stage="frontend"),
            choice("ptxas.usage", list(range(11)), 5),
        ),
    )


def _objective(config) -> float:
    """A bowl with its minimum at level=1, cap=64, cache=cg, vec=True, usage=8."""
    cap = {"default": 3, 32: 2, 64: 0, 128: 1, 255: 2}[config["ptxas.cap"]]
    cache = {"default": 1, "ca": 2, "cg": 0, "cs": 3}[config["ptxas.cache"]]
    return (
        (config["ptxas.level"] - 1) ** 2
        + cap * 2
        + cache
        + (0 if config["nvcc.vec"] else 1)
        + abs(config["ptxas.usage"] - 8)
    )


def _run(strategy: str, seed: int, budget: int, batch: int = 8) -> list[float]:
    searcher = Searcher(_space(), SearchSettings(strategy=strategy, seed=seed))
    values: list[float] = []
    while len(values) < budget:
        configs = searcher.ask(min(batch, budget - len(values)))
        if not configs:
            break
        results = [Observation(c, _objective(c)) for c in configs]
        values += [r.value for r in results]
        searcher.tell(results)
    return values


def test_exhaustive_visits_every_config_once_defaults_first():
    space = _space()
    configs = list(enumerate_space(space))
    assert len(configs) == space.size() == 4 * 5 * 4 * 2 * 11
    assert len({c.key for c in configs}) == len(configs)
    assert configs[0] == space.default_config()
    values = _run("exhaustive", 0, space.size() + 10, batch=64)
    assert len(values) == space.size() and min(values) == 0


@pytest.mark.parametrize("strategy", ["bayes", "random"])
def test_a_seed_reproduces_a_run(strategy):
    assert _run(strategy, 7, 24) == _run(strategy, 7, 24)
    assert _run(strategy, 7, 24) != _run(strategy, 8, 24)


def test_ask_never_repeats_a_told_or_excluded_config():
    searcher = Searcher(_space(), SearchSettings(seed=1))
    first = searcher.ask(12)
    searcher.tell([Observation(c, _objective(c)) for c in first])
    excluded = [c.key for c in searcher.ask(3)]
    later = searcher.ask(20, exclude=excluded)
    keys = [c.key for c in first] + [c.key for c in later]
    assert len(set(keys)) == len(keys)
    assert not set(excluded) & {c.key for c in later}


def test_bayes_beats_random_on_a_smooth_objective():
    budget = 40
    bayes = [min(_run("bayes", seed, budget)) for seed in range(6)]
    random = [min(_run("random", seed, budget)) for seed in range(6)]
    assert sum(bayes) < sum(random)


def test_failures_are_told_as_a_finite_penalty():
    searcher = Searcher(_space(), SearchSettings(seed=3, initial_points=4))
    configs = searcher.ask(8)
    searcher.tell([Observation(c, None if i % 2 else _objective(c)) for i, c in enumerate(configs)])
    more = searcher.ask(4)  # fits a model on the penalised history: would raise on inf/NaN
    assert len(more) == 4
    fitted = searcher._fitted
    assert len(fitted) == 8 and all(math.isfinite(v) for v in fitted)
    assert [v for i, v in enumerate(fitted) if i % 2] == [FAILURE_RANK] * 4
    assert max(v for i, v in enumerate(fitted) if not i % 2) < FAILURE_RANK


@pytest.mark.parametrize("forest", [ExtraTreesRegressor, RandomForestRegressor])
def test_one_pass_forest_predicts_what_the_forest_predicts(forest):
    rng = np.random.default_rng(0)
    points, values = rng.integers(0, 6, size=(120, 5)).astype(float), rng.random(120)
    model = forest(n_estimators=8, random_state=0, min_variance=1e-3).fit(points, values)
    pool = rng.integers(0, 6, size=(300, 5)).astype(float)
    mean, std = model.predict(pool, return_std=True)
    fast_mean, fast_std = OnePassForest(model).predict(pool, return_std=True)
    np.testing.assert_allclose(fast_mean, mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fast_std, std, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("surrogate", ["ET", "RF"])
def test_a_refit_grows_the_trees_scikit_learn_grows(surrogate):
    """The refit's quickly cloned trees are scikit-learn's own: same splits, same leaves, same
    predictions, for the same seed (a forest fitted as scikit-learn fits it is the reference)."""
    rng = np.random.default_rng(1)
    points, values = rng.integers(0, 6, size=(150, 5)).astype(float), rng.random(150)
    optimizer = new_optimizer(_space(), SearchSettings(seed=7, surrogate=surrogate))
    reference = clone(optimizer.base_estimator_).fit(points, values)
    quick = fresh_model(optimizer)
    assert type(quick.estimator) is not type(reference.estimator_)  # the quick trees are in use
    quick.fit(points, values)
    assert len(quick.estimators_) == len(reference.estimators_) == SearchSettings().trees
    for ours, theirs in zip(quick.estimators_, reference.estimators_):
        assert ours.random_state == theirs.random_state
        np.testing.assert_array_equal(ours.tree_.feature, theirs.tree_.feature)
        np.testing.assert_array_equal(ours.tree_.threshold, theirs.tree_.threshold)
        np.testing.assert_array_equal(ours.tree_.value, theirs.tree_.value)
    pool = rng.integers(0, 6, size=(200, 5)).astype(float)
    np.testing.assert_array_equal(quick.predict(pool), reference.predict(pool))
    again = fresh_model(optimizer).fit(points[:40], values[:40])  # a fresh model: nothing fitted carried over
    assert len(again.estimators_) == SearchSettings().trees and again.estimators_[0].tree_.weighted_n_node_samples[0] == 40


def test_warm_start_tells_history_in_one_call():
    history = [Observation(c, _objective(c)) for c in list(enumerate_space(_space()))[:30]]
    searcher = Searcher(_space(), SearchSettings(seed=0))
    searcher.tell(history)
    assert searcher.observations == 30
    assert not {c.key for c in searcher.ask(8)} & {o.config.key for o in history}


def test_bad_settings_are_usage_errors():
    with pytest.raises(UsageError, match="strategy"):
        Searcher(_space(), SearchSettings(strategy="annealing"))
    with pytest.raises(UsageError, match="surrogate"):
        Searcher(_space(), SearchSettings(surrogate="GBRT"))


def test_a_batch_on_a_plateau_spreads_out():
    """Where the model sees no difference, a batch must not be eight near-copies of one config."""
    searcher = Searcher(_space(), SearchSettings(seed=5))
    history = list(enumerate_space(_space()))[::37][:12]
    searcher.tell([Observation(c, 1.0) for c in history])
    batch = searcher.ask(8)
    rows = [tuple(sorted(c.as_dict().items())) for c in batch]
    for i, first in enumerate(rows):
        for second in rows[i + 1 :]:
            assert sum(a != b for a, b in zip(first, second)) >= 2, (first, second)


@pytest.mark.parametrize("surrogate", ["ET", "GP"])
def test_model_features_are_skopts_transform(surrogate):
    """Tree surrogates skip skopt's identity transform; GP still gets its normalised inputs."""
    optimizer = new_optimizer(_space(), SearchSettings(surrogate=surrogate))
    points = [[3, 0, 0, 0, 5], [0, 4, 3, 1, 10], [1, 2, 1, 0, 0]]
    np.testing.assert_array_equal(
        features_of(optimizer)(points), optimizer.space.transform(points)
    )


def test_the_first_batch_opens_with_corners_of_an_orthogonal_array():
    """The corners design: after the centre, CORNER_RUNS configs are runs of an 8-run orthogonal
    array at each ptxas parameter's lowest and highest value (middle values follow them)."""
    space = _space()
    ptxas = [p for p in space.parameters if p.stage == "ptxas"]
    extremes = {
        p.name: (p.values[1] if p.values[0] == "default" else p.values[0], p.values[-1])
        for p in ptxas
    }
    for seed in range(5):
        batch = Searcher(space, SearchSettings(seed=seed)).ask(8)
        corners = [c.as_dict() for c in batch[1 : 1 + CORNER_RUNS]]
        assert all(c[name] in extremes[name] for c in corners for name in extremes)
