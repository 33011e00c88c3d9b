"""What an ACF cites was built by the run that writes it.

Rows from anyone else (a shared database, `db import`, the build cache) steer the search, but the
baseline and the chosen trial of a static objective are compiled again here, past the build cache,
before an ACF cites them. A row whose rebuild disagrees is quarantined and named with who recorded
it: a search trial fails with the reason (never offered again: its config is taken) and the choice
is made again; the baseline's row is replaced by the rebuild (origin "replaced": what every view
and the ACF then say of it). The build cache then holds the rebuild, so a poisoned cached build is
replaced, not served to the next study. A row recorded before names of internal linkage were the
same on every build (build/linkage.py) differs from its rebuild in those names and the code hash
over them alone: it is brought up to date from the rebuild, not quarantined. So is a row recorded
before its `unscored` table (the kernels tune.toml's `entries` leave unscored, which the no-harm rules
read: evaluate/unscored.py), or each kernel's table of it, was: what it records must be the rebuild's.

A database can hold many forged rows, each claiming a better result than its config gives. Checked
one per pass (rebuild the winner, quarantine it, decide again, rebuild the next winner), 40 of them
cost a run two minutes and MAX_QUARANTINED of them most of an hour. So once a row has disagreed, the
next decision first rebuilds in one batch (`sweep`) every complete row this run did not build that
could still be chosen or cited (`contenders`: no row this run built or checked that may win beats it
on every objective) and quarantines all that disagree: a database full of forgeries costs one batch
of compiles on all workers (as parallel as they are) and one more decision, each further round only
while new disagreements appear, at most MAX_SWEEPS rounds (then one row a pass, as before).

A row is judged against its rebuild once a run: one this run quarantined is never judged again as if its
quarantine (a failed row) were what its recorder claimed. Where a later decision reads it (a
simplification's drop), it is replaced by the rebuild made when it was quarantined, and its reason keeps
the first judgment: the forged claim and who recorded it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from compileiq.build.compile import Build
from compileiq.build.linkage import stable_name
from compileiq.core.errors import CompileIQError
from compileiq.core.records import QUARANTINED, Trial, TrialState
from compileiq.core.static_score import StaticMetrics
from compileiq.evaluate.metrics import Evaluation
from compileiq.evaluate.unscored import unscored_difference, unscored_predates
from compileiq.results.pareto import dominates, values_of
from compileiq.tuning.runner import TRANSIENT_KEY

_THIS_RUNS = ("compiled", "verified", "replaced")  # origins of rows this run built or checked
# what a rebuild must reproduce of a static row: every static metric it records, stack_bytes too,
# which no score reads (a row forged only there would put a false stack frame in the ACF's evidence);
# and the `unscored` table the no-harm rules read (`unscored_difference`)
COMPARED = StaticMetrics.FIELDS
MAX_QUARANTINED = 1000  # rows one run sets aside before it gives up (a database of nothing but forgeries)
MAX_SWEEPS = 3  # batches of every row that could still be chosen, one after each decision that found a forgery

Rebuild = Callable[[Sequence[Trial]], list[tuple[Build, Evaluation]]]  # in one batch, in order


class Quarantined(CompileIQError):
    """A row the ACF would have cited disagreed with its rebuild: choose again."""


class Rerecorded(Quarantined):
    """A row was brought up to date from its rebuild (its names of internal linkage, or a compile an
    earlier run lost to a timeout or crash that builds now): choose again from the rows as they now
    are, so that the ACF cites the rebuild's code hash."""


