"""The note that occupancy was scored at an assumed launch: where tune.toml gives no launch facts
(no block_size, dynamic_smem or [launch.NAME]), each kernel's occupancy is scored at its
``__launch_bounds__`` as compiled, else 256 threads, and no dynamic shared memory, which nobody
should read as the occupancy of their real launch.

One text for every view of one decision: `tune` and the ACF (`[evidence.launch]`) say it from the
kernel's spec (`assumed_launch`); a run records that its launch was assumed (`decision_entry`), and
`show`, `show --json` and the report say it from that record and the chosen trial
(`recorded_note`, in `explain`'s notes). A run row is untrusted: only `true` marks it, and the
note's numbers are the chosen row's own, so a forged row can only add or hide this note.
"""

from __future__ import annotations

from typing import Any

from compileiq.core.records import RunRecord, Trial
from compileiq.source.entry_names import readable
from compileiq.source.spec import KernelSpec

KEY = "launch_assumed"  # the decision's key: tune.toml gave no launch facts


def assumed(spec: KernelSpec) -> bool:
    """Whether tune.toml gives no launch facts for the kernel."""
    return not (spec.block_size_given or spec.launch or spec.dynamic_smem)


def decision_entry(spec: KernelSpec) -> dict[str, Any]:
    """What a run adds to its recorded decision: that its occupancy was scored at an assumed launch."""
    return {KEY: True} if assumed(spec) else {}


def note(trial: Trial) -> str:
    """What occupancy was scored at for `trial` (its block size, or each kernel's), said as a note."""
    threads = trial.metrics.get("block_size")
    per_entry = trial.metrics.get("launch")
    scored = (", ".join(f"{facts[0]} threads per block for {readable(name)}" for name, facts in sorted(per_entry.items()))
              if isinstance(per_entry, dict) and per_entry else f"{threads} threads per block")
    return (f"tune.toml gives no launch facts: occupancy was scored at {scored} and no dynamic shared memory "
            "(the kernel's __launch_bounds__, else 256 threads); set block_size and dynamic_smem, or "
            "[launch.NAME], for the launch the code makes")


def assumed_launch(spec: KernelSpec, trial: Trial) -> str | None:
    """The note for `trial` where tune.toml gives no launch facts; None when it gives them."""
    return note(trial) if assumed(spec) else None


def recorded_note(run: RunRecord | None, trial: Trial | None) -> str | None:
    """The note for the chosen `trial` where `run` (the run whose record the views follow) recorded
    that its launch was assumed (`decision_entry`); None else (a run before this was recorded, too)."""
    recorded = run.decision.get(KEY) if run is not None and isinstance(run.decision, dict) else None
    return note(trial) if recorded is True and trial is not None else None
