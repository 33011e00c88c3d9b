"""What each number a result records may be: a trial's metrics, and the ACF evidence taken from
them. A NaN (never worse), a string or a negative count there would forge a result, so a row of
a shared database, a row of an export and an edited ACF are all held to these ranges."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

MAX_BUDGET = 100_000  # the search trials one tune may be given (--budget), so also what a provenance records
MAX_PICK_RULE = 200  # characters of a pick rule a run row, an export or an ACF may hold: more than any valid one

RANGES: dict[str, tuple[type, float, float]] = {
    "spill_bytes": (int, 0, math.inf), "registers": (int, 0, 255), "occupancy": (float, 0, 1),
    "instructions": (int, 0, math.inf), "stack_bytes": (int, 0, math.inf), "block_size": (int, 1, 1024),
    "trial": (int, 0, math.inf), "samples": (int, 0, math.inf), "median_ms": (float, 0, math.inf),
    "iqr_ms": (float, 0, math.inf), "min_ms": (float, 0, math.inf),
}  # fmt: skip


def problem(values: Mapping[str, Any]) -> str | None:
    """``NAME = VALUE must be ...`` for the first number of ``values`` outside its range, else None."""
    for key, (kind, low, high) in RANGES.items():
        if key not in values:
            continue
        value = values[key]
        if not ((is_count(value) if kind is int else is_finite(value)) and low <= value <= high):
            what = "an integer" if kind is int else "a number"
            bounds = f"from {low:g} to {high:g}" if high < math.inf else f">= {low:g}"
            return f"{key} = {str(value)[:40]!r} must be {what} {bounds}"
    return None


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
