"""Each setting's contribution to a study's gain (its ablation path): the rows and the note the
HTML page (`page`) and the markdown (`markdown`) show of it."""

from __future__ import annotations

from typing import Any

from compileiq.core.readings import gain_text, reading
from compileiq.results.ablation import RULE, Ablation, missing_note


def contribution_rows(objective: str, ablation: Ablation) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """The path's steps for the study's `objective` (its key's), then their total: each value in
    the objective's own reading, the text `show --why` prints (`core.readings`; the HTML table still
    sorts it as a number); a share only where the path gives them (`Ablation.shares`)."""
    header = ("step", "setting", "value", "before", "after", "contribution", "share of gain", "trial")
    shown = reading(objective)
    shares = ablation.shares
    rows: list[tuple[Any, ...]] = []
    for i, s in enumerate(ablation.steps, 1):
        share = shares[i - 1] if shares is not None else None
        rows.append((i, s.setting, s.shown, shown.text(s.before), shown.text(s.after) + s.through,
                     gain_text(objective, s.contribution), f"{share:.0%}" if share is not None else "-",
                     f"#{s.trial}" if s.trial is not None else "-"))
    rows.append(("", "total", "", shown.text(ablation.baseline_value), shown.text(ablation.chosen_value),
                 gain_text(objective, ablation.total_gain), "100%" if shares is not None else "-", ""))
    return header, rows


def contribution_note(ablation: Ablation) -> str:
    note = (f"Ablation path: {RULE}. The contributions sum to the total gain (baseline minus chosen). "
            "A setting that only helps together with one flipped after it is credited 0 here; the surrogate "
            "importance below also sees such interactions.")
    if (withheld := ablation.shares_withheld) is not None:
        note += f" No share of the gain is given: {withheld}."
    if not ablation.complete:
        note += f" {missing_note(ablation.missing)}."
    return note
