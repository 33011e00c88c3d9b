"""Reaching the database: URL parsing, engines (SQLite pragmas and BEGIN IMMEDIATE),
transactions, the Alembic upgrade with newer-schema detection, and error messages that never
show a password."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine

from compileiq.core.errors import CompileIQError, UsageError
from compileiq.store.trust import lenient_json

# SQLAlchemy logs what it catches and goes on from (a connection's reset interrupted by Ctrl-C:
# "Exception during reset or similar" and a traceback, re-raised to the stop that prints its one
# line): with no logging configured, Python's last-resort handler printed it to stderr. A handler
# that drops it, as a library is meant to add; an application's own logging still sees it.
logging.getLogger("sqlalchemy").addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from alembic.script import ScriptDirectory

MIGRATIONS = Path(__file__).parent.with_name("migrations")
SCHEMA_HEAD = "0009"  # the newest migration's revision (a test holds it to Alembic's head)
_PG_SCHEMA_LOCK = 0x636F6D70  # advisory lock id serialising concurrent upgrades


class StoreError(CompileIQError):
    """The database cannot be reached, is too new, or holds something that contradicts a request."""


class InconsistentStudyError(StoreError):
    """A study row whose evaluator and objective do not describe its trials (relabelled in a shared
    database): every view of it refuses (`rows.of_its_kind`); the study list leaves it out, warned."""


class DatabaseUrlError(StoreError, UsageError):
    """The URL given is not one of a database compileiq can keep a study in: bad input (exit 2)."""


class NoStudyError(StoreError, UsageError):
    """No study has the name (or id) given: a mistyped name is bad input (exit 2), like a missing file."""


class NoDatabaseError(StoreError, UsageError):
    """A command that only reads was pointed at an SQLite file that is not there (exit 2)."""


def open_engine(url: str, create: bool = True) -> Engine:
    """An engine for ``url``; a bad URL or a missing driver is a StoreError. ``create`` False: an
    SQLite file that does not exist is a NoDatabaseError, its folders and file left uncreated."""
    return _make_engine(_parse_url(url), create)


def display(url: URL) -> str:
    """``url`` fit to show or record: its password and every query value masked (any of them,
    ``?password=`` or a token, may be a credential). A password holding a raw '@' ends at its first
    '@' as URLs are parsed, the rest read as the host: all up to the host's last '@' is masked."""
    if url.host and "@" in url.host:
        url = url.set(password="***", host=url.host.rpartition("@")[2])
    shown = url.set(query={}).render_as_string(hide_password=True)
    return shown + ("?" + "&".join(f"{name}=***" for name in url.query) if url.query else "")


@contextmanager
def transaction(engine: Engine, readonly: bool = False) -> Iterator[Connection]:
    """One transaction; connection-level failures become a one-line StoreError."""
    try:
        with engine.connect() as conn:
            conn.execution_options(compileiq_readonly=readonly)
            with conn.begin():
                yield conn
    except sa.exc.IntegrityError:
        raise  # a concurrent claim or import: the store handles it
    except sa.exc.DBAPIError as exc:  # unreachable, not a database, damaged, a value too long...
        raise StoreError(f"database {display(engine.url)}: {_one_line(exc, engine.url)}") from None


def upgrade_schema(conn: Connection) -> str:
    """Apply pending migrations in ``conn``; return the schema revision now in the database.
    A schema already at SCHEMA_HEAD is read in one query, without loading Alembic."""
    if _recorded_revision(conn) == SCHEMA_HEAD:
        return SCHEMA_HEAD
    return _upgrade_with_alembic(conn)


def _recorded_revision(conn: Connection) -> str | None:
    """The one revision in Alembic's version table; None without the table or with no row. More
    than one row (a half-applied branch, a forged row) is refused before anything is changed."""
    if not sa.inspect(conn).has_table("alembic_version"):
        return None
    rows = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(rows) > 1:
        shown = ", ".join(sorted(repr(str(row))[:40] for row in rows[:5])) + (", ..." if len(rows) > 5 else "")
        raise StoreError(f"database {display(conn.engine.url)}: its schema version table alembic_version holds {len(rows)} revisions ({shown}), "
                         "not one: it was changed outside compileiq; nothing was changed")
    return str(rows[0]) if rows else None


