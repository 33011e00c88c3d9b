"""Claims of builds in flight, by what ptxas is given (the PTX key): tuners on one database never
run ptxas twice on the same PTX with the same flags.

A tuner about to run ptxas claims the PTX key by inserting its row (``build_claims``, the key is
the primary key); the build it records under that key (``builds.ptx_key``) deletes the claim in the
same transaction. Another tuner that finds the claim waits for the build; a claim whose heartbeat
is older than the stale timeout (or forged into the future) is taken over, so a tuner that died
mid-claim blocks nobody for longer than that.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, fields
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from compileiq.core.records import BuildRecord
from compileiq.store.rows import checked_build, utc
from compileiq.store.schema import among, build_claims, builds, db_now

FUTURE_S = 60.0  # a heartbeat further ahead of the database clock than this is forged
_SERVED = ("ok", "compile_error")  # outcomes the same inputs repeat: only these are shared


@dataclass(frozen=True)
class BuildClaims:
    """What a claim of PTX keys found: builds recorded under some, claims taken on others, and
    the keys another tuner is building now (ask again later)."""

    built: dict[str, BuildRecord] = field(default_factory=dict)
    mine: frozenset[str] = frozenset()
    held: dict[str, str] = field(default_factory=dict)  # PTX key -> the tuner that claimed it
    skipped: tuple[tuple[str, str], ...] = ()  # (build key, why) of unusable rows read


def claim(conn: Connection, keys: Collection[str], worker: str, stale_after_s: float) -> BuildClaims:
    """Claim each of ``keys`` not built yet, in ``conn``'s transaction."""
    skipped: list[tuple[str, str]] = []
    built = _built(conn, keys, skipped)
    rest = [key for key in keys if key not in built]
    if not rest:
        return BuildClaims(built, skipped=tuple(skipped))
    c = build_claims.c
    now = utc(conn.execute(sa.select(db_now())).scalar_one())
    present = set(conn.execute(sa.select(c.ptx_key).where(among(conn, c.ptx_key, rest))).scalars())
    fresh = [{"ptx_key": key, "worker": worker} for key in rest if key not in present]
    if fresh:
        conn.execute(_insert_new_claims(conn).values(heartbeat_at=db_now()), fresh)
    lapsed = sa.or_(c.heartbeat_at < now - timedelta(seconds=stale_after_s),
                    c.heartbeat_at > now + timedelta(seconds=FUTURE_S))
    conn.execute(build_claims.update().where(among(conn, c.ptx_key, rest), c.worker != worker, lapsed)
                 .values(worker=worker, heartbeat_at=db_now()))
    holders = dict(conn.execute(sa.select(c.ptx_key, c.worker).where(among(conn, c.ptx_key, rest))).all())
    mine = {key for key in rest if holders.get(key) == worker}
    late = _built(conn, mine, skipped)  # recorded between the first read and the claim
    if late:
        release(conn, late, worker)
        built.update(late)
    held = {key: str(holders.get(key)) for key in rest if key not in mine}
    return BuildClaims(built, frozenset(mine - set(late)), held, tuple(skipped))


def beat(conn: Connection, keys: Collection[str], worker: str) -> None:
    """Mark ``worker``'s claims of ``keys`` alive, by the database clock."""
    c = build_claims.c
    conn.execute(build_claims.update().where(among(conn, c.ptx_key, keys), c.worker == worker)
                 .values(heartbeat_at=db_now()))


def release(conn: Connection, keys: Collection[str], worker: str | None = None) -> None:
    """Delete the claims of ``keys`` (only ``worker``'s, when given)."""
    c = build_claims.c
    where = [among(conn, c.ptx_key, keys)] + ([c.worker == worker] if worker is not None else [])
    conn.execute(build_claims.delete().where(*where))


def recorded(conn: Connection, records: Collection[BuildRecord]) -> None:
    """Builds were just recorded: their PTX keys' claims are done, whoever held them."""
    keys = {record.ptx_key for record in records if record.ptx_key}
    if keys:
        release(conn, keys)


def _built(conn: Connection, keys: Collection[str], skipped: list[tuple[str, str]]) -> dict[str, BuildRecord]:
    """A usable build recorded under each of ``keys`` that has one (rows checked as any cached build)."""
    if not keys:
        return {}
    query = sa.select(*(builds.c[f.name] for f in fields(BuildRecord))).where(among(conn, builds.c.ptx_key, keys))
    found: dict[str, BuildRecord] = {}
    for row in conn.execute(query.order_by(builds.c.key)).mappings():
        checked = checked_build(row)
        if not isinstance(checked, BuildRecord):
            skipped.append((str(row["key"]), checked))
        elif checked.ptx_key and checked.metrics.get("status", "ok") in _SERVED:
            found.setdefault(checked.ptx_key, checked)
    return found


def _insert_new_claims(conn: Connection) -> sa.Insert:
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql as dialect
    else:
        from sqlalchemy.dialects import sqlite as dialect  # type: ignore[no-redef]
    return dialect.insert(build_claims).on_conflict_do_nothing(index_elements=["ptx_key"])
