"""Export and import of a study: its trials with the builds and measurements of their machine
code, read or merged inside one transaction that the caller holds."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, fields
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from compileiq.core.metric_ranges import MAX_PICK_RULE
from compileiq.core.records import (
    BuildRecord,
    Measurement,
    Study,
    StudyExport,
    Trial,
    TrialState,
    latest_decision,
    unchosen,
)
from compileiq.store.rows import (
    check_same_key,
    checked_build,
    checked_measurement,
    measurement_values,
    study_record,
)
from compileiq.store.run_log import Skip, readable_runs
from compileiq.store.schema import (
    MEASUREMENT_KEY,
    among,
    builds,
    chunks,
    db_now,
    measurements,
    runs,
    studies,
    take_number,
    trials_table,
)

T = TypeVar("T")

# what an export carries of the latest deciding run's decision (`carried`): its pick rule
# (`recorded_decision.recorded_pick`), --no-simplify and tune.toml's forbidden settings (`recorded_simplify`,
# `recorded_forbidden`), its shipped build's compilation database (`shipped_origin.KEY`), its sources' hashes,
# base flags and kernel path (`recorded_sources`), that its launch was assumed (`launch_note.KEY`: the note every
# view of the imported study says)
CARRIED = ("pick", "simplify", "forbidden", "baseline", "source_bundle_sha256", "source_files_sha256", "base_flags",
           "kernel_path", "launch_assumed")
MAX_CARRIED_TEXT = 4096
MAX_CARRIED_ITEMS = 4096


def export_rows(
    conn: Connection, study: Study, usable: Callable[[Iterable[sa.RowMapping]], list[Trial]], skip: Skip
) -> StudyExport:
    """``study`` with all its ``usable`` trials, the builds and measurements of their machine code,
    and what its latest deciding run recorded of what it started from (`carried`)."""
    t = trials_table.c
    query = sa.select(trials_table, studies.c.space_sha256).join(studies, studies.c.id == t.study_id)
    trials = tuple(usable(conn.execute(query.where(t.study_id == study.id).order_by(t.number)).mappings()))
    hashes = sorted({trial.code_hash for trial in trials if trial.code_hash})
    build_query = sa.select(*(builds.c[f.name] for f in fields(BuildRecord)))
    found = _checked(conn, build_query, builds.c.code_hash, hashes, checked_build, BuildRecord)
    query = sa.select(measurements).order_by(measurements.c.id)
    timed = _checked(conn, query, measurements.c.code_hash, hashes, checked_measurement, Measurement)
    latest = latest_decision(readable_runs(conn, runs.c.study_id == study.id, skip))  # as every view reads it
    decision = latest.decision if latest is not None and latest.decision is not None else {}
    rule = decision.get("pick") if unchosen(decision) is None else None  # a run that stopped before it chose: none
    return StudyExport(study.name, study.key, trials, tuple(sorted(found, key=lambda b: b.key)), tuple(timed),
                       pick=rule if isinstance(rule, str) and len(rule) <= MAX_PICK_RULE else None,
                       recorded=carried(decision))


def carried(decision: Any) -> dict[str, Any]:
    """What an export carries of a run's recorded decision (`CARRIED`), each value a bounded JSON
    string, boolean or list of strings (a file is untrusted: the views check each one again as they
    check any run row's, `recorded_sources.path_problem` a kernel path); never its choice, its
    digests or what it verified, which only a run of the database that holds the rows may vouch for."""
    if not isinstance(decision, dict):
        return {}
    return {key: value for key in CARRIED if _bounded(value := decision.get(key))}


def _bounded(value: Any) -> bool:
    if isinstance(value, list):
        return len(value) <= MAX_CARRIED_ITEMS and all(isinstance(v, str) and len(v) <= MAX_CARRIED_TEXT for v in value)
    return isinstance(value, bool) or (isinstance(value, str) and len(value) <= MAX_CARRIED_TEXT)


def insert_decision(conn: Connection, study_id: int, rule: str | None, recorded: dict[str, Any], origin: str) -> None:
    """A run row that records what an imported study's latest deciding run started from (`carried`:
    its kernel's path, base flags, sources' hashes, shipped build, --no-simplify, what tune.toml
    forbade) and the pick rule its ACF was chosen by, so that the views show, report and compare it
    as its source database does. It names no choice (no trial number is taken from the file): the
    views replay the choice by that rule and say that it came from an imported export, not from a
    run of this database: the file's checksum catches damage, not a deliberate edit (`exchange`)."""
    decision = carried(recorded) | ({"pick": rule} if rule is not None else {})
    conn.execute(runs.insert().values(study_id=study_id, worker="import", limits={}, started_at=db_now(),
                                      finished_at=db_now(), stopped=f"imported from {origin}"[:200],
                                      search_trials=0, extra_trials=0, decision=decision))


