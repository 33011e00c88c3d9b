"""Several measurers (one per GPU) as one: each call goes to the idle measurer that has waited
longest, so calls take turns across the GPUs and concurrent calls run on different GPUs at once.
A single run's timing protocol stays on one GPU; comparisons that interleave runs (confirmation)
use `first`, one GPU for every run they compare."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence

from compileiq.evaluate.measure import Measurer, RunResult


class MeasurerPool:
    def __init__(self, measurers: Sequence[Measurer]) -> None:
        if not measurers:
            raise ValueError("a measurer pool needs at least one measurer")
        self._measurers = tuple(measurers)
        self._idle = deque(range(len(self._measurers)))
        self._turn = threading.Condition()

    @property
    def device(self) -> str:
        """The first GPU's model: the device a study's measurements are filed under."""
        return self._measurers[0].device

    @property
    def first(self) -> Measurer:
        return self._measurers[0]

    def __len__(self) -> int:
        return len(self._measurers)

    def measure(self, executable: bytes, args: Sequence[str], timeout_s: float, *, dump: bool = True) -> RunResult:
        with self._turn:
            self._turn.wait_for(lambda: bool(self._idle))
            index = self._idle.popleft()
        try:
            return self._measurers[index].measure(executable, args, timeout_s, dump=dump)
        finally:
            with self._turn:
                self._idle.append(index)
                self._turn.notify()
