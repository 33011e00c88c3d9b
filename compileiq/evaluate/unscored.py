"""The kernels a build compiles that tune.toml's `entries` leave unscored, and what the no-harm rules
(`eligibility`) hold a choice to for them.

`entries` narrows what the objective scores, but a -Xptxas flag (a register cap) applies to every
kernel of the translation unit: a cap that helps the scored kernel and makes twenty others spill is
no safe choice. The compiler reports every kernel's resources, so every trial records the unscored
ones' spill bytes and occupancy, each kernel's (`metrics.unscored_facts`), and a choice may make
neither worse for any one of them than the baseline made it, whatever the objective
(`unscored_refusal`): one kernel's spills removed never hide another's new ones. Rows recorded
before each kernel's were hold the group (spill bytes summed, the lowest occupancy) and say so.
Each one's registers are recorded too: no rule holds them (more registers without a spill or lost
occupancy is no harm), but every view says what the chosen flags did to them, and to their occupancy
(`unscored_views`), for whoever applies the flags to the whole file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from compileiq.core import metric_ranges
from compileiq.source.entry_names import kernel_names


@dataclass(frozen=True)
class Unscored:
    """The static facts of the kernels tune.toml's `entries` leave unscored (a trial's `unscored`
    metric, `metrics.unscored_facts`): its -Xptxas flags build them too."""

    spill_bytes: int
    occupancy: float
    spilling: tuple[str, ...] = ()
    kernels: int = 0  # how many kernels are unscored (0: none, the table still recorded)
    # each one's registers by readable name (`by_name`); None: a row recorded before them
    registers: tuple[tuple[str, int], ...] | None = None
    # each one's spill bytes and occupancy, as `registers`; None: a row recorded before them
    kernel_spill_bytes: tuple[tuple[str, int], ...] | None = None
    kernel_occupancy: tuple[tuple[str, float], ...] | None = None

    @property
    def per_kernel(self) -> bool:
        """Each kernel's spill bytes and occupancy are recorded: the rules hold each to its own."""
        return self.kernel_spill_bytes is not None and self.kernel_occupancy is not None

    @property
    def unnamed(self) -> int:
        """How many of the kernels no per-kernel table names (past MAX_NAMED_KERNELS, or a row recorded
        before a long name was given a label): the rules hold those as one group."""
        return self.kernels - min(len(self.kernel_spill_bytes or ()), len(self.kernel_occupancy or ()))

    def as_metric(self) -> dict[str, Any]:
        """As a trial's `unscored` metric records it."""
        table: dict[str, Any] = {"spill_bytes": self.spill_bytes, "occupancy": self.occupancy,
                                 "spilling": list(self.spilling), "kernels": self.kernels}
        for key in metric_ranges.PER_KERNEL:
            if (named := getattr(self, key)) is not None:
                table[key] = dict(named)
        return table

    @classmethod
    def of(cls, metrics: Mapping[str, Any]) -> Unscored | None:
        """None where the metrics hold none (no `entries`: every kernel scored) or hold them damaged
        (`metric_ranges.unscored_problem`: a row with one is a damaged row, never read as none)."""
        table = metrics.get("unscored")
        if not isinstance(table, Mapping) or metric_ranges.unscored_problem(table) is not None:
            return None
        def named(key: str, kind: type) -> Any:
            found = table.get(key)
            return None if found is None else tuple(sorted((str(name), kind(value)) for name, value in found.items()))
        try:
            return cls(int(table["spill_bytes"]), float(table["occupancy"]), tuple(table["spilling"]),
                       int(table["kernels"]), named("registers", int), named("kernel_spill_bytes", int),
                       named("kernel_occupancy", float))
        except (KeyError, TypeError, ValueError, OverflowError):
            return None


NAMED_CHANGES = 3  # the kernels a harm or a register change names, then "and N more"


@dataclass(frozen=True)
class Worse:
    """One kernel the rules refuse a build for (`kernel`; "" for the group), its baseline's number
    and this build's: spill bytes, or occupancy."""

    kernel: str
    baseline: float
    now: float

    def text(self, unit: str) -> str:
        """"heavy_k 0 -> 1276 B", "bounded_k 100.0% -> 62.5%"."""
        if unit == "B":
            return f"{shown(self.kernel) + ' ' if self.kernel else ''}{self.baseline:.0f} -> {self.now:.0f} B"
        return f"{shown(self.kernel) + ' ' if self.kernel else ''}{self.baseline:.1%} -> {self.now:.1%}"

    def measured(self, unit: str, baseline: str) -> str:
        """As the gate says both builds measured it: "heavy_k: defaults 0 B, ACF 1276 B"."""
        def value(number: float) -> str:
            return f"{number:.0f} B" if unit == "B" else f"{number:.1%}"
        return f"{shown(self.kernel) + ': ' if self.kernel else ''}{baseline} {value(self.baseline)}, ACF {value(self.now)}"


