"""Query-side views of the tables that ``migrations/versions/*`` create (never create_all),
the database clock, and the few SQL building blocks the store and its transfers share."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler

from compileiq.core.records import KEY_FIELDS, MAX_TRIAL_NUMBER, TrialState
from compileiq.store.connect import StoreError
from compileiq.store.trust import MALFORMED

_meta = sa.MetaData()
_TS = sa.DateTime(timezone=True)


class _ReadableTime(sa.TypeDecorator[Any]):
    """A timestamp that reads as MALFORMED when damaged (SQLite stores any text), never raises."""

    impl = sa.DateTime
    cache_ok = True

    def result_processor(self, dialect: sa.Dialect, coltype: Any) -> Any:
        inner = self.impl_instance.result_processor(dialect, coltype)
        if inner is None:
            return None

        def process(value: Any) -> Any:
            try:
                return inner(value)
            except (ValueError, TypeError):
                return MALFORMED

        return process


_TYPES: dict[str, Any] = {"int": sa.Integer, "str": sa.String, "text": sa.Text, "float": sa.Float}
_TYPES.update(bool=sa.Boolean, json=sa.JSON, time=_ReadableTime(timezone=True))


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
    str="config_key state worker code_hash purpose",
    text="reason",
    float="value compile_seconds",
    bool="retryable",
    json="config metrics",
    time="started_at heartbeat_at finished_at",
)
runs = _table(
    "runs", int="id study_id search_trials extra_trials", str="worker stopped", json="limits decision",
    time="started_at finished_at",
)
builds = _table(
    "builds", str="key code_hash ptx_key", text="message", bool="ok", json="metrics", float="seconds"
)
search_journal = _table("search_journal", int="id study_id run_id", json="entry")  # `tuning.resume_replay`
build_claims = _table("build_claims", str="ptx_key worker", time="heartbeat_at")
measurements = _table(
    "measurements",
    int="id",
    str="code_hash device driver harness_args_hash status",
    json="samples clocks",
    float="median iqr min",
)
MEASUREMENT_KEY = ("code_hash", "device", "driver", "harness_args_hash")


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


def take_number(conn: Connection, study_id: int, count: int = 1) -> int:
    """The first of the study's next ``count`` trial numbers, taken in ``conn``'s transaction."""
    bump = (
        studies.update()
        .where(studies.c.id == study_id)
        .values(next_number=_next_free(study_id, count) + count)
        .returning(studies.c.next_number)
    )
    taken = conn.execute(bump).scalar_one_or_none()
    if taken is None:
        raise StoreError(f"no study with id {study_id}")
    if type(taken) is not int or not count <= taken <= MAX_TRIAL_NUMBER:
        raise StoreError(f"study {study_id} has no trial numbers left (its highest is {MAX_TRIAL_NUMBER})")
    return taken - count


_LARGEST_COUNTER = 2**31 - 1  # PostgreSQL's INTEGER columns (SQLite's hold more: the smaller bound for both)


def _next_free(study_id: int, count: int) -> sa.ColumnElement[Any]:
    """The study's counter where it is a number past each of its trials' numbers and `count` more
    fit; else (a damaged row of a shared database: text, past the largest, or behind its trials)
    the number after its highest trial's: the counter is repaired, no trial is overwritten or
    refused as a duplicate, no integer overflows."""
    n, t = studies.c.next_number, trials_table.c
    last = min(MAX_TRIAL_NUMBER, _LARGEST_COUNTER) - count
    highest = (sa.select(sa.func.coalesce(sa.func.max(t.number), -1))
               .where(t.study_id == study_id, t.number >= 0, t.number <= last).scalar_subquery())
    return sa.case((sa.and_(n >= 0, n <= last, n > highest), n), else_=highest + 1)


def to_retry(t: Any) -> sa.ColumnElement[bool]:
    """`Trial.to_retry` in SQL: a row the next run tries again, not counted as a trial (`TrialCounts`)."""
    return sa.and_(t.state == TrialState.FAILED.value, t.retryable.is_(True))


def final_failure(t: Any) -> sa.ColumnElement[bool]:
    """A FAILED trial that will not be retried."""
    return sa.and_(t.state == TrialState.FAILED.value, t.retryable.is_(False))


def among(conn: Connection, column: sa.ColumnElement[Any], values: Iterable[Any]) -> sa.ColumnElement[bool]:
    """``column IN values``; on PostgreSQL one array parameter (``= ANY(...)``): psycopg parses
    again every statement of more than 50 parameters, ~5 ms for a claim's 48 keys."""
    listed = list(values)
    if conn.dialect.name == "postgresql":
        return column == sa.any_(sa.bindparam(None, listed, type_=sa.ARRAY(column.type)))
    return column.in_(listed)


def with_space(query: sa.Select[Any]) -> sa.Select[Any]:
    """``query`` of trials, each row with its study's space_sha256."""
    return query.add_columns(studies.c.space_sha256).join(studies, studies.c.id == trials_table.c.study_id)


def chunks(items: Sequence[Any], size: int = 500) -> Iterator[Sequence[Any]]:
    """Slices small enough for any database's limit on bound parameters per statement."""
    for start in range(0, len(items), size):
        yield items[start:start + size]
