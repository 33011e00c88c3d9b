"""What every part of the store shares: the engine, one transaction per call, the schema brought
up to date on opening, and the rows skipped as unusable (each reported once)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Self

from sqlalchemy.engine import Connection, Engine

from compileiq.store.connect import display, open_engine, transaction, upgrade_schema


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
        self._engine.dispose()

    @property
    def url_for_display(self) -> str:
        return display(self._engine.url)

    def upgrade(self) -> str:
        """Apply pending migrations; return the schema revision now in the database."""
        with self._tx() as conn:
            return upgrade_schema(conn)

    def _skip(self, identity: tuple[str, Any], what: str, problem: str) -> None:
        if identity not in self._reported:
            self._reported.add(identity)
            self._warn(f"skipped {what}: {problem}")

    @contextmanager
    def _tx(self, readonly: bool = False) -> Iterator[Connection]:
        """One transaction; connection-level failures become a one-line StoreError."""
        with transaction(self._engine, readonly) as conn:
            yield conn


def _warn_on_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)
