"""The kernels a build compiles that tune.toml's `entries` leave unscored, and what the no-harm rules
(`eligibility`) hold a choice to for them.

`entries` narrows what the objective scores, but a -Xptxas flag (a register cap) applies to every
kernel of the translation unit: a cap that helps the scored kernel and makes twenty others spill is
no safe choice. The compiler reports every kernel's resources, so every trial records the unscored
ones' spill bytes and lowest occupancy (`metrics.unscored_facts`), and a choice may make neither
worse than the baseline's, whatever the objective.
"""

from __future__ import annotations

from collections.abc import Mapping
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

    def as_metric(self) -> dict[str, Any]:
        """As a trial's `unscored` metric records it."""
        return {"spill_bytes": self.spill_bytes, "occupancy": self.occupancy, "spilling": list(self.spilling),
                "kernels": self.kernels}

    @classmethod
    def of(cls, metrics: Mapping[str, Any]) -> Unscored | None:
        """None where the metrics hold none (no `entries`: every kernel scored) or hold them damaged
        (`metric_ranges.unscored_problem`: a row with one is a damaged row, never read as none)."""
        table = metrics.get("unscored")
        if not isinstance(table, Mapping) or metric_ranges.unscored_problem(table) is not None:
            return None
        try:
            return cls(int(table["spill_bytes"]), float(table["occupancy"]), tuple(table["spilling"]),
                       int(table["kernels"]))
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


def scored(metrics: Mapping[str, Any]) -> dict[str, Any] | None:
    """Which kernels a trial's objective scored where tune.toml's `entries` left others out (the
    baseline's metrics say it for the study): {"entries": names, "unscored_kernels": how many}; None
    where every kernel was scored. Every view describes the objective with it (`scoring_text`)."""
    if (unscored := Unscored.of(metrics)) is None:
        return None
    records = metrics.get("entries")
    names = [readable(str(r.get("name"))) for r in records if isinstance(r, Mapping) and r.get("entry")] \
        if isinstance(records, list) else []
    return {"entries": names, "unscored_kernels": unscored.kernels}


def scoring_text(metrics: Mapping[str, Any]) -> str | None:
    """`scored`, as one phrase: what the objective scored, and what the others were held to."""
    if (found := scored(metrics)) is None:
        return None
    others = found["unscored_kernels"]
    held = f"{others} other kernel(s) of the file held to the baseline's spills and occupancy" if others else \
        "the baseline's build has no other kernel"
    return f"scored only {', '.join(found['entries'])} (tune.toml's entries); {held}"

