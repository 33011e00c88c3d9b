"""What an ACF cites was built by the run that writes it.

Rows from anyone else (a shared database, `db import`, the build cache) steer the search, but the
baseline and the chosen trial of a static objective are compiled again here, past the build cache,
before an ACF cites them. A row whose rebuild disagrees is quarantined and named with who recorded
it: a search trial fails with the reason (never offered again: its config is taken) and the choice
is made again; the baseline's row is recorded again from the rebuild. The build cache then holds
the rebuild, so a poisoned cached build is replaced, not served to the next study.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from compileiq.build.compile import Build
from compileiq.core.errors import CompileIQError
from compileiq.core.records import QUARANTINED, Trial, TrialState
from compileiq.evaluate.metrics import Evaluation

COMPARED = ("spill_bytes", "registers", "occupancy", "instructions")
MAX_QUARANTINED = 1000  # rows one run sets aside before it gives up (a database of nothing but forgeries)

Rebuild = Callable[[Trial], tuple[Build, Evaluation]]


class Quarantined(CompileIQError):
    """A row the ACF would have cited disagreed with its rebuild: choose again."""


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
        if self._origins.get(trial.id) in ("compiled", "verified"):
            return
        build, fresh = self._rebuild(trial)
        if agrees(trial, build, fresh):
            self._origins[trial.id] = "verified"
            return
        said = (f"its row says {described(trial.value, trial.metrics, trial.code_hash)}, a rebuild here gives "
                f"{described(fresh.value, fresh.metrics, build.code_hash)} (recorded by {trial.worker or 'nobody'})")
        self.quarantined += 1
        if self.quarantined > MAX_QUARANTINED:
            raise CompileIQError(f"more than {MAX_QUARANTINED} rows disagree with their rebuilds; no ACF was written")
        if trial.config_key == self._baseline_key:
            self._store.finish_trial(
                trial.id, state=TrialState.COMPLETE if fresh.value is not None else TrialState.FAILED,
                value=fresh.value, reason=f"{QUARANTINED} row replaced by a rebuild: {said}"[:4000],
                metrics=fresh.metrics, code_hash=build.code_hash, compile_seconds=build.seconds)
            self._origins[trial.id] = "verified"
        else:
            self._store.finish_trial(trial.id, state=TrialState.FAILED, value=None,
                                     reason=f"{QUARANTINED}: {said}"[:4000], metrics=trial.metrics,
                                     code_hash=trial.code_hash, compile_seconds=trial.compile_seconds)
        self._note(f"trial #{trial.number} {QUARANTINED}: {said}")
        raise Quarantined(f"trial #{trial.number}: {said}")


def agrees(trial: Trial, build: Build, fresh: Evaluation) -> bool:
    """The row's value, machine code and static metrics are the rebuild's."""
    if trial.state is not TrialState.COMPLETE or fresh.value is None or trial.value is None:
        return False
    if trial.code_hash != build.code_hash or not math.isclose(trial.value, fresh.value, rel_tol=1e-9, abs_tol=1e-12):
        return False
    return all(trial.metrics.get(name) == fresh.metrics.get(name) for name in COMPARED)


def described(value: float | None, metrics: dict[str, Any], code_hash: str | None) -> str:
    shown = ", ".join(f"{name} {metrics[name]}" for name in COMPARED if name in metrics)
    return f"value {value:g} ({shown}; code {str(code_hash)[:12]})" if value is not None else "a failed build"
