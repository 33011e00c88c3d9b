"""`compileiq show STUDY --why | --pareto`: each setting's contribution, the surrogate importance, the
Pareto front of the recorded trials."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from compileiq.cli.console import kind_label, out, safe
from compileiq.core.readings import gain_text, reading
from compileiq.core.records import RunRecord, Study, Trial, first_line
from compileiq.results import multi_objective
from compileiq.results.ablation import RULE, evidence_rows, missing_note
from compileiq.results.explain import Explanation, explain
from compileiq.results.multi_objective import PICK_RULES
from compileiq.results.pareto import Front, parse_objectives, values_of
from compileiq.search.importance import METHOD, Importances, surrogate_importance


def print_why(study: Study, trials: Sequence[Trial], as_json: bool, runs: Sequence[RunRecord] = ()) -> None:
    explanation = explain(study, trials, runs=runs)
    importances = _importances(study, trials)
    importance = importances[0][1]
    ablation = explanation.ablation
    if as_json:
        data: dict[str, Any] = {
            "study": study.name, "objective": study.key.objective, "kind": kind_label(study.key.objective),
            "baseline": explanation.baseline.number if explanation.baseline else None,
            "chosen": explanation.chosen.number if explanation.chosen else None,
            "decided_by": explanation.decided_by or "the study's rules, replayed over its trials",
            "notes": list(explanation.notes),
            "contribution": evidence_rows(ablation) if ablation else [],
            "total_gain": ablation.total_gain if ablation else None,
            "path_complete": ablation.complete if ablation else None,
            "importance": [{"setting": i.setting, "share": i.share} for i in importance.items],
            **({"importance_by_objective": {name: [{"setting": i.setting, "share": i.share} for i in found.items]
                                            for name, found in importances}} if len(importances) > 1 else {}),
        }
        print(json.dumps(data, indent=2, default=str))
        return
    label = f"{study.key.objective}, {kind_label(study.key.objective)}"
    print_notes(explanation)
    if explanation.front is not None:
        out.print("no contribution to show: a study of several objectives chooses a trade-off on its front, which has "
                  f"no single gain to share out (show {study.name} lists the front)", markup=False)
    elif ablation is None or not ablation.steps:
        out.print("no contribution to show: " + ("the chosen configuration is the baseline" if ablation else
                                                   "no completed baseline and chosen trial"), markup=False)
    else:
        shown = reading(study.key.objective)  # occupancy as occupancy (its gain as occupancy gained)
        table = Table(title=f"{study.name}: each setting's contribution ({label}; {shown.heading})")
        for column in ("step", "setting", "value", "before", "after", "contribution"):
            table.add_column(column)
        for i, s in enumerate(ablation.steps, 1):
            after = shown.text(s.after) + s.through  # a step through a refused build says so
            table.add_row(*(Text(c) for c in (str(i), s.setting, s.shown, shown.text(s.before), after,
                                                gain_text(shown.objective, s.contribution))))
        out.print(table)
        out.print(f"total gain {gain_text(shown.objective, ablation.total_gain)}: baseline "
                  f"{shown.text(ablation.baseline_value)}, chosen #{explanation.chosen.number if explanation.chosen else '?'} "
                  f"{shown.text(ablation.chosen_value)}; the contributions sum to it", markup=False)
        out.print(f"ablation path: {RULE}", markup=False)
        if not ablation.complete:
            out.print(missing_note(ablation.missing), markup=False)
    for name, found in importances:
        which = f" for {name}" if len(importances) > 1 else ""
        if found.items:
            shares = ", ".join(f"{i.setting} {i.share:.0%}" for i in found.items[:8])
            out.print(f"surrogate importance{which} ({METHOD}, {found.trials} trials): {shares}", markup=False)
        else:
            out.print(f"surrogate importance{which}: not computed ({found.note})", markup=False)


def _importances(study: Study, trials: Sequence[Trial]) -> list[tuple[str, Importances]]:
    """The surrogate importance of the study's objective; several objectives: of each (a trial's
    recorded value is only the first's, which may be the same everywhere while another varies)."""
    objectives = multi_objective.objectives_of(study.key.objective)
    if len(objectives) == 1:
        return [(objectives[0], surrogate_importance(trials))]
    found = []
    for index, name in enumerate(objectives):
        def value(trial: Trial, i: int = index) -> float | None:
            values = values_of(trial, objectives)
            return values[i] if values is not None else None
        found.append((name, surrogate_importance(trials, value, name)))
    return found


