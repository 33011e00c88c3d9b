"""What each number a result records may be: a trial's metrics, and the ACF evidence taken from
them. A NaN (never worse), a string or a negative count there would forge a result, so a row of
a shared database, a row of an export and an edited ACF are all held to these ranges."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, cast

MAX_BUDGET = 100_000  # the search trials one tune may be given (--budget), so also what a provenance records
MAX_PICK_RULE = 200  # characters of a pick rule a run row, an export or an ACF may hold: more than any valid one
# the largest count (bytes, instructions, trial numbers, samples) a result may hold: far past any real
# kernel, and a float holds it exactly; a larger one (10**400: valid JSON) is a forged row, which would
# pass ``value <= inf`` and then crash the scoring that turns it into a float
MAX_COUNT = 2**40
# the unscored kernels a result names in its per-kernel tables (registers, spill bytes, occupancy:
# `evaluate.unscored`), and how long a
# name may be: far past a real file's, a bound on what a forged row makes every view read
MAX_NAMED_KERNELS = 1000
MAX_KERNEL_NAME = 200

RANGES: dict[str, tuple[type, float, float]] = {
    "spill_bytes": (int, 0, MAX_COUNT), "registers": (int, 0, 255), "occupancy": (float, 0, 1),
    "instructions": (int, 0, MAX_COUNT), "stack_bytes": (int, 0, MAX_COUNT), "block_size": (int, 1, 1024),
    "dynamic_smem": (int, 0, 2**31 - 1),  # bytes a launch may ask for (`source.launch.RANGES`)
    "trial": (int, 0, MAX_COUNT), "samples": (int, 0, MAX_COUNT), "median_ms": (float, 0, math.inf),
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
            return f"{key} = {shown(value)!r} must be {what} {bounds}"
    if "unscored" in values and (nested := unscored_problem(values["unscored"])):
        return f"unscored.{nested}"
    if "bounds" in values and (nested := bounds_problem(values["bounds"])):
        return f"bounds.{nested}"
    return None


ARCH = re.compile(r"sm_\d{2,3}[af]?")


def bounds_problem(table: Any) -> str | None:
    """For a `bounds` table (`evaluate.launch_bound`): an architecture, and at most MAX_NAMED_KERNELS
    kernel names each with [threads 1-1024, registers 0-255, static shared bytes]; else what is wrong."""
    if not isinstance(table, Mapping) or not isinstance(arch := table.get("arch"), str) or not ARCH.fullmatch(arch):
        return f" = {shown(table)!r} must be a table with an arch (sm_90)"
    kernels = table.get("kernels")
    if not isinstance(kernels, Mapping) or len(kernels) > MAX_NAMED_KERNELS:
        return f"kernels = {shown(kernels)!r} must be a table of at most {MAX_NAMED_KERNELS} kernels"
    limits = (RANGES["block_size"], RANGES["registers"], RANGES["dynamic_smem"])
    for name, facts in kernels.items():
        if not is_kernel_name(name):
            return f"kernels: {shown(name)!r} must be a kernel name of 1 to {MAX_KERNEL_NAME} printable characters"
        if not isinstance(facts, list) or len(facts) != 3 or not all(
                is_count(value) and low <= value <= high for value, (_, low, high) in zip(facts, limits, strict=True)):
            return f"kernels.{shown(name)} = {shown(facts)!r} must be [threads 1-1024, registers 0-255, shared bytes]"
    return None


def unscored_problem(table: Any) -> str | None:
    """``NAME = VALUE must be ...`` for a damaged `unscored` table (the kernels tune.toml's entries
    leave unscored: `evaluate.unscored`), else None: counts are integers, occupancy in [0, 1],
    spilling a list of kernel names. A damaged one is a damaged row, never "no entries"."""
    if not isinstance(table, Mapping):
        return f" = {shown(table)!r} must be a table"
    for key in ("spill_bytes", "kernels"):
        if not is_count(table.get(key)):
            return f"{key} = {shown(table.get(key))!r} must be an integer from 0 to {MAX_COUNT}"
    if not (is_finite(occupancy := table.get("occupancy")) and 0 <= cast(float, occupancy) <= 1):
        return f"occupancy = {shown(occupancy)!r} must be a number from 0 to 1"
    names = table.get("spilling")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return f"spilling = {shown(names)!r} must be a list of kernel names"
    for key in PER_KERNEL:
        if problem := per_kernel_problem(key, table.get(key)):
            return problem
    return per_kernel_mismatch(table)


def per_kernel_mismatch(table: Mapping[str, Any]) -> str | None:
    """For an `unscored` table whose parts are each in range: its PER_KERNEL tables name the same
    kernels, no more than it counts, and their spill bytes add up to no more than its total. A table
    that names a kernel in one but not another, or more kernels than the build had, is damaged:
    every view would name a kernel the build does not have."""
    present = [(key, table[key]) for key in PER_KERNEL if table.get(key) is not None]
    for key, named in present:
        if len(named) > table["kernels"]:
            return f"{key} names {len(named)} kernels, more than kernels = {table['kernels']}"
        if set(named) != set(present[0][1]):
            return f"{key} must name the kernels {present[0][0]} names"
    if sum((spills := table.get("kernel_spill_bytes") or {}).values()) > table["spill_bytes"]:
        return f"kernel_spill_bytes add up to {sum(spills.values())}, more than spill_bytes = {table['spill_bytes']}"
    return None


# an `unscored` table's optional tables of each unscored kernel's facts, by readable name (absent in
# rows recorded before them): its registers (shown), its spill bytes and occupancy (each held to its own)
PER_KERNEL: dict[str, tuple[type, float, float]] = {
    "registers": (int, 0, 255), "kernel_spill_bytes": (int, 0, MAX_COUNT), "kernel_occupancy": (float, 0, 1)}


def per_kernel_problem(key: str, named: Any) -> str | None:
    """For one of an `unscored` table's optional PER_KERNEL tables: at most MAX_NAMED_KERNELS kernels,
    each a printable name of 1 to MAX_KERNEL_NAME characters with a value in the key's range."""
    if named is None:
        return None
    if not isinstance(named, Mapping) or len(named) > MAX_NAMED_KERNELS:
        return f"{key} = {shown(named)!r} must be a table of at most {MAX_NAMED_KERNELS} kernels"
    kind, low, high = PER_KERNEL[key]
    for name, value in named.items():
        if not is_kernel_name(name):
            return f"{key}: {shown(name)!r} must be a kernel name of 1 to {MAX_KERNEL_NAME} printable characters"
        if not ((is_count(value) if kind is int else is_finite(value)) and low <= value <= high):
            return f"{key}.{shown(name)} = {shown(value)!r} must be {'an integer' if kind is int else 'a number'} " \
                   f"from {low:g} to {high:g}"
    return None


def is_kernel_name(name: Any) -> bool:
    """A kernel's name as a result may record it: printable text of 1 to MAX_KERNEL_NAME characters."""
    return isinstance(name, str) and 0 < len(name) <= MAX_KERNEL_NAME and name.isprintable()


def is_count(value: Any) -> bool:
    """An integer from 0 to MAX_COUNT (never True: `true` is no count)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def is_finite(value: Any) -> bool:
    """A number a float holds, finite; never raises (an integer past a float's range is not one)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past 1.8e308
        return False


def shown(value: Any, limit: int = 40) -> str:
    """The start of ``value`` as text for a message; never raises (str() refuses ints past 4300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(10**limit) < value < 10**limit:
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    try:
        return str(value)[:limit]
    except (ValueError, RecursionError):
        return f"a {type(value).__name__}"
