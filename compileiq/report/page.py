"""`compileiq report`: what a study's report holds (`build`: a `StudyReport`, and the rows each
section shows) and its self-contained HTML page; the same content as markdown with SVG files
beside it is `markdown`, the writing of either `output`.

Sections: summary, convergence, chosen configuration and its evidence, each setting's contribution
(ablation path), surrogate importance, the trial table, failures by reason, provenance. Nothing
is fetched from a network (a Content-Security-Policy forbids it); every text from the database
is escaped. Static objectives are labelled as static estimates, never as runtimes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compileiq.core.errors import UsageError
from compileiq.core.key_labels import KERNEL_PATH, SOURCE_BUNDLE, key_label
from compileiq.core.readings import Reading, reading
from compileiq.core.records import (
    RUNTIME_KIND,
    STATIC_KIND,
    Trial,
    TrialCounts,
    TrialState,
    counted,
    first_line,
)
from compileiq.core.static_score import StaticMetrics
from compileiq.core.text import html_text
from compileiq.report.contributions import contribution_note, contribution_rows
from compileiq.report.figures import (
    contributions_svg,
    convergence_svg,
    importance_svg,
    pareto_svg,
    short_name,
)
from compileiq.report.html_parts import html_document, html_note, html_section, html_table
from compileiq.results import multi_objective
from compileiq.results.baseline_labels import baseline_label
from compileiq.results.evidence import SHOWN_KEYS, scoring_text, shown_metrics
from compileiq.results.explain import Explanation, changed_settings, explain
from compileiq.results.multi_objective import PICK_RULES
from compileiq.results.pareto import Front, values_by_objective
from compileiq.results.recorded_sources import recorded_bundle, recorded_path
from compileiq.results.shipped_origin import recorded_origin
from compileiq.search.importance import METHOD, Importances, surrogate_importance
from compileiq.store import Store

SECTIONS = ("summary", "convergence", "chosen", "contributions", "importance", "trials", "failures", "provenance")
PARETO_RULES = "knee: nearest the ideal point after scaling each objective to [0, 1] over the front; first: best first objective; weights=...: lowest weighted sum of the scaled values"
REASON_CHARS = 2000



@dataclass(frozen=True)
class FailureGroup:
    reason: str  # the first line of the reason
    trials: tuple[int, ...]
    example: str  # one full reason (truncated)
    retryable: bool


@dataclass(frozen=True)
class StudyReport:
    explanation: Explanation
    importance: Importances
    failures: tuple[FailureGroup, ...]
    database: str
    front: Front | None = None

    @property
    def kind(self) -> str:
        return RUNTIME_KIND if self.explanation.runtime else STATIC_KIND

    @property
    def objectives(self) -> tuple[str, ...]:
        return multi_objective.objectives_of(self.explanation.study.key.objective)

    @property
    def reading(self) -> Reading:
        """How a trial's recorded value reads: with several objectives the first's (a trial records
        it alone as its value); each objective's own is `readings`."""
        return self.readings[0]

    @property
    def readings(self) -> tuple[Reading, ...]:
        return tuple(reading(o) for o in self.objectives)

    @property
    def heading(self) -> str:
        """The objective's unit and direction (each's by name), then what it scored (`evidence.scoring_text`)."""
        if len(self.readings) == 1:
            heading = self.reading.heading
        else:
            heading = "; ".join(f"{r.objective}: {r.heading}" for r in self.readings)
        baseline = self.explanation.baseline
        chosen = self.explanation.chosen
        scoring = scoring_text(baseline.metrics, chosen.metrics if chosen is not None else None,
                               self.explanation.study.key.objective) \
            if baseline is not None else ""
        return f"{heading}; {scoring}" if scoring else heading

    def values(self, trial: Trial) -> tuple[float | None, ...]:
        """The trial's recorded (minimised) value of each objective; None where it has none."""
        return values_by_objective(self.objectives, trial)

    def shown_values(self, trial: Trial) -> tuple[float | None, ...]:
        """Each objective's value as people read it (occupancy, not its shortfall)."""
        return tuple(r.shown(v) for r, v in zip(self.readings, self.values(trial), strict=True))

    def value_texts(self, trial: Trial) -> tuple[str, ...]:
        return tuple(r.text(v) for r, v in zip(self.readings, self.values(trial), strict=True))

    def value_text(self, trial: Trial) -> str:
        """A trial's result as the summary states it: its value, or with several objectives each
        objective's value by name (the first alone read as if it were the whole result)."""
        return values_text(self.explanation.study.key.objective, trial)

    @property
    def value_labels(self) -> tuple[str, ...]:
        """Each objective with its kind, unit and direction, as every table heads its values."""
        kind = "GPU runtime" if self.explanation.runtime else "static estimate"
        return tuple(f"{r.objective} ({kind}; {r.heading})" for r in self.readings)

    @property
    def value_label(self) -> str:
        """The label of a trial's recorded value (with several objectives: the first's)."""
        return self.value_labels[0]


