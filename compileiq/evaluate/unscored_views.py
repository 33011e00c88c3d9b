"""What every view (tune's summary, show, --json, report, the ACF) says of the kernels tune.toml's
`entries` leave unscored: what the objective scored, what the rules held the others to (`held_as`,
per objective: `spills` and the other single objectives let a kernel trade occupancy for fewer spill
bytes of its own, `static` never), and what the chosen flags did to the others' registers and
occupancy (`registers_text`, `occupancy_text`): one rendering, read by each view."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from compileiq.core import metric_ranges
from compileiq.evaluate.unscored import NAMED_CHANGES, OCCUPANCY_TOLERANCE, Unscored, shown
from compileiq.source.entry_names import kernel_names


@dataclass(frozen=True)
class Change:
    """An unscored kernel whose registers (`unit` "") or occupancy ("%") the chosen settings change
    (None: not in that build)."""

    kernel: str
    baseline: float | None
    chosen: float | None
    unit: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "baseline": self.baseline, "chosen": self.chosen}

    def text(self) -> str:
        """"k1 23 -> 25", "ov 50.0% -> 12.5%"."""
        def value(n: float | None) -> str:
            return "none" if n is None else f"{n:.1%}" if self.unit == "%" else f"{n:.0f}"
        return f"{shown(self.kernel)} {value(self.baseline)} -> {value(self.chosen)}"


RegisterChange = Change  # the name its callers knew


def _changes(baseline: Mapping[str, Any], chosen: Mapping[str, Any], key: str) -> tuple[Change, ...] | None:
    """The unscored kernels whose `key` table (registers, kernel_occupancy) differs between the
    baseline's and the chosen trial's metrics, the largest change first; None where either records none."""
    before, after = Unscored.of(baseline), Unscored.of(chosen)
    was_table, now_table = (getattr(row, key) if row is not None else None for row in (before, after))
    if was_table is None or now_table is None:
        return None
    was, now = dict(was_table), dict(now_table)
    unit, tolerance = ("%", OCCUPANCY_TOLERANCE) if key == "kernel_occupancy" else ("", 0)
    changes = [Change(name, was.get(name), now.get(name), unit) for name in sorted(was.keys() | now.keys())
               if was.get(name) is None or now.get(name) is None or abs(was[name] - now[name]) > tolerance]
    return tuple(sorted(changes, key=lambda c: -abs((c.chosen or 0) - (c.baseline or 0))))


def register_changes(baseline: Mapping[str, Any], chosen: Mapping[str, Any]) -> tuple[Change, ...] | None:
    """The unscored kernels whose registers differ (`_changes`)."""
    return _changes(baseline, chosen, "registers")


def occupancy_changes(baseline: Mapping[str, Any], chosen: Mapping[str, Any]) -> tuple[Change, ...] | None:
    """The unscored kernels whose occupancy differs (`_changes`)."""
    return _changes(baseline, chosen, "kernel_occupancy")


_WHAT = {"registers": "registers", "kernel_occupancy": "occupancy"}


def _changes_text(baseline: Mapping[str, Any], chosen: Mapping[str, Any], key: str) -> str | None:
    if (unscored := Unscored.of(baseline)) is None or not unscored.kernels:
        return None
    what = f"other kernels' {_WHAT[key]}"
    if (changes := _changes(baseline, chosen, key)) is None:
        return f"{what}: not recorded (a result recorded before they were, or damaged)"
    if not changes:
        return f"{what}: unchanged"
    named = ", ".join(c.text() for c in changes[:NAMED_CHANGES])
    more = f", and {len(changes) - NAMED_CHANGES} more" if len(changes) > NAMED_CHANGES else ""
    return f"{what}: {named}{more}"


def registers_text(baseline: Mapping[str, Any], chosen: Mapping[str, Any]) -> str | None:
    """`register_changes`, as one phrase: "other kernels' registers: k1 23 -> 25, and 2 more", or
    "unchanged"; None where the baseline scored every kernel or its build has no other."""
    return _changes_text(baseline, chosen, "registers")


def occupancy_text(baseline: Mapping[str, Any], chosen: Mapping[str, Any]) -> str | None:
    """`occupancy_changes`, as one phrase: "other kernels' occupancy: ov 50.0% -> 12.5%", or
    "unchanged"; None where the baseline scored every kernel or its build has no other."""
    return _changes_text(baseline, chosen, "kernel_occupancy")


def scored(metrics: Mapping[str, Any], chosen: Mapping[str, Any] | None, objective: str) -> dict[str, Any] | None:
    """Which kernels a trial's objective scored where tune.toml's `entries` left others out (the
    baseline's metrics say it for the study): {"entries": names, "unscored_kernels": how many}; None
    where every kernel was scored. Every view describes the objective with it (`scoring_text`).
    Under the study's `objective` (required: every view says what the same rules held the others
    to, never a default's), what the rules held them to (`held`: `held_as`); with the `chosen`
    trial's metrics, what its settings did to the others' registers (`registers_text`, and
    `registers_changed`: each `register_changes` one) and occupancy (`occupancy_text`, `occupancy_changed`)."""
    if (unscored := Unscored.of(metrics)) is None:
        return None
    records = metrics.get("entries")
    names = kernel_names([str(r.get("name")) for r in records if isinstance(r, Mapping) and r.get("entry")]) \
        if isinstance(records, list) else []
    found: dict[str, Any] = {"entries": names, "unscored_kernels": unscored.kernels}
    if unscored.kernels:
        found["held"] = held_as(metrics, chosen, objective).strip()
    if chosen is not None and (text := registers_text(metrics, chosen)) is not None:
        changes = register_changes(metrics, chosen)
        found |= {"registers_text": text, "registers_changed": None if changes is None else [c.as_json() for c in changes]}
    if chosen is not None and (text := occupancy_text(metrics, chosen)) is not None:
        lower = occupancy_changes(metrics, chosen)
        found |= {"occupancy_text": text, "occupancy_changed": None if lower is None else [c.as_json() for c in lower]}
    return found


def scoring_text(metrics: Mapping[str, Any], chosen: Mapping[str, Any] | None, objective: str) -> str | None:
    """`scored`, as one phrase: what the objective scored, and what the others were held to under
    `objective`; with the `chosen` trial's metrics, what its settings did to the others' registers
    and occupancy (`registers_text`, `occupancy_text`)."""
    if (found := scored(metrics, chosen, objective)) is None:
        return None
    others = found["unscored_kernels"]
    held = f"{others} other kernel(s) of the file {found['held']}" if others else \
        "the baseline's build has no other kernel"
    changes = "".join(f"; {found[key]}" for key in ("registers_text", "occupancy_text") if key in found)
    return f"scored only {', '.join(found['entries'])} (tune.toml's entries); {held}{changes}"


def held_as(baseline: Mapping[str, Any], chosen: Mapping[str, Any] | None = None, objective: str = "static") -> str:
    """What the rules hold the unscored kernels to under `objective` (`unscored.unscored_harm`), as a
    phrase: each to its own spills and occupancy (`static`), or to its own spills and to its occupancy
    unless it spills less (any other objective: the trade it may make); or, where the baseline's (or
    the chosen trial's) row records no kernel's own, the group and why."""
    static = objective == "static"
    what = "spills and occupancy" if static else "spills"
    trade = "" if static else ", and to its occupancy unless it spills less (never to 0%)"
    rows = [Unscored.of(baseline), *([Unscored.of(chosen)] if chosen is not None else [])]
    if all(row is not None and row.per_kernel for row in rows):
        if unnamed := max(row.unnamed for row in rows if row is not None):
            return (f" held to the baseline's {what}{trade}, each on its own but {unnamed} only as one "
                    f"group (past the {metric_ranges.MAX_NAMED_KERNELS} kernels a result names, or a result "
                    "recorded before long names were)")
        return f" each held to its own {what} in the baseline{trade}"
    return f" held as one group to the baseline's {what}{trade} (a result recorded before each kernel's own were)"
