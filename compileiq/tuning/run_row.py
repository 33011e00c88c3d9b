"""What a run's row records besides its choice: what it started from (its shipped build's
compilation database, `shipped_origin`; its sources, `recorded_sources`), on the row of a run that
chose and on that of one its baseline stopped (`baseline.BaselineError`), so that every view names
a study's baseline the same way whether or not a run of it ever chose."""

from __future__ import annotations

from typing import Any

from compileiq.core.errors import CompileIQError
from compileiq.core.records import UNCHOSEN, first_line
from compileiq.results import launch_note, recorded_sources, shipped_origin
from compileiq.source.spec import KernelSpec, SourceBundle
from compileiq.store import Store
from compileiq.tuning.baseline import BaselineError
from compileiq.tuning.request import searched

BASELINE_FAILED = "its baseline failed"


def started_from(kernel: KernelSpec, bundle: SourceBundle) -> dict[str, Any]:
    """What a run adds to its recorded decision of what it started from (its launch assumed, too)."""
    return (shipped_origin.decision_entry(kernel.shipped) | recorded_sources.decision_entry(bundle, kernel)
            | launch_note.decision_entry(kernel))


def record_stop(store: Store, study_id: int, run_id: int | None, error: BaseException, kernel: KernelSpec,
                bundle: SourceBundle) -> None:
    """Finish the row of a run its baseline stopped (`error`: any other stop leaves it as it is):
    why it stopped, and a decision that chose nothing (`records.unchosen`) but records what it
    started from. A database that refuses the write leaves the row unfinished: `error` is what
    the user hears."""
    if run_id is None or not isinstance(error, BaselineError):
        return
    try:
        store.finish_run(run_id, f"{BASELINE_FAILED}: {first_line(str(error), 200)}", searched(store.trials(study_id)),
                         0, started_from(kernel, bundle) | {UNCHOSEN: BASELINE_FAILED})
    except CompileIQError:
        pass
