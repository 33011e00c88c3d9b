"""Rows to records and records to column values, and the check that a stored study matches
the key a request asks for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, fields
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from compileiq.core.records import (
    KEY_FIELDS,
    SEARCH,
    BuildRecord,
    Measurement,
    RunRecord,
    Study,
    StudyKey,
    Trial,
    TrialState,
)
from compileiq.core.space import SearchSpace
from compileiq.core.text import printable
from compileiq.store.connect import InconsistentStudyError, StoreError
from compileiq.store.schema import db_now
from compileiq.store.trust import (
    build_problem,
    kind_problem,
    measurement_problem,
    static_value_problem,
    trial_problem,
)

_KEY_WORDS = {"source_sha256": "kernel source or tune.toml settings", "space_id": "search space"}
_KEY_WORDS.update(space_sha256="version of the search space", arch="architecture")


def check_same_key(study: Study, key: StudyKey) -> None:
    """Refuse a study made for another kernel source, toolchain, arch, space or objective."""
    for name in KEY_FIELDS:
        theirs, ours = getattr(study.key, name), getattr(key, name)
        if theirs != ours:
            raise StoreError(
                f"study '{study.name}' was made for another {_KEY_WORDS.get(name, name)} "
                f"({name} {theirs[:16]} != {ours[:16]}); choose another study name"
            )


def study_record(row: sa.RowMapping) -> Study:
    """The row as a study; StoreError (one line) if it is damaged."""
    texts = [row[name] for name in ("name", *KEY_FIELDS)]
    try:
        if not all(isinstance(text, str) for text in texts):
            raise TypeError("its name or key is not text")
        key = StudyKey(**{name: row[name] for name in KEY_FIELDS})
        return Study(id=row["id"], name=row["name"], key=key, created_at=utc(row["created_at"]))
    except TypeError as error:
        raise StoreError(f"study {row['id']} in the database is damaged: {error}") from None


def trial_record(row: sa.RowMapping) -> Trial:
    values = {f.name: row[f.name] for f in fields(Trial)}
    values.update(state=TrialState(row["state"]), retryable=bool(row["retryable"]))
    values.update(value=_float(row["value"]), compile_seconds=_float(row["compile_seconds"]))
    values.update(config=_object(row["config"], "config"), metrics=_reported(_object(row["metrics"] or {}, "metrics")))
    finished = row["finished_at"]
    values.update(started_at=utc(row["started_at"]), finished_at=finished and utc(finished))
    return Trial(**values)


def checked_trial(row: sa.RowMapping, space: SearchSpace | None) -> Trial | str:
    """The row as a trial, or why it cannot be used (damaged, or its config is not in ``space``)."""
    try:
        trial = trial_record(row)
    except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as error:
        return f"unreadable: {error}"
    return trial_problem(trial, space) or trial


def of_its_kind(study: Study, trials: list[Trial], skip: Callable[[tuple[str, Any], str, str], None]) -> list[Trial]:
    """The trials whose result is of the kind the study's row says (`trust.kind_problem`, as `db
    import` holds them: shared rows are untrusted), each other one skipped with its reason. When no
    complete trial is (a static study relabelled "time", or a timed one relabelled static), the row
    is what is wrong: InconsistentStudyError (one line), so no view renders its values under that label."""
    wrong = {trial.id: problem for trial in trials if (problem := kind_problem(trial, study.key))}
    complete = [trial for trial in trials if trial.state is TrialState.COMPLETE]
    if wrong and len(wrong) == len(complete):
        key = study.key
        raise InconsistentStudyError(
            f"study {study.id} '{printable(study.name)}' is inconsistent: its row says evaluator "
            f"'{printable(key.evaluator)[:40]}', objective '{printable(key.objective)[:80]}', but none of its "
            f"{len(complete)} complete trials is such a result ({next(iter(wrong.values()))}); edited in the "
            "database? Nothing was changed: set the row's evaluator and objective back to what its trials are")
    # a value its own metrics do not give (a forged -5 on a row that spills): set aside like a row of another kind
    wrong |= {trial.id: problem for trial in trials if trial.id not in wrong
              and (problem := static_value_problem(trial, study.key, lenient=True))}
    for trial in trials:
        if trial.id in wrong:
            skip(("trial", trial.id), f"trial #{trial.number} of study {study.id}", wrong[trial.id])
    return [trial for trial in trials if trial.id not in wrong]


def checked_build(row: sa.RowMapping) -> BuildRecord | str:
    try:
        build = build_record(row)
    except (ValueError, TypeError, AttributeError, OverflowError) as error:  # float(10**400): OverflowError
        return f"unreadable: {error}"
    return build_problem(build) or build


def checked_measurement(row: sa.RowMapping) -> Measurement | str:
    try:
        measurement = measurement_record(row)
    except (ValueError, TypeError, AttributeError, OverflowError) as error:  # float(10**400): OverflowError
        return f"unreadable: {error}"
    return measurement_problem(measurement) or measurement


def run_record(row: sa.RowMapping) -> RunRecord:
    values = {f.name: row[f.name] for f in fields(RunRecord)}
    finished = row["finished_at"]
    values.update(started_at=utc(row["started_at"]), finished_at=finished and utc(finished))
    return RunRecord(**values)


def build_record(row: sa.RowMapping) -> BuildRecord:
    return BuildRecord(**{**row, "ok": bool(row["ok"]), "seconds": float(row["seconds"])})


def measurement_record(row: sa.RowMapping) -> Measurement:
    values = {f.name: row[f.name] for f in fields(Measurement)}
    values.update(samples=tuple(float(v) for v in row["samples"] or ()))
    values.update(clocks=tuple(float(v) for v in row["clocks"] or ()))
    for name in ("median", "iqr", "min"):
        values[name] = float("nan") if row[name] is None else float(row[name])
    return Measurement(**values)


def running_values(config: dict[str, Any], worker: str, purpose: str = SEARCH) -> dict[str, Any]:
    """Column values of a freshly claimed trial."""
    values = dict.fromkeys(("value", "reason", "code_hash", "compile_seconds", "finished_at"))
    values.update(config=config, worker=worker, state=TrialState.RUNNING.value, retryable=False, purpose=purpose)
    return {**values, "metrics": {}, "started_at": db_now(), "heartbeat_at": db_now()}


def measurement_values(measurement: Measurement) -> dict[str, Any]:
    values = asdict(measurement)
    values.update(samples=list(measurement.samples), clocks=list(measurement.clocks))
    return values


def utc(value: datetime) -> datetime:
    """Naive values (SQLite) are UTC already; aware ones are converted."""
    if not isinstance(value, datetime):
        raise TypeError(f"{value!r} is not a time")
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


UNREPORTED = ("median_ms", "iqr_ms", "min_ms")  # a program reports none of them: its one time is the value


def _reported(metrics: dict[str, Any]) -> dict[str, Any]:
    """The metrics less the timing keys an earlier compileiq recorded as None for a program-mode run
    (the harness's fields, which a program never prints): read as not reported, not as damage, so
    such a study's trials are not skipped."""
    if not any(metrics.get(key, 0) is None for key in UNREPORTED):
        return metrics
    return {key: value for key, value in metrics.items() if not (value is None and key in UNREPORTED)}


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"its {what} is not a JSON object")
    return value


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)  # SQLite RETURNING may hand back an int
