"""The runs of a study: when each started, its limits, what stopped it and what it chose."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from compileiq.core.records import ACF_NOT_WRITTEN, RunRecord, Trial, chosen_number
from compileiq.store.base import StoreBase
from compileiq.store.rows import checked_trial, run_record
from compileiq.store.schema import chunks, db_now, runs, search_journal, trials_table


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

    def journal_search(self, study_id: int, run_id: int, entry: dict[str, Any]) -> None:
        """Record what a run's searcher was asked and told since its previous claim (`resume_replay`)."""
        with self._tx() as conn:
            conn.execute(search_journal.insert().values(study_id=study_id, run_id=run_id, entry=entry))

    def search_journal(self, study_id: int) -> list[tuple[int, Any]]:
        """The study's journal rows, oldest first: (run id, entry as recorded: unchecked)."""
        query = sa.select(search_journal.c.run_id, search_journal.c.entry).where(
            search_journal.c.study_id == study_id).order_by(search_journal.c.id)
        with self._tx(readonly=True) as conn:
            return [(run_id, entry) for run_id, entry in conn.execute(query).all()]

    def acf_not_written(self, run_id: int, why: str) -> None:
        """Say on the run's row that its ACF was not written (refused after the run, or failed): its
        decision stays recorded, and no view says an ACF holds it (`recorded_decision.ACF_NOT_WRITTEN`)."""
        query = sa.select(runs.c.decision).where(runs.c.id == run_id)
        with self._tx() as conn:
            found = conn.execute(query).scalar_one_or_none()
            if isinstance(found, dict):  # nothing recorded is lost: one key added
                conn.execute(runs.update().where(runs.c.id == run_id).values(decision={**found, ACF_NOT_WRITTEN: why}))

    def runs(self, study_id: int) -> list[RunRecord]:
        """The study's runs, oldest first."""
        with self._tx(readonly=True) as conn:
            return readable_runs(conn, runs.c.study_id == study_id, self._skip)


Skip = Callable[[tuple[str, Any], str, str], None]


def readable_runs(conn: Connection, where: sa.ColumnElement[bool], skip: Skip) -> list[RunRecord]:
    """The runs `where` selects, oldest first, as records: a damaged row of a shared database is set
    aside with a note (`skip`; never deleted). What every reader of runs reads (the study list and
    `db export` too), so that `records.latest_decision` chooses among the same rows in each."""
    found = []
    for row in conn.execute(sa.select(runs).where(where).order_by(runs.c.id)).mappings().all():
        try:
            found.append(run_record(row))
        except (TypeError, ValueError, AttributeError, KeyError) as error:
            skip(("run", row["id"]), f"run {row['id']} of study {row['study_id']}", f"unreadable: {error}")
    return found


def cited_rows(conn: Connection, decisions: Mapping[int, dict[str, Any]]) -> dict[int, tuple[Trial | None, Trial | None]]:
    """Study id -> (the trial its recorded decision names, its baseline: the first usable row), each
    a checked trial or None: what the study list holds a recorded choice against (its refusal
    against the baseline, as every view's). Two indexed rows per study at most."""
    pairs = [(study_id, number) for study_id, d in decisions.items() if (number := chosen_number(d)) is not None]
    named = _rows_named(conn, pairs)
    t = trials_table.c
    firsts: list[tuple[int, int]] = []
    for chunk in chunks([study_id for study_id, _ in pairs], 2_000):
        first = sa.select(t.study_id, sa.func.min(t.number)).where(t.study_id.in_(list(chunk))).group_by(t.study_id)
        firsts.extend((row[0], row[1]) for row in conn.execute(first))
    base = _rows_named(conn, firsts)
    return {study_id: (named.get(study_id), base.get(study_id)) for study_id, _ in pairs}


def _rows_named(conn: Connection, pairs: list[tuple[int, int]]) -> dict[int, Trial]:
    """Study id -> the row (study, number) names, when it is a usable trial (a damaged row is none)."""
    t = trials_table.c
    found: dict[int, Trial] = {}
    for chunk in chunks(pairs, 500):  # (study_id = ? AND number = ?) OR ...: SQLite scanned every trial for a row-value IN
        query = sa.select(trials_table).where(sa.or_(*(sa.and_(t.study_id == s, t.number == n) for s, n in chunk)))
        for row in conn.execute(query).mappings():
            if isinstance(checked := checked_trial(row, None), Trial):
                found[row["study_id"]] = checked
    return found