@dataclass(frozen=True)
class Harm:
    """What a build does to the kernels tune.toml's `entries` leave unscored that the rules refuse:
    more spill bytes (`unit` "B") or lost occupancy ("%"), each kernel it does it to, or the
    group's where a row records no kernel's own (`grouped`, `spilling`: the kernels that spill anew)."""

    unit: str
    kernels: tuple[Worse, ...]
    grouped: bool = False
    spilling: str = ""

    def text(self) -> str:
        """"heavy_k 0 -> 1276 B", a few named, then "and N more"."""
        named = ", ".join(k.text(self.unit) for k in self.kernels[:NAMED_CHANGES])
        more = f", and {len(self.kernels) - NAMED_CHANGES} more" if len(self.kernels) > NAMED_CHANGES else ""
        return named + more + (f": {self.spilling}" if self.spilling else "")

    def measured(self, baseline: str) -> str:
        """`Worse.measured` of a few, then "and N more"."""
        named = "; ".join(k.measured(self.unit, baseline) for k in self.kernels[:NAMED_CHANGES])
        more = f"; and {len(self.kernels) - NAMED_CHANGES} more" if len(self.kernels) > NAMED_CHANGES else ""
        return f"{named}{more} ({'unscored kernels as one group' if self.grouped else 'unscored kernels'})"


def unscored_harm(now: Unscored, before: Unscored, pareto_safe: bool) -> Harm | None:
    """Kernel by kernel where both record each one's facts: a kernel that spills more than it did in
    the baseline, or loses occupancy as the rules refuse for a scored kernel (to 0%, or with no fewer
    spill bytes of its own, or at all under `pareto_safe`). Then the rest as one group: the spill
    bytes of the kernels both do not name (only one build has them: another instance of a macro; or
    none names them: past MAX_NAMED_KERNELS), so that no named kernel's savings hide their new
    spills, and the lowest occupancy; the whole group for rows recorded before each kernel's were."""
    rest_was, rest_now = before.spill_bytes, now.spill_bytes
    if now.per_kernel and before.per_kernel:
        spills_was, spills_now = dict(before.kernel_spill_bytes or ()), dict(now.kernel_spill_bytes or ())
        more = tuple(Worse(name, spills_was[name], count) for name, count in now.kernel_spill_bytes or ()
                     if name in spills_was and count > spills_was[name])
        if more:
            return Harm("B", more)
        was = dict(before.kernel_occupancy or ())
        lower = tuple(Worse(name, was[name], occupancy) for name, occupancy in now.kernel_occupancy or ()
                      if name in was and occupancy < was[name] - OCCUPANCY_TOLERANCE and (
                          occupancy == 0.0 or pareto_safe or spills_now.get(name, 0) >= spills_was.get(name, 0)))
        if lower:
            return Harm("%", lower)
        both = spills_was.keys() & spills_now.keys()
        rest_was -= sum(spills_was[name] for name in both)
        rest_now -= sum(spills_now[name] for name in both)
    grouped = not (now.per_kernel and before.per_kernel)
    if rest_now > rest_was:
        named = ", ".join(n for n in now.spilling if n not in before.spilling)[:200] or ", ".join(now.spilling)[:200]
        return Harm("B", (Worse("" if grouped else REST, rest_was, rest_now),), grouped, named)
    # held kernel by kernel, only a lowest occupancy that fell in a kernel not named in both builds is
    # the rest's: the named kernels' own trades (fewer spills for occupancy) are judged above
    unexcused = pareto_safe or (now.spill_bytes >= before.spill_bytes if grouped else rest_now >= rest_was)
    if now.occupancy < before.occupancy - OCCUPANCY_TOLERANCE and unexcused and (
            grouped or now.occupancy < _lowest_named(now, before) - OCCUPANCY_TOLERANCE):
        return Harm("%", (Worse("" if grouped else REST, before.occupancy, now.occupancy),), grouped)
    return None


def _lowest_named(now: Unscored, before: Unscored) -> float:
    """The lowest occupancy `now` records of the kernels named in both builds (1.0 where none)."""
    was = dict(before.kernel_occupancy or ())
    return min((occupancy for name, occupancy in now.kernel_occupancy or () if name in was), default=1.0)


REST = "the kernels not named in both builds"
GROUPED = " (held as one group: a result recorded before each kernel's own were)"


def unscored_refusal(metrics: Mapping[str, Any], before: Unscored | None, against: str,
                     pareto_safe: bool) -> str | None:
    """Why a result may not win for the kernels the objective does not score (tune.toml's `entries`
    leave them out, but -Xptxas flags apply to every kernel of the file): `unscored_harm`, the kernels
    named; None when the baseline (`before`) had no such kernels; `against` names it."""
    if before is None:
        return None
    if (now := Unscored.of(metrics)) is None:
        return "no static metrics for the kernels tune.toml's entries leave unscored, to check it by"
    if (harm := unscored_harm(now, before, pareto_safe)) is None:
        return None
    what = f"adds spill bytes over {against}" if harm.unit == "B" else "lowers occupancy"
    return (f"{what} in kernels tune.toml's entries leave unscored ({harm.text()}){GROUPED if harm.grouped else ''}; "
            "its flags build every kernel of the file")


