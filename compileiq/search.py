"""Which configurations to try next: Bayesian (skopt ask/tell), random, or exhaustive.

The searcher is passive: the tuning loop asks it for a batch, evaluates, and tells it the results.
It keeps no state the database does not also hold, so it is rebuilt from a study's history.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from skopt import Optimizer
from skopt.acquisition import gaussian_ei
from skopt.learning import ExtraTreesRegressor, RandomForestRegressor
from skopt.space import Integer

from compileiq.errors import UsageError
from compileiq.space import Config, Parameter, SearchSpace

STRATEGIES = ("bayes", "random", "exhaustive")
SURROGATES = ("ET", "RF", "GP")
ENUMERATE_LIMIT = 4096  # spaces up to this size are scored whole by the acquisition function
CANDIDATE_SAMPLES = 2048
MAX_EXHAUSTIVE = 1_000_000
FAILURE_RANK = 1.5


@dataclass(frozen=True)
class Observation:
    config: Config
    value: float | None  # None: the variant failed


@dataclass(frozen=True)
class SearchSettings:
    strategy: str = "bayes"
    seed: int = 0
    surrogate: str = "ET"
    initial_points: int = 10
    exploration: float = 0.01  # EI's xi
    trees: int = 32
    frontend_cost: float = 5.0  # a new front-end (nvcc -ptx) compile costs this many ptxas runs
    initial_frontends: int = 3  # front-end settings (besides the default) in the initial design
    min_samples_leaf: int = 1


class Searcher:
    """Proposes batches of untried configurations of one search space."""

    def __init__(self, space: SearchSpace, settings: SearchSettings) -> None:
        _check(settings, space)
        self._space = space
        self._settings = settings
        self._rng = np.random.default_rng(settings.seed)
        self._seen: set[str] = set()
        self._values: list[float | None] = []
        self._points: list[list[Any]] = []
        self._optimizer = _optimizer(space, settings) if settings.strategy == "bayes" else None
        self._enumeration: Iterator[Config] | None = None
        self._frontend_names = [p.name for p in space.parameters if p.stage == "frontend"]
        self._frontends: set[str] = set()  # front-end settings already compiled or about to be
        self._initial_frontends: set[str] = set()
        self._frontend_cost = settings.frontend_cost

    @property
    def observations(self) -> int:
        return len(self._values)

    def tell(self, observations: Sequence[Observation]) -> None:
        """Record results (one refit per call, however many observations it carries)."""
        fresh = [o for o in observations if o.config.key not in self._seen]
        for observation in fresh:
            self._seen.add(observation.config.key)
            self._frontends.add(self._frontend(observation.config))
            self._points.append(_to_point(self._space, observation.config))
            self._values.append(observation.value)
        if self._optimizer is not None and fresh:
            self._refit()

    def ask(self, count: int, exclude: Sequence[str] = ()) -> list[Config]:
        """Up to `count` distinct configurations, none seen before nor in `exclude`."""
        skip = self._seen | set(exclude)
        strategy = self._settings.strategy
        if strategy == "exhaustive":
            return self._next_enumerated(count, skip)
        if strategy == "random":
            return self._random(count, skip)
        pool = self._candidates(skip)
        if len(self._values) < self._settings.initial_points or self._optimizer is None:
            pool = self._initial_pool(pool)
            scores = np.ones(len(pool))
            chosen = self._pick(pool, scores, count, lambda weights: self._rng.choice(len(pool), p=weights))
        else:
            chosen = self._pick(pool, self._acquisition(pool), count, lambda weights: int(np.argmax(weights)))
        self._frontends.update(self._frontend(c) for c in chosen)
        return chosen

    def _next_enumerated(self, count: int, skip: set[str]) -> list[Config]:
        if self._enumeration is None:
            self._enumeration = enumerate_space(self._space)
        batch: list[Config] = []
        for config in self._enumeration:
            if config.key not in skip:
                batch.append(config)
                if len(batch) == count:
                    break
        return batch

    def _random(self, count: int, skip: set[str]) -> list[Config]:
        pool = self._candidates(skip)
        order = self._rng.permutation(len(pool))
        return [pool[index] for index in order[:count]]

    def _acquisition(self, pool: list[Config]) -> np.ndarray:
        assert self._optimizer is not None
        if not pool:
            return np.zeros(0)
        model = self._optimizer.models[-1]
        features = self._optimizer.space.transform([_to_point(self._space, c) for c in pool])
        best = min(self._optimizer.yi)
        scores = gaussian_ei(features, model, y_opt=best, xi=self._settings.exploration)
        return np.maximum(np.asarray(scores, dtype=float), 0.0) + 1e-12

    def _pick(self, pool: list[Config], scores: np.ndarray, count: int, choose: Any) -> list[Config]:
        """Greedy batch: score per unit of compile cost; a new front-end setting costs more
        until one variant of the batch pays for it (expected improvement per second)."""
        frontends = [self._frontend(c) for c in pool]
        planned = set(self._frontends)
        available = np.ones(len(pool), dtype=bool)
        chosen: list[Config] = []
        for _ in range(min(count, len(pool))):
            cost = np.array([1.0 if f in planned else 1.0 + self._frontend_cost for f in frontends])
            weights = np.where(available, scores / cost, 0.0)
            index = choose(weights / weights.sum())
            available[index] = False
            planned.add(frontends[index])
            chosen.append(pool[index])
        return chosen

    def _initial_pool(self, pool: list[Config]) -> list[Config]:
        """The initial design spreads over a few front-end settings only (each costs an nvcc run):
        enough variety for the model to learn their effect, few enough to stay cheap."""
        if not self._initial_frontends:
            fresh = sorted({self._frontend(c) for c in pool} - self._frontends)
            picks = self._rng.permutation(len(fresh))[: self._settings.initial_frontends]
            self._initial_frontends = self._frontends | {fresh[i] for i in picks}
        narrowed = [c for c in pool if self._frontend(c) in self._initial_frontends]
        return narrowed or pool

    def set_frontend_cost(self, ratio: float) -> None:
        """Measured cost of a new front-end compile, in ptxas runs (updates the batch choice)."""
        if math.isfinite(ratio) and ratio > 0:
            self._frontend_cost = ratio

    def _frontend(self, config: Config) -> str:
        return repr([config[name] for name in self._frontend_names])

    def _candidates(self, skip: set[str]) -> list[Config]:
        if self._space.size() <= ENUMERATE_LIMIT:
            return [c for c in enumerate_space(self._space) if c.key not in skip]
        drawn: dict[str, Config] = {}
        for _ in range(CANDIDATE_SAMPLES):
            config = _random_config(self._space, self._rng)
            if config.key not in skip:
                drawn.setdefault(config.key, config)
        return list(drawn.values())

    def _refit(self) -> None:
        assert self._optimizer is not None
        values = _with_penalty(self._values)
        if len(values) < self._settings.initial_points:
            return
        fitted = self._optimizer
        fitted.Xi, fitted.yi, fitted.models = [], [], []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fitted.tell([list(p) for p in self._points], values)


def enumerate_space(space: SearchSpace) -> Iterator[Config]:
    """Every configuration, defaults first, in a fixed order."""
    names = [p.name for p in space.parameters]
    orders = [_default_first(p) for p in space.parameters]
    for values in itertools.product(*orders):
        yield Config.of(dict(zip(names, values)))


def _default_first(parameter: Parameter) -> list[Any]:
    return [parameter.default] + [v for v in parameter.values if v != parameter.default]


def _random_config(space: SearchSpace, rng: np.random.Generator) -> Config:
    return Config.of({p.name: p.values[int(rng.integers(len(p.values)))] for p in space.parameters})


def _dimension(parameter: Parameter) -> Integer:
    """Every parameter as an ordinal: int values as they are, choices by their listed order.

    Choice lists are ordered (default first, then rising caps or levels), so tree surrogates
    can split on order; one-hot codes would hide that a cap of 64 lies between 48 and 80.
    """
    if parameter.kind == "int":
        return Integer(int(min(parameter.values)), int(max(parameter.values)), name=parameter.name)  # type: ignore[arg-type]
    return Integer(0, len(parameter.values) - 1, name=parameter.name)


def _to_point(space: SearchSpace, config: Config) -> list[Any]:
    point: list[Any] = []
    for parameter in space.parameters:
        value = config[parameter.name]
        point.append(value if parameter.kind == "int" else parameter.values.index(value))
    return point


def _with_penalty(values: Sequence[float | None]) -> list[float]:
    """What the surrogate fits: each result's rank among the results so far, scaled to [0, 1);
    a failure is 1.5, worse than anything seen (skopt rejects inf and NaN).

    Ranks ignore the objective's scale: the static composite spans nine orders of magnitude
    (spill bytes x 1e9 over instruction counts), and on the search benchmark ranks reached the
    optimum in 2.6x (sgemm) and 1.5x (transpose) fewer evaluations than log-scaled values.
    """
    finite = sorted(v for v in values if v is not None and math.isfinite(v))
    first_rank: dict[float, int] = {}
    for rank, value in enumerate(finite):
        first_rank.setdefault(value, rank)
    count = max(len(finite), 1)
    return [FAILURE_RANK if v is None or not math.isfinite(v) else first_rank[v] / count for v in values]


def _optimizer(space: SearchSpace, settings: SearchSettings) -> Optimizer:
    dimensions = [_dimension(p) for p in space.parameters]
    return Optimizer(
        dimensions,
        base_estimator=_estimator(settings),
        n_initial_points=1,
        acq_func="EI",
        acq_optimizer="sampling",
        acq_optimizer_kwargs={"n_points": 64},
        random_state=settings.seed,
    )


def _estimator(settings: SearchSettings) -> Any:
    """Tree ensembles sized for a refit per batch in well under a second (skopt's own use 100 trees)."""
    forest = {"ET": ExtraTreesRegressor, "RF": RandomForestRegressor}.get(settings.surrogate)
    if forest is None:
        return settings.surrogate
    return forest(n_estimators=settings.trees, min_samples_leaf=settings.min_samples_leaf, random_state=settings.seed)


def _check(settings: SearchSettings, space: SearchSpace) -> None:
    if settings.strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy {settings.strategy!r}; choose one of: {', '.join(STRATEGIES)}")
    if settings.surrogate not in SURROGATES:
        raise UsageError(f"unknown surrogate {settings.surrogate!r}; choose one of: {', '.join(SURROGATES)}")
    if settings.strategy == "exhaustive" and space.size() > MAX_EXHAUSTIVE:
        raise UsageError(
            f"the space has {space.size():,} configurations; exhaustive search allows {MAX_EXHAUSTIVE:,}"
            " (narrow it with --only/--exclude)"
        )
