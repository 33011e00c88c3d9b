"""The records the store hands out: frozen, typed, free of any database library."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any


class TrialState(str, enum.Enum):
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"


SEARCH = "search"  # a trial the search asked for: the budget counts these (the baseline included)
SCREEN = "screen"  # compiled and refused by the static rules before measuring (runtime objectives): free
PURPOSES = (SEARCH, SCREEN, "simplify", "ablation", "confirm")  # the others explain or shrink the winner: free
NODE_KEY = "node"  # in a trial's metrics: the Ray node whose ptxas built it ("IP/node-id")
MEASURED_ON_KEY = "measured_on"  # in a trial's metrics: the GPU that screened it ("IP/node-id GPU n")
# What kind of number an objective's value is, as the ACF and the report label it.
STATIC_KIND = "static estimate (compiler output, not a runtime)"
QUARANTINED = "quarantined"  # the start of the reason of a row whose rebuild disagreed (tuning.verify)
RUNTIME_KIND = "runtime (GPU, median of samples)"


MAX_TRIAL_NUMBER = 2**62  # a trial number beyond (a forged run row's) names no trial: SQLite's INTEGER ends at 2**63


@dataclass(frozen=True)
class StudyKey:
    """What makes two tuning runs the same study."""

    kernel: str
    source_sha256: str
    space_id: str
    space_sha256: str
    toolchain: str
    arch: str
    evaluator: str  # "static" or a device model
    objective: str


@dataclass(frozen=True)
class Study:
    id: int
    name: str
    key: StudyKey
    created_at: datetime


@dataclass(frozen=True)
class StudySummary:
    """A study with its trial count and best value, counted by the database (`compileiq show`)."""

    study: Study
    trials: int
    best: float | None  # the lowest complete value
    decision: dict[str, Any] | None = None  # the latest run's recorded choice (`RunRecord.decision`)
    named_state: TrialState | None = None  # the trial that choice names, as its row is now (None: no row)
    named_value: float | None = None
    named: Trial | None = None  # that trial's row as a usable trial (None: none, or damaged)
    baseline: Trial | None = None  # the study's first usable row, which the choice is held against
    to_retry: int = 0  # rows the next run tries again (`Trial.to_retry`; not in `trials`)


@dataclass(frozen=True)
class Trial:
    id: int
    study_id: int
    number: int
    config_key: str
    config: dict[str, Any]
    state: TrialState
    value: float | None
    reason: str | None
    retryable: bool
    metrics: dict[str, Any]
    code_hash: str | None
    compile_seconds: float | None
    started_at: datetime
    finished_at: datetime | None
    worker: str
    purpose: str = SEARCH  # one of PURPOSES: why this run built it

    @property
    def searched(self) -> bool:
        return self.purpose == SEARCH

    @property
    def final(self) -> bool:
        """COMPLETE, or FAILED for good (not waiting to be retried): a result a budget counts."""
        return self.state is TrialState.COMPLETE or (self.state is TrialState.FAILED and not self.retryable)

    @property
    def to_retry(self) -> bool:
        """FAILED for a reason that was not the variant's (its tuner stopped or went silent): claimed again."""
        return self.state is TrialState.FAILED and self.retryable


@dataclass(frozen=True)
class TrialCounts:
    """What every view (`show`, its list, --json, the reports) counts as a study's trials: every
    row but those to retry (`Trial.to_retry`: handed back by a run that stopped or went silent, or
    a compiler timeout reopened; the next run records their outcome on the same row), which are
    named beside the count, neither trials nor failures of their own."""

    trials: int
    complete: int
    failed: int  # failed for good
    to_retry: int

    @classmethod
    def of(cls, trials: Sequence[Trial]) -> TrialCounts:
        return cls(sum(counted(t) for t in trials), sum(t.state is TrialState.COMPLETE for t in trials),
                   sum(t.state is TrialState.FAILED and counted(t) for t in trials),
                   sum(t.to_retry for t in trials))

    def text(self) -> str:
        """"8 trials (8 complete, 0 failed; 3 to retry)"."""
        retry = f"; {self.to_retry} to retry" if self.to_retry else ""
        return f"{self.trials} trials ({self.complete} complete, {self.failed} failed{retry})"


def counted(trial: Trial) -> bool:
    """A trial of the study's, as every view counts them (`TrialCounts`)."""
    return not trial.to_retry


@dataclass(frozen=True)
class TrialOutcome:
    """What `Store.finish_trials` records for one trial; `build` is cached in the same write."""

    trial_id: int
    state: TrialState
    value: float | None
    reason: str | None
    metrics: dict[str, Any]
    code_hash: str | None
    compile_seconds: float | None
    retryable: bool = False
    build: BuildRecord | None = None


