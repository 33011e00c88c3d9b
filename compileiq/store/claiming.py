"""Claiming trials: a batch of configs becomes RUNNING trials of one tuner, inside the caller's
transaction, in a few statements whatever its size (a driver feeding a hundred workers claims
hundreds per batch). A key already in the study is taken over only when its trial is a retryable
failure or unusable (damaged, or its config outside the study's space)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from compileiq.core.records import Trial, TrialState
from compileiq.store.rows import checked_trial, running_values, trial_record, utc
from compileiq.store.schema import among, chunks, take_number, trials_table, with_space

if TYPE_CHECKING:
    from compileiq.core.space import SearchSpace

SpaceOf = Callable[[str], "SearchSpace | None"]  # a study's space by its sha256, if known


def claim_batch(
    conn: Connection, study_id: int, configs: Sequence[tuple[str, dict[str, Any]]], worker: str, purpose: str,
    space_of: SpaceOf,
) -> list[Trial]:
    """The trials claimed for ``(config_key, config)`` pairs, in their order (one read of the
    keys, one numbering, the new rows inserted, and their ids read back by number)."""
    t = trials_table.c
    wanted = {key: config for key, config in reversed(configs)}  # the first config of a repeated key
    keys = list(dict.fromkeys(key for key, _ in configs))
    existing: dict[str, sa.RowMapping] = {}
    for chunk in chunks(keys):
        query = with_space(sa.select(trials_table)).where(t.study_id == study_id, among(conn, t.config_key, chunk))
        existing.update((row["config_key"], row) for row in conn.execute(query).mappings())
    inserted = _insert_fresh(conn, study_id, [key for key in keys if key not in existing], wanted, worker, purpose)
    claimed = (inserted.get(key) or _retake(conn, existing[key], wanted[key], worker, purpose, space_of) for key in keys)
    return [trial for trial in claimed if trial is not None]


def _insert_fresh(
    conn: Connection, study_id: int, fresh: list[str], wanted: dict[str, dict[str, Any]], worker: str, purpose: str
) -> dict[str, Trial]:
    """Insert the ``fresh`` keys under the study's next numbers; their trials by key."""
    if not fresh:
        return {}
    t = trials_table.c
    first = take_number(conn, study_id, len(fresh))
    values = running_values({}, worker, purpose)
    clock = {name: v for name, v in values.items() if isinstance(v, sa.ClauseElement)}  # the database's
    common = {name: v for name, v in values.items() if name not in clock}
    rows = [{**common, "study_id": study_id, "number": first + index, "config_key": key, "config": wanted[key]}
            for index, key in enumerate(fresh)]
    insert = trials_table.insert().values(clock)
    for chunk in chunks(rows):  # executemany of one short statement: a many-row RETURNING would be
        conn.execute(insert, list(chunk))  # a statement of thousands of parameters, parsed each time
    # Only what the database chose is read back, by the numbers just taken: the rest is what was written.
    by_key = {row["config_key"]: row for row in rows}
    numbered = t.number.between(first, first + len(fresh) - 1)
    made = conn.execute(sa.select(t.id, t.config_key, t.started_at).where(t.study_id == study_id, numbered))
    return {row["config_key"]: _claimed_trial(by_key[row["config_key"]], row) for row in made.mappings()}


def _retake(
    conn: Connection, existing: sa.RowMapping, config: dict[str, Any], worker: str, purpose: str, space_of: SpaceOf
) -> Trial | None:
    """Take over a retryable failed trial or an unusable one (damaged, or its config not in
    the study's space); None if the key is taken."""
    t = trials_table.c
    checked = checked_trial(existing, space_of(existing["space_sha256"]))
    retryable = isinstance(checked, Trial) and checked.state is TrialState.FAILED and checked.retryable
    if isinstance(checked, Trial) and not retryable:
        return None
    unchanged = (t.id == existing["id"], t.state == existing["state"], t.worker == existing["worker"])
    update = trials_table.update().where(*unchanged).values(running_values(config, worker, purpose))
    row = conn.execute(update.returning(trials_table)).mappings().one_or_none()
    return None if row is None else trial_record(row)  # None: another claim took it first


def _claimed_trial(written: dict[str, Any], made: sa.RowMapping) -> Trial:
    """A trial just claimed, from the values the claim wrote (`running_values`) and the id and
    start time the database gave it: the record a read of the row gives, without reading it back."""
    values = {name: written[name] for name in Trial.__dataclass_fields__ if name in written}
    values.update(id=made["id"], state=TrialState(written["state"]), started_at=utc(made["started_at"]),
                  config=dict(written["config"]), metrics=dict(written["metrics"]))
    return Trial(**values)
