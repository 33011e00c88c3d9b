"""The kernels a build compiles that tune.toml's `entries` leave unscored, and what the no-harm rules
(`eligibility`) hold a choice to for them.

`entries` narrows what the objective scores, but a -Xptxas flag (a register cap) applies to every
kernel of the translation unit: a cap that helps the scored kernel and makes twenty others spill is
no safe choice. The compiler reports every kernel's resources, so every trial records the unscored
ones' spill bytes and lowest occupancy (`metrics.unscored_facts`), and a choice may make neither
worse than the baseline's, whatever the objective. Each one's registers are recorded too: no rule
holds them (more registers without a spill or lost occupancy is no harm), but every view says what
the chosen flags did to them (`registers_text`), for whoever applies the flags to the whole file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from compileiq.core import metric_ranges
from compileiq.source.entry_names import readable


@dataclass(frozen=True)
class Unscored:
    """The static facts of the kernels tune.toml's `entries` leave unscored (a trial's `unscored`
    metric, `metrics.unscored_facts`): its -Xptxas flags build them too."""

    spill_bytes: int
    occupancy: float
    spilling: tuple[str, ...] = ()
    kernels: int = 0  # how many kernels are unscored (0: none, the table still recorded)
    # each one's registers by readable name (`registers_by_name`); None: a row recorded before them
    registers: tuple[tuple[str, int], ...] | None = None

    def as_metric(self) -> dict[str, Any]:
        """As a trial's `unscored` metric records it."""
        table: dict[str, Any] = {"spill_bytes": self.spill_bytes, "occupancy": self.occupancy,
                                 "spilling": list(self.spilling), "kernels": self.kernels}
        if self.registers is not None:
            table["registers"] = dict(self.registers)
        return table

    @classmethod
    def of(cls, metrics: Mapping[str, Any]) -> Unscored | None:
        """None where the metrics hold none (no `entries`: every kernel scored) or hold them damaged
        (`metric_ranges.unscored_problem`: a row with one is a damaged row, never read as none)."""
        table = metrics.get("unscored")
        if not isinstance(table, Mapping) or metric_ranges.unscored_problem(table) is not None:
            return None
        registers = table.get("registers")
        try:
            return cls(int(table["spill_bytes"]), float(table["occupancy"]), tuple(table["spilling"]),
                       int(table["kernels"]), None if registers is None else
                       tuple(sorted((str(name), int(count)) for name, count in registers.items())))
        except (KeyError, TypeError, ValueError, OverflowError):
            return None


def unscored_refusal(metrics: Mapping[str, Any], before: Unscored | None, against: str,
                     pareto_safe: bool) -> str | None:
    """Why a result may not win for the kernels the objective does not score (tune.toml's `entries`
    leave them out, but -Xptxas flags apply to every kernel of the file): more spill bytes, or an
    occupancy the rules would refuse for a scored kernel (`pareto_safe`: `static`, which trades none);
    None when the baseline (`before`) had no such kernels; `against` names it."""
    if before is None:
        return None
    if (now := Unscored.of(metrics)) is None:
        return "no static metrics for the kernels tune.toml's entries leave unscored, to check it by"
    if now.spill_bytes > before.spill_bytes:
        named = ", ".join(n for n in now.spilling if n not in before.spilling)[:200] or ", ".join(now.spilling)[:200]
        return (f"adds spill bytes over {against} in kernels tune.toml's entries leave unscored "
                f"({before.spill_bytes} -> {now.spill_bytes}: {named}); its flags build every kernel of the file")
    if now.occupancy < before.occupancy - 1e-9 and (now.spill_bytes >= before.spill_bytes or pareto_safe):
        return (f"lowers occupancy ({before.occupancy:.1%} -> {now.occupancy:.1%}) in kernels tune.toml's entries "
                "leave unscored; its flags build every kernel of the file")
    return None


def registers_by_name(kernels: Iterable[tuple[str, int]]) -> dict[str, int]:
    """The `registers` an `unscored` table records of (compiled name, registers) pairs: by the name
    tune.toml can give each (`readable`), the compiled name beside it where two share it (overloads);
    at most `metric_ranges.MAX_NAMED_KERNELS`, first by name, and never a name the ranges refuse (a
    recorded row must read back as undamaged)."""
    pairs = sorted(kernels)
    shown = [readable(name) for name, _ in pairs]
    named: dict[str, int] = {}
    for (name, count), plain in zip(pairs, shown, strict=True):
        key = plain if shown.count(plain) == 1 else f"{plain} ({name})"
        if metric_ranges.is_kernel_name(key) and 0 <= count <= 255 and len(named) < metric_ranges.MAX_NAMED_KERNELS:
            named.setdefault(key, count)
    return named


