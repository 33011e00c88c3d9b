"""`compileiq show STUDY --why`: each setting's contribution and the surrogate importance."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from compileiq.ablation import RULE, evidence_rows
from compileiq.cli.render import kind_label, out
from compileiq.explain import explain
from compileiq.importance import METHOD, surrogate_importance
from compileiq.store import Study, Trial


def print_why(study: Study, trials: Sequence[Trial], as_json: bool) -> None:
    explanation = explain(study, trials)
    importance = surrogate_importance(trials)
    ablation = explanation.ablation
    if as_json:
        data: dict[str, Any] = {
            "study": study.name, "objective": study.key.objective, "kind": kind_label(study.key.objective),
            "baseline": explanation.baseline.number if explanation.baseline else None,
            "chosen": explanation.chosen.number if explanation.chosen else None,
            "contribution": evidence_rows(ablation) if ablation else [],
            "total_gain": ablation.total_gain if ablation else None,
            "path_complete": ablation.complete if ablation else None,
            "importance": [{"setting": i.setting, "share": i.share} for i in importance.items],
        }
        print(json.dumps(data, indent=2, default=str))
        return
    label = f"{study.key.objective}, {kind_label(study.key.objective)}"
    if ablation is None or not ablation.steps:
        out.print("no contribution to show: " + ("the chosen configuration is the baseline" if ablation else
                                                   "no completed baseline and chosen trial"), markup=False)
    else:
        table = Table(title=f"{study.name}: each setting's contribution ({label}, lower is better)")
        for column in ("step", "setting", "value", "before", "after", "contribution"):
            table.add_column(column)
        for i, s in enumerate(ablation.steps, 1):
            table.add_row(*(Text(c) for c in (str(i), s.setting, str(s.value), _num(s.before), _num(s.after),
                                                _num(s.contribution))))
        out.print(table)
        out.print(f"total gain {_num(ablation.total_gain)} = baseline {_num(ablation.baseline_value)} - chosen "
                  f"#{explanation.chosen.number if explanation.chosen else '?'} {_num(ablation.chosen_value)}; "
                  "the contributions sum to it", markup=False)
        out.print(f"ablation path: {RULE}", markup=False)
        if not ablation.complete:
            out.print(f"{ablation.missing} configuration(s) on the path were never built; rerun tune to complete it",
                      markup=False)
    if importance.items:
        shares = ", ".join(f"{i.setting} {i.share:.0%}" for i in importance.items[:8])
        out.print(f"surrogate importance ({METHOD}, {importance.trials} trials): {shares}", markup=False)
    else:
        out.print(f"surrogate importance: not computed ({importance.note})", markup=False)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