class Verifier:
    """Checks the rows an ACF cites against rebuilds made in this run (`check`), and the rows a
    decision reads (`check_results`); each call rebuilds its rows in one batch on the workers.

    Only a rebuild that the same inputs repeat (a build, or a compile error) is evidence: one that
    timed out or crashed here (load, a lost worker) checks nothing and accuses nobody. The row is
    left as recorded; a cited row then stops the run (no ACF cites an unchecked row), a row a decision
    reads is left out of it (its step has no result: a setting whose drop has none stays, as the
    winner, which was checked, has it)."""

    def __init__(self, store: Any, rebuild: Rebuild, origins: dict[int, str], baseline_key: str,
                 note: Callable[[str], None]) -> None:
        self._store, self._rebuild, self._origins = store, rebuild, origins
        self._baseline_key, self._note = baseline_key, note
        self.quarantined = self.sweeps = 0
        # rows this run quarantined and failed: what their row said and the rebuild that disagreed
        self._set_aside: dict[int, tuple[str, Build, Evaluation]] = {}
        self._suspect = False  # a row disagreed with its rebuild since the last sweep

    def sweep(self, trials: Sequence[Trial], refuse: Callable[[Trial], str | None], objectives: Sequence[str]) -> bool:
        """After a row disagreed with its rebuild, before the choice is made again: rebuild in one batch
        every complete row of `trials` that this run did not build and that could still be chosen or cited
        (`contenders`, the best MAX_QUARANTINED of them), and judge each as `check` does (one that agrees is
        verified, one that disagrees quarantined: all of them in this one round). A rebuild that timed out
        or crashed leaves its row as recorded (`check` tries again if the ACF would cite it). Returns
        whether a row was rewritten (the caller reads the study again)."""
        if not self._suspect or self.sweeps >= MAX_SWEEPS:
            return False
        self._suspect = False
        checked = {t.id for t in trials if self._origins.get(t.id) in _THIS_RUNS}
        pending = [t for t in contenders(trials, checked, refuse, objectives)
                   if t.id not in self._set_aside][:MAX_QUARANTINED]
        if not pending:
            return False
        self.sweeps += 1
        self._note(f"a row disagreed with its rebuild: rebuilding in one batch the {len(pending)} other row(s) this run "
                   "did not build that could still be chosen, to check them before deciding again")
        rewritten = False
        for trial, (build, fresh) in zip(pending, self._rebuild(pending), strict=True):
            if build.status.deterministic:
                try:
                    self._judge(trial, build, fresh, trial.config_key == self._baseline_key, failed_too=False)
                except Quarantined:
                    rewritten = True
        self._suspect = False  # what this round quarantined needs no round of its own
        return rewritten

    def check(self, trials: Sequence[Trial]) -> None:
        """Return when this run built each of ``trials`` or a rebuild agrees with its row; else
        quarantine the rows that disagree and raise Quarantined. A row whose rebuild timed out or
        crashed is left as recorded and the run stops (CompileIQError): an ACF cites it."""
        unchecked = self._check_all(trials, failed_too=False)
        if unchecked:
            trial, build = unchecked[0]
            raise CompileIQError(
                f"could not rebuild trial #{trial.number} to check it before the ACF cites it: {_failure(build)}; "
                "its row is left as recorded and no ACF was written (run again on a less loaded machine, or raise "
                "compile_timeout_s in tune.toml)")

    def check_results(self, trials: Sequence[Trial]) -> list[Trial]:
        """The rows a decision reads (a simplification's drops, the ablation's steps), complete or failed,
        each this run's or checked against its rebuild: one that disagrees is replaced by the rebuild (as
        the baseline's is) and the decision made again (Quarantined), so that it reads what this run
        built. Failing it instead would leave its config with no result, and a drop with no result is no
        drop: the setting its author wanted kept would stay. Returns the rows the decision may read: one
        whose rebuild timed out or crashed here is left out (and as recorded)."""
        unchecked = {trial.id for trial, _ in self._check_all(trials, failed_too=True, replace_all=True)}
        return [trial for trial in trials if trial.id not in unchecked]

    def _check_all(self, trials: Sequence[Trial], failed_too: bool,
                   replace_all: bool = False) -> list[tuple[Trial, Build]]:
        """Rebuild the rows this run did not build, in one batch, and judge each; raise the first
        Quarantined once every row is judged. Returns the rows whose rebuild checked nothing."""
        pending = list({t.id: t for t in trials if self._origins.get(t.id) not in _THIS_RUNS}.values())
        raised: Quarantined | None = None
        unchecked: list[tuple[Trial, Build]] = []
        for trial in [t for t in pending if t.id in self._set_aside]:  # judged already: not again
            pending.remove(trial)
            if replace_all or trial.config_key == self._baseline_key:
                replaced = self._replace_set_aside(trial)  # each of them, not only the first
                raised = raised or replaced
            else:  # a row an ACF would cite that this run quarantined: choose again, never cite it
                raised = raised or Quarantined(f"trial #{trial.number}: {QUARANTINED} above")
        for trial, (build, fresh) in zip(pending, self._rebuild(pending), strict=True):
            if not build.status.deterministic:
                unchecked.append((trial, build))
                if failed_too:  # else the run stops, saying so
                    self._note(f"trial #{trial.number} could not be checked: its rebuild here gave {_failure(build)} "
                               "(no evidence either way); its row is left as recorded, and the decision does without it")
                continue
            try:
                self._judge(trial, build, fresh, replace_all or trial.config_key == self._baseline_key, failed_too)
            except Quarantined as error:
                raised = raised or error
        if raised is not None and not (unchecked and not failed_too):
            raise raised
        return unchecked

    def _bring_up_to_date(self, trial: Trial, fresh: Evaluation, code_hash: str | None, why: str) -> NoReturn:
        """Record a row that agrees in all it records with its rebuild's metrics (an older release's
        row, no one's forgery): its value and reason kept, verified; Rerecorded says `why`."""
        self._store.finish_trial(trial.id, state=TrialState.COMPLETE, value=trial.value, reason=trial.reason,
                                 metrics=fresh.metrics, code_hash=code_hash, compile_seconds=trial.compile_seconds)
        self._origins[trial.id] = "verified"
        raise Rerecorded(f"trial #{trial.number}: {why}")

    def _judge(self, trial: Trial, build: Build, fresh: Evaluation, replace: bool, failed_too: bool) -> None:
        if lost_to_chance(trial):  # an earlier compile timed out or crashed: the rebuild is its result
            self._store.finish_trial(
                trial.id, state=TrialState.COMPLETE if fresh.value is not None else TrialState.FAILED,
                value=fresh.value, reason=fresh.reason, metrics=fresh.metrics, code_hash=build.code_hash,
                compile_seconds=build.seconds)
            self._origins[trial.id] = "compiled"
            raise Rerecorded(f"trial #{trial.number}: its compile was lost to a timeout or crash; rebuilt")
        if agrees(trial, build, fresh) or (failed_too and failed_alike(trial, fresh)):
            self._origins[trial.id] = "verified"
            return
        if renamed_only(trial, build, fresh):
            self._bring_up_to_date(trial, fresh, build.code_hash, "recorded with its scratch folder's names of internal linkage")
        if predates_unscored(trial, build, fresh):
            self._bring_up_to_date(trial, fresh, trial.code_hash, "recorded before its unscored kernels' table was")
        unscored = unscored_difference(trial.metrics, fresh.metrics) if fresh.value is not None else None
        said = (f"its row says {described(trial.value, trial.metrics, trial.code_hash)}, a rebuild here gives "
                f"{described(fresh.value, fresh.metrics, build.code_hash)}{f'; {unscored}' if unscored else ''} "
                f"(recorded by {trial.worker or 'nobody'})")
        self.quarantined += 1
        self._suspect = True
        if self.quarantined > MAX_QUARANTINED:
            raise CompileIQError(f"more than {MAX_QUARANTINED} rows disagree with their rebuilds; no ACF was written")
        if replace:
            self._store.finish_trial(
                trial.id, state=TrialState.COMPLETE if fresh.value is not None else TrialState.FAILED,
                value=fresh.value, reason=f"{QUARANTINED} row replaced by a rebuild: {said}"[:4000],
                metrics=fresh.metrics, code_hash=build.code_hash, compile_seconds=build.seconds)
            self._origins[trial.id] = "replaced"  # this run's rebuild: no longer the row it checked
        else:
            self._store.finish_trial(trial.id, state=TrialState.FAILED, value=None,
                                     reason=f"{QUARANTINED}: {said}"[:4000], metrics=trial.metrics,
                                     code_hash=trial.code_hash, compile_seconds=trial.compile_seconds)
            self._set_aside[trial.id] = (said, build, fresh)
        self._note(f"trial #{trial.number} {QUARANTINED}: {said}")
        raise Quarantined(f"trial #{trial.number}: {said}")

    def _replace_set_aside(self, trial: Trial) -> Quarantined:
        """A row this run quarantined that a decision reads: replaced by the rebuild that disagreed with
        it, its reason still what the row claimed and who recorded it (the decision is made again)."""
        said, build, fresh = self._set_aside.pop(trial.id)
        self._store.finish_trial(
            trial.id, state=TrialState.COMPLETE if fresh.value is not None else TrialState.FAILED,
            value=fresh.value, reason=f"{QUARANTINED} row replaced by a rebuild: {said}"[:4000],
            metrics=fresh.metrics, code_hash=build.code_hash, compile_seconds=build.seconds)
        self._origins[trial.id] = "replaced"
        self._note(f"trial #{trial.number}, {QUARANTINED} above, is read as its rebuild")
        return Quarantined(f"trial #{trial.number}: replaced by its rebuild")


