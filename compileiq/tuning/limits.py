"""What ends a tuning run: the budget of search trials, a time budget, or patience (batches in a
row without a better best). Each run records its limits and the one that ended it."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from compileiq.core.errors import UsageError

_PART = re.compile(r"(\d+(?:\.\d+)?)([smh])")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0}
MAX_TIME_BUDGET_S = 7 * 24 * 3600.0
MAX_PATIENCE = 100_000


def parse_duration(text: str, option: str = "--time-budget") -> float:
    """Seconds of "90s", "10m", "1h", "1h30m" or "2.5h"; UsageError (one line) for anything else."""
    cleaned = text.strip().lower()
    parts = _PART.findall(cleaned)
    units = [unit for _, unit in parts]
    in_order = units == sorted(set(units), key="hms".index)  # each unit once, largest first: 1h30m
    if not cleaned or "".join(number + unit for number, unit in parts) != cleaned or not in_order:
        raise UsageError(f"{option} takes a duration such as 90s, 10m, 1h or 1h30m, got {text!r}")
    seconds = sum(float(number) * _UNIT_S[unit] for number, unit in parts)
    if not 0 < seconds <= MAX_TIME_BUDGET_S:
        raise UsageError(f"{option} must be more than 0 s and at most {format_duration(MAX_TIME_BUDGET_S)}, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest of "90s", "10m", "1h30m" for a number of seconds."""
    whole = math.ceil(seconds) if seconds >= 1 else seconds
    if whole < 1:
        return f"{seconds:g}s"
    hours, rest = divmod(int(whole), 3600)
    minutes, secs = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs else "")
    return text


def check_patience(patience: int | None) -> None:
    if patience is not None and not 1 <= patience <= MAX_PATIENCE:
        raise UsageError(f"--patience must be between 1 and {MAX_PATIENCE} batches, got {patience}")


@dataclass(frozen=True)
class RunLimits:
    budget: int  # search trials in the study, baseline included
    time_budget_s: float | None = None  # no trial starts after this many seconds of the run
    patience: int | None = None  # stop after this many batches in a row without a better best

    def describe(self) -> str:
        parts = [f"budget {self.budget} search trials"]
        if self.time_budget_s is not None:
            parts.append(f"time budget {format_duration(self.time_budget_s)}")
        if self.patience is not None:
            parts.append(f"patience {_batches(self.patience)}")
        return ", ".join(parts)

    def as_json(self) -> dict[str, Any]:
        return {"budget": self.budget, "time_budget_s": self.time_budget_s, "patience": self.patience}


@dataclass
class RunClock:
    """Tracks one run against its limits: call `stop_reason` before each batch and `batch_done`
    after each one the search ran."""

    limits: RunLimits
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=0.0)
    best: float | None = None
    stale_batches: int = 0  # batches in a row that did not lower the best

    def __post_init__(self) -> None:
        self.started = self.clock()

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.started

    @property
    def out_of_time(self) -> bool:
        return self.limits.time_budget_s is not None and self.elapsed_s >= self.limits.time_budget_s

    def stop_reason(self, searched: int) -> str | None:
        """Why no further batch may start (None: go on), given the study's search trials."""
        limits = self.limits
        if searched >= limits.budget:
            return f"budget {limits.budget}"
        if self.out_of_time:
            assert limits.time_budget_s is not None
            return f"time budget {format_duration(limits.time_budget_s)}"
        if limits.patience is not None and self.stale_batches >= limits.patience:
            return f"no improvement in {_batches(self.stale_batches)}"
        return None

    def batch_done(self, best: float | None) -> None:
        """A batch finished; `best` is the best value the study has now (None: none yet)."""
        if best is not None and (self.best is None or best < self.best):
            self.best, self.stale_batches = best, 0
        else:
            self.stale_batches += 1


def _batches(count: int) -> str:
    """The count as the stop line and the limits line say it: "1 batch", "3 batches"."""
    return f"{count} batch" if count == 1 else f"{count} batches"
