"""The database: studies, trial claims and heartbeats, the build cache (SQLite or PostgreSQL).

The database is the coordinator: a config is claimed by INSERT under UNIQUE(study, key), time
comes from the database clock, and the schema is managed by the Alembic migrations shipped in
``compileiq/migrations``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler

from compileiq.errors import CompileIQError
from compileiq.records import (
    KEY_FIELDS,
    BuildRecord,
    ImportSummary,
    Measurement,
    Study,
    StudyExport,
    StudyKey,
    Trial,
    TrialState,
)

__all__ = ["KEY_FIELDS", "BuildRecord", "ImportSummary", "Measurement", "Store", "StoreError"]
__all__ += ["Study", "StudyExport", "StudyKey", "Trial", "TrialState"]

MIGRATIONS = Path(__file__).with_name("migrations")
_PG_SCHEMA_LOCK = 0x636F6D70  # advisory lock id serialising concurrent upgrades


class StoreError(CompileIQError):
    """The database cannot be reached, is too new, or holds something that contradicts a request."""


_KEY_WORDS = {"source_sha256": "kernel source", "space_id": "search space"}
_KEY_WORDS.update(space_sha256="version of the search space", arch="architecture")

# Query-side views of the tables that migrations/versions/* create (never create_all).
_meta = sa.MetaData()
_TS = sa.DateTime(timezone=True)
_TYPES: dict[str, Any] = {"int": sa.Integer, "str": sa.String, "text": sa.Text, "float": sa.Float}
_TYPES.update(bool=sa.Boolean, json=sa.JSON, time=_TS)


def _table(name: str, **columns: str) -> sa.Table:
    """``_table("t", int="a b", json="c")``: columns a and b are integers, c is JSON."""
    typed = ((column, _TYPES[kind]) for kind, names in columns.items() for column in names.split())
    return sa.Table(name, _meta, *(sa.Column(column, kind) for column, kind in typed))


studies = _table(
    "studies", int="id next_number", str=" ".join(("name", *KEY_FIELDS)), time="created_at"
)
trials_table = _table(
    "trials",
    int="id study_id number",
    str="config_key state worker code_hash",
    text="reason",
    float="value compile_seconds",
    bool="retryable",
    json="config metrics",
    time="started_at heartbeat_at finished_at",
)
builds = _table(
    "builds", str="key code_hash", text="message", bool="ok", json="metrics", float="seconds"
)
measurements = _table(
    "measurements",
    int="id",
    str="code_hash device driver harness_args_hash status",
    json="samples clocks",
    float="median iqr min",
)
_MEASUREMENT_KEY = ("code_hash", "device", "driver", "harness_args_hash")


class db_now(sa.sql.functions.FunctionElement[datetime]):
    """The database clock (millisecond precision on SQLite, where CURRENT_TIMESTAMP has seconds)."""

    type = _TS
    inherit_cache = True


@compiles(db_now)
def _db_now_default(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "CURRENT_TIMESTAMP"


@compiles(db_now, "sqlite")
def _db_now_sqlite(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "strftime('%Y-%m-%d %H:%M:%f', 'now')"


def default_study_name(key: StudyKey) -> str:
    """``<kernel>-<objective>-<8 hex digits of the key's hash>``."""
    digest = hashlib.sha256(json.dumps(asdict(key), sort_keys=True).encode()).hexdigest()
    return f"{key.kernel}-{key.objective}-{digest[:8]}"


