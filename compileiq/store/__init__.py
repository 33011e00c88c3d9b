"""The database (SQLite or PostgreSQL): `Store`, with trial claims and reads here, the studies
(`study_catalog`: creating, finding, listing and summing them up), a trial's life after its claim
(`trial_lifecycle`: heartbeats, outcomes, stale and released claims),
the build cache (`build_cache`), the runs (`run_log`) and the measurement cache
(`measurement_cache`) in parts of their own over one engine (`base`).

The database is the coordinator: a config is claimed by INSERT under UNIQUE(study, key), time
comes from the database clock, and the schema is managed by the Alembic migrations shipped in
``compileiq/migrations``. Also here: which database a command opens, group commit, and moving a
study between databases (export/import), with the trust checks every outside row passes.

May import: core, build. The only importer of sqlalchemy and alembic (build: a cached build's record types).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from compileiq.core.errors import UsageError
from compileiq.core.records import (
    KEY_FIELDS,
    PURPOSES,
    SEARCH,
    BuildRecord,
    ImportSummary,
    Measurement,
    RunRecord,
    Study,
    StudyExport,
    StudyKey,
    StudySummary,
    Trial,
    TrialOutcome,
    TrialState,
)
from compileiq.core.text import printable
from compileiq.store import transfer
from compileiq.store.build_cache import BuildCache
from compileiq.store.build_claims import BuildClaims
from compileiq.store.claiming import claim_batch
from compileiq.store.connect import MIGRATIONS as MIGRATIONS  # re-exported
from compileiq.store.connect import StoreError
from compileiq.store.measurement_cache import MeasurementCache
from compileiq.store.rows import (
    checked_trial,
    of_its_kind,
    study_record,
)
from compileiq.store.run_log import RunLog
from compileiq.store.schema import (
    among,
    chunks,
    final_failure,
    studies,
    trials_table,
    with_space,
)
from compileiq.store.study_catalog import StudyCatalog, default_study_name, derived_study_names
from compileiq.store.trial_lifecycle import TrialLifecycle

if TYPE_CHECKING:
    from compileiq.core.space import SearchSpace

__all__ = ["KEY_FIELDS", "BuildClaims", "BuildRecord", "ImportSummary", "Measurement", "RunRecord", "Store"]
__all__ += ["StoreError", "default_study_name", "derived_study_names"]
__all__ += ["Study", "StudyExport", "StudyKey", "StudySummary", "Trial", "TrialOutcome", "TrialState"]


class Store(StudyCatalog, TrialLifecycle, BuildCache, RunLog, MeasurementCache):
    """A study/trial/build database. Open with :meth:`Store.open`; every call is one transaction."""

    def __init__(self, engine: Engine, warn: Callable[[str], None] | None = None) -> None:
        super().__init__(engine, warn)
        self._spaces: dict[str, SearchSpace] = {}  # by sha256: the studies' rows must fit them
        self._read: dict[int, dict[int, tuple[tuple[Any, ...], Trial | None]]] = {}  # study -> id -> (row, as checked)

    def check_trials_against(self, space: SearchSpace) -> None:
        """From now on a trial of a study made for ``space`` whose config does not fit it is
        skipped when read (shared and imported rows are untrusted), and taken over by a claim."""
        self._spaces[space.sha256] = space
        self._read.clear()  # rows read before are checked again, against the space

    # -- trials --------------------------------------------------------------------------

    def claim_trial(
        self, study_id: int, config_key: str, config: dict[str, Any], worker: str, purpose: str = SEARCH
    ) -> Trial | None:
        """Claim ``config_key`` for ``worker``; None if another claim holds it or it is done.

        A FAILED trial marked retryable is claimed again (same id and number).
        """
        claimed = self.claim_trials(study_id, [(config_key, config)], worker, purpose=purpose)
        return claimed[0] if claimed else None

    def claim_trials(
        self,
        study_id: int,
        configs: Sequence[tuple[str, dict[str, Any]]],
        worker: str,
        retry: bool = True,
        purpose: str = SEARCH,
    ) -> list[Trial]:
        """Claim a batch of ``(config_key, config)`` in one transaction; the trials claimed
        (configs another claim holds, or that are done, are left out). ``purpose``: why they are
        built (the budget counts only ``search`` trials)."""
        if purpose not in PURPOSES:
            raise StoreError(f"unknown trial purpose {purpose!r}")
        try:
            with self._tx() as conn:
                return claim_batch(conn, study_id, configs, worker, purpose, self._spaces.get)
        except sa.exc.IntegrityError:  # a concurrent tuner inserted one of them first
            if not retry:
                raise
            again = len(configs) > 1  # one at a time, each retried once more at most
            return [t for pair in configs for t in self.claim_trials(study_id, [pair], worker, again, purpose)]

    def trials(self, study_id: int, states: Collection[TrialState] | None = None) -> list[Trial]:
        """The study's trials ordered by number, optionally only those in ``states``.

        Each row is read whole and checked once while it stays the same: a later read fetches
        every row's plain columns and reads again only the rows that changed (or are new), so
        that a driver reading a study of thousands of trials per batch does not decode and
        check thousands of configs each time. Only an edit of a row's config or metrics JSON
        that leaves every other column as it was goes unseen (the row as checked is kept)."""
        t = trials_table.c
        query = sa.select(*_MARKER).where(t.study_id == study_id)
        if states is not None:
            query = query.where(t.state.in_([s.value for s in states]))
        known = self._read.setdefault(study_id, {})
        with self._tx(readonly=True) as conn:
            markers = conn.execute(query.order_by(t.number)).all()
            changed = [row[0] for row in markers if (row[0] not in known or known[row[0]][0] != tuple(row))]
            for chunk in chunks(changed):
                rows = conn.execute(with_space(sa.select(trials_table)).where(among(conn, t.id, chunk))).mappings().all()
                for row in rows:
                    usable = self._usable([row])
                    known[row["id"]] = (tuple(row[c.name] for c in _MARKER), usable[0] if usable else None)
        read = [trial for row in markers if (found := known.get(row[0])) and (trial := found[1]) is not None]
        study = self._study_where(studies.c.id == study_id)  # its row says which kind each trial must be
        return read if study is None else of_its_kind(study, read, self._skip)

    def related_trials(self, key: StudyKey, exclude_study_id: int | None = None,
                       sources: Collection[str] = ()) -> list[Trial]:
        """Finished trials of the studies that share ``key``'s kernel source, toolchain, arch and
        search space (any objective), except study ``exclude_study_id``: a warm start's evidence.
        `sources`: every identity of the kernel (`kernel.study_identities`; default: ``key``'s)."""
        s, t = studies.c, trials_table.c
        query = (
            sa.select(trials_table, s.space_sha256)
            .join(studies, s.id == t.study_id)
            .where(s.source_sha256.in_(_sources(key, sources)), s.toolchain == key.toolchain)
            .where(s.arch == key.arch, s.space_id == key.space_id)
            .where(sa.or_(t.state == TrialState.COMPLETE.value, final_failure(t)))
        )
        if exclude_study_id is not None:
            query = query.where(s.id != exclude_study_id)
        with self._tx(readonly=True) as conn:
            rows = conn.execute(query.order_by(t.study_id, t.number)).mappings().all()
        return self._usable(rows)

    def other_kernels_studies(self, key: StudyKey, sources: Collection[str] = ()) -> int:
        """How many static studies of *other* sources on ``key``'s toolchain, arch and search space
        the database holds (as `other_kernels_trials` picks them): at most how many a warm start of a
        study of ``key`` drew from. Not only those started before it: every run of a study warm-starts
        from the latest, and an imported study is numbered anew."""
        s = studies.c
        query = (
            sa.select(sa.func.count()).select_from(studies)
            .where(s.source_sha256.not_in(_sources(key, sources)), s.toolchain == key.toolchain)
            .where(s.arch == key.arch, s.space_id == key.space_id, s.evaluator == "static")
        )
        with self._tx(readonly=True) as conn:
            return int(conn.execute(query).scalar_one())

    def other_kernels_trials(self, key: StudyKey, max_studies: int = 32, max_rows: int = 4096,
                             sources: Collection[str] = ()) -> list[tuple[Study, list[Trial]]]:
        """Finished trials of the latest ``max_studies`` static studies of *other* sources on
        ``key``'s toolchain, arch and search space (any macros, any objective), ``max_rows`` at
        most, oldest trials of each study first: what a cross-kernel warm start learns from
        (`compileiq.search.transfer`). Rows are untrusted: each is checked as any trial read.
        `sources`: every identity of this kernel (as `related_trials`), none of them another's."""
        s, t = studies.c, trials_table.c
        latest = (
            sa.select(s.id)
            .where(s.source_sha256.not_in(_sources(key, sources)), s.toolchain == key.toolchain)
            .where(s.arch == key.arch, s.space_id == key.space_id, s.evaluator == "static")
            .order_by(s.id.desc())
            .limit(max_studies)
            .scalar_subquery()
        )
        query = (
            sa.select(trials_table, s.space_sha256)
            .join(studies, s.id == t.study_id)
            .where(t.study_id.in_(latest), sa.or_(t.state == TrialState.COMPLETE.value, final_failure(t)))
            .order_by(t.study_id.desc(), t.number)
            .limit(max_rows)
        )
        with self._tx(readonly=True) as conn:
            rows = conn.execute(query).mappings().all()
            ids = sorted({row["study_id"] for row in rows})
            found = conn.execute(sa.select(studies).where(among(conn, s.id, ids))).mappings().all() if ids else []
        grouped: dict[int, list[Trial]] = {}
        for trial in self._usable(rows):
            grouped.setdefault(trial.study_id, []).append(trial)
        result = []
        for row in found:
            try:
                study = study_record(row)
            except StoreError as error:
                self._skip(("study", row["id"]), f"study {row['id']}", str(error))
                continue
            if study.id in grouped:
                result.append((study, grouped[study.id]))
        return result

    def _usable(self, rows: Iterable[sa.RowMapping]) -> list[Trial]:
        """The rows that are usable trials; each other one is reported once and skipped."""
        usable = []
        for row in rows:
            checked = checked_trial(row, self._spaces.get(row["space_sha256"]))
            if isinstance(checked, Trial):
                usable.append(checked)
            else:
                self._skip(("trial", row["id"]), f"trial #{row['number']} of study {row['study_id']}", checked)
        return usable

    # -- export and import ---------------------------------------------------------------

    def export_study(self, name_or_id: str) -> StudyExport:
        """A study with all its trials, the builds and measurements of their machine code."""
        study = self.find_study(name_or_id)
        with self._tx(readonly=True) as conn:
            return transfer.export_rows(conn, study, self._usable, self._skip)

    def import_study(self, export: StudyExport) -> ImportSummary:
        """Merge an exported study in ONE transaction: on any error nothing changes.

        The study is matched by name (its key must be the same); trials by config key: a
        finished or running trial here is kept, one failed-to-be-retried is replaced, a missing
        one is added with the next free number. Builds and measurements are added when missing.
        Importing the same export twice changes nothing; a file whose every trial was rejected
        (`exchange.read`), or rejected but for unfinished ones, is refused (UsageError, one line) and changes nothing.
        """
        try:
            with self._tx() as conn:
                study, created = transfer.import_target(conn, export)
                added, kept, skipped = transfer.import_trials(conn, study.id, export.trials)
                if not added + kept and (lost := [why for why in export.rejected if why.startswith("trial")]):
                    # no result of it would arrive (the rest, if any, unfinished: skipped), and an empty
                    # study and its builds would be left behind: rolled back
                    rest = f" (the other {skipped} unfinished: not results)" if skipped else ""
                    raise UsageError(f"all {len(lost)} trials of study {printable(export.name)} in the file were "
                                     f"rejected{rest}, so nothing was imported; the first: {lost[0]}")
                builds_added = transfer.insert_builds(conn, export.builds)
                timed = transfer.insert_measurements(conn, export.measurements)
                if created and (export.pick is not None or export.recorded):  # a study here keeps its own runs'
                    transfer.insert_decision(conn, study.id, export.pick, export.recorded, "an export")
        except sa.exc.IntegrityError:
            raise StoreError(
                f"import of study '{export.name}' collided with a concurrent change; "
                "nothing was imported: run it again"
            ) from None
        return ImportSummary(study, created, added, kept, skipped, builds_added, timed)


# A trial row's columns but its JSON (config, metrics) and heartbeat: what `Store.trials` compares
# to tell whether a row changed since it was read.
_MARKER = tuple(c for c in trials_table.c if c.name not in ("config", "metrics", "heartbeat_at"))


def _sources(key: StudyKey, sources: Collection[str]) -> list[str]:
    """The source identities of `key`'s kernel: `sources` with `key`'s own."""
    return sorted({key.source_sha256, *sources})
