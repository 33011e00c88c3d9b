"""How the `compileiq` command shows things: rich tables and lines (progress lines: `progress`;
JSON documents: `json_views`).

Static scores are labelled as static estimates wherever they appear; runtimes as GPU runtimes.
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from compileiq.cli.console import cells, kind_label, out, safe
from compileiq.cli.run_notes import (
    failed_line,
    more_instructions,
    node_spread,
    transfers_line,
    trials_summary,
    untried_macro_values,
)
from compileiq.core.readings import reading
from compileiq.core.records import Trial
from compileiq.core.static_score import StaticMetrics
from compileiq.core.text import db_option
from compileiq.evaluate.unscored_views import scoring_text
from compileiq.source.shipped import to_remove

if TYPE_CHECKING:  # the command must start fast (`compileiq flags` runs once per kernel in a build)
    from compileiq import app
    from compileiq.gating import check as gate_lib


def print_gate(report: gate_lib.GateReport) -> None:
    from compileiq.gating import ci_reports as gate_report

    table = Table(title=Text(f"compileiq gate ({report.mode})"))
    for column in ("ACF", "kernel", "verdict", "findings"):
        table.add_column(column)
    for result in report.results:
        lines = [safe(f"{f.severity.value} {f.rule}" + ("" if result.bad_input else f": {f.recorded} -> {f.measured}"))
                 for f in result.findings]
        table.add_row(*cells(result.acf, result.kernel, result.verdict), Text("\n".join(lines) or "-"))
    out.print(table)
    for result in report.results:
        for finding in result.findings:
            out.print(safe(f"{result.acf}: {gate_report.finding_line(finding)}"), markup=False)
    out.print(gate_report.summary_line(report), markup=False)


def emit(as_json: bool, data: Any, table: Any) -> None:
    if as_json:
        print(json.dumps(data, indent=2, default=str))
    else:
        out.print(table())


def print_report(report: app.TuneReport) -> None:
    result = report.result
    counters = result.counters
    objective = result.study.key.objective
    scoring = scoring_text(result.baseline.metrics, result.chosen.metrics, objective)  # as show, report and --json say it
    title = (f"{report.kernel.name}: {objective} ({kind_label(objective)}; {reading(objective).heading}"
             f"{f'; {scoring}' if scoring else ''})")
    table = Table(title=Text(safe(title)))
    for column in ("", "value", *METRIC_COLUMNS):
        table.add_column(column, justify="right" if column else "left")
    chosen_label = "chosen on the front" if result.front is not None else "chosen"
    for label, trial in ((baseline_label_of(report), result.baseline), (f"{chosen_label} (#{result.chosen.number})", result.chosen)):
        table.add_row(*cells(label, *metric_cells(trial, objective)))
    out.print(table)
    acf_flags = report.space.nvcc_args(config_of(result.chosen))
    from compileiq.evaluate import eligibility

    kept = f"({eligibility.against(report.kernel.shipped)})"  # the ACF's vs_defaults.against: one wording
    out.print(f"best flags: {safe(shlex.join(acf_flags) or kept)}", markup=False)
    if note := more_instructions(result.baseline, result.chosen, objective):
        out.print(note, markup=False)
    if report.kernel.shipped is not None and (remove := to_remove(report.kernel.shipped.settings, result.chosen.config)):
        out.print(f"remove from your build's command: {safe(' '.join(remove))} (the ACF changes these shipped "
                  "settings; appending its flags alone would keep them)", markup=False)
    if result.simplification is not None and result.simplification.dropped:
        dropped = result.simplification.dropped
        back = "your build's value" if report.kernel.shipped is not None and report.kernel.shipped.settings else "the default"
        from compileiq.results.pareto import values_by_objective

        objectives = result.front.objectives if result.front is not None else (objective,)
        same = values_by_objective(objectives, result.winner) == values_by_objective(objectives, result.chosen)
        effect = (f"made no difference and went back to {back}" if same
                  else f"went back to {back}, which left no objective worse and made the choice better")
        out.print(f"simplified: search winner #{result.winner.number} -> #{result.chosen.number}; "
                  f"{len(dropped)} setting(s) {effect}: {', '.join(dropped)}", markup=False)
    if result.confirmation is not None:
        out.print(_confirmation_line(result.confirmation), markup=False)
    if result.front is not None:
        from compileiq.cli.why import print_front

        print_front(result.study, result.front, result.baseline, result.chosen)
    if note := launch_note(report):
        out.print(f"note: {safe(note)}", markup=False)
    for line in _to_time_lines(report):
        out.print(line, markup=False)
    calls = counters.compiler_calls
    note = " — every result came from the database" if calls == 0 else ""
    if counters.verify_calls:  # its own counter: a parenthesis after "same machine code 0" read as 11 of those 0
        note = f"; rebuilt to check rows this run did not build: {counters.verify_calls} of the {calls} compiler calls"
    out.print(f"compiler calls: {calls} (nvcc front end {counters.frontend_calls}, ptxas {counters.ptxas_calls}); "
              f"build cache hits {counters.build_cache_hits}; ptxas skipped (same PTX and flags) {counters.shared_builds}; "
              f"same machine code {counters.same_code_reuses}{note}", markup=False)
    out.print(f"trials: {trials_summary(result)}; {counters.new_trials} new, {len(result.trials)} in study "
              f"{safe(result.study.name)}; {result.wall_seconds:.1f} s; stopped: {safe(result.stopped)}", markup=False)
    if failures := failed_line(result.trials):
        shown = f"compileiq show {shlex.quote(safe(result.study.name))} --json {db_option(report.database)}"
        out.print(f"note: {failures} ({shown} lists every reason)", markup=False)
    if untried := untried_macro_values(result.trials, report.space):
        out.print(untried.note(), markup=False)
    if counters.compiled_where:
        out.print(counters.compiled_where, markup=False)
    if counters.nodes:
        out.print(node_spread(counters.nodes), markup=False)
    if counters.transfers.tasks:
        out.print(transfers_line(counters.transfers, counters.new_trials), markup=False)
    out.print(f"{safe(report.acf_path)} already holds this choice: unchanged" if report.acf_unchanged
              else f"wrote {safe(report.acf_path)}", markup=False)


def to_time_entries(report: app.TuneReport) -> list[dict[str, Any]]:
    """The run's candidates to time, as the ACF records them (`results.to_time`)."""
    from compileiq.results import to_time

    result = report.result
    return to_time.entries(result.to_time, result.baseline, result.study.key.objective,
                           to_time.kernel_argument(report.kernel.source), report.space, report.kernel.shipped)


