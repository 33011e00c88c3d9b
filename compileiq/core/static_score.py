"""A build's static metrics and the value a static objective gives them: one formula, for the
evaluator that records a trial's value and for the checks that hold a recorded value (a shared row,
an export, an ACF's evidence) to its own metrics (a forged value, -5 on a row that spills 3052
bytes, would steer the search and the views).

`StaticMetrics.of` is the one reader of the metrics a DB row, an ACF table or an export holds:
None where one the score reads is missing or out of range (`metric_ranges`); `StaticMetrics.recorded`
reads an ACF's evidence the same way, where an older ACF records no instruction count (the gate
reads its evidence, rebuilds and reports with these names only). Two sets of names
are kept apart: `SCORED`, what the score reads, and `FIELDS`, every static metric of a build (what
a rebuild must reproduce, `tuning.verify`); they differ in stack_bytes, which no score reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from compileiq.core import metric_ranges


@dataclass(frozen=True)
class StaticMetrics:
    """Whole-build static estimates: sums over functions, or the worst entry where a sum is meaningless.

    Spill bytes count every function ptxas reports: the entries and the device functions it
    compiled on their own (non-inlined callees spill in their own frames)."""

    spill_bytes: int
    registers: int
    occupancy: float
    instructions: int
    stack_bytes: int = 0  # the largest entry's stack frame: recorded and reproduced, never scored

    SCORED: ClassVar[tuple[str, ...]] = ("spill_bytes", "registers", "occupancy", "instructions")
    FIELDS: ClassVar[tuple[str, ...]] = ("spill_bytes", "registers", "occupancy", "instructions", "stack_bytes")
    LABELS: ClassVar[dict[str, str]] = {"spill_bytes": "spill bytes", "registers": "registers",
                                        "occupancy": "occupancy", "instructions": "instructions",
                                        "stack_bytes": "stack bytes"}

    @classmethod
    def of(cls, row: Any) -> StaticMetrics | None:
        """The metrics a trial's row, an ACF's evidence table or an export holds; None when one the
        score reads is missing, or any is out of its range (stack_bytes, when absent, is 0)."""
        if not isinstance(row, Mapping) or not all(name in row for name in cls.SCORED):
            return None
        found = {name: row[name] for name in cls.FIELDS if name in row}
        if metric_ranges.problem(found) is not None:
            return None
        return cls(int(found["spill_bytes"]), int(found["registers"]), float(found["occupancy"]),
                   int(found["instructions"]), int(found.get("stack_bytes", 0)))

    @classmethod
    def recorded(cls, row: Any) -> tuple[StaticMetrics, bool] | None:
        """The metrics an ACF's evidence table records, read as `of` reads them, and whether it
        records the instruction count: an ACF written before counts were recorded has none (read as
        0 here: the caller, the gate, checks nothing against it). None as `of` gives None."""
        counted = isinstance(row, Mapping) and "instructions" in row
        metrics = cls.of(row if counted or not isinstance(row, Mapping) else {**row, "instructions": 0})
        return None if metrics is None else (metrics, counted)

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.FIELDS}


assert StaticMetrics.FIELDS == tuple(f.name for f in fields(StaticMetrics))  # one order, the dataclass's
SCORED = StaticMetrics.SCORED  # what `score` reads
METRICS = SCORED  # its earlier name


def score(objective: str, metrics: StaticMetrics) -> float | None:
    """Lower is better for every one; None for a name that is no static objective (see
    `compileiq.evaluate.metrics.objective_value`, which explains each)."""
    shortfall = 1.0 - metrics.occupancy
    if objective == "spills":
        return float(metrics.spill_bytes)
    if objective == "registers":
        return float(metrics.registers)
    if objective == "occupancy":
        return round(shortfall, 6)
    if objective == "instructions":
        return float(metrics.instructions)
    if objective == "static":
        return float(metrics.spill_bytes * 1000 + round(shortfall * 1000))
    return None