def by_name(key: str, kernels: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """One of an `unscored` table's PER_KERNEL tables (`key`) of (compiled name, value) pairs, by
    `labelled` name: at most `metric_ranges.MAX_NAMED_KERNELS`, first by name, and never a value the
    ranges refuse (a recorded row must read back as undamaged)."""
    named: dict[str, Any] = {}
    _, low, high = metric_ranges.PER_KERNEL[key]
    for name_label, value in labelled(kernels):
        if low <= value <= high and len(named) < metric_ranges.MAX_NAMED_KERNELS:
            named.setdefault(name_label, value)
    return named


def labelled(kernels: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """(compiled name, value) pairs, sorted, each by the name tune.toml can give it (`readable`), the
    compiled name beside it where two share it (overloads), a `label` where that is too long to record."""
    pairs = sorted(kernels)
    return [(label(called, name), value)
            for (name, value), called in zip(pairs, kernel_names([name for name, _ in pairs]), strict=True)]


LABEL_START = 150  # characters of a long name a label keeps, before "…#" and its hash


def label(name: str, compiled: str) -> str:
    """`name` as a result records a kernel: itself where the ranges take it (`is_kernel_name`), else
    its first LABEL_START printable characters, "…#" and a hash of its compiled name: bounded, the
    same in every build of the kernel, and never another kernel's."""
    if metric_ranges.is_kernel_name(name):
        return name
    start = "".join(c for c in name if c.isprintable())[:LABEL_START]
    return f"{start}…#{hashlib.sha256(compiled.encode()).hexdigest()[:12]}"


SHOWN = 60  # characters of a kernel's label a message shows


def shown(name: str) -> str:
    """A label as a message shows it: a long one's start, and its end (a label's hash tells apart two
    that begin alike)."""
    return name if len(name) <= SHOWN else f"{name[:SHOWN - 21]}…{name[-20:]}"


OCCUPANCY_TOLERANCE = 1e-9  # as the rules compare occupancy (`unscored_harm`, eligibility, the gate)
_COMPARED = (*metric_ranges.PER_KERNEL, "spill_bytes", "occupancy", "spilling", "kernels")  # each kernel first
_LABELS = {"spill_bytes": "spill bytes", "occupancy": "lowest occupancy", "spilling": "spilling kernels",
           "kernels": "kernel count", "registers": "registers", "kernel_spill_bytes": "spill bytes",
           "kernel_occupancy": "occupancy"}


def unscored_difference(recorded: Mapping[str, Any], rebuilt: Mapping[str, Any]) -> str | None:
    """The first fact of the `unscored` table a row's metrics record that its rebuild's differ on, as
    "vic's spill bytes: its row says 72, a rebuild here gives 31112" (occupancy within
    OCCUPANCY_TOLERANCE); None where each one it records is the rebuild's. A table, or a kernel's
    table, that the row does not record (recorded before it was) is no difference (`unscored_predates`);
    a damaged one, or one where the rebuild has none, is."""
    was, now = recorded.get("unscored"), rebuilt.get("unscored")
    if was is None:
        return None
    if not isinstance(was, Mapping) or metric_ranges.unscored_problem(was) is not None or not isinstance(now, Mapping):
        return f"unscored kernels: its row says {metric_ranges.shown(was, 80)}, a rebuild here gives " \
               f"{metric_ranges.shown(now, 80)}"
    for key in _COMPARED:
        mine, theirs = was.get(key), now.get(key)
        if key in metric_ranges.PER_KERNEL:
            if mine is None:
                continue
            if not isinstance(theirs, Mapping):
                return f"unscored kernels' {_LABELS[key]}: its row records them, a rebuild here does not"
            for name in sorted(set(mine) | set(theirs)):
                if not _same(key, mine.get(name), theirs.get(name)):
                    return _said(f"{shown(str(name))}'s {_LABELS[key]}", mine.get(name), theirs.get(name))
        elif not _same(key, mine, theirs):
            return _said(f"unscored kernels' {_LABELS[key]}", mine, theirs)
    return None


def unscored_predates(recorded: Mapping[str, Any], rebuilt: Mapping[str, Any]) -> bool:
    """The row records no `unscored` table, or no kernel's own table of it, where its rebuild does:
    recorded before they were (brought up to date from the rebuild, never read as a disagreement)."""
    was, now = recorded.get("unscored"), rebuilt.get("unscored")
    if not isinstance(now, Mapping):
        return False
    return was is None or isinstance(was, Mapping) and any(
        was.get(key) is None and now.get(key) is not None for key in metric_ranges.PER_KERNEL)


def _same(key: str, mine: Any, theirs: Any) -> bool:
    if mine is None or theirs is None:
        return mine is theirs
    if key in ("occupancy", "kernel_occupancy"):
        return metric_ranges.is_finite(mine) and metric_ranges.is_finite(theirs) and \
            abs(float(mine) - float(theirs)) <= OCCUPANCY_TOLERANCE
    return bool(type(mine) is type(theirs) and mine == theirs)


def _said(what: str, mine: Any, theirs: Any) -> str:
    def value(found: Any) -> str:
        return "none" if found is None else metric_ranges.shown(found, 80)
    return f"{what}: its row says {value(mine)}, a rebuild here gives {value(theirs)}"