def contenders(trials: Sequence[Trial], checked: set[int], refuse: Callable[[Trial], str | None],
               objectives: Sequence[str]) -> list[Trial]:
    """The complete rows not `checked` (by id) that no checked row that may win beats on every objective,
    best first: the search's winner, a candidate to time (better than the choice) or a point of a front
    can only be one of them or a checked row. One objective: each row whose value is no worse than the
    best checked one's (no bound where none may win)."""
    def vector(trial: Trial) -> tuple[float, ...] | None:
        if len(objectives) > 1:
            return values_of(trial, objectives)
        return (trial.value,) if trial.state is TrialState.COMPLETE and trial.value is not None else None

    scored = [(values, t) for t in trials if (values := vector(t)) is not None]
    bounds = [values for values, t in scored if t.id in checked and refuse(t) is None]
    if len(objectives) == 1 and bounds:
        bounds = [min(bounds)]
    open_ = [(values, t) for values, t in scored if t.id not in checked
             and not any(dominates(bound, values) for bound in bounds)]
    return [t for _, t in sorted(open_, key=lambda pair: (pair[0], pair[1].number))]


def lost_to_chance(trial: Trial) -> bool:
    """A failed row whose compile timed out or crashed (`runner.TRANSIENT_KEY`): not a result of its
    settings, so a rebuild that gives one replaces it without accusing anyone."""
    return trial.state is TrialState.FAILED and TRANSIENT_KEY in trial.metrics