class Store:
    """A study/trial/build database. Open with :meth:`Store.open`; every call is one transaction."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @classmethod
    def open(cls, url: str) -> Store:
        """Connect to ``url`` and bring its schema up to date (a new database is created)."""
        store = cls(_make_engine(_parse_url(url)))
        try:
            store.upgrade()
        except BaseException:
            store.close()
            raise
        return store

    def close(self) -> None:
        self._engine.dispose()

    @property
    def url_for_display(self) -> str:
        return self._engine.url.render_as_string(hide_password=True)

    def upgrade(self) -> str:
        """Apply pending migrations; return the schema revision now in the database."""
        script = ScriptDirectory(str(MIGRATIONS))
        with self._tx() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_SCHEMA_LOCK)))
            current = MigrationContext.configure(conn).get_current_revision()
            if current is not None and not _known_revision(script, current):
                raise StoreError(
                    f"database schema {current} is newer than this compileiq knows; "
                    "upgrade compileiq"
                )
            config = AlembicConfig()
            config.set_main_option("script_location", str(MIGRATIONS))
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
            return MigrationContext.configure(conn).get_current_revision() or ""

    # -- studies -------------------------------------------------------------------------

    def get_or_create_study(self, key: StudyKey, name: str | None = None) -> Study:
        """The study named ``name`` (default: derived from ``key``), created if missing."""
        name = name or default_study_name(key)
        study = self._study_where(studies.c.name == name)
        if study is None:
            try:
                with self._tx() as conn:
                    conn.execute(studies.insert().values(name=name, next_number=0, **asdict(key)))
            except sa.exc.IntegrityError:
                pass  # created by a concurrent process: read theirs
            study = self._study_where(studies.c.name == name)
        if study is None:
            raise StoreError(f"study '{name}' could not be created")
        _check_same_key(study, key)
        return study

    def find_study(self, name_or_id: str) -> Study:
        study = self._study_where(studies.c.name == name_or_id)
        if study is None and name_or_id.isdigit():
            study = self._study_where(studies.c.id == int(name_or_id))
        if study is None:
            raise StoreError(f"no study named '{name_or_id}' in {self.url_for_display}")
        return study

    def list_studies(self) -> list[Study]:
        with self._tx(readonly=True) as conn:
            rows = conn.execute(sa.select(studies).order_by(studies.c.id)).mappings().all()
        return [_study(row) for row in rows]

    def _study_where(self, condition: sa.ColumnElement[bool]) -> Study | None:
        with self._tx(readonly=True) as conn:
            row = conn.execute(sa.select(studies).where(condition)).mappings().one_or_none()
        return None if row is None else _study(row)

    # -- trials --------------------------------------------------------------------------

    def claim_trial(
        self, study_id: int, config_key: str, config: dict[str, Any], worker: str
    ) -> Trial | None:
        """Claim ``config_key`` for ``worker``; None if another claim holds it or it is done.

        A FAILED trial marked retryable is claimed again (same id and number).
        """
        try:
            with self._tx() as conn:
                number = self._take_number(conn, study_id)
                insert = trials_table.insert().values(
                    study_id=study_id,
                    number=number,
                    config_key=config_key,
                    **_running(config, worker),
                )
                return _trial(conn.execute(insert.returning(trials_table)).mappings().one())
        except sa.exc.IntegrityError:
            return self._reclaim(study_id, config_key, config, worker)

    def _take_number(self, conn: Connection, study_id: int) -> int:
        bump = (
            studies.update()
            .where(studies.c.id == study_id)
            .values(next_number=studies.c.next_number + 1)
            .returning(studies.c.next_number)
        )
        taken = conn.execute(bump).scalar_one_or_none()
        if taken is None:
            raise StoreError(f"no study with id {study_id}")
        return int(taken) - 1

    def _reclaim(
        self, study_id: int, config_key: str, config: dict[str, Any], worker: str
    ) -> Trial | None:
        t = trials_table.c
        update = (
            trials_table.update()
            .where(t.study_id == study_id, t.config_key == config_key)
            .where(t.state == TrialState.FAILED.value, t.retryable.is_(True))
            .values(_running(config, worker))
        )
        return self._update_one(update)

    def heartbeat(self, trial_ids: Sequence[int]) -> None:
        """Mark RUNNING trials as alive, by the database clock."""
        if not trial_ids:
            return
        t = trials_table.c
        with self._tx() as conn:
            conn.execute(
                trials_table.update()
                .where(t.id.in_(list(trial_ids)), t.state == TrialState.RUNNING.value)
                .values(heartbeat_at=db_now())
            )

    def finish_trial(
        self,
        trial_id: int,
        *,
        state: TrialState,
        value: float | None,
        reason: str | None,
        metrics: dict[str, Any],
        code_hash: str | None,
        compile_seconds: float | None,
        retryable: bool = False,
    ) -> Trial:
        """Record the outcome of a trial (COMPLETE or FAILED)."""
        if state is TrialState.RUNNING:
            raise StoreError("finish_trial needs a final state, not running")
        update = (
            trials_table.update()
            .where(trials_table.c.id == trial_id)
            .values(
                state=state.value,
                value=value,
                reason=reason,
                metrics=metrics,
                code_hash=code_hash,
                compile_seconds=compile_seconds,
                retryable=retryable,
                finished_at=db_now(),
            )
        )
        trial = self._update_one(update)
        if trial is None:
            raise StoreError(f"no trial with id {trial_id}")
        return trial

    def _update_one(self, update: sa.Update) -> Trial | None:
        with self._tx() as conn:
            row = conn.execute(update.returning(trials_table)).mappings().one_or_none()
        return None if row is None else _trial(row)

    def fail_stale_trials(self, study_id: int, older_than_s: float) -> int:
        """Fail RUNNING trials without a heartbeat for ``older_than_s`` (0: all of them)."""
        t = trials_table.c
        stale = [t.study_id == study_id, t.state == TrialState.RUNNING.value]
        with self._tx() as conn:
            if older_than_s > 0:
                now = _utc(conn.execute(sa.select(db_now())).scalar_one())
                stale.append(t.heartbeat_at < now - timedelta(seconds=older_than_s))
            result = conn.execute(
                trials_table.update()
                .where(*stale)
                .values(
                    state=TrialState.FAILED.value,
                    retryable=True,
                    finished_at=db_now(),
                    reason=f"abandoned: no heartbeat for {older_than_s:g}s",
                )
            )
        return int(result.rowcount)

    def trials(self, study_id: int, states: Collection[TrialState] | None = None) -> list[Trial]:
        """The study's trials ordered by number, optionally only those in ``states``."""
        query = sa.select(trials_table).where(trials_table.c.study_id == study_id)
        if states is not None:
            query = query.where(trials_table.c.state.in_([s.value for s in states]))
        with self._tx(readonly=True) as conn:
            rows = conn.execute(query.order_by(trials_table.c.number)).mappings().all()
        return [_trial(row) for row in rows]

    def related_trials(self, key: StudyKey, exclude_study_id: int | None = None) -> list[Trial]:
        """Finished trials of the studies that share ``key``'s kernel source, toolchain, arch and
        search space (any objective), except study ``exclude_study_id``: a warm start's evidence."""
        s, t = studies.c, trials_table.c
        query = (
            sa.select(trials_table)
            .join(studies, s.id == t.study_id)
            .where(s.source_sha256 == key.source_sha256, s.toolchain == key.toolchain)
            .where(s.arch == key.arch, s.space_id == key.space_id)
            .where(sa.or_(t.state == TrialState.COMPLETE.value, _final_failure(t)))
        )
        if exclude_study_id is not None:
            query = query.where(s.id != exclude_study_id)
        with self._tx(readonly=True) as conn:
            rows = conn.execute(query.order_by(t.study_id, t.number)).mappings().all()
        return [_trial(row) for row in rows]

    # -- build cache ---------------------------------------------------------------------

    def get_build(self, key: str) -> BuildRecord | None:
        query = sa.select(*(builds.c[f.name] for f in fields(BuildRecord)))
        with self._tx(readonly=True) as conn:
            row = conn.execute(query.where(builds.c.key == key)).mappings().one_or_none()
        return None if row is None else _build(row)

    def put_build(self, record: BuildRecord) -> None:
        """Cache a build; an existing record under the same key is kept."""
        try:
            with self._tx() as conn:
                conn.execute(builds.insert().values(**asdict(record)))
        except sa.exc.IntegrityError:
            pass

    def builds_count(self) -> int:
        with self._tx(readonly=True) as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(builds)).scalar_one())

    # -- measurement cache ---------------------------------------------------------------

    def get_measurement(
        self, code_hash: str, device: str, driver: str, harness_args_hash: str
    ) -> Measurement | None:
        m = measurements.c
        where = (m.code_hash == code_hash, m.device == device, m.driver == driver)
        query = sa.select(measurements).where(*where, m.harness_args_hash == harness_args_hash)
        with self._tx(readonly=True) as conn:
            row = conn.execute(query).mappings().one_or_none()
        return None if row is None else _measurement(row)

    def put_measurement(self, measurement: Measurement) -> None:
        """Cache a measurement; an existing one under the same key is kept."""
        try:
            with self._tx() as conn:
                conn.execute(measurements.insert().values(_measurement_values(measurement)))
        except sa.exc.IntegrityError:
            pass

    # -- export and import ---------------------------------------------------------------

    def export_study(self, name_or_id: str) -> StudyExport:
        """A study with all its trials, the builds and measurements of their machine code."""
        study = self.find_study(name_or_id)
        t = trials_table.c
        with self._tx(readonly=True) as conn:
            query = sa.select(trials_table).where(t.study_id == study.id).order_by(t.number)
            trials = tuple(_trial(row) for row in conn.execute(query).mappings())
            hashes = sorted({trial.code_hash for trial in trials if trial.code_hash})
            build_query = sa.select(*(builds.c[f.name] for f in fields(BuildRecord)))
            build_query = build_query.where(builds.c.code_hash.in_(hashes)).order_by(builds.c.key)
            found = tuple(_build(row) for row in conn.execute(build_query).mappings())
            m = measurements.c
            query = sa.select(measurements).where(m.code_hash.in_(hashes)).order_by(m.id)
            timed = tuple(_measurement(row) for row in conn.execute(query).mappings())
        return StudyExport(study.name, study.key, trials, found, timed)

    def import_study(self, export: StudyExport) -> ImportSummary:
        """Merge an exported study in ONE transaction: on any error nothing changes.

        The study is matched by name (its key must be the same); trials by config key: a
        finished or running trial here is kept, one failed-to-be-retried is replaced, a missing
        one is added with the next free number. Builds and measurements are added when missing.
        Importing the same export twice changes nothing.
        """
        try:
            with self._tx() as conn:
                study, created = self._import_target(conn, export)
                added, kept, skipped = self._import_trials(conn, study.id, export.trials)
                builds_added = _insert_builds(conn, export.builds)
                timed = _insert_measurements(conn, export.measurements)
        except sa.exc.IntegrityError:
            raise StoreError(
                f"import of study '{export.name}' collided with a concurrent change; "
                "nothing was imported: run it again"
            ) from None
        return ImportSummary(study, created, added, kept, skipped, builds_added, timed)

    def _import_target(self, conn: Connection, export: StudyExport) -> tuple[Study, bool]:
        query = sa.select(studies).where(studies.c.name == export.name).with_for_update()
        row = conn.execute(query).mappings().one_or_none()
        created = row is None
        if row is None:
            values = dict(name=export.name, next_number=0, **asdict(export.key))
            conn.execute(studies.insert().values(values))
            row = conn.execute(query).mappings().one()
        study = _study(row)
        _check_same_key(study, export.key)
        return study, created

    def _import_trials(
        self, conn: Connection, study_id: int, imported: Sequence[Trial]
    ) -> tuple[int, int, int]:
        t = trials_table.c
        query = sa.select(t.id, t.config_key, t.state, t.retryable).where(t.study_id == study_id)
        here = {row.config_key: row for row in conn.execute(query)}
        added = kept = skipped = 0
        for trial in imported:
            mine = here.get(trial.config_key)
            if not _final(trial.state, trial.retryable):
                skipped += 1
            elif mine is not None and not (mine.state == TrialState.FAILED.value and mine.retryable):
                kept += 1
            else:
                values = _imported_values(trial)
                if mine is None:
                    number = self._take_number(conn, study_id)
                    conn.execute(trials_table.insert().values(study_id=study_id, number=number, **values))
                else:
                    conn.execute(trials_table.update().where(t.id == mine.id).values(values))
                added += 1
        return added, kept, skipped

    # -- plumbing ------------------------------------------------------------------------

    @contextmanager
    def _tx(self, readonly: bool = False) -> Iterator[Connection]:
        """One transaction; connection-level failures become a one-line StoreError."""
        try:
            with self._engine.connect() as conn:
                conn.execution_options(compileiq_readonly=readonly)
                with conn.begin():
                    yield conn
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
            raise StoreError(
                f"database {self.url_for_display}: {_one_line(exc, self._engine.url)}"
            ) from None


