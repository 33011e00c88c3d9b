"""When a streaming run refits its surrogate, and how many proposals it asks for at once.

A refit costs ~0.3 ms of CPU per observation (32 trees on this machine): refitting once per batch of
results, as a batch run does, costs the driver more per result the longer the study grows, and a
driver that feeds a hundred compile slots has no time to spare. A streaming run therefore refits
once `batch_size` new results are in AND the fits so far took at most `share` of the driver's
wall time since the previous one ended; a driver with time to spare (few slots, slow compiles)
refits per batch exactly as before. A refit's time counts the proposals asked of the new model
(they are asked then, a batch at a time, and handed out as slots free up). Batch runs never use this: they stay reproducible.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

FIT_SHARE = 0.25
T = TypeVar("T")


class RefitSchedule:
    def __init__(self, batch_size: int, share: float = FIT_SHARE,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._batch_size, self._share, self._clock = max(1, batch_size), share, clock
        self._unfitted = 0
        self._fit_s = 0.0
        self._fitted_at = -float("inf")

    def told(self, count: int) -> None:
        """`count` more results reached the searcher, not yet fitted on."""
        self._unfitted += count

    def due(self) -> bool:
        if self._unfitted < self._batch_size:
            return False
        since = self._clock() - self._fitted_at
        return self._fit_s * (1 - self._share) <= since * self._share

    def refresh(self, refit_and_ask: Callable[[], T]) -> T:
        """Run `refit_and_ask` (a refit and the proposals of the new model), timing it."""
        start = self._clock()
        found = refit_and_ask()
        self._fitted_at = self._clock()
        self._fit_s = self._fitted_at - start
        self._unfitted = 0
        return found
