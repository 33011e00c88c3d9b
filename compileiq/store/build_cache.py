"""The build cache: what a compile made, by the hash of everything it depended on, and the claims
that keep two tuners from building the same PTX and flags at once."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, fields
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from compileiq.core.records import BuildRecord
from compileiq.store import build_claims
from compileiq.store.base import StoreBase
from compileiq.store.build_claims import BuildClaims
from compileiq.store.rows import checked_build
from compileiq.store.schema import among, builds


class BuildCache(StoreBase):
    """The store's build-cache calls (each one transaction)."""

    def get_build(self, key: str) -> BuildRecord | None:
        return self.get_builds([key]).get(key)

    def get_builds(self, keys: Collection[str]) -> dict[str, BuildRecord]:
        """The cached builds among ``keys``, by key (one query)."""
        query = sa.select(*(builds.c[f.name] for f in fields(BuildRecord)))
        with self._tx(readonly=True) as conn:
            rows = conn.execute(query.where(among(conn, builds.c.key, keys))).mappings().all()
        found = {}
        for row in rows:
            checked = checked_build(row)
            if isinstance(checked, BuildRecord):
                found[checked.key] = checked
            else:
                self._skip(("build", row["key"]), f"cached build {str(row['key'])[:16]}", checked)
        return found

    def put_build(self, record: BuildRecord) -> None:
        """Cache a build; an existing record under the same key is kept."""
        with self._tx() as conn:
            put_build_row(conn, record)

    def replace_build(self, record: BuildRecord) -> None:
        """Cache a build over any record under the same key (one a rebuild here contradicted)."""
        with self._tx() as conn:
            conn.execute(builds.delete().where(builds.c.key == record.key))
            put_build_row(conn, record)

    def claim_builds(self, ptx_keys: Collection[str], worker: str, stale_after_s: float) -> BuildClaims:
        """For each PTX key (what ptxas is given): the build recorded under it, else a claim for
        ``worker`` to build it (taken over from a claim without a heartbeat for ``stale_after_s``),
        else held: another tuner builds it now. One transaction."""
        if not ptx_keys:
            return BuildClaims()
        with self._tx() as conn:
            found = build_claims.claim(conn, ptx_keys, worker, stale_after_s)
        for key, problem in found.skipped:
            self._skip(("build", key), f"cached build {key[:16]}", problem)
        return found

    def heartbeat_build_claims(self, ptx_keys: Collection[str], worker: str) -> None:
        """Mark ``worker``'s claims of builds alive, by the database clock."""
        if ptx_keys:
            with self._tx() as conn:
                build_claims.beat(conn, ptx_keys, worker)

    def release_build_claims(self, ptx_keys: Collection[str], worker: str) -> None:
        """Give up ``worker``'s claims of builds it will not record (a compiler that timed out, a run that failed)."""
        if ptx_keys:
            with self._tx() as conn:
                build_claims.release(conn, ptx_keys, worker)

    def builds_count(self) -> int:
        with self._tx(readonly=True) as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(builds)).scalar_one())


def build_columns(record: BuildRecord) -> dict[str, Any]:
    """The record's column values as they are (`asdict` would copy its metrics deeply)."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


def insert_new_builds(conn: Connection) -> Any:
    """An insert into the build cache that skips keys cached already (one statement, no error)."""
    # each dialect imported here, when used: the other one's import costs every command ~0.1 s
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql as dialect
    else:
        from sqlalchemy.dialects import sqlite as dialect  # type: ignore[no-redef]
    return dialect.insert(builds).on_conflict_do_nothing(index_elements=["key"])


def put_build_row(conn: Connection, record: BuildRecord) -> None:
    """Insert ``record`` unless its key is cached already; a claim of its PTX key is done."""
    conn.execute(insert_new_builds(conn).values(**asdict(record)))
    build_claims.recorded(conn, [record])