def _parse_url(url: str) -> URL:
    try:
        return sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        raise StoreError(f"not a database URL: {_redact(url)}") from None


def _make_engine(url: URL) -> Engine:
    backend = url.get_backend_name()
    try:
        if backend == "sqlite":
            return _sqlite_engine(url)
        args = {"connect_timeout": 10} if backend == "postgresql" else {}
        return sa.create_engine(url, connect_args=args, pool_pre_ping=True)
    except ImportError:
        raise StoreError(
            f"no database driver for {url.drivername}; for PostgreSQL: "
            "pip install 'compileiq-tuner[postgres]'"
        ) from None
    except sa.exc.ArgumentError as exc:
        raise StoreError(f"unsupported database URL {_display(url)}: {exc}") from None


def _sqlite_engine(url: URL) -> Engine:
    database = url.database or ""
    if database and database != ":memory:" and not database.startswith("file:"):
        folder = Path(database).expanduser().parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"database {_display(url)}: cannot create {folder}: {exc.strerror or exc}"
            ) from None
    engine = sa.create_engine(url, connect_args={"timeout": 30})

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (below)
        for pragma in ("journal_mode=WAL", "busy_timeout=30000", "foreign_keys=ON"):
            dbapi_conn.execute(f"PRAGMA {pragma}")

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        readonly = conn.get_execution_options().get("compileiq_readonly", False)
        conn.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")

    return engine


