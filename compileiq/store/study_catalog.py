"""The studies of a database: creating one for a key, finding one by name or id (a name that is
also another study's id is refused as ambiguous), listing them, and each one's summary (trial
count, best value, the latest recorded choice) in one aggregate query. A study row read here is
untrusted as every row is (`rows.study_record`): one that is not usable is skipped, said once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any

import sqlalchemy as sa

from compileiq.core.metric_ranges import is_finite
from compileiq.core.records import (
    RunRecord,
    Study,
    StudyKey,
    StudySummary,
    TrialState,
    latest_decision,
)
from compileiq.core.text import printable
from compileiq.store.base import StoreBase
from compileiq.store.connect import NoStudyError, StoreError
from compileiq.store.rows import check_same_key, study_record
from compileiq.store.run_log import cited_rows, readable_runs
from compileiq.store.schema import runs, studies, to_retry, trials_table
from compileiq.store.trust import kind_problem


def default_study_name(key: StudyKey) -> str:
    """``<kernel>-<objective>-<8 hex digits of the key's hash>``."""
    return derived_study_names(key)[0]


def derived_study_names(key: StudyKey) -> tuple[str, str, str]:
    """The names a study of ``key`` may take without --study: the default name, then the same with
    16 and 64 hex digits, for where a study of another key holds the shorter (a team database's
    rows are untrusted: anyone who can write to it can take a name; `study_lookup.derived_name`)."""
    digest = hashlib.sha256(json.dumps(asdict(key), sort_keys=True).encode()).hexdigest()
    short, longer, full = (f"{key.kernel}-{key.objective}-{digest[:n]}" for n in (8, 16, 64))
    return short, longer, full


class StudyCatalog(StoreBase):
    """The store's calls on studies (each one transaction)."""

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
        check_same_key(study, key)
        return study

    def study_named(self, name: str) -> Study | None:
        """The study named ``name`` (never read as an id), or None."""
        return self._study_where(studies.c.name == name)

    def find_study(self, name_or_id: str) -> Study:
        """The study named ``name_or_id``, or whose id it is (ASCII digits within SQL's BIGINT). A
        study *named* "1" beside study id 1 is refused as ambiguous (anyone who can write to a team
        database can name one so), naming how to open each of the two."""
        study = self._study_where(studies.c.name == name_or_id)
        numbered = None
        if name_or_id.isascii() and name_or_id.isdigit() and int(name_or_id) < 2**63:
            numbered = self._study_where(studies.c.id == int(name_or_id))
        if study is not None and numbered is not None and study.id != numbered.id:
            raise NoStudyError(f"'{printable(name_or_id)}' in {self.url_for_display} is both study id {numbered.id} "
                               f"(named '{printable(numbered.name)}') and the name of study id {study.id}: "
                               f"give '{printable(numbered.name)}' or {study.id} to say which")
        study = study or numbered
        if study is None:
            raise NoStudyError(f"no study named '{printable(name_or_id)}' in {self.url_for_display}")
        return study

    def list_studies(self) -> list[Study]:
        with self._tx(readonly=True) as conn:
            rows = conn.execute(sa.select(studies).order_by(studies.c.id)).mappings().all()
        found = []
        for row in rows:
            try:
                found.append(study_record(row))
            except StoreError as error:
                self._skip(("study", row["id"]), f"study {row['id']}", str(error))
        return found

    def study_summaries(self) -> list[StudySummary]:
        """Every study with its trial count and best complete value, in one aggregate query: the
        database counts, so listing a team database of 100,000 trials reads 200 rows."""
        t = trials_table.c
        finite = sa.and_(t.state == TrialState.COMPLETE.value, t.value.between(-1e308, 1e308))
        per_study = (
            sa.select(t.study_id, sa.func.count().label("trial_count"),
                      sa.func.min(sa.case((finite, t.value))).label("best_value"))
            .group_by(t.study_id)
            .subquery()
        )  # fmt: skip  (study_id, state, value) is one index: the trial rows themselves are not read
        # rows to retry (`TrialCounts`: handed back, or reopened): named beside the count, not counted
        # as trials (a Ctrl-C'd run listed "9" for 1 built); only failed rows are read for it
        retry = (
            sa.select(t.study_id, sa.func.count().label("to_retry"))
            .where(to_retry(t))
            .group_by(t.study_id)
            .subquery()
        )  # fmt: skip
        query = (
            sa.select(studies, sa.func.coalesce(per_study.c.trial_count, 0).label("trial_count"), per_study.c.best_value,
                      sa.func.coalesce(retry.c.to_retry, 0).label("to_retry"))
            .select_from(studies.outerjoin(per_study, per_study.c.study_id == studies.c.id)
                         .outerjoin(retry, retry.c.study_id == studies.c.id))
            .order_by(studies.c.id)
        )  # fmt: skip
        with self._tx(readonly=True) as conn:
            rows = conn.execute(query).mappings().all()
            by_study: dict[int, list[RunRecord]] = {}  # the runs that recorded anything: the candidates
            for run in readable_runs(conn, runs.c.decision.is_not(None), self._skip):
                by_study.setdefault(run.study_id, []).append(run)
            decisions: dict[int, dict[str, Any]] = {}  # the one that is the study's, as every view reads it
            for study_id, candidates in by_study.items():
                if (latest := latest_decision(candidates)) is not None and latest.decision is not None:
                    decisions[study_id] = latest.decision
            cited = cited_rows(conn, decisions)  # the row each names and its baseline: two per study at most
        found = []
        for row in rows:
            try:
                study, (named, baseline) = study_record(row), cited.get(row["id"], (None, None))
                named = None if named is None or kind_problem(named, study.key) else named  # replayed: one check
                returned = int(row["to_retry"])
                found.append(StudySummary(study, int(row["trial_count"]) - returned,
                                          _finite_or_none(row["best_value"]),
                                          decisions.get(row["id"]), named.state if named else None,
                                          named.value if named else None,
                                          named, baseline, to_retry=returned))
            except StoreError as error:
                self._skip(("study", row["id"]), f"study {row['id']}", str(error))
        return found

    def _study_where(self, condition: sa.ColumnElement[bool]) -> Study | None:
        with self._tx(readonly=True) as conn:
            row = conn.execute(sa.select(studies).where(condition)).mappings().one_or_none()
        return None if row is None else study_record(row)


def _finite_or_none(value: Any) -> float | None:
    """A best value read back: a finite float, else None (SQLite stores whatever it was given)."""
    return float(value) if is_finite(value) else None