@dataclass(frozen=True)
class RegisterChange:
    """An unscored kernel whose registers the chosen settings change (None: not in that build)."""

    kernel: str
    baseline: int | None
    chosen: int | None

    def as_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "baseline": self.baseline, "chosen": self.chosen}

    def text(self) -> str:
        def count(n: int | None) -> str:
            return "none" if n is None else str(n)
        return f"{self.kernel[:60]} {count(self.baseline)} -> {count(self.chosen)}"


def register_changes(baseline: Mapping[str, Any], chosen: Mapping[str, Any]) -> tuple[RegisterChange, ...] | None:
    """The unscored kernels whose registers differ between the baseline's and the chosen trial's
    metrics, the largest change first; None where either records none (no `entries`, or a row
    recorded before their registers were)."""
    before, after = Unscored.of(baseline), Unscored.of(chosen)
    if before is None or after is None or before.registers is None or after.registers is None:
        return None
    was, now = dict(before.registers), dict(after.registers)
    changes = [RegisterChange(name, was.get(name), now.get(name)) for name in sorted(was.keys() | now.keys())
               if was.get(name) != now.get(name)]
    return tuple(sorted(changes, key=lambda c: -abs((c.chosen or 0) - (c.baseline or 0))))


NAMED_CHANGES = 3  # the register changes a view names, then "and N more"


def registers_text(baseline: Mapping[str, Any], chosen: Mapping[str, Any]) -> str | None:
    """`register_changes`, as one phrase: "other kernels' registers: k1 23 -> 25, and 2 more", or
    "unchanged"; None where the baseline scored every kernel or its build has no other."""
    if (found := scored(baseline)) is None or not found["unscored_kernels"]:
        return None
    if (changes := register_changes(baseline, chosen)) is None:
        return "other kernels' registers: not recorded (a result recorded before they were)"
    if not changes:
        return "other kernels' registers: unchanged"
    named = ", ".join(c.text() for c in changes[:NAMED_CHANGES])
    more = f", and {len(changes) - NAMED_CHANGES} more" if len(changes) > NAMED_CHANGES else ""
    return f"other kernels' registers: {named}{more}"


def scored(metrics: Mapping[str, Any], chosen: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """Which kernels a trial's objective scored where tune.toml's `entries` left others out (the
    baseline's metrics say it for the study): {"entries": names, "unscored_kernels": how many}; None
    where every kernel was scored. Every view describes the objective with it (`scoring_text`).
    With the `chosen` trial's metrics, what its settings did to the others' registers too
    (`registers_text`, and `registers_changed`: each `register_changes` one)."""
    if (unscored := Unscored.of(metrics)) is None:
        return None
    records = metrics.get("entries")
    names = [readable(str(r.get("name"))) for r in records if isinstance(r, Mapping) and r.get("entry")] \
        if isinstance(records, list) else []
    found: dict[str, Any] = {"entries": names, "unscored_kernels": unscored.kernels}
    if chosen is not None and (text := registers_text(metrics, chosen)) is not None:
        changes = register_changes(metrics, chosen)
        found |= {"registers": text, "registers_changed": None if changes is None else [c.as_json() for c in changes]}
    return found


def scoring_text(metrics: Mapping[str, Any], chosen: Mapping[str, Any] | None = None) -> str | None:
    """`scored`, as one phrase: what the objective scored, and what the others were held to; with
    the `chosen` trial's metrics, what its settings did to the others' registers (`registers_text`)."""
    if (found := scored(metrics, chosen)) is None:
        return None
    others = found["unscored_kernels"]
    held = f"{others} other kernel(s) of the file held to the baseline's spills and occupancy" if others else \
        "the baseline's build has no other kernel"
    registers = f"; {found['registers']}" if "registers" in found else ""
    return f"scored only {', '.join(found['entries'])} (tune.toml's entries); {held}{registers}"

