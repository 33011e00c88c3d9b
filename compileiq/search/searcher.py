"""Which configurations to try next: Bayesian (a surrogate fitted per batch, `surrogate`), random, or exhaustive.

The searcher is passive: the tuning loop asks it for a batch, evaluates, and tells it the results.
It keeps no state the database does not also hold, so it is rebuilt from a study's history: its
trials, or (`tune --resume`) the record of the calls it was given, replayed (`journal`).

Its first batches (the initial design) need numpy alone: the surrogate's module (scikit-optimize,
scikit-learn, scipy: a second to import on an idle machine) loads on a thread of its own from
construction on, and is first waited for by the first fit, a batch or two later.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cached_property
from typing import Any

import numpy as np

from compileiq.core.space import Config, SearchSpace
from compileiq.search import local_search
from compileiq.search.encoding import Encoding, Row, enumerate_space
from compileiq.search.initial_design import InitialDesign
from compileiq.search.loading import SearchLoad
from compileiq.search.settings import Observation, SearchSettings, check_settings

__all__ = ["Observation", "SearchSettings", "Searcher"]  # the first two re-exported: the searcher's vocabulary

ENUMERATE_LIMIT = 16384  # spaces up to this size are scored whole by the acquisition function (an ask
# on the 10,240-configuration convolution space: 31 ms median; a random pool of CANDIDATE_SAMPLES
# left most of a restricted space's allowed configurations unscored at each ask)
CANDIDATE_SAMPLES = 2048
SPARSE = 16  # restrictions allowing under 1 in SPARSE: 9 draws of CANDIDATE_SAMPLES fill under half a pool
RESTRICTED_DRAWS = 8  # more draws of CANDIDATE_SAMPLES while restrictions leave under half of them
FAILURE_RANK = 1.5
NEIGHBOUR_DISCOUNT = 0.1  # a batch's later picks: score of configs one setting from an earlier pick


class Searcher:
    """Proposes batches of untried configurations of one search space."""

    def __init__(self, space: SearchSpace, settings: SearchSettings) -> None:
        check_settings(settings, space)
        self._space = space
        self._settings = settings
        self._rng = np.random.default_rng(settings.seed)
        self._encoding = Encoding(space)
        self._seen: set[Row] = set()
        self._values: list[float | None] = []
        self._refused: list[float | None] = []  # parallel to _values (see Observation.refused)
        self._points: list[list[int]] = []  # the surrogate's coordinates of each told row
        self._rows: list[Row] = []  # the told rows (value indices), in the same order
        self._bayes = settings.strategy == "bayes"  # read by FrontSearcher too
        self._surrogate: SearchLoad[Any] | None = SearchLoad(_import_surrogate) if self._bayes else None
        self._enumeration: Iterator[Config] | None = None
        self._frontends: set[Row] = set()  # front-end settings already compiled or about to be
        self._frontend_cost = settings.frontend_cost
        self._model: Any = None  # the surrogate, once `initial_points` results are in
        self._fitted: list[float] = []  # what it was fitted on (ranks; failures penalised)
        self._best_fitted = 0.0  # the best allowed result's rank in _fitted (EI's incumbent)
        self._feasibility: Any = None  # P(allowed), fitted once some compiled result was refused
        self._design = InitialDesign(self._encoding, self._rng, self._frontends, settings.initial_frontends)
        self._avoided: list[tuple[int, int]] = []  # (column, value index): never proposed while others are left

    @cached_property
    def _optimizer(self) -> Any:
        """skopt's optimizer over the space, made at the first fit."""
        return self._surrogate_module.new_optimizer(self._space, self._settings)

    @cached_property
    def _features(self) -> Callable[[Any], Any]:
        """The surrogate's point -> feature transform (the identity for trees)."""
        return self._surrogate_module.features_of(self._optimizer)

    @property
    def _surrogate_module(self) -> Any:
        """The module `surrogate`, waited for."""
        assert self._surrogate is not None
        return self._surrogate.get()

    def discourage(self, settings: Iterable[tuple[str, Any]]) -> None:
        """Propose these (parameter, value) settings later in the initial design (settings other
        studies' rules refused, `transfer`): its corners and middles prefer runs without them, its
        random picks weigh them down. Never forbidden, and the fitted model ignores this."""
        found = (self._encoding.slot(name, value) for name, value in settings)
        self._design.discourage(sorted({slot for slot in found if slot is not None}))

    def avoid(self, settings: Iterable[tuple[str, Any]]) -> None:
        """Propose none of these (parameter, value) settings while an untried configuration without
        them is left: values no result of the run may win with (a static objective's lowered
        optimisation, `eligibility.lowering_settings`). Where every one is tried, they come back."""
        found = (self._encoding.slot(name, value) for name, value in settings)
        self._avoided = sorted({slot for slot in found if slot is not None})
        self._design.avoid(self._avoided)

    def _without_avoided(self, rows: np.ndarray) -> np.ndarray:
        """`rows` less those holding an avoided setting (all of them when none is left)."""
        if not self._avoided or not len(rows):
            return rows
        keep = np.ones(len(rows), dtype=bool)
        for column, index in self._avoided:
            keep &= rows[:, column] != index
        return rows[keep] if keep.any() else rows

    def _projected(self, rows: np.ndarray) -> np.ndarray:
        """Random rows with each avoided setting redrawn among its column's other values, so that a
        sampled pool keeps its size (`_without_avoided` would drop most of it); as they were, with
        no draw, when nothing is avoided."""
        for column in sorted({column for column, _ in self._avoided}):
            bad = [index for c, index in self._avoided if c == column]
            good = np.setdiff1d(np.arange(self._encoding.cardinality[column]), bad)
            mask = np.isin(rows[:, column], bad)
            if len(good) and mask.any():
                rows[mask, column] = self._rng.choice(good, size=int(mask.sum()))
        return rows

    @property
    def observations(self) -> int:
        return len(self._values)

    def tell(self, observations: Sequence[Observation], fit: bool = True) -> None:
        """Record results (one refit per call, however many observations it carries; none
        with `fit` False: a streaming run refits on its own schedule, see `refit_schedule`)."""
        fresh = 0
        for observation in observations:
            row = self._encoding.row(observation.config)
            if row in self._seen:
                continue
            self._seen.add(row)
            self._frontends.add(self._encoding.frontend(row))
            self._points.append(self._encoding.points(np.array([row]))[0])
            self._rows.append(row)
            self._values.append(observation.value)
            self._refused.append(observation.refused if observation.value is None else None)
            fresh += 1
        if self._bayes and fresh and fit:
            self._refit()

    def fit(self) -> None:
        """Refit the surrogate on every observation told so far."""
        if self._bayes:
            self._refit()

    def refit(self, values: Sequence[float | None]) -> None:
        """Fit the surrogate on other values of the observations told so far, in the order told
        (a multi-objective search's scalarisation of the moment; None: failed or may not win)."""
        if len(values) != len(self._values):
            raise ValueError(f"{len(values)} values for {len(self._values)} observations")
        self._values = list(values)
        if self._bayes:
            self._refit()

    def ask(self, count: int, exclude: Sequence[str] = ()) -> list[Config]:
        """Up to `count` distinct configurations, none seen before nor in `exclude` (config keys)."""
        skip = self._encoding.with_twins(self._seen | self._encoding.rows_of_keys(exclude))
        strategy = self._settings.strategy
        if strategy == "exhaustive":
            return self._next_enumerated(count, skip)
        pool = self._without_avoided(self._candidates(skip))
        if strategy == "random":
            order = self._rng.permutation(len(pool))[:count]
            return [self._encoding.config(row) for row in pool[order]]
        if self._model is None:
            rows = self._design.rows(pool, skip, count, self._pick)
        else:
            polished = self._polish(skip) if count > 1 else pool[:0]
            pool = self._encoding.without(pool, {tuple(r) for r in polished.tolist()})
            # Tree surrogates predict plateaus: many candidates tie, and grid order must not decide.
            scores = self._acquisition(pool) * (1.0 + 1e-6 * self._rng.random(len(pool)))
            picks = self._pick(
                pool, scores, count - len(polished), lambda w: int(np.argmax(w)), spread=True
            )
            rows = np.concatenate([polished, pool[picks]])
        rows = self._encoding.allowed(rows)  # the designs' corners and middles too: never an invalid build
        self._frontends.update(self._encoding.frontend(row) for row in rows)
        return [self._encoding.config(row) for row in rows]

    def _polish(self, skip: set[Row]) -> np.ndarray:
        """The batch's local pick: an untried neighbour of the incumbents (see local_search)."""
        rows = self._observed_rows()
        encoding = self._encoding
        around = local_search.incumbents(rows, self._values, self._rng)
        candidates = self._without_avoided(
            encoding.allowed(encoding.without(local_search.neighbours(around, encoding.cardinality), skip)))
        pick = local_search.polish(
            candidates,
            self._predicted_mean,
            local_search.main_effects(rows, _with_penalty(self._values), encoding.cardinality),
            self._rng,
        )
        return candidates[:0] if pick is None else candidates[pick : pick + 1]

    def _observed_rows(self) -> np.ndarray:
        return np.asarray(self._rows, dtype=np.int64).reshape(-1, len(self._encoding.cardinality))

    def _predicted_mean(self, rows: np.ndarray) -> np.ndarray:
        features = self._features(self._encoding.points(rows))
        mean = np.asarray(self._surrogate_module.predictor(self._model).predict(features), dtype=float)
        if self._feasibility is None:
            return mean
        allowed = self._allowed_probability(features)  # refused at the failures' rank, as before
        return allowed * mean + (1.0 - allowed) * FAILURE_RANK

    def _next_enumerated(self, count: int, skip: set[Row]) -> list[Config]:
        if self._enumeration is None:
            self._enumeration = enumerate_space(self._space)
        batch: list[Config] = []
        for config in self._enumeration:
            row = self._encoding.row(config)
            if row not in skip and not self._encoding.is_twin(row):
                batch.append(config)
                if len(batch) == count:
                    break
        return batch

    def _acquisition(self, pool: np.ndarray) -> np.ndarray:
        if not len(pool):
            return np.zeros(0)
        features = self._features(self._encoding.points(pool))
        scores = self._surrogate_module.expected_improvement(features, self._model, self._best_fitted, self._settings.exploration)
        scores = np.maximum(scores, 0.0)
        if self._feasibility is not None:
            scores = scores * self._allowed_probability(features)
        return scores + 1e-12

    def _allowed_probability(self, features: Any) -> np.ndarray:
        return np.clip(np.asarray(self._feasibility.predict(features), dtype=float), 0.0, 1.0)

    def _pick(
        self, pool: np.ndarray, scores: np.ndarray, count: int, choose: Any, spread: bool = False
    ) -> list[int]:
        """Greedy batch: score per unit of compile cost; a new front-end setting costs more
        until one variant of the batch pays for it (expected improvement per second).

        With `spread`, each pick discounts the configs one setting away from it: the best
        candidates of a plateau are near-copies, and a batch of them often compiles to the
        same code eight times.
        """
        if not len(pool):
            return []
        columns = self._encoding.frontend_columns
        keys, group = np.unique(pool[:, columns], axis=0, return_inverse=True)
        group = group.reshape(-1)
        planned = np.array([tuple(k) in self._frontends for k in keys.tolist()], dtype=bool)
        cost = np.where(planned[group], 1.0, 1.0 + self._frontend_cost)
        values = pool.astype(np.int16) if spread else pool  # value indices: compared once per pick
        available = np.ones(len(pool), dtype=bool)
        chosen: list[int] = []
        for _ in range(min(count, len(pool))):
            weights = np.where(available, scores / cost, 0.0)
            index = int(choose(weights / weights.sum()))
            available[index] = False
            if not planned[group[index]]:
                planned[group[index]] = True
                cost[group == group[index]] = 1.0
            chosen.append(index)
            if spread:
                near = np.count_nonzero(values != values[index], axis=1) <= 1
                scores = np.where(near, scores * NEIGHBOUR_DISCOUNT, scores)
        return chosen

    def set_frontend_cost(self, ratio: float) -> None:
        """Measured cost of a new front-end compile, in ptxas runs (updates the batch choice)."""
        if math.isfinite(ratio) and ratio > 0:
            self._frontend_cost = ratio

    def _candidates(self, skip: set[Row]) -> np.ndarray:
        """The pool a batch is chosen from: allowed, untried configurations (the whole space when
        it is small; else random ones from the whole space, a restricted one drawing again to fill
        the pool; where the restrictions allow too few for that (under 1 in SPARSE) and their
        macro combinations were enumerated, every allowed one when few, else drawn from them)."""
        encoding = self._encoding
        if self._space.size() <= ENUMERATE_LIMIT:
            return encoding.without(encoding.allowed(encoding.grid), skip)
        allowed = encoding.allowed_count() if encoding.restricted else None
        if allowed is not None and allowed * SPARSE < self._space.size():
            # the macro combinations the restrictions allow, enumerated: every allowed row when
            # few, else drawn from them (drawing from the whole product and rejecting kept none
            # of 1 in 10**6, and the search stopped after the baseline). Denser restrictions keep
            # the draws below, as the recorded landscapes were measured with them.
            if allowed <= ENUMERATE_LIMIT:
                return encoding.without(encoding.allowed_grid(), skip)
            rows = encoding.allowed(self._projected(encoding.sample_allowed(self._rng, CANDIDATE_SAMPLES)))
            return encoding.without(rows, skip)
        rows = encoding.allowed(self._projected(encoding.sample(self._rng, CANDIDATE_SAMPLES)))
        for _ in range(RESTRICTED_DRAWS if encoding.restricted else 0):
            if len(rows) >= CANDIDATE_SAMPLES // 2:
                break
            more = encoding.allowed(self._projected(encoding.sample(self._rng, CANDIDATE_SAMPLES)))
            rows = np.unique(np.concatenate([rows, more]), axis=0)
        return encoding.without(rows, skip)

    def _refit(self) -> None:
        if len(self._values) < self._settings.initial_points:
            return
        # One fit on the whole history; skopt's Optimizer.tell would also optimise an acquisition
        # for its own next point, which the batch choice here never uses. The surrogate models
        # the objective as compiled: a result the no-harm rules refused at its own rank. Once one
        # was refused, a second forest models the chance of being allowed and EI is weighted by
        # it (see _acquisition, docs/architecture.md, "A refused result keeps its value").
        values = _with_penalty([v if v is not None else r for v, r in zip(self._values, self._refused)])
        refused = any(r is not None for r in self._refused)
        fresh_model = self._surrogate_module.fresh_model
        model = fresh_model(self._optimizer)
        feasibility = fresh_model(self._optimizer) if refused else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(self._features(self._points), values)
            if feasibility is not None:
                feasibility.fit(self._features(self._points), [float(v is not None) for v in self._values])
        allowed = [rank for rank, value in zip(values, self._values) if value is not None]
        self._model, self._fitted, self._feasibility = model, values, feasibility
        self._best_fitted = min(allowed, default=min(values))


def _import_surrogate() -> Any:
    from compileiq.search import surrogate

    return surrogate


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
    return [
        FAILURE_RANK if v is None or not math.isfinite(v) else first_rank[v] / count for v in values
    ]
