"""Group commit: results recorded a few at a time, in one transaction each, within ~250 ms.

A driver feeding a hundred compile slots finishes a trial every millisecond; one transaction per
result cost more than everything else it does. Outcomes wait here until the next `flush` (the
tuner flushes before it asks or claims, and when a run ends or is interrupted) or until the oldest
has waited `every_s` (a background thread writes them): a killed process loses at most the last
group, whose trials stay claimed by a tuner that is gone and are retried by the next one.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from typing import Self

from compileiq.core.errors import CompileIQError
from compileiq.core.records import TrialOutcome
from compileiq.store import Store

# A write costs ~1.5 ms of the driver's CPU (a budget-480 run on 2 CPUs, where a result arrives
# every ~50-100 ms): at 50 ms nearly every result was a transaction of its own (358 for 503
# trials), at 250 ms about two thirds as many; a killed tuner loses at most this much compiling.
FLUSH_EVERY_S = 0.25


class GroupCommit:
    """Outcomes waiting to be written; `flush` makes every one added so far durable."""

    def __init__(self, store: Store, every_s: float = FLUSH_EVERY_S) -> None:
        self._store, self._every_s = store, every_s
        self._pending: list[TrialOutcome] = []
        self._oldest = 0.0
        self._failed = False  # a background write failed: the caller's next call writes (and raises)
        self._closed = False
        self._changed = threading.Condition()
        self._writing = threading.Lock()  # one write at a time, in order
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is None:
            self.close()
            return
        with contextlib.suppress(CompileIQError):  # the first error is the one to report
            self.close()  # what finished before the error is kept

    def add(self, outcome: TrialOutcome) -> None:
        with self._changed:
            if not self._pending:
                self._oldest = time.monotonic()
                self._changed.notify()  # the writer sleeps until a group starts
            self._pending.append(outcome)
            failed = self._failed
        if failed:
            self.flush()
        elif self._thread is None:
            self._thread = threading.Thread(target=self._flush_in_time, name="compileiq-commit", daemon=True)
            self._thread.start()

    @property
    def pending(self) -> int:
        with self._changed:
            return len(self._pending)

    def flush(self) -> None:
        """Write what waits (one transaction); on an error it stays pending and the error is raised."""
        with self._writing:
            with self._changed:
                batch, self._pending = self._pending, []
            if not batch:
                return
            try:
                self._store.finish_trials(batch)
            except BaseException:
                self._put_back(batch)
                raise
            with self._changed:
                self._failed = False

    def close(self) -> None:
        """Stop the background writer, then write what is left (errors propagate)."""
        with self._changed:
            self._closed = True
            self._changed.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.flush()

    def _put_back(self, batch: Sequence[TrialOutcome]) -> None:
        with self._changed:
            self._pending[:0] = batch
            self._oldest = time.monotonic()

    def _flush_in_time(self) -> None:
        while True:
            with self._changed:
                while not self._closed and (self._failed or not self._pending):
                    self._changed.wait()
                if self._closed:
                    return
                due = self._oldest + self._every_s - time.monotonic()
                if due > 0:
                    self._changed.wait(due)
                    continue
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - the batch stays pending: the caller's next flush raises it
                with self._changed:
                    self._failed = True  # left for the caller's next add or flush to report
