"""compileiq's confirmation judged on a landscape: the product's statistic on replayed samples,
against the table's truth.

Per seed (and per `--confirmations` repeat), compileiq's search runs a fixed budget
(`--budget` evaluations after the defaults), its finalists are chosen by the product's
`choose_finalists` (screening value = recorded mean, distinct configurations) and confirmed
against the defaults by the product's `confirm` (A/A noise delta, interleaved rounds, 95% interval
of the median round ratio) with `executable_sampler` over a `ReplayMeasurer`: each block draws,
seeded and with replacement, from the configuration's steady-state timings (its recorded times
less the first, a cold launch no warmed-up harness times: `Landscape.timed`). An interval covers
when it holds the true ratio candidate/defaults. Four truths are reported: the ratio of the
steady-state medians (what the product states: a median speedup), the ratio of the steady-state
means (the speedup a user sees once the kernel runs warm), the ratio of the means
of all recorded times (the cold first launch included), and the statistic's own estimand, the
median of the round ratio median(10 draws of B) / median(10 draws of A) under that same
resampling (Monte Carlo, 4,000 rounds). The final choice is the confirmed winner (or the defaults
when the baseline is kept); its true speedup (defaults' mean / its mean, all recorded times, as
the search is judged) is set beside the best possible (defaults' mean / optimum).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from common import BATCH
from landscape_peers import searcher_batches
from landscape_problem import Key, Problem

from compileiq.evaluate.confirm import Candidate, choose_finalists, confirm, executable_sampler
from compileiq.evaluate.replay import ReplayMeasurer

ESTIMAND_ROUNDS = 4000


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    medians_ratio: float  # candidate's steady-state median / the defaults' (what a median speedup states)
    steady_ratio: float  # candidate's steady-state mean / the defaults'
    means_ratio: float  # candidate's mean of all recorded times / the defaults'
    estimand: float  # median round ratio under the resampling (what the statistic estimates)

    TRUTHS = ("medians_ratio", "steady_ratio", "means_ratio", "estimand")

    def covers(self, truth: str) -> bool:
        """Whether the interval holds this truth (one of TRUTHS)."""
        return self.low <= getattr(self, truth) <= self.high


def marker(key: Key) -> bytes:
    return b"ciq-replay-key:" + ",".join(map(str, key)).encode() + b";"  # what ReplayMeasurer reads


def estimand(problem: Problem, candidate: Key, baseline: Key, samples: int = 10, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    a = rng.choice(np.asarray(problem.landscape.timed(baseline)), size=(ESTIMAND_ROUNDS, samples))
    b = rng.choice(np.asarray(problem.landscape.timed(candidate)), size=(ESTIMAND_ROUNDS, samples))
    return float(np.median(np.median(b, axis=1) / np.median(a, axis=1)))


def _steady_median(problem: Problem, key: Key) -> float:
    return statistics.median(problem.landscape.timed(key))


@dataclass(frozen=True)
class Choice:
    """What a confirmation decided, as the ACF records it."""

    key: Key  # the final choice (the defaults when kept)
    intervals: list[Interval]  # each finalist's, with its truths
    confirmed_median: float | None  # `objective.confirmed_median` (None when the defaults are kept)
    delta: float  # `objective.confirmation_delta`: the A/A threshold (nan: nothing to confirm)


def confirmed_choice(problem: Problem, evaluated: Sequence[Key], seed: int,
                     screened: Mapping[Key, float] | None = None) -> Choice:
    """The product's finalists and confirmation on `evaluated` (defaults first). `screened`:
    each configuration's screening value (default: its recorded mean)."""
    base = problem.default
    order = {k: i for i, k in enumerate(dict.fromkeys(evaluated))}
    screen = problem.value if screened is None else screened.get
    candidates = [Candidate(i, ",".join(map(str, k)), v, True) for k, i in order.items()
                  if (v := screen(k)) is not None]
    finalists = choose_finalists(candidates, ",".join(map(str, base)))
    by_trial = {i: k for k, i in order.items()}
    measurer = ReplayMeasurer(problem.landscape, seed=seed)
    pairs = [(c, executable_sampler(measurer, marker(by_trial[c.trial]))) for c in finalists]
    outcome = confirm(executable_sampler(measurer, marker(base)), pairs, seed=seed)
    intervals = []
    base_mean, base_steady = problem.value(base), problem.landscape.steady_mean(base)
    for confirmed in outcome.confirmed:
        if confirmed.comparison is None:
            continue
        key = by_trial[confirmed.candidate.trial]
        intervals.append(Interval(confirmed.comparison.low, confirmed.comparison.high,
                                  _steady_median(problem, key) / _steady_median(problem, base),
                                  problem.landscape.steady_mean(key) / base_steady,  # type: ignore[operator]
                                  problem.value(key) / base_mean, estimand(problem, key, base)))  # type: ignore[operator]
    if outcome.winner is None:
        return Choice(base, intervals, None, outcome.delta)
    return Choice(by_trial[outcome.winner.candidate.trial], intervals, outcome.winner.median_ms, outcome.delta)


def compileiq_evaluated(problem: Problem, seed: int, budget: int, batch: int = BATCH) -> list[Key]:
    """The configurations compileiq's search evaluates in `budget` evaluations after the defaults
    (whole batches of `batch`), each once, in order: what its confirmation chooses from."""
    batches = searcher_batches(problem, "bayes", seed, lambda b: sum(map(len, b)) >= budget + 1, batch)
    return list(dict.fromkeys(k for b in batches for k in b))


def coverage(problem: Problem, seeds: int, budget: int, repeats: int, batch: int = BATCH) -> dict:
    intervals: list[Interval] = []
    speedups: list[float] = []
    base_mean = problem.value(problem.default)
    assert base_mean is not None
    for seed in range(seeds):
        evaluated = compileiq_evaluated(problem, seed, budget, batch)
        for repeat in range(repeats):
            choice = confirmed_choice(problem, evaluated, seed * 1000 + repeat)
            intervals += choice.intervals
            speedups.append(base_mean / problem.value(choice.key))  # type: ignore[operator]
    return summarize_coverage(intervals, speedups, base_mean / problem.best, budget)


def summarize_coverage(intervals: Sequence[Interval], speedups: Sequence[float], best: float, budget: int) -> dict:
    n = len(intervals)
    return {
        "budget": budget, "intervals": n,
        **{f"coverage_of_{truth}": sum(i.covers(truth) for i in intervals) / n if n else None
           for truth in Interval.TRUTHS},
        "choices": len(speedups),
        "median_true_speedup_of_choice": statistics.median(speedups) if speedups else None,
        "quartiles_true_speedup_of_choice": quartiles(speedups),
        "choices_slower_than_defaults": sum(s < 1 for s in speedups),
        "choices_keeping_defaults": sum(s == 1 for s in speedups),
        "best_possible_speedup": best,
    }


def quartiles(values: Sequence[float]) -> list[float] | None:
    if len(values) < 2:
        return None
    q = statistics.quantiles(values, n=4, method="inclusive")
    return [q[0], q[2]]