def values_text(objective: str, trial: Trial | None) -> str:
    """A trial's result in the objective's own reading ("-" for none); with several objectives,
    each objective's by name ("registers 72, instructions 936")."""
    if trial is None:
        return "-"
    objectives = multi_objective.objectives_of(objective)
    values = values_by_objective(objectives, trial)
    if len(objectives) == 1:
        return reading(objective).text(values[0])
    if all(v is None for v in values):
        return reading(objectives[0]).text(None)
    return ", ".join(f"{name} {reading(name).text(v)}" for name, v in zip(objectives, values, strict=True))


def build(store: Store, study: str, pareto: str | None = None, pick: str | None = None) -> StudyReport:
    found = store.find_study(study)
    objectives = multi_objective.view_objectives(found.name, found.key.objective, pareto, pick)
    trials = store.trials(found.id)
    if not trials:
        raise UsageError(f"study {found.name} has no trials yet: nothing to report")
    explanation = explain(found, trials, pick, store.runs(found.id))
    if objectives is None and explanation.front is not None:  # several objectives: the tuner's front
        objectives = explanation.front.objectives
    if explanation.front is not None and objectives == explanation.front.objectives:
        trade_offs: Front | None = explanation.front
    else:
        trade_offs = explanation.front_of(objectives, pick or "knee") if objectives else None
    return StudyReport(explanation, surrogate_importance(trials), failure_groups(trials), store.url_for_display,
                       trade_offs)


def failure_groups(trials: Sequence[Trial]) -> tuple[FailureGroup, ...]:
    groups: dict[str, list[Trial]] = {}
    for trial in trials:
        if trial.state is TrialState.FAILED and counted(trial):  # rows to retry are no failure (`TrialCounts`)
            groups.setdefault(first_line(trial.reason, 200), []).append(trial)
    ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    return tuple(FailureGroup(reason, tuple(t.number for t in group), (group[0].reason or "")[:REASON_CHARS],
                              all(t.retryable for t in group)) for reason, group in ordered)


# -- HTML ---------------------------------------------------------------------------------------


def html_page(report: StudyReport) -> str:
    study = report.explanation.study
    body = "".join(section(report) for section in (_summary, _convergence, _chosen, _to_time, _contributions,
                                                      _importance, _pareto, _trials, _failures, _provenance))
    return html_document(f"compileiq report: {study.name}", body)


def _summary(report: StudyReport) -> str:
    e = report.explanation
    key = e.study.key
    path = recorded_path(e.runs, key.kernel)
    lines = [("kernel", f"{key.kernel} ({path})" if path else key.kernel), ("objective", f"{key.objective}: {report.kind}; {report.heading}"),
             ("trials", TrialCounts.of(e.trials).text())]
    if e.baseline is not None and e.chosen is not None:
        lines += [(baseline_label(e.study, e.baseline, recorded_origin(e.runs)), report.value_text(e.baseline)),
                  (f"chosen (trial #{e.chosen.number})", report.value_text(e.chosen)), ("chosen by", e.decided_by)]
    lines += [("note", note) for note in e.notes]
    return html_section("summary", "Summary", html_table(("", ""), lines))


def _convergence(report: StudyReport) -> str:
    note = ("Dots: each trial's value; line: the best so far; dashed: the expected best of random search "
            "drawing the same number of trials without replacement from this study's own results "
            "(exact, conditioned on at least one successful draw); red crosses: failed trials.")
    return html_section("convergence", "Convergence", convergence_svg(report.explanation.trials, report.value_label, report.reading) + html_note(note))


def _chosen(report: StudyReport) -> str:
    e = report.explanation
    if e.baseline is None or e.chosen is None:
        return html_section("chosen", "Chosen configuration", html_note("no trial completed: nothing was chosen"))
    changes = [(name, e.baseline.config.get(name), value) for name, value in changed_settings(e.chosen, e.baseline).items()]
    settings = (html_table(("setting", "baseline", "chosen"), changes) if changes
                else html_note(f"the {baseline_label(e.study, e.baseline, recorded_origin(e.runs))}'s settings"))
    evidence = html_table(*evidence_rows(report))
    note = (f"Chosen by {e.decided_by}. The tuner chooses the search winner with every setting that made no "
            "difference reset to the baseline's value (the compiler's default, or with --compile-commands the build "
            "as shipped); every view shows the choice the study's latest run recorded (its ACF's) while its row "
            "holds the value recorded, else replays that simplification over the recorded trials.")
    if e.runtime:
        note += " Runtime studies: the ACF's choice also passed an interleaved confirmation, not replayed here."
    return html_section("chosen", "Chosen configuration and its evidence", settings + evidence + html_note(note))


