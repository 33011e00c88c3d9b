"""The records the store hands out: frozen, typed, free of any database library."""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any


class TrialState(str, enum.Enum):
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"


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


@dataclass(frozen=True)
class BuildRecord:
    key: str
    ok: bool
    message: str
    metrics: dict[str, Any]
    code_hash: str | None
    seconds: float


KEY_FIELDS = tuple(f.name for f in fields(StudyKey))
