"""What an ACF cites was built by the run that writes it.

Rows from anyone else (a shared database, `db import`, the build cache) steer the search, but the
baseline and the chosen trial of a static objective are compiled again here, past the build cache,
before an ACF cites them. A row whose rebuild disagrees is quarantined and named with who recorded
it: a search trial fails with the reason (never offered again: its config is taken) and the choice
is made again; the baseline's row is replaced by the rebuild (origin "replaced": what every view
and the ACF then say of it). The build cache then holds the rebuild, so a poisoned cached build is
replaced, not served to the next study. A row recorded before names of internal linkage were the
same on every build (build/linkage.py) differs from its rebuild in those names and the code hash
over them alone: it is brought up to date from the rebuild, not quarantined.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from compileiq.build.compile import Build
from compileiq.build.linkage import stable_name
from compileiq.core.errors import CompileIQError
from compileiq.core.records import QUARANTINED, Trial, TrialState
from compileiq.evaluate.metrics import Evaluation

COMPARED = ("spill_bytes", "registers", "occupancy", "instructions")
MAX_QUARANTINED = 1000  # rows one run sets aside before it gives up (a database of nothing but forgeries)

Rebuild = Callable[[Trial], tuple[Build, Evaluation]]


class Quarantined(CompileIQError):
    """A row the ACF would have cited disagreed with its rebuild: choose again."""


class Rerecorded(Quarantined):
    """A row was brought up to date from its rebuild (its names of internal linkage): choose
    again from the rows as they now are, so that the ACF cites the rebuild's code hash."""


class Verifier:
    """Checks the rows an ACF cites against rebuilds made in this run (`check`)."""

    def __init__(self, store: Any, rebuild: Rebuild, origins: dict[int, str], baseline_key: str,
                 note: Callable[[str], None]) -> None:
        self._store, self._rebuild, self._origins = store, rebuild, origins
        self._baseline_key, self._note = baseline_key, note
        self.quarantined = 0

    def check(self, trial: Trial) -> None:
        """Return when this run built ``trial`` or a rebuild agrees with its row; else quarantine
        the row and raise Quarantined."""
        self._check(trial, replace=trial.config_key == self._baseline_key, failed_too=False)

    def check_result(self, trial: Trial) -> None:
        """`check` for a row a decision reads (a simplification's drop), complete or failed: one that
        disagrees is replaced by the rebuild (as the baseline's is), so that the decision, made again,
        reads what this run built. Failing it instead would leave its config with no result, and a
        drop with no result is no drop: the setting its author wanted kept would stay."""
        self._check(trial, replace=True, failed_too=True)

    def _check(self, trial: Trial, replace: bool, failed_too: bool) -> None:
        if self._origins.get(trial.id) in ("compiled", "verified", "replaced"):
            return
        build, fresh = self._rebuild(trial)
        if agrees(trial, build, fresh) or (failed_too and failed_alike(trial, fresh)):
            self._origins[trial.id] = "verified"
            return
        if renamed_only(trial, build, fresh):
            self._store.finish_trial(trial.id, state=TrialState.COMPLETE, value=trial.value, reason=trial.reason,
                                     metrics=fresh.metrics, code_hash=build.code_hash,
                                     compile_seconds=trial.compile_seconds)
            self._origins[trial.id] = "verified"
            raise Rerecorded(f"trial #{trial.number}: recorded with its scratch folder's names of internal linkage")
        said = (f"its row says {described(trial.value, trial.metrics, trial.code_hash)}, a rebuild here gives "
                f"{described(fresh.value, fresh.metrics, build.code_hash)} (recorded by {trial.worker or 'nobody'})")
        self.quarantined += 1
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
        self._note(f"trial #{trial.number} {QUARANTINED}: {said}")
        raise Quarantined(f"trial #{trial.number}: {said}")


def agrees(trial: Trial, build: Build, fresh: Evaluation) -> bool:
    """The row's value, machine code and static metrics are the rebuild's."""
    return trial.code_hash == build.code_hash and _same_result(trial, fresh)


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
