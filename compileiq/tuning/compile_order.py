"""The order a batch's compiles start in: the longest predicted first.

A batch ends with its slowest variant (the barrier before the searcher's refit): with 8 variants
on 2 workers, a long ptxas run started last leaves a worker idle while it finishes. Starting the
longest first (the LPT rule) shortens that tail. A variant's ptxas time is predicted from the
compiles this run has finished: the mean log-time of all of them, plus, for each setting, how much
the finished variants with the same value ran longer or shorter than that mean, shrunk towards
nothing while few of them are known (an additive model: `-O0` against `-O3`, a tight register
cap, a larger tile are each the same cost wherever they occur).

The order changes no result and no proposal: results are recorded as they finish, whatever the
order, and the searcher is told a batch's results in the order the trials were claimed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
SHRINK = 3.0  # a value seen n times moves the prediction by n / (n + SHRINK) of its measured effect
MIN_SECONDS = 1e-3  # a time below this (a cache hit, a failed run) teaches nothing


class LongestFirst:
    """Learns from finished compiles; orders a batch longest predicted first."""

    def __init__(self) -> None:
        self._count = 0
        self._total = 0.0  # sum of log seconds
        self._by_value: dict[tuple[str, str], list[float]] = {}  # (setting, value) -> [count, sum of log seconds]

    def learn(self, config: Mapping[str, Any], seconds: float | None) -> None:
        """One finished compile of `config` took `seconds` (ptxas wall time)."""
        if seconds is None or not math.isfinite(seconds) or seconds < MIN_SECONDS:
            return
        log = math.log(seconds)
        self._count += 1
        self._total += log
        for name, value in config.items():
            seen = self._by_value.setdefault((name, repr(value)), [0, 0.0])
            seen[0] += 1
            seen[1] += log

    def predict(self, config: Mapping[str, Any]) -> float | None:
        """The predicted log-seconds of `config`'s compile; None before anything was learned."""
        return self._estimate(config) if self._count else None

    def _estimate(self, config: Mapping[str, Any]) -> float:
        mean = self._total / self._count
        estimate = mean
        for name, value in config.items():
            seen = self._by_value.get((name, repr(value)))
            if seen is not None:
                count, total = seen
                estimate += (total / count - mean) * count / (count + SHRINK)
        return estimate

    def order(self, items: Sequence[T], config_of: Callable[[T], Mapping[str, Any]]) -> list[T]:
        """`items` longest predicted first; ties (and everything, before anything is learned)
        keep their order."""
        if len(items) < 2 or not self._count:
            return list(items)
        predicted = [self._estimate(config_of(item)) for item in items]
        ranked = sorted(range(len(items)), key=lambda i: -predicted[i])
        return [items[i] for i in ranked]
