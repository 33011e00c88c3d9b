"""A streaming run's refill: new variants claimed while others compile.

As soon as a quarter of the batch (at least one) is free, the runner asks the feed for more, so
that the workers never wait for a batch's slowest variant. A hundred slots are fed from a queue of
proposals, not by an ask per free slot: the searcher learns each result when the queue is next
asked for, refits on `RefitSchedule`'s terms, and both its refits and its asks run beside the
driver (`BackgroundRefresh`), which keeps handing out the previous model's proposals meanwhile.

The queue is sized by the pace of the run: each ask asks for enough proposals to last 2.5 refits
at the rate variants are being handed out, and a refit only starts when the queue lasts twice as
long as the last one took (else the queue is topped up first and the refit starts next). A driver that waits for
its searcher leaves every slot that frees meanwhile idle.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Protocol

from compileiq.core.records import Trial
from compileiq.core.space import Config
from compileiq.search.refit_schedule import BackgroundRefresh, RefitSchedule

PROPOSALS_PER_ASK = 2  # batches of proposals asked at once of one model, at the least
MARGIN = 2.0  # a job starts while the queue lasts this many times as long as the job is expected to take
ASKED_REFITS = 2.5  # an ask asks for enough proposals to last this many refits: room for the next one


class Proposer(Protocol):
    def ask(self, count: int, exclude: Sequence[str] = ()) -> list[Config]: ...

    def fit(self) -> None: ...


class StreamingFeed:
    """The runner's `Refill` for one streaming batch: `feed(finished, running) -> claimed trials`.

    `tell(trials, fit)` teaches the searcher results; `claim(configs)` claims and returns trials.
    With `refit_each_batch` (several objectives: their search refits per proposal anyway) it
    tells a batch at a time and asks on the driver's thread, as a batch run does.
    """

    def __init__(
        self,
        batch_size: int,
        left: int,
        searcher: Proposer,
        refresh: BackgroundRefresh,
        tell: Callable[[Sequence[Trial], bool], None],
        claim: Callable[[Sequence[Config]], list[Trial]],
        flush: Callable[[], None],
        out_of_time: Callable[[], bool],
        refit_each_batch: bool = False,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._batch_size, self._left = batch_size, left
        self._searcher, self._refresh = searcher, refresh
        self._tell, self._claim, self._flush, self._out_of_time = tell, claim, flush, out_of_time
        self._refit_each_batch, self._clock = refit_each_batch, clock
        self._step = max(1, batch_size // 4)
        self._schedule = RefitSchedule(batch_size)
        self._read = 0  # finished trials looked at so far (the runner's list only grows)
        self._done = 0  # ... of which count towards the budget
        self._untold: list[Trial] = []
        self._lost: set[str] = set()  # finished without a result that counts (retried later): not proposed again now
        self._proposals: list[Config] = []
        self._handed: set[str] = set()  # config keys handed out since the job in flight was asked (it
        # excluded those compiling then, not these; nor those lost meanwhile, retried by a later run)
        self._handed_total = 0
        self._started_at: float | None = None
        self._took = {"refit": 0.0, "ask": 0.0}  # the last job of each kind, seconds
        self._topped_up = False  # the last job was an ask to make room for a due refit

    def __call__(self, finished: Sequence[Trial], running: Sequence[Trial]) -> Sequence[Trial]:
        for trial in finished[self._read:]:
            if trial.final:
                self._done += 1
                self._untold.append(trial)
            else:
                self._lost.add(trial.config_key)
        self._read = len(finished)
        left = self._left - len(running) - self._done
        free = min(self._batch_size - len(running), left)
        if self._out_of_time() or free <= 0 or free < min(self._step, left):
            return []
        if self._started_at is None:
            self._started_at = self._clock()
        self._flush()  # what the searcher learns is recorded first
        busy = sorted(self._lost.union(t.config_key for t in running))
        if self._refit_each_batch:
            if len(self._untold) >= self._batch_size:
                self._tell(self._untold, True)
                self._untold = []
            return self._hand_out(self._searcher.ask(free, exclude=sorted({*busy, *(t.config_key for t in finished)})))
        return self._hand_out(self._next(free, busy))

    def _next(self, free: int, busy: list[str]) -> list[Config]:
        refresh = self._refresh
        wanted = max(free, PROPOSALS_PER_ASK * self._batch_size, self._cover(ASKED_REFITS * self._expected_refit()))
        if (fresh := refresh.done()) is not None:  # the new proposals replace the old
            self._proposals = self._untaken(fresh)
        if not refresh.running:
            self._start_job(wanted, busy)
        if len(self._proposals) < free and refresh.running:
            self._proposals = self._untaken(refresh.wait())
        if len(self._proposals) < free:
            self._proposals = self._searcher.ask(wanted, exclude=busy)
        batch, self._proposals = self._proposals[:free], self._proposals[free:]
        return batch

    def _start_job(self, wanted: int, busy: list[str]) -> None:
        if self._untold:
            self._tell(self._untold, False)
            self._schedule.told(len(self._untold))
            self._untold = []
        queued = len(self._proposals)
        refit_due = self._schedule.due()
        if refit_due and (self._topped_up or queued >= self._cover(MARGIN * self._expected_refit())):
            job, kind = partial(self._schedule.refresh, partial(self._refit_and_ask, wanted, busy)), "refit"
        elif refit_due or queued < max(self._batch_size, self._cover(MARGIN * self._took["ask"])):
            job, kind = partial(self._searcher.ask, wanted, busy), "ask"  # the next ones asked beside it
        else:
            return
        self._topped_up = refit_due and kind == "ask"
        self._handed.clear()
        self._refresh.start(partial(self._timed, kind, job))

    def _expected_refit(self) -> float:
        """Seconds the next refit (and its ask) should take: the last one, or before the first,
        twice an ask (a refit grows its trees, then asks)."""
        return max(self._took["refit"], 2 * self._took["ask"])

    def _refit_and_ask(self, count: int, exclude: Sequence[str]) -> list[Config]:
        self._searcher.fit()
        return self._searcher.ask(count, exclude=exclude)

    def _timed(self, kind: str, job: Callable[[], list[Config]]) -> list[Config]:
        start = self._clock()
        try:
            return job()
        finally:
            self._took[kind] = self._clock() - start

    def _untaken(self, configs: Sequence[Config]) -> list[Config]:
        return [c for c in configs if c.key not in self._handed and c.key not in self._lost]

    def _cover(self, seconds: float) -> int:
        """How many variants are handed out in `seconds` at the pace so far."""
        if self._started_at is None or (elapsed := self._clock() - self._started_at) <= 0:
            return 0
        return math.ceil(self._handed_total / elapsed * seconds)

    def _hand_out(self, configs: list[Config]) -> list[Trial]:
        self._handed.update(c.key for c in configs)
        self._handed_total += len(configs)
        return self._claim(configs)
