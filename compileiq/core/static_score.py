"""The value a static objective gives a build's metrics: one formula, for the evaluator that records
a trial's value and for the checks that hold a recorded value (a shared row, an export) to its own
metrics (a forged value, -5 on a row that spills 3052 bytes, would steer the search and the views)."""

from __future__ import annotations

METRICS = ("spill_bytes", "registers", "occupancy", "instructions")  # what `score` reads, in its order


def score(objective: str, spill_bytes: int, registers: int, occupancy: float, instructions: int) -> float | None:
    """Lower is better for every one; None for a name that is no static objective (see
    `compileiq.evaluate.metrics.objective_value`, which explains each)."""
    shortfall = 1.0 - occupancy
    if objective == "spills":
        return float(spill_bytes)
    if objective == "registers":
        return float(registers)
    if objective == "occupancy":
        return round(shortfall, 6)
    if objective == "instructions":
        return float(instructions)
    if objective == "static":
        return float(spill_bytes * 1000 + round(shortfall * 1000))
    return None
