"""What every part of the store shares: the engine, one transaction per call, the schema brought
up to date on opening, and the rows skipped as unusable (each reported once)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Self

from sqlalchemy.engine import Connection, Engine

from compileiq.store.connect import display, open_engine, transaction, upgrade_schema

MAX_REPORTED = 20  # unusable rows named a line each; the rest counted (`StoreBase._skip`)


class StoreBase:
    """The engine and its transactions; `Store` is this with studies, trials, builds, runs and measurements."""

    def __init__(self, engine: Engine, warn: Callable[[str], None] | None = None) -> None:
        self._engine = engine
        self._warn = warn or _warn_on_stderr
        self._reported: set[tuple[str, Any]] = set()

    @classmethod
    def open(cls, url: str, warn: Callable[[str], None] | None = None, create: bool = True) -> Self:
        """Connect to ``url`` and bring its schema up to date (a new database is created; with
        ``create`` False, for a command that only reads, a missing SQLite file is a one-line
        `NoDatabaseError` and nothing is created: a mistyped path is not an empty store).
        ``warn`` hears of each stored row skipped as unusable (default: a line on stderr)."""
        store = cls(open_engine(url, create), warn)
        try:
            store.upgrade()
        except BaseException:
            store.close()
            raise
        return store

    def close(self) -> None:
        if (more := len(self._reported) - MAX_REPORTED) > 0:
            self._warn(f"skipped {more} more unusable row(s) of the database, after the {MAX_REPORTED} named above")
            self._reported.clear()
        self._engine.dispose()

    @property
    def url_for_display(self) -> str:
        return display(self._engine.url)

    def upgrade(self) -> str:
        """Apply pending migrations; return the schema revision now in the database."""
        with self._tx() as conn:
            return upgrade_schema(conn)

    def _skip(self, identity: tuple[str, Any], what: str, problem: str) -> None:
        """Report an unusable row once: the first MAX_REPORTED each in a line, the rest counted and
        told in one line when the store closes (a shared database of thousands of forged rows
        would bury the command's own output in CI logs)."""
        if identity in self._reported:
            return
        self._reported.add(identity)
        if len(self._reported) <= MAX_REPORTED:
            self._warn(f"skipped {what}: {problem}")
        elif len(self._reported) == MAX_REPORTED + 1:
            self._warn("more unusable rows are skipped; how many is said at the end")

    @contextmanager
    def _tx(self, readonly: bool = False) -> Iterator[Connection]:
        """One transaction; connection-level failures become a one-line StoreError."""
        with transaction(self._engine, readonly) as conn:
            yield conn


def _warn_on_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)
