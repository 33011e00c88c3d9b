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
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

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


class BackgroundRefresh:
    """A streaming run's refit and ask on a thread of their own, so that the driver keeps handing
    out the previous model's proposals while the next model is fitted (the forest's trees are
    built and walked outside the interpreter lock: on a second core). At most one is in flight;
    while it is, the searcher is the thread's alone: nothing else may tell or ask it."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._running: Future[list[Any]] | None = None

    @property
    def running(self) -> bool:
        return self._running is not None

    def start(self, refit_and_ask: Callable[[], list[T]]) -> None:
        assert self._running is None, "one refresh at a time"
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compileiq-refit")
        self._running = self._pool.submit(refit_and_ask)

    def done(self) -> list[Any] | None:
        """The proposals of the new model if it is ready (None if not, or if none runs)."""
        if self._running is None or not self._running.done():
            return None
        return self.wait()

    def wait(self) -> list[Any]:
        """The new model's proposals, waiting for them ([] if none runs); a failure raises here."""
        running, self._running = self._running, None
        return [] if running is None else running.result()

    def close(self) -> None:
        """Wait for a refresh in flight (the searcher is the caller's again), stop the thread."""
        try:
            if self._running is not None:
                self._running.exception()
        finally:
            self._running = None
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