def print_pareto(study: Study, trials: Sequence[Trial], objectives_text: str, pick: str | None, as_json: bool,
                 runs: Sequence[RunRecord] = ()) -> None:
    """The front of these objectives over the recorded trials; for the objectives of a study of
    several objectives, the tuner's front (only trials that may win) and its pick, in full precision
    (by default the rule its latest run chose by: the ACF's choice)."""
    own = multi_objective.objectives_of(study.key.objective)
    objectives = parse_objectives(objectives_text)
    explanation = explain(study, trials, pick, runs)
    if objectives == own and explanation.front is not None:
        print_tuned_front(study, explanation, as_json)
        return
    rule = pick or "knee"
    trade_offs = explanation.front_of(objectives, rule)
    base = explanation.baseline.config if explanation.baseline else {}
    changes = {p.trial.number: {k: v for k, v in p.trial.config.items() if base.get(k) != v} for p in trade_offs.points}
    if as_json:
        print(json.dumps({"study": study.name, "objectives": list(objectives), "pick_rule": rule,
                          "pick": trade_offs.pick.trial.number if trade_offs.pick else None,
                          "front": [{"trial": p.trial.number, "values": list(p.values), "changed": changes[p.trial.number]}
                                    for p in trade_offs.points]}, indent=2, default=str))
        return
    table = Table(title=f"{study.name}: Pareto front of {', '.join(objectives)} (recorded trials the study's rules "
                        f"let win; {reading(','.join(objectives)).heading}; static estimates unless time)")
    for column in ("#", *objectives, "pick", "settings that differ from the baseline"):
        table.add_column(column)
    for p in trade_offs.points:
        settings = " ".join(f"{k}={v}" for k, v in sorted(changes[p.trial.number].items())) or "(as the baseline)"
        table.add_row(*(Text(c) for c in (str(p.trial.number), *_shown(objectives, p.values),
                                            "<- " + rule if p is trade_offs.pick else "", settings)))
    out.print(table)
    if trade_offs.pick is not None:
        out.print(f"pick ({rule}): trial #{trade_offs.pick.trial.number}; {len(trade_offs.points)} trial(s) on the "
                  f"front, {len(trade_offs.others)} dominated", markup=False)


def print_tuned_front(study: Study, explanation: Explanation, as_json: bool) -> None:
    trade_offs = explanation.front
    assert trade_offs is not None and explanation.baseline is not None
    chosen = explanation.chosen or explanation.baseline
    if as_json:
        print(json.dumps({"study": study.name, **tuned_front_json(explanation)}, indent=2, default=str))
        return
    print_front(study, trade_offs, explanation.baseline, chosen)
    print_notes(explanation)


def print_notes(explanation: Explanation) -> None:
    """What every view says of where the choice comes from, when it is not simply a run's of this
    database, and of an assumed launch its occupancy was scored at (`Explanation.notes`), one line each."""
    for note in explanation.notes:
        out.print(safe(first_line(note, 400)), markup=False)


def tuned_front_json(explanation: Explanation) -> dict[str, Any]:
    """A study of several objectives: its front, in full precision, and the pick (the ACF's choice)."""
    trade_offs = explanation.front
    assert trade_offs is not None and explanation.baseline is not None
    chosen = explanation.chosen or explanation.baseline
    base = explanation.baseline.config
    return {"objectives": list(trade_offs.objectives), "pick_rule": trade_offs.rule,
            "pick": chosen.number, "pick_values": list(values_of(chosen, trade_offs.objectives) or []),
            "decided_by": explanation.decided_by, "notes": list(explanation.notes),
            "front": [{"trial": p.trial.number, "values": list(p.values),
                       "changed": {k: v for k, v in p.trial.config.items() if base.get(k) != v}}
                      for p in trade_offs.points]}


def print_front(study: Study, trade_offs: Front, baseline: Trial, chosen: Trial) -> None:
    """The front of a study of several objectives (values in full precision, each in its own
    reading: occupancy as occupancy, as the run's summary and the report give it; the settings that
    differ from the baseline, which keeps the shipped build's) and the choice the ACF records."""
    objectives = trade_offs.objectives
    table = Table(title=Text(f"{study.name}: Pareto front of {', '.join(objectives)} "
                             f"({kind_label(study.key.objective)}; {reading(','.join(objectives)).heading}; "
                             "trials that may win)"))
    for column in ("#", *objectives, "chosen", "settings that differ from the baseline"):
        table.add_column(column)
    for p in trade_offs.points:
        shown = p.trial  # the picked point is the chosen trial, simplified (`pareto.with_chosen`)
        settings = " ".join(f"{k}={v}" for k, v in sorted(shown.config.items())
                            if baseline.config.get(k) != v) or "(as the baseline)"
        mark = f"<- {trade_offs.rule}" if p is trade_offs.pick else ""
        table.add_row(*(Text(c) for c in (str(shown.number), *_shown(objectives, p.values), mark, settings)))
    out.print(table)
    out.print(f"chosen ({trade_offs.rule}): trial #{chosen.number}; {len(trade_offs.points)} trial(s) on the front, "
              f"{len(trade_offs.others)} dominated; pick rules: {PICK_RULES}", markup=False)


def _shown(objectives: Sequence[str], values: Sequence[float]) -> tuple[str, ...]:
    """A front point's values as people read them: occupancy as occupancy ("100.0%", not its
    shortfall 0), the others at full precision (`core.readings`)."""
    return tuple(reading(o).text(v) for o, v in zip(objectives, values, strict=True))