def evidence_rows(report: StudyReport) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """The header and rows of the chosen trial's evidence against the baseline (and the search's
    winner where the choice is another): each objective's value, then the static metrics as the
    ACF's evidence states them (registers, spill bytes, occupancy, ...) and the machine code hash;
    the HTML and the markdown report show the same table."""
    e = report.explanation
    shown = [(label, t) for label, t in (("baseline", e.baseline), (f"chosen #{e.chosen.number}" if e.chosen else "", e.chosen))
             if t is not None]
    if e.winner is not None and e.chosen is not None and e.winner.number != e.chosen.number:
        shown.append((f"search winner #{e.winner.number}", e.winner))
    metrics = [(label, t, shown_metrics(t.metrics)) for label, t in shown]  # as the ACF's evidence states them
    keys = [k for k in SHOWN_KEYS if any(m.get(k) is not None for _, _, m in metrics)]
    rows = [(label, *report.shown_values(t), *(_evidence_cell(m.get(k)) for k in keys), t.code_hash or "")
            for label, t, m in metrics]
    return ("", *report.value_labels, *keys, "machine code hash"), rows


def _evidence_cell(value: Any) -> Any:
    """A metric as an evidence cell; each kernel's launch facts (`launch_by_kernel`) on one line."""
    if not isinstance(value, dict):
        return value
    return "; ".join(f"{name}: {facts['block_size']} threads" + (f", {facts['dynamic_smem']} B dynamic smem"
                                                                 if facts["dynamic_smem"] else "")
                     for name, facts in value.items())


TO_TIME_NOTE = ("Refused without a GPU only for a trade-off a GPU must judge (a lower optimisation level, or "
                "under static occupancy given for fewer spills), and better on the objective than the choice. "
                "The run's output and the ACF's [[evidence.to_time]] give the command that times each: "
                "compileiq tune KERNEL --objective time --only SETTINGS --strategy exhaustive --budget N "
                "(over 1,024 combinations: the search over SETTINGS).")


def to_time_rows(report: StudyReport) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    e = report.explanation
    rows = [(f"#{t.number}", " ".join(f"{short_name(k)}={v}" for k, v in changed_settings(t, e.baseline).items()),
             t.value, t.metrics.get("spill_bytes"), t.metrics.get("occupancy"),
             e.refusal(t) or "")  # the study's rules, naming its baseline as every view does
            for t in e.to_time]
    return ("trial", "settings that differ from the baseline", report.value_label, "spill_bytes", "occupancy",
            "refused because"), rows


def _to_time(report: StudyReport) -> str:
    if not report.explanation.to_time:
        return ""
    return html_section("to-time", "Candidates to time on a GPU",
                        html_table(*to_time_rows(report)) + html_note(TO_TIME_NOTE))


def _contributions(report: StudyReport) -> str:
    ablation = report.explanation.ablation
    if ablation is None or not ablation.steps:
        why = "the chosen configuration is the baseline: no setting to credit" if ablation else \
            "no ablation path: the baseline or the chosen trial has no value"
        return html_section("contributions", "Each setting's contribution", html_note(why))
    rows = contribution_rows(report.explanation.study.key.objective, ablation)
    return html_section("contributions", "Each setting's contribution",
                        contributions_svg(ablation, report.value_label) + html_table(*rows)
                        + html_note(contribution_note(ablation)))


def _importance(report: StudyReport) -> str:
    imp = report.importance
    if not imp.items:
        return html_section("importance", "Surrogate importance", html_note(f"not computed: {imp.note}"))
    note = f"{METHOD} ({imp.trials} trials). It describes the whole search's sample, not one path."
    return html_section("importance", "Surrogate importance", importance_svg(imp) + html_note(note))


def _pareto(report: StudyReport) -> str:
    trade_offs = report.front
    if trade_offs is None:
        return ""
    if not trade_offs.points:
        return html_section("pareto", "Pareto front", html_note("no complete trial records these objectives"))
    return html_section("pareto", "Pareto front", pareto_svg(trade_offs) + html_table(*pareto_rows(report, trade_offs))
                        + html_note(pareto_note(trade_offs, tuned(report))))


