"""The runs of a study: when each started, its limits, what stopped it and what it chose."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from compileiq.core.records import RunRecord, TrialState
from compileiq.store.base import StoreBase
from compileiq.store.rows import run_record
from compileiq.store.schema import chunks, db_now, runs, trials_table


class RunLog(StoreBase):
    """The store's calls on runs (each one transaction)."""

    def start_run(self, study_id: int, worker: str, limits: dict[str, Any]) -> int:
        """Record a tuning run of the study with its limits; its id (for `finish_run`)."""
        with self._tx() as conn:
            insert = runs.insert().values(study_id=study_id, worker=worker, limits=limits, started_at=db_now())
            return int(conn.execute(insert.returning(runs.c.id)).scalar_one())

    def finish_run(self, run_id: int, stopped: str, search_trials: int, extra_trials: int,
                   decision: dict[str, Any] | None = None) -> None:
        """Record which limit ended the run, how many trials it left in the study, and what it chose."""
        update = runs.update().where(runs.c.id == run_id)
        with self._tx() as conn:
            conn.execute(update.values(stopped=stopped, search_trials=search_trials, extra_trials=extra_trials,
                                       decision=decision, finished_at=db_now()))

    def runs(self, study_id: int) -> list[RunRecord]:
        """The study's runs, oldest first."""
        query = sa.select(runs).where(runs.c.study_id == study_id).order_by(runs.c.id)
        with self._tx(readonly=True) as conn:
            return [run_record(row) for row in conn.execute(query).mappings().all()]


def named_trials(conn: Connection, decisions: Mapping[int, dict[str, Any]]) -> dict[int, tuple[TrialState | None, float | None]]:
    """Study id -> (state, value) of the trial its recorded decision names, as the row is now (the
    study list shows a run's choice only while that row holds the value the run recorded: one
    indexed row per study, read in statements of bounded size)."""
    pairs = [(study_id, d["chosen"]) for study_id, d in decisions.items() if type(d.get("chosen")) is int]
    t = trials_table.c
    found: dict[int, tuple[TrialState | None, float | None]] = {}
    for chunk in chunks(pairs, 2_000):
        query = sa.select(t.study_id, t.state, t.value).where(sa.tuple_(t.study_id, t.number).in_(list(chunk)))
        for row in conn.execute(query):
            state = next((s for s in TrialState if s.value == row.state), None)
            value = float(row.value) if isinstance(row.value, int | float) and math.isfinite(row.value) else None
            found[row.study_id] = (state, value)
    return found