def launch_note(report: app.TuneReport) -> str | None:
    from compileiq.results.launch_note import assumed_launch

    return assumed_launch(report.kernel, report.result.chosen)


def _to_time_lines(report: app.TuneReport) -> list[str]:
    entries = to_time_entries(report)
    if not entries:
        return []
    objective = safe(report.result.study.key.objective)
    lines = [f"candidates to time ({len(entries)}): refused without a GPU, better on {objective} than the choice; on a GPU:"]
    for entry in entries:
        settings = " ".join(f"{name}={value}" for name, value in entry["settings"].items())
        lines.append(f"  #{entry['trial']} {safe(settings)}: spill bytes {entry.get('spill_bytes')}, occupancy "
                     f"{float(entry.get('occupancy', 0)):.0%}; {safe(entry['refused'])}")
        lines.append(f"    {safe(entry['command'])}")
    return lines


def _confirmation_line(confirmation: Any) -> str:
    count = len(confirmation.confirmed)
    confirmed = f"confirmed ({count} finalist{'s' * (count != 1)} against the baseline)"
    if not count:
        return f"{confirmed}: nothing to confirm (no screened variant had other machine code); the ACF keeps the baseline"
    if confirmation.keeps_baseline:
        return (f"{confirmed}: none beat the baseline beyond ±{confirmation.delta:.1%} "
                "(the A/A noise threshold); the ACF keeps the baseline")
    c, median = confirmation.winner.comparison, confirmation.winner.median_ms
    held = "" if median is None else f"; over them it ran {median:.6g} ms, the time `gate --device` holds it to"
    return (f"{confirmed}: {c.verdict.value}, median speedup {1 / c.estimate:.3f}x "
            f"(95% interval {1 / c.high:.3f}-{1 / c.low:.3f}x, {c.rounds} interleaved rounds{held})")


def config_of(trial: Trial) -> Any:
    from compileiq.core.space import Config

    return Config.of(trial.config)


def value_text(trial: Trial, objective: str) -> str:
    """A complete trial's value as people read it; several objectives: each one's, "a / b"."""
    value = reading(objective).text(trial.value)
    if "," in objective:  # the recorded value is the first objective's alone (minimised: a shortfall)
        from compileiq.results.pareto import values_of

        names = objective.split(",")
        values = values_of(trial, names)
        value = " / ".join(reading(n).text(v) for n, v in zip(names, values, strict=True)) if values else value
    return value


def metric_cells(trial: Trial, objective: str) -> list[str]:
    """The value (several objectives: each, "a / b") and the static metrics of a trial's row."""
    m = trial.metrics
    value = value_text(trial, objective) if trial.value is not None else "failed"
    return [value, *(("-" if name not in m else f"{m[name]:.0%}" if name == "occupancy" else str(m[name]))
                     for name in StaticMetrics.SCORED)]


METRIC_COLUMNS = tuple(StaticMetrics.LABELS[name] for name in StaticMetrics.SCORED)  # `metric_cells`' headings


def baseline_label_of(report: app.TuneReport) -> str:
    from compileiq.results.baseline_labels import baseline_label

    shipped = report.kernel.shipped
    return baseline_label(report.result.study, report.result.baseline, shipped.origin if shipped else None)
