"""What `compileiq show` and `compileiq space` print: the studies, one study's trials as `explain`
ranks them (the ACF's choice first), and the search space with its restrictions; as rich tables
or JSON documents.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from compileiq.cli.console import cells, kind_label, out, safe
from compileiq.cli.json_views import objective_json, study_fields, study_json, trial_json
from compileiq.cli.render import METRIC_COLUMNS, emit, metric_cells
from compileiq.cli.run_notes import failed_line, gpu_spread, node_spread, trials_per_node
from compileiq.core import macro_space
from compileiq.core.readings import reading
from compileiq.core.records import (
    MEASURED_ON_KEY,
    RunRecord,
    Study,
    StudySummary,
    Trial,
    TrialCounts,
    TrialState,
    first_line,
    unchosen,
)
from compileiq.core.space import Parameter, same
from compileiq.evaluate import unscored_views

if TYPE_CHECKING:
    from compileiq.core.space import SearchSpace
    from compileiq.results.explain import Explanation
    from compileiq.results.study_list import ListedChoice
    from compileiq.store import Store


def listed_studies(store: Store) -> tuple[list[StudySummary], list[ListedChoice], list[str], list[str]]:
    """Each study the list shows, with its choice (`study_choice`: replayed where no recorded choice is
    followed), its kernel as the list names it (`listed_kernels`) and its baseline (`listed_baselines`);
    a study whose row does not describe its trials (`InconsistentStudyError`) is left out with its
    one-line reason, the others still listed."""
    from compileiq.results.study_list import study_choice
    from compileiq.store.connect import InconsistentStudyError

    listed = []
    for summary in store.study_summaries():
        try:
            listed.append((summary, study_choice(summary, lambda i: (store.trials(i), store.runs(i)))))
        except InconsistentStudyError as error:
            print(f"warning: skipped {error}", file=sys.stderr)
    summaries = [summary for summary, _ in listed]
    kernels = listed_kernels(summaries)
    return summaries, [choice for _, choice in listed], kernels, listed_baselines(summaries, kernels)


def listed_kernels(summaries: list[StudySummary]) -> list[str]:
    """Each listed study's kernel as the list names it: studies of different files of one name told
    apart by the shortest end of the path their latest runs recorded (`results.study_labels`)."""
    from compileiq.results.recorded_sources import decided_path
    from compileiq.results.study_labels import kernel_labels

    return kernel_labels([(s.study.key.kernel, decided_path(s.decision, s.study.key.kernel)) for s in summaries])


def summary_json(summary: StudySummary, choice: ListedChoice, kernel: str, baseline: str) -> dict[str, Any]:
    """A listed study: the trial its latest run chose (and recorded), else the choice replayed from
    its trials as `show STUDY` replays it (a study imported, or made by a run that did not finish),
    said so (`results.study_list`); `kernel` and `baseline`: as the list names them (`listed_kernels`,
    `listed_baselines`)."""
    from compileiq.results.recorded_sources import decided_path

    best_is = f"the chosen trial, replayed from its trials ({_unchosen(summary)})" if choice.replayed else "the chosen trial"
    return study_fields(summary.study, summary.trials, choice.number, choice.value, decided_path(summary.decision, summary.study.key.kernel)) | {
        "kernel_shown": kernel, "best_is": best_is, "baseline": baseline, "to_retry": summary.to_retry}


def listed_baselines(summaries: list[StudySummary], kernels: list[str]) -> list[str]:
    """Each listed study's baseline as the list shows it: studies of one file shipped with other
    flags differ here (their names differ only in the identity's hash): its shipped settings
    (`baseline_labels.baseline_settings`: "your build (compile_commands.json): ptxas.opt_level=2"), then
    the base flags that tell it from the other studies of its sources, and a register cap
    (`results.listed_base_flags`: "...; base flag -maxrregcount=64")."""
    from compileiq.results.baseline_labels import baseline_settings
    from compileiq.results.listed_base_flags import flags_label, shown_flags, sources_of
    from compileiq.results.recorded_sources import decided_files, decided_flags
    from compileiq.results.shipped_origin import decided_origin

    flags = shown_flags([(sources_of(decided_files(s.decision), kernel), decided_flags(s.decision))
                         for s, kernel in zip(summaries, kernels, strict=True)])
    labels = []
    for summary, shown in zip(summaries, flags, strict=True):
        label = baseline_settings(summary.study, summary.baseline, decided_origin(summary.decision))
        labels.append(label + (("; " if ": " in label else ": ") + flags_label(shown) if shown else ""))
    return labels


def _unchosen(summary: StudySummary) -> str:
    """Why the list replays the study's choice from its trials instead of following a run's record."""
    decision = summary.decision or {}
    if (stopped := unchosen(decision)) is not None:  # its only run stopped before it chose (`run_row`)
        return f"its latest run stopped before it chose: {stopped}"
    if "pick" in decision and "chosen" not in decision:
        return "pick rule from an imported export, no run here chose"
    if decision and "chosen" not in decision:  # what `db import` records of what the study started from
        return "no run here chose"
    if decision and _matches_rows(summary):
        return "no valid recorded choice: held against its baseline row, the trial its latest run names could never be chosen"
    if decision and _row_changed(summary):
        return "its latest run's recorded choice's row changed since that run: re-tune to rebuild it"
    if decision:
        return "its latest run's recorded choice does not match the rows"
    return "no run here chose"


def print_trials(study: Study, trials: list[Trial], runs: list[RunRecord], top: int, as_json: bool,
                 pick: str | None = None) -> None:
    """One study's best `top` trials as `explain` ranks them (the ACF's choice first), then where
    they were built and measured, and its first failure. A study of several objectives (`--json`
    only: its table is the front, `why.print_tuned_front`): each trial's value of every objective,
    and the front with its pick (by `pick`, else the rule its latest run chose by)."""
    from compileiq.results.baseline_labels import baseline_label
    from compileiq.results.explain import explain
    from compileiq.results.recorded_sources import recorded_path
    from compileiq.results.shipped_origin import recorded_origin

    explanation = explain(study, trials, pick, runs)
    complete = explanation.ranked()
    ranked = complete[:top]
    failed = [t for t in trials if t.state is TrialState.FAILED and not t.to_retry]
    running = [t for t in trials if t.state is TrialState.RUNNING]
    counts = TrialCounts.of(trials)  # what every view counts (the list, the reports)
    objective = study.key.objective
    data = {"study": study_json(study, explanation.chosen, counts.trials, recorded_path(runs, study.key.kernel)),
            "objective": objective_json(objective, explanation.baseline.metrics if explanation.baseline else None,
                                        explanation.chosen.metrics if explanation.chosen else None),
            "to_retry": counts.to_retry,
            "baseline_label": baseline_label(study, explanation.baseline, recorded_origin(runs)),
            "running": [{"number": t.number, "worker": t.worker} for t in running],
            "trials": [trial_json(t, objective, explanation.refusal(t))
                       | {"status": explanation.status(t), "provenance": explanation.provenance(t)} for t in ranked],
            "complete_trials": len(complete), "failed": [trial_json(t, objective) for t in failed],
            "decided_by": explanation.decided_by, "notes": list(explanation.notes)}
    if explanation.front is not None:
        from compileiq.cli.why import tuned_front_json

        data |= tuned_front_json(explanation)
    emit(as_json, data, lambda: trials_table(study, explanation, ranked))
    if as_json:
        return
    from compileiq.cli.why import print_notes

    print_notes(explanation)
    if len(complete) > len(ranked):
        out.print(f"showing {len(ranked)} of {len(complete)} complete trials: --top {len(complete)} shows all",
                  markup=False)
    if running:  # a tuner's claims: compiling now, or left by one that died (a rerun takes them over)
        workers = sorted({safe(t.worker or "unknown") for t in running})
        out.print(f"{len(running)} trial(s) running, claimed by {', '.join(workers)} (a tuner that is gone leaves "
                  "them: the next run on this study retries them)", markup=False)
    if counts.to_retry:  # handed back by a run that stopped, or a compiler timeout reopened: no marker tells which
        out.print(f"{counts.to_retry} trial(s) to retry (the next run on this study tries them again; not counted as "
                  "trials or failures)", markup=False)
    if nodes := trials_per_node(trials):
        out.print(node_spread(nodes), markup=False)
    if len(gpus := trials_per_node(trials, MEASURED_ON_KEY)) > 1:
        out.print(gpu_spread(gpus), markup=False)
    if line := failed_line(trials):
        out.print(line, markup=False)


def studies_table(summaries: list[StudySummary], choices: list[ListedChoice], kernels: list[str],
                  baselines: list[str]) -> Table:
    """The studies, each with the trial every view names as its choice (`results.study_list`), its
    kernel and its baseline as the list names them (`listed_kernels`, `listed_baselines`)."""
    table = Table(title=Text("studies"))
    shipped = any(b != "defaults" for b in baselines)  # a column of "defaults" alone would tell nothing apart
    for column in ("id", "name", "kernel", "objective", "arch", *(("baseline",) if shipped else ()), "trials", "chosen"):
        table.add_column(column)
    for summary, baseline, choice, kernel in zip(summaries, baselines, choices, kernels, strict=True):
        study, number = summary.study, choice.number
        replayed = f", replayed: {_unchosen(summary)}" if choice.replayed else ""
        nothing = f"none ({stopped})" if (stopped := unchosen(summary.decision)) is not None else "-"
        shown = nothing if number is None else f"{reading(study.key.objective).text(choice.value)} (#{number}{replayed})"
        if "," in study.key.objective and number is not None:  # its value is the first objective's alone
            shown = f"#{number} on the front (show {study.id}{replayed})"
        table.add_row(*cells(study.id, study.name, kernel, study.key.objective, study.key.arch,
                             *((baseline,) if shipped else ()), _trials_cell(summary), shown))
    return table


def _trials_cell(summary: StudySummary) -> str:
    """The study's trials; the rows to retry beside them, not among them (`TrialCounts`)."""
    return f"{summary.trials} (+{summary.to_retry} to retry)" if summary.to_retry else str(summary.trials)


