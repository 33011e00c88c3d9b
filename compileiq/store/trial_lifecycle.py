"""A claimed trial's life: heartbeats while it runs, its outcome (with its build, in the same
transaction; many at once by group commit), and the claims handed back: stale ones (no heartbeat,
by the database clock) and those of a tuner that stopped."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from compileiq.core.records import BuildRecord, Trial, TrialOutcome, TrialState
from compileiq.store import build_claims
from compileiq.store.base import StoreBase
from compileiq.store.build_cache import build_columns, insert_new_builds, put_build_row
from compileiq.store.build_claims import FUTURE_S
from compileiq.store.connect import StoreError
from compileiq.store.rows import trial_record, utc
from compileiq.store.schema import among, db_now, trials_table

_OUTCOME_COLUMNS = ("state", "value", "reason", "metrics", "code_hash", "compile_seconds", "retryable")


class TrialLifecycle(StoreBase):
    """The store's calls on claimed trials (each one transaction)."""

    def heartbeat(self, trial_ids: Sequence[int]) -> None:
        """Mark RUNNING trials as alive, by the database clock."""
        if not trial_ids:
            return
        t = trials_table.c
        with self._tx() as conn:
            conn.execute(
                trials_table.update()
                .where(among(conn, t.id, trial_ids), t.state == TrialState.RUNNING.value)
                .values(heartbeat_at=db_now())
            )

    def finish_trial(
        self,
        trial_id: int,
        *,
        state: TrialState,
        value: float | None,
        reason: str | None,
        metrics: dict[str, Any],
        code_hash: str | None,
        compile_seconds: float | None,
        retryable: bool = False,
        build: BuildRecord | None = None,
    ) -> Trial:
        """Record the outcome of a trial (COMPLETE or FAILED), and cache its ``build`` in the
        same transaction (an existing record under the build's key is kept)."""
        if state is TrialState.RUNNING:
            raise StoreError("finish_trial needs a final state, not running")
        update = (
            trials_table.update()
            .where(trials_table.c.id == trial_id)
            .values(
                state=state.value,
                value=value,
                reason=reason,
                metrics=metrics,
                code_hash=code_hash,
                compile_seconds=compile_seconds,
                retryable=retryable,
                finished_at=db_now(),
            )
        )
        with self._tx() as conn:
            if build is not None:
                put_build_row(conn, build)
            row = conn.execute(update.returning(trials_table)).mappings().one_or_none()
        if row is None:
            raise StoreError(f"no trial with id {trial_id}")
        return trial_record(row)

    def hand_back(self, trial: Trial, reason: str | None) -> Trial:
        """Mark a final trial FAILED and retryable with `reason`, its metrics and build facts kept, so
        that the next run evaluates it again (once: that run records its own outcome as final)."""
        return self.finish_trial(trial.id, state=TrialState.FAILED, value=None, reason=reason, metrics=trial.metrics,
                                 code_hash=trial.code_hash, compile_seconds=trial.compile_seconds, retryable=True)

    def finish_trials(self, outcomes: Sequence[TrialOutcome]) -> None:
        """Record several outcomes, and cache their builds, in ONE transaction of a few
        statements whatever their number (group commit: a driver feeding a hundred workers
        records hundreds of results a second). The trials are not read back."""
        if not outcomes:
            return
        t = trials_table.c
        update = (
            trials_table.update()
            .where(t.id == sa.bindparam("trial_id"))
            .values(finished_at=db_now(), **{name: sa.bindparam(f"new_{name}") for name in _OUTCOME_COLUMNS})
        )
        rows = [{"trial_id": o.trial_id, "new_state": o.state.value, "new_value": o.value, "new_reason": o.reason,
                 "new_metrics": o.metrics, "new_code_hash": o.code_hash, "new_compile_seconds": o.compile_seconds,
                 "new_retryable": o.retryable} for o in outcomes]
        if any(o.state is TrialState.RUNNING for o in outcomes):
            raise StoreError("finish_trials needs final states, not running")
        records = {o.build.key: build_columns(o.build) for o in outcomes if o.build is not None}
        with self._tx() as conn:
            if records:
                conn.execute(insert_new_builds(conn), list(records.values()))
                build_claims.recorded(conn, [o.build for o in outcomes if o.build is not None])
            done = conn.execute(update, rows).rowcount
            if conn.dialect.supports_sane_multi_rowcount and done != len({o.trial_id for o in outcomes}):
                raise StoreError(f"{len(rows) - done} of {len(rows)} finished trials are not in the database")

    def fail_stale_trials(self, study_id: int, older_than_s: float) -> int:
        """Fail RUNNING trials without a heartbeat for ``older_than_s`` (0: all of them). Heartbeats
        come from the database clock, so one in the future was forged (it would hold its config
        forever): it is clamped to now first, and goes stale like any other."""
        t = trials_table.c
        stale = [t.study_id == study_id, t.state == TrialState.RUNNING.value]
        with self._tx() as conn:
            if older_than_s > 0:
                now = utc(conn.execute(sa.select(db_now())).scalar_one())
                conn.execute(trials_table.update().where(*stale, t.heartbeat_at > now + timedelta(seconds=FUTURE_S))
                             .values(heartbeat_at=now))
                stale.append(t.heartbeat_at < now - timedelta(seconds=older_than_s))
            result = conn.execute(
                trials_table.update()
                .where(*stale)
                .values(
                    state=TrialState.FAILED.value,
                    retryable=True,
                    finished_at=db_now(),
                    reason=f"abandoned: no heartbeat for {older_than_s:g}s",
                )
            )
        return int(result.rowcount)

    def release_trials(self, study_id: int, worker: str, reason: str) -> int:
        """Hand back the RUNNING trials ``worker`` claimed in the study (FAILED, retryable: any
        tuner retries them at once): a run that stops early, or a tuner known to be gone."""
        t = trials_table.c
        held = [t.study_id == study_id, t.state == TrialState.RUNNING.value, t.worker == worker]
        release = trials_table.update().where(*held)
        release = release.values(state=TrialState.FAILED.value, retryable=True, reason=reason, finished_at=db_now())
        with self._tx() as conn:
            return int(conn.execute(release).rowcount)

    def running_claims(self, study_id: int) -> dict[str, float]:
        """Workers holding RUNNING trials of the study -> seconds since their latest heartbeat."""
        t = trials_table.c
        query = (
            sa.select(t.worker, sa.func.max(t.heartbeat_at))
            .where(t.study_id == study_id, t.state == TrialState.RUNNING.value)
            .group_by(t.worker)
        )
        with self._tx(readonly=True) as conn:
            now = utc(conn.execute(sa.select(db_now())).scalar_one())
            rows = conn.execute(query).all()
        return {worker: _seconds_since(now, beat) for worker, beat in rows}


def _seconds_since(now: datetime, beat: object) -> float:
    """Seconds since a heartbeat; none, or one that is not a time (a damaged row of a shared
    database), reads as never: the claim is stale."""
    return (now - utc(beat)).total_seconds() if isinstance(beat, datetime) else float("inf")