def _failure(build: Build) -> str:
    first = (build.message or "").strip().splitlines()[:1]
    return f"{build.status.value}" + (f" ({first[0][:200]})" if first else "")


def agrees(trial: Trial, build: Build, fresh: Evaluation) -> bool:
    """The row's value, machine code and static metrics are the rebuild's, its `unscored` table too."""
    return (trial.code_hash == build.code_hash and _same_result(trial, fresh)
            and unscored_difference(trial.metrics, fresh.metrics) is None
            and not unscored_predates(trial.metrics, fresh.metrics))


def predates_unscored(trial: Trial, build: Build, fresh: Evaluation) -> bool:
    """The row is its rebuild in all it records, but was recorded before its `unscored` table, or each
    kernel's table of it, was (`unscored_predates`): brought up to date from the rebuild."""
    return (trial.code_hash == build.code_hash and _same_result(trial, fresh)
            and unscored_difference(trial.metrics, fresh.metrics) is None
            and unscored_predates(trial.metrics, fresh.metrics))


def failed_alike(trial: Trial, fresh: Evaluation) -> bool:
    """A failed row whose rebuild fails too (its reason may name this run's folders)."""
    return trial.state is TrialState.FAILED and fresh.value is None


def _same_result(trial: Trial, fresh: Evaluation) -> bool:
    """A complete row whose value and compared static metrics are the rebuild's."""
    if trial.state is not TrialState.COMPLETE or fresh.value is None or trial.value is None:
        return False
    if not math.isclose(trial.value, fresh.value, rel_tol=1e-9, abs_tol=1e-12):
        return False
    return all(trial.metrics.get(name) == fresh.metrics.get(name) for name in COMPARED)


def renamed_only(trial: Trial, build: Build, fresh: Evaluation) -> bool:
    """The row differs from its rebuild only in names nvcc gave after the path of the folder it was
    compiled in (recorded before build/linkage.py made them the same on every build) and in the
    code hash over those names: its value, static metrics and entries, so renamed, are the rebuild's."""
    if not _same_result(trial, fresh):
        return False
    recorded, rebuilt = trial.metrics.get("entries"), fresh.metrics.get("entries")
    if not isinstance(recorded, list) or not isinstance(rebuilt, list) or len(recorded) != len(rebuilt):
        return False
    if not all(isinstance(e, dict) and isinstance(e.get("name"), str) for e in recorded):
        return False
    renamed = [{**e, "name": stable_name(e["name"])} for e in recorded]
    return renamed != recorded and renamed == rebuilt


def described(value: float | None, metrics: dict[str, Any], code_hash: str | None) -> str:
    shown = ", ".join(f"{name} {metrics[name]}" for name in COMPARED if name in metrics)
    return f"value {value:g} ({shown}; code {str(code_hash)[:12]})" if value is not None else "a failed build"