def _known_revision(script: ScriptDirectory, revision: str) -> bool:
    try:
        return script.get_revision(revision) is not None
    except (CommandError, RevisionError):
        return False


def _check_same_key(study: Study, key: StudyKey) -> None:
    for name in KEY_FIELDS:
        theirs, ours = getattr(study.key, name), getattr(key, name)
        if theirs != ours:
            raise StoreError(
                f"study '{study.name}' was made for another {_KEY_WORDS.get(name, name)} "
                f"({name} {theirs[:16]} != {ours[:16]}); choose another study name"
            )


def _study(row: sa.RowMapping) -> Study:
    key = StudyKey(**{name: row[name] for name in KEY_FIELDS})
    return Study(id=row["id"], name=row["name"], key=key, created_at=_utc(row["created_at"]))


def _running(config: dict[str, Any], worker: str) -> dict[str, Any]:
    """Column values of a freshly claimed trial."""
    values = dict.fromkeys(("value", "reason", "code_hash", "compile_seconds", "finished_at"))
    values.update(config=config, worker=worker, state=TrialState.RUNNING.value, retryable=False)
    return {**values, "metrics": {}, "started_at": db_now(), "heartbeat_at": db_now()}


def _final(state: TrialState | str, retryable: bool) -> bool:
    """COMPLETE, or FAILED for good (not waiting to be retried)."""
    state = TrialState(state)
    return state is TrialState.COMPLETE or (state is TrialState.FAILED and not retryable)


