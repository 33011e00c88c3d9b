"""The A/B statistic for timings: interleaved rounds, per-round median ratios, an order-statistic
interval for their median, and a verdict against a noise threshold.

Candidate B against baseline A: in each round both run (in random order), k samples each; the
round's ratio is median(B) / median(A). The estimate is the median ratio; its distribution-free
95% interval comes from order statistics of the ratios (R=10: r(2)..r(9); R=20: r(6)..r(15)).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

MIN_DELTA = 0.02
ROUND_SCHEDULE = (10, 20, 30)
FINALISTS = 4  # how many screened candidates are confirmed against the baseline (3-5 per the design)
MAX_FINALISTS = 8


def interleaved_runs(schedule: Sequence[int] = ROUND_SCHEDULE) -> tuple[int, int]:
    """The fewest and the most runs of the two arms' programs one interleaved comparison takes:
    one of each per round, its rounds escalating along `schedule` while undecided."""
    return 2 * schedule[0], 2 * schedule[-1]


class Verdict(str, Enum):
    FASTER = "FASTER"
    SAME = "SAME"
    SLOWER = "SLOWER"
    INCONCLUSIVE = "INCONCLUSIVE"


@dataclass(frozen=True)
class Comparison:
    """B relative to A: ratio < 1 means B is faster."""

    estimate: float
    low: float
    high: float
    rounds: int
    delta: float
    verdict: Verdict

    @property
    def speedup(self) -> float:
        return 1.0 / self.estimate if self.estimate > 0 else math.nan


SPEEDUP_IS = ("the median over the interleaved rounds of the baseline's median time / this build's median time "
              "in that round; the 95% interval is of that median (a typical-run speedup), not of the ratio of "
              "mean times, which a slow first launch or an outlier moves")


def interval_ranks(rounds: int, confidence: float = 0.95) -> tuple[int, int]:
    """1-based ranks (low, high) of the order statistics bounding the median at `confidence`."""
    if rounds < 6:
        raise ValueError("at least 6 rounds are needed for a 95% interval of the median")
    tail = (1.0 - confidence) / 2
    cumulative, k = 0.0, 0
    while True:
        cumulative += math.comb(rounds, k) / 2**rounds
        if cumulative > tail:
            break
        k += 1
    return k, rounds - k + 1


def ratios(rounds_a: Sequence[Sequence[float]], rounds_b: Sequence[Sequence[float]]) -> list[float]:
    return [statistics.median(b) / statistics.median(a) for a, b in zip(rounds_a, rounds_b, strict=True)]


def judge(round_ratios: Sequence[float], delta: float) -> Comparison:
    ordered = sorted(round_ratios)
    low_rank, high_rank = interval_ranks(len(ordered))
    low, high = ordered[low_rank - 1], ordered[high_rank - 1]
    return Comparison(statistics.median(ordered), low, high, len(ordered), delta, verdict(low, high, delta))


def verdict(low: float, high: float, delta: float) -> Verdict:
    if low > 1 + delta:
        return Verdict.SLOWER
    if high < 1 - delta:
        return Verdict.FASTER
    if low >= 1 - delta and high <= 1 + delta:
        return Verdict.SAME
    return Verdict.INCONCLUSIVE


def noise_delta(aa_ratios: Sequence[float]) -> float:
    """δ = max(2%, 2 × the A/A noise), the noise being the median |ratio − 1| of an A/A run."""
    if not aa_ratios:
        return MIN_DELTA
    noise = statistics.median(abs(r - 1.0) for r in aa_ratios)
    return max(MIN_DELTA, 2.0 * noise)


Sampler = Callable[[int], list[float]]  # samples(k) -> k timings of one arm


def interleaved(
    sample_a: Sampler,
    sample_b: Sampler,
    *,
    delta: float = MIN_DELTA,
    samples: int = 10,
    schedule: Sequence[int] = ROUND_SCHEDULE,
    seed: int = 0,
) -> Comparison:
    """Run rounds of A and B in random order; escalate the round count while undecided."""
    order = random.Random(seed)
    round_ratios: list[float] = []
    result = None
    for target in schedule:
        while len(round_ratios) < target:
            round_ratios.append(_one_round(sample_a, sample_b, samples, order))
        result = judge(round_ratios, delta)
        if result.verdict is not Verdict.INCONCLUSIVE:
            return result
    assert result is not None
    return result


def _one_round(sample_a: Sampler, sample_b: Sampler, samples: int, order: random.Random) -> float:
    if order.random() < 0.5:
        a, b = sample_a(samples), sample_b(samples)
    else:
        b, a = sample_b(samples), sample_a(samples)
    return statistics.median(b) / statistics.median(a)


@dataclass(frozen=True)
class TimingSamplers:
    """One GPU's timings: the ACF build, the default build, and the recorded median (if any)."""

    acf: Sampler
    default: Sampler
    recorded_median: float | None = None
    recorded_is: str = ""  # where the recorded median was read (the ACF's key)
    samples: int = 10  # per block: a harness run's samples; 1 for a program (one printed time a run)