def _matches_rows(summary: StudySummary) -> bool:
    """The recorded choice names a complete row with its recorded value (`listed_choice` refused it for its rules)."""
    from compileiq.results.recorded_decision import followed_choice

    return followed_choice(summary.study, summary.decision, summary.named_state, summary.named_value) is not None


def _row_changed(summary: StudySummary) -> bool:
    """The recorded choice names a complete row that holds another value than it recorded (what
    `recorded_decision.changed_choice` skips in every view)."""
    from compileiq.results.recorded_decision import recorded_choice

    choice = recorded_choice(summary.decision)
    return (choice is not None and summary.named_state is TrialState.COMPLETE and summary.named_value is not None
            and summary.named_value != choice[1])


def trials_table(study: Study, explanation: Explanation, trials: list[Trial]) -> Table:
    """The trials as `explain` ranks them: the chosen one (the ACF's) first, then those that may be
    chosen, then the refused ones, each with its status."""
    from compileiq.results.recorded_sources import recorded_path

    objective, path = study.key.objective, recorded_path(explanation.runs, study.key.kernel)
    scoring = unscored_views.scoring_text(explanation.baseline.metrics, explanation.chosen.metrics if explanation.chosen
                                          else None, objective) if explanation.baseline is not None else None
    title = (f"{study.name}{f' ({path})' if path else ''}: trials, chosen first ({objective}, {kind_label(objective)}; {reading(objective).heading}"
             f"{f'; {scoring}' if scoring else ''})")
    table = Table(title=Text(safe(title)))
    for column in ("#", "value", *METRIC_COLUMNS, "status",
                   "settings that differ from the baseline"):
        table.add_column(column)
    baseline = explanation.baseline.config if explanation.baseline is not None else {}
    for trial in trials:
        table.add_row(*cells(trial.number, *metric_cells(trial, objective), trial_status(explanation, trial),
                             _changes(trial, baseline)))
    return table


