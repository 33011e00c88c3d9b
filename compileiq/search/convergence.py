"""How a search went: the best value so far per trial, and what random search would expect.

The random-search reference is exact for the study's own values: the expected minimum of k
draws without replacement from the recorded trials (failed trials are draws that give nothing),
conditioned on at least one draw succeeding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compileiq.core.records import Trial, TrialState


@dataclass(frozen=True)
class Point:
    number: int
    value: float | None  # None: the trial failed
    best: float | None  # the best value among trials up to this one


def best_so_far(trials: Sequence[Trial]) -> list[Point]:
    points, best = [], None
    for trial in sorted(trials, key=lambda t: t.number):
        if not trial.final:  # running, or to retry: no outcome of its own yet (`TrialCounts`)
            continue
        value = trial.value if trial.state is TrialState.COMPLETE else None
        if value is not None and (best is None or value < best):
            best = value
        points.append(Point(trial.number, value, best))
    return points


def expected_random_best(values: Sequence[float | None]) -> list[float | None]:
    """Entry k-1: the expected best of k random draws (without replacement) from `values`."""
    ranked = sorted(v for v in values if v is not None)
    total, successes = len(values), len(ranked)
    expected: list[float | None] = []
    for k in range(1, total + 1):
        probability = k / total  # P(the draws' best has rank 1), then a recurrence down the ranks
        weighted = mass = 0.0
        for i in range(successes):
            weighted += probability * ranked[i]
            mass += probability
            remaining = total - i - 1
            probability = probability * (remaining - k + 1) / remaining if remaining >= k else 0.0
        expected.append(weighted / mass if mass > 0 else None)
    return expected