def _checked(conn: Connection, query: sa.Select[Any], column: sa.ColumnElement[Any], keys: Sequence[str],
             check: Callable[[sa.RowMapping], Any], kind: type[T]) -> list[T]:
    """The rows of ``query`` whose ``column`` is among ``keys`` and that pass ``check``, in
    statements of a bounded number of parameters (PostgreSQL takes at most 65,535 per statement)."""
    rows = (row for chunk in chunks(keys, 10_000)
            for row in conn.execute(query.where(among(conn, column, chunk))).mappings())
    return [record for row in rows if isinstance(record := check(row), kind)]


def import_target(conn: Connection, export: StudyExport) -> tuple[Study, bool]:
    """The study to import into (locked), created if missing; and whether it was created."""
    query = sa.select(studies).where(studies.c.name == export.name).with_for_update()
    row = conn.execute(query).mappings().one_or_none()
    created = row is None
    if row is None:
        values = dict(name=export.name, next_number=0, **asdict(export.key))
        conn.execute(studies.insert().values(values))
        row = conn.execute(query).mappings().one()
    study = study_record(row)
    check_same_key(study, export.key)
    return study, created


def import_trials(
    conn: Connection, study_id: int, imported: Sequence[Trial]
) -> tuple[int, int, int]:
    """Merge ``imported`` by config key; return how many were added, kept and skipped."""
    t = trials_table.c
    query = sa.select(t.id, t.config_key, t.state, t.retryable).where(t.study_id == study_id)
    here = {row.config_key: row for row in conn.execute(query)}
    added = kept = skipped = 0
    for trial in imported:
        mine = here.get(trial.config_key)
        if not trial.final:
            skipped += 1
        elif mine is not None and not (mine.state == TrialState.FAILED.value and mine.retryable):
            kept += 1
        else:
            values = _imported_values(trial)
            if mine is None:
                number = take_number(conn, study_id)
                conn.execute(
                    trials_table.insert().values(study_id=study_id, number=number, **values)
                )
            else:
                conn.execute(trials_table.update().where(t.id == mine.id).values(values))
            added += 1
    return added, kept, skipped


def insert_builds(conn: Connection, records: Sequence[BuildRecord]) -> int:
    """Add the builds not cached yet; return how many."""
    keys = [record.key for record in records]
    query = sa.select(builds.c.key)
    present: set[str] = set()
    for chunk in chunks(keys, 10_000):
        present.update(conn.execute(query.where(among(conn, builds.c.key, chunk))).scalars())
    fresh = {r.key: asdict(r) for r in records if r.key not in present}
    if fresh:
        conn.execute(builds.insert(), list(fresh.values()))
    return len(fresh)


def insert_measurements(conn: Connection, records: Sequence[Measurement]) -> int:
    """Add the measurements not cached yet; return how many."""
    added = 0
    for record in records:
        m = measurements.c
        where = [m[name] == getattr(record, name) for name in MEASUREMENT_KEY]
        if conn.execute(sa.select(m.id).where(*where)).first() is None:
            conn.execute(measurements.insert().values(measurement_values(record)))
            added += 1
    return added


def _imported_values(trial: Trial) -> dict[str, Any]:
    values = {f.name: getattr(trial, f.name) for f in fields(Trial)}
    for name in ("id", "study_id", "number"):
        del values[name]
    values.update(state=trial.state.value, heartbeat_at=trial.finished_at or trial.started_at)
    return values