def trial_status(explanation: Explanation, trial: Trial) -> str:
    """The trial's status with its provenance where it matters (`Explanation.described`), on one line."""
    return first_line(explanation.described(trial), 240)


def _changes(trial: Trial, baseline: dict[str, Any]) -> str:
    """The trial's settings that differ from the baseline's, short names; "(as the baseline)" for
    none, as the report says (the baseline may be a shipped build, not the compiler defaults)."""
    parts = [f"{k.partition('.')[2]}={v}" for k, v in sorted(trial.config.items()) if baseline.get(k) != v]
    return " ".join(parts) or "(as the baseline)"


def _listed(space: SearchSpace) -> list[Any]:
    """The parameters as `space` lists them: a kernel's macros first (its own settings), then the compiler's."""
    return sorted(space.parameters, key=lambda p: not p.name.startswith("define."))


MACRO_RISK = "yours (tune.toml)"


def risk_label(parameter: Parameter) -> str:
    """A compiler option's risk class; a tuned macro's is its owner's word: tune.toml lists its
    values as interchangeable, and compileiq cannot tell what a macro changes (a tile size, or a
    stencil's radius: another result), so it never calls one "safe"."""
    return MACRO_RISK if parameter.name.startswith("define.") else parameter.risk


def space_json(space: SearchSpace, shipped: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`parameters`: each parameter; with a shipped build (--compile-commands), `baseline` is the
    value the search starts from: the shipped one where the build sets it, else the default.
    `restrictions`: tune.toml's and what they allow, as the table's caption says it (None: none)."""
    shipped = shipped or {}
    parameters = [{"name": p.name, "stage": p.stage, "values": list(p.values), "default": p.default,
                   **({"baseline": shipped.get(p.name, p.default)} if shipped else {}), "risk": risk_label(p),
                   "help": p.help} for p in _listed(space)]
    counted = restriction_count(space)
    restrictions = None if counted is None else {
        "texts": list(counted.texts), "allowed": counted.allowed, "combinations": counted.combinations,
        "unevaluable": counted.unevaluable}
    return {"parameters": parameters, "restrictions": restrictions}


def space_table(space: SearchSpace, kernel: str | None, shipped: Mapping[str, Any] | None = None) -> Table:
    macros = any(p.name.startswith("define.") for p in space.parameters)  # none: the note says so, not the title
    title = f"search space {space.id}" + (f" with the macros of {kernel}" if kernel and macros else
                                          f" for {kernel}" if kernel else "")
    table = Table(title=title)
    shipped = shipped or {}
    column = "baseline (your build; default)" if shipped else "default"
    for heading in ("parameter (--only/--exclude name)", "values", column, "risk", "what it does"):
        table.add_column(heading, overflow="fold")
    for p in _listed(space):
        values = ", ".join(str(v) for v in p.values)
        start = str(p.default) if p.name not in shipped else (
            f"{shipped[p.name]} (your build; the default)" if same(shipped[p.name], p.default)
            else f"{shipped[p.name]} (your build; default {p.default})")
        table.add_row(escape(p.name), escape(values), escape(start), risk_label(p), escape(p.help))
    counted = restriction_count(space)
    if counted is not None:
        table.caption = restriction_line(counted)
    return table


@dataclass(frozen=True)
class RestrictionCount:
    """What tune.toml's restrictions allow of the tuned macros: counted once, said by the table's
    caption and by `space --json` alike."""

    texts: tuple[str, ...]  # the restrictions as written
    allowed: int | None  # the macro combinations they allow; None: too many to count
    combinations: int  # all the macro combinations
    unevaluable: int | None  # of the others, how many a restriction could not evaluate; None: not counted


def restriction_count(space: SearchSpace) -> RestrictionCount | None:
    """The count of `space`'s restrictions; None where it has none."""
    if space.restriction is None:
        return None
    allowed, total = space.macro_combinations()
    return RestrictionCount(tuple(space.restriction.texts), allowed, total, macro_space.unevaluable_count(space))


def restriction_line(counted: RestrictionCount) -> str:
    """How many combinations of the tuned macros tune.toml's restrictions allow."""
    count = f"{counted.allowed:,}" if counted.allowed is not None else "(too many to count)"
    cannot = (f" ({counted.unevaluable:,} of the others could not be evaluated: a value past the evaluator's bound "
              "or a division by zero, so they are not allowed either)" if counted.unevaluable else "")
    return (f"{count} of {counted.combinations:,} macro combinations satisfy tune.toml's {len(counted.texts)} "
            f"restrictions{cannot}")
