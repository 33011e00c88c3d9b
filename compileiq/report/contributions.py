"""Each setting's contribution to a study's gain (its ablation path): the rows and the note the
HTML page (`page`) and the markdown (`markdown`) show of it."""

from __future__ import annotations

from typing import Any

from compileiq.core.readings import gain_text, reading
from compileiq.results.ablation import RULE, Ablation, missing_note


def contribution_rows(objective: str, ablation: Ablation) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """The path's steps for the study's `objective` (its key's), then their total."""
    header = ("step", "setting", "value", "before", "after", "contribution", "share of gain", "trial")
    total = ablation.total_gain
    occupancy = objective == "occupancy"  # read as occupancy, as every view reads it; others as numbers (sortable)

    def value(v: float | None) -> Any:
        return reading(objective).text(v) if occupancy else v

    def gain(v: float | None) -> Any:
        return gain_text(objective, v) if occupancy else v

    rows: list[tuple[Any, ...]] = []
    for i, s in enumerate(ablation.steps, 1):
        share = f"{s.contribution / total:.0%}" if s.contribution is not None and total else "-"
        rows.append((i, s.setting, s.shown, value(s.before), value(s.after), gain(s.contribution), share,
                     f"#{s.trial}" if s.trial is not None else "-"))
    rows.append(("", "total", "", value(ablation.baseline_value), value(ablation.chosen_value), gain(total),
                 "100%" if total else "-", ""))
    return header, rows


def contribution_note(ablation: Ablation) -> str:
    note = (f"Ablation path: {RULE}. The contributions sum to the total gain (baseline minus chosen). "
            "A setting that only helps together with one flipped after it is credited 0 here; the surrogate "
            "importance below also sees such interactions.")
    if not ablation.complete:
        note += f" {missing_note(ablation.missing)}."
    return note