def _upgrade_with_alembic(conn: Connection) -> str:
    from alembic import command
    from alembic.config import Config as AlembicConfig
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(MIGRATIONS))
    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_SCHEMA_LOCK)))
    current = MigrationContext.configure(conn).get_current_revision()
    if current is not None and not _known_revision(script, current):
        raise StoreError(
            f"database schema {current} is newer than this compileiq knows; upgrade compileiq"
        )
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = conn
    command.upgrade(config, "head")
    return MigrationContext.configure(conn).get_current_revision() or ""


def _known_revision(script: ScriptDirectory, revision: str) -> bool:
    from alembic.script.revision import RevisionError
    from alembic.util import CommandError

    try:
        return script.get_revision(revision) is not None
    except (CommandError, RevisionError):
        return False


def _parse_url(url: str) -> URL:
    try:
        parsed = sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        raise DatabaseUrlError(f"not a database URL: {_unparsed(url)}") from None
    if parsed.host and "@" in parsed.host:  # the driver would try the password's tail as a host, and say it
        raise DatabaseUrlError(f"database URL {display(parsed)}: its password holds a raw '@', which ends the "
                               "password there; write each '@' in it as %40")
    return parsed


def _make_engine(url: URL, create: bool) -> Engine:
    backend = url.get_backend_name()
    if backend not in ("sqlite", "postgresql"):  # the schema and its migrations are made for these two
        raise DatabaseUrlError(f"unsupported database URL {display(url)}: compileiq keeps studies in SQLite "
                               "(sqlite:///FILE) or PostgreSQL (postgresql+psycopg://...)")
    try:
        if backend == "sqlite":
            return _sqlite_engine(url, create)
        return sa.create_engine(url, connect_args={"connect_timeout": 10}, pool_pre_ping=True,
                                json_deserializer=lenient_json)
    except ImportError:
        hint = ("pip install 'compileiq-tuner[postgres]' and use postgresql+psycopg://..."
                if backend == "postgresql" else "use sqlite:///FILE")
        raise DatabaseUrlError(f"no database driver for {url.drivername} in this Python: {hint}") from None
    except sa.exc.ArgumentError as exc:
        raise DatabaseUrlError(f"unsupported database URL {display(url)}: {exc}") from None


def _sqlite_engine(url: URL, create: bool) -> Engine:
    database = url.database or ""
    if database in ("", ":memory:") or "mode=memory" in database or url.query.get("mode") == "memory":
        raise DatabaseUrlError(
            f"{display(url)} is an in-memory database, gone when this process ends; "
            "give a file, e.g. sqlite:///store/compileiq.db"
        )
    if database.removeprefix("file:").split("?")[0].endswith("/"):  # meant as a folder: sqlite makes a file of that name
        raise DatabaseUrlError(f"{display(url)} names a folder (it ends in /), not a database file; "
                               f"give a file in it, e.g. sqlite:///{database.split('?')[0]}compileiq.db")
    # the driver first (an unsupported URL is that, not a missing file); nothing is opened until connect
    engine = sa.create_engine(url, connect_args={"timeout": 30}, json_deserializer=lenient_json)
    if not create and not Path(database.removeprefix("file:").split("?")[0]).expanduser().is_file():
        raise NoDatabaseError(f"no database at {database}: this command only reads one "
                              "(tune, db import and db upgrade create it)")
    if not database.startswith("file:"):
        folder = Path(database).expanduser().parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"database {display(url)}: cannot create {folder}: {exc.strerror or exc}"
            ) from None

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (below)
        # synchronous=NORMAL: with WAL a killed process loses nothing committed; only a power
        # cut can drop the last commits (each trial's commit no longer waits for an fsync).
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "busy_timeout=30000", "foreign_keys=ON"):
            dbapi_conn.execute(f"PRAGMA {pragma}")

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        readonly = conn.get_execution_options().get("compileiq_readonly", False)
        conn.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")

    return engine


def _redact(text: str) -> str:
    """Text that may hold a URL: no password in user:password@."""
    return re.sub(r"(://[^/?#@\s]*:)[^/?#\s]*@", r"\1***@", text)


def _unparsed(url: str) -> str:
    """A URL that did not parse: no password, nothing after a '?'."""
    return _redact(re.sub(r"\?.*", "?***", url, flags=re.DOTALL))


def _one_line(exc: sa.exc.DBAPIError, url: URL) -> str:
    text = " ".join(str(exc.orig or exc).split())
    secrets = [str(url.password)] if url.password else []
    for value in url.query.values():
        secrets += [v for v in ([value] if isinstance(value, str) else value) if len(v) > 2]
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "***")
    return _redact(text)[:400]
