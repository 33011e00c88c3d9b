"""Whether a study's baseline is a build the project ships, as its runs recorded it.

A run with --compile-commands starts from the shipped build even where that build sets no searched
setting (its fixed flags, nvcc's -maxrregcount, are applied to every build): its baseline row then
holds the compiler defaults' values, so the rows alone cannot tell. The run records the compilation
database's file name in its decision (`decision_entry`); every view reads it back from the study's
latest deciding run (`recorded_origin`), so that show, report, --json and the run name the baseline
the same way. A run row is untrusted: a name that is not a short printable file name is not used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compileiq.core.records import RunRecord
from compileiq.results.recorded_decision import latest_decision
from compileiq.source.spec import ShippedBuild

KEY = "baseline"  # the decision's key: the compilation database's file name
MAX_ORIGIN = 255


def decision_entry(shipped: ShippedBuild | None) -> dict[str, Any]:
    """What a run adds to its recorded decision: its shipped build's origin (nothing without one)."""
    return {KEY: shipped.origin} if shipped is not None else {}


def recorded_origin(runs: Sequence[RunRecord]) -> str | None:
    """The compilation database the study's latest deciding run started from, None when it started
    from the compiler defaults (or recorded nothing usable: an older run, a damaged row)."""
    latest = latest_decision(runs)
    return decided_origin(latest.decision if latest is not None else None)


def decided_origin(decision: dict[str, Any] | None) -> str | None:
    """The compilation database a recorded decision names (the study list reads the latest run's
    decision alone), None when it names none usable."""
    origin = decision.get(KEY) if decision is not None else None
    if not isinstance(origin, str) or not 0 < len(origin) <= MAX_ORIGIN or not origin.isprintable() or "/" in origin:
        return None
    return origin