def pareto_rows(report: StudyReport, trade_offs: Front) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """The front's points, each objective in its own reading (occupancy as occupancy, as the trials'
    table and `show` give it; the others as numbers, sortable)."""
    header = ("#", *trade_offs.objectives, "pick", "settings that differ from the baseline")
    base = report.explanation.baseline
    readings = [reading(o) for o in trade_offs.objectives]
    rows = [(p.trial.number, *(r.text(v) if r.minimised_as else v for r, v in zip(readings, p.values, strict=True)),
             "◀" if p is trade_offs.pick else "", changes_text(p.trial, base))
            for p in trade_offs.points]
    return header, rows


def pareto_note(trade_offs: Front, tuned: bool = False) -> str:
    if tuned:
        return (f"The study's objectives are {', '.join(trade_offs.objectives)} "
                f"({reading(','.join(trade_offs.objectives)).heading}); the "
                "search aimed at their front. Shown: the non-dominated trials that may win (the no-harm rules), the "
                f"dominated ones in grey, and the configuration chosen by {trade_offs.rule!r} ({PICK_RULES}).")
    return (f"Non-dominated complete trials for {', '.join(trade_offs.objectives)} "
            f"({reading(','.join(trade_offs.objectives)).heading}), read "
            f"from the recorded trials: the search aimed at one objective, so it samples the front unevenly. "
            f"Pick rule {trade_offs.rule!r} ({PARETO_RULES}).")


def tuned(report: StudyReport) -> bool:
    return report.front is not None and report.front is report.explanation.front


def _trials(report: StudyReport) -> str:
    e = report.explanation
    keys = StaticMetrics.SCORED
    rows = []
    for t in e.trials:
        changed = changes_text(t, e.baseline)
        complete = t.state is TrialState.COMPLETE
        values = report.shown_values(t) if complete else (None,) * len(report.objectives)
        status = e.described(t) if complete else t.state.value if counted(t) else "to retry"
        rows.append((t.number, status, *values, *(t.metrics.get(k) for k in keys), changed))
    table = html_table(("#", "status", *report.value_labels, *keys, "settings that differ from the baseline"), rows,
                   "sortable")
    return html_section("trials", "Trials", html_note("Click a column header to sort.") + table)


def _failures(report: StudyReport) -> str:
    if not report.failures:
        return html_section("failures", "Failures by reason", html_note("no trial failed"))
    parts = []
    for group in report.failures:
        numbers = ", ".join(f"#{n}" for n in group.trials)
        kind = " (retryable)" if group.retryable else ""
        parts.append(f'<details><summary class="failed">{len(group.trials)} × {html_text(group.reason)}{kind}: '
                     f"{html_text(numbers)}</summary><pre>{html_text(group.example)}</pre></details>")
    return html_section("failures", "Failures by reason", "".join(parts))


def _provenance(report: StudyReport) -> str:
    e = report.explanation
    key = e.study.key
    rows = [("study", f"{e.study.name} (#{e.study.id})"), ("created", e.study.created_at.isoformat()),
            *provenance_rows(e), (key_label("space_id"), f"{key.space_id} (sha256 {key.space_sha256})"),
            (key_label("evaluator"), key.evaluator), (key_label("objective"), f"{key.objective}: {report.kind}"),
            ("database", report.database)]
    space = _space_rows(e.trials)
    return html_section("provenance", "Provenance", html_table(("", ""), rows) +
                    "<h3>Search space (values the study recorded)</h3>" + html_table(("setting", "values"), space))


def provenance_rows(e: Explanation) -> list[tuple[str, str]]:
    """The toolchain, arch, study key and (where its run recorded them) the kernel's path and the
    source bundle's hash, each under its one label (`core.key_labels`): what the HTML and the
    markdown report show alike."""
    key = e.study.key
    rows = [(key_label("toolchain"), key.toolchain), (key_label("arch"), key.arch),
            (key_label("source_sha256"), key.source_sha256)]
    path, bundle = recorded_path(e.runs, key.kernel), recorded_bundle(e.runs)
    return rows + ([(KERNEL_PATH, path)] if path is not None else []) + ([(SOURCE_BUNDLE, bundle)] if bundle is not None else [])


def _space_rows(trials: Sequence[Trial]) -> list[tuple[str, str]]:
    seen: dict[str, list[Any]] = {}
    for t in trials:
        for name, value in t.config.items():
            if value not in seen.setdefault(name, []):
                seen[name].append(value)
    return [(name, ", ".join(map(str, values))) for name, values in sorted(seen.items())]


def changes_text(trial: Trial, baseline: Trial | None) -> str:
    """The trial's settings that differ from the baseline's, short names; "(as the baseline)" for none."""
    return " ".join(f"{short_name(k)}={v}" for k, v in changed_settings(trial, baseline).items()) or "(as the baseline)"