@dataclass(frozen=True)
class RunRecord:
    """One tuning run of a study: its limits, which one ended it, and what it built."""

    id: int
    study_id: int
    worker: str
    limits: dict[str, Any]  # budget, time_budget_s, patience
    stopped: str | None  # "budget 40", "time budget 10m", ...; None while running (or killed)
    search_trials: int | None
    extra_trials: int | None
    started_at: datetime
    finished_at: datetime | None
    decision: dict[str, Any] | None = None  # what the run chose (`Decision`); None before schema 0007


@dataclass(frozen=True)
class BuildRecord:
    key: str
    ok: bool
    message: str
    metrics: dict[str, Any]
    code_hash: str | None
    seconds: float
    ptx_key: str | None = None  # what ptxas was given (PTX, flags, toolchain): shared by every config that gives the same


KEY_FIELDS = tuple(f.name for f in fields(StudyKey))


@dataclass(frozen=True)
class Measurement:
    """GPU timings of one machine code on one device, driver and harness setting (a cache entry)."""

    code_hash: str
    device: str
    driver: str
    harness_args_hash: str
    samples: tuple[float, ...]  # seconds, in the order taken
    median: float
    iqr: float
    min: float
    clocks: tuple[float, ...]  # SM clock (MHz) per sample; empty when not read
    status: str  # "ok", or why the variant could not be timed


@dataclass(frozen=True)
class StudyExport:
    """One study as it moves between databases: its trials, their builds and measurements."""

    name: str
    key: StudyKey
    trials: tuple[Trial, ...]
    builds: tuple[BuildRecord, ...]
    measurements: tuple[Measurement, ...]
    rejected: tuple[str, ...] = ()  # rows of a file left out: why each one
    pick: str | None = None  # several objectives: the rule the latest run chose its front's point by
    # what that run recorded of what it started from (`transfer.carried`: its kernel's path, base flags, ...)
    recorded: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ImportSummary:
    study: Study
    created: bool  # the study did not exist in this database before
    trials_added: int
    trials_kept: int  # already finished here: left as they were
    trials_skipped: int  # unfinished in the file (running, or failed to be retried): not results
    builds_added: int
    measurements_added: int
    rejected: tuple[str, ...] = ()  # rows of the file refused (malformed or outside the space)

    @property
    def changed(self) -> bool:
        return self.created or bool(self.trials_added + self.builds_added + self.measurements_added)


def first_line(text: str | None, limit: int | None = 400, empty: str = "unknown") -> str:
    """The first non-blank line of a reason or message (cut at `limit` characters), else `empty`."""
    lines = (text or "").strip().splitlines()
    return lines[0][:limit] if lines else empty


# the key a run's decision gets when its ACF was not written after it (`Store.acf_not_written`): why
ACF_NOT_WRITTEN = "acf_not_written"
# the key of the decision a run records when it stopped before it chose (its baseline failed): why;
# the rest of that record says what it started from (`shipped_origin`, `recorded_sources`)
UNCHOSEN = "unchosen"


def unchosen(decision: Any) -> str | None:
    """Why a run stopped before it chose, where its recorded decision says so (a short line), else
    None. A run row is untrusted: only a string marks it (a forged one can only make the views
    replay the study's choice from its trials, as for a run that recorded nothing)."""
    why = decision.get(UNCHOSEN) if isinstance(decision, dict) else None
    return first_line(why, 80) if isinstance(why, str) else None


def latest_decision(runs: Iterable[RunRecord]) -> RunRecord | None:
    """The one rule for which run's recorded decision is a study's (its choice, its pick rule, what it
    started from), that every view and `db export` follow: of the readable runs (a damaged row is set
    aside before: `store.rows.run_record`) whose decision is a JSON object, the one of the highest id
    (runs are numbered as they start; two that finish in the same instant are told apart by it);
    one that stopped before it chose (`unchosen`) only where no run chose, so that it never hides
    a choice."""
    return max((r for r in runs if isinstance(r.decision, dict)), key=lambda r: (unchosen(r.decision) is None, r.id),
               default=None)


def chosen_number(decision: Any) -> int | None:
    """The trial number a run's recorded decision (`runs.decision`) names as its choice, when it is
    one a trial can have; else None (a damaged or forged row: a 10**23 would overflow every query
    of it). What the study list fetches rows by and what every view reads the choice by."""
    if not isinstance(decision, dict):
        return None
    number = decision.get("chosen")
    return number if is_trial_number(number) else None


def is_trial_number(value: object) -> bool:
    """Whether a value (of an untrusted row) is a number a trial can have: an int (not a bool, not
    text) from 0 to MAX_TRIAL_NUMBER."""
    return type(value) is int and 0 <= value <= MAX_TRIAL_NUMBER