def _final_failure(t: Any) -> sa.ColumnElement[bool]:
    return sa.and_(t.state == TrialState.FAILED.value, t.retryable.is_(False))


def _imported_values(trial: Trial) -> dict[str, Any]:
    values = {f.name: getattr(trial, f.name) for f in fields(Trial)}
    for name in ("id", "study_id", "number"):
        del values[name]
    values.update(state=trial.state.value, heartbeat_at=trial.finished_at or trial.started_at)
    return values


def _build(row: sa.RowMapping) -> BuildRecord:
    return BuildRecord(**{**row, "ok": bool(row["ok"]), "seconds": float(row["seconds"])})


def _insert_builds(conn: Connection, records: Sequence[BuildRecord]) -> int:
    keys = [record.key for record in records]
    query = sa.select(builds.c.key).where(builds.c.key.in_(keys))
    present = set(conn.execute(query).scalars())
    fresh = {r.key: asdict(r) for r in records if r.key not in present}
    if fresh:
        conn.execute(builds.insert(), list(fresh.values()))
    return len(fresh)


def _insert_measurements(conn: Connection, records: Sequence[Measurement]) -> int:
    added = 0
    for record in records:
        m = measurements.c
        where = [m[name] == getattr(record, name) for name in _MEASUREMENT_KEY]
        if conn.execute(sa.select(m.id).where(*where)).first() is None:
            conn.execute(measurements.insert().values(_measurement_values(record)))
            added += 1
    return added


def _measurement_values(measurement: Measurement) -> dict[str, Any]:
    values = asdict(measurement)
    values.update(samples=list(measurement.samples), clocks=list(measurement.clocks))
    return values


def _measurement(row: sa.RowMapping) -> Measurement:
    values = {f.name: row[f.name] for f in fields(Measurement)}
    values.update(samples=tuple(float(v) for v in row["samples"] or ()))
    values.update(clocks=tuple(float(v) for v in row["clocks"] or ()))
    for name in ("median", "iqr", "min"):
        values[name] = float("nan") if row[name] is None else float(row[name])
    return Measurement(**values)


def _trial(row: sa.RowMapping) -> Trial:
    values = {f.name: row[f.name] for f in fields(Trial)}
    values.update(state=TrialState(row["state"]), retryable=bool(row["retryable"]))
    values.update(value=_float(row["value"]), compile_seconds=_float(row["compile_seconds"]))
    values.update(config=dict(row["config"]), metrics=dict(row["metrics"] or {}))
    finished = row["finished_at"]
    values.update(started_at=_utc(row["started_at"]), finished_at=finished and _utc(finished))
    return Trial(**values)


def _utc(value: datetime) -> datetime:
    """Naive values (SQLite) are UTC already; aware ones are converted."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)  # SQLite RETURNING may hand back an int


def _display(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def _redact(text: str) -> str:
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", text)


def _one_line(exc: sa.exc.DBAPIError, url: URL) -> str:
    text = " ".join(str(exc.orig or exc).split())
    if url.password:
        text = text.replace(str(url.password), "***")
    return _redact(text)[:400]
