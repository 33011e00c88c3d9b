"""How the `compileiq` command shows things: progress lines, rich tables and JSON documents.

Static scores are labelled as static estimates wherever they appear; runtimes as GPU runtimes.
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from compileiq.cli.console import cells, err, kind_label, out, safe
from compileiq.cli.run_notes import (
    RunningFront,
    failed_line,
    more_instructions,
    node_spread,
    transfers_line,
    trials_summary,
    untried_macro_values,
)
from compileiq.core.readings import reading
from compileiq.core.records import (
    Study,
    Trial,
    TrialState,
    first_line,
)
from compileiq.core.text import db_option
from compileiq.source.shipped import to_remove

if TYPE_CHECKING:  # the command must start fast (`compileiq flags` runs once per kernel in a build)
    from rich.progress import Progress, TaskID
    from rich.status import Status

    from compileiq import app
    from compileiq.gating import check as gate_lib
    from compileiq.tuning.progress import Outcome

class LineProgress:
    """Progress on stderr: plain lines in a pipe or CI log (and with --json, whose stdout stays one
    document); on a terminal a progress bar (search trials done / budget, best so far, rate, time
    left) with each trial's line printed above it. `hold`: lines wait until the run has a result
    (its first complete trial, or its end), so that a run that fails first says one error line."""

    def __init__(self, quiet: bool = False, *, live: bool | None = None, hold: bool = False) -> None:
        self._quiet = quiet
        self._held: list[str] | None = [] if hold else None
        self._live = (err.is_terminal and not quiet) if live is None else live
        self._budget = 0
        self._done = 0
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._reading = reading("")
        self._front = RunningFront()  # several objectives: the progress line's "best"
        self._status: Status | None = None

    def status(self, text: str) -> None:
        """On a terminal, a passing line for what the run is doing before its study line (a
        start-up phase: "bundling sources (nvcc -M)…"), so that a slow start never looks hung; it
        is erased, so a run that fails early still ends with its one error line."""
        if not self._live:
            return
        if self._status is None:
            self._status = err.status(safe(text))
            self._status.start()
        else:
            self._status.update(safe(text))

    def _end_status(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def started(self, study: Study, budget: int, finished: int) -> None:
        self._end_status()
        self._budget, self._done = budget, finished
        self._reading = reading(study.key.objective)
        self.note(f"study {study.name} (#{study.id}): {finished}/{budget} trials already recorded; "
                  f"objective {study.key.objective} ({kind_label(study.key.objective)}; {self._reading.heading})")
        if self._live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(TextColumn("tuning"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[best]}"), TextColumn("{task.fields[rate]}"),
                                 TimeRemainingColumn(), console=err, transient=True)
            self._task = self._bar.add_task("tuning", total=max(budget, finished), completed=finished,
                                            best="best -", rate="")
            self._bar.start()

    def trial(self, outcome: Outcome, best: Trial | None) -> None:
        trial = outcome.trial
        self._done += trial.searched
        objective = self._reading.objective
        shown = value_text(trial, objective) if trial.value is not None else f"FAILED ({safe(first_line(trial.reason, 120))})"
        if outcome.refused:
            shown += f" (refused: {safe(first_line(outcome.refused, 300))})"
        if "," in objective:  # no one best of a trade-off: the front of the results that may win so far
            best_text = self._front.add(trial, objective) if not outcome.refused else self._front.text()
        else:
            best_text = _best_text(self._reading.text(best.value) if best and best.value is not None else None,
                                   best.number if best else 0, outcome.baseline_pending)
        step = f"{self._done}/{self._budget}" if trial.searched else safe(trial.purpose)
        self._line(f"[{step}] #{trial.number} {shown}  {best_text}  [{safe(outcome.source)}]")
        if trial.state is TrialState.COMPLETE:
            self._release()
        if self._bar is not None and self._task is not None:
            task = self._bar.tasks[0]
            rate = f"{task.speed * 60:.0f}/min" if task.speed else ""
            self._bar.update(self._task, completed=min(self._done, self._budget), best=best_text, rate=rate)

    def note(self, message: str) -> None:
        self._line(safe(message))

    def _line(self, text: str) -> None:
        if self._held is not None:
            self._held.append(text)
        elif not self._quiet:
            (self._bar.console if self._bar is not None else err).print(text, markup=False, highlight=False)

    def _release(self) -> None:
        held, self._held = self._held, None
        for text in held or ():
            self._line(text)

    def close(self, failed: bool = False) -> None:
        """End the display; lines still held are printed, or dropped when the run `failed`."""
        self._end_status()
        if failed:
            self._held = None
        self._release()
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _best_text(value: str | None, number: int, baseline_pending: bool) -> str:
    """The progress line's best; while the baseline has no result (another tuner builds it), the
    best so far, which the baseline's rules and its rank among equals may still overturn."""
    if not baseline_pending:
        return f"best {value} (#{number})" if value is not None else "best -"
    return f"best so far {value} (#{number}; baseline pending)" if value is not None else "best - (baseline pending)"


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
    title = f"{report.kernel.name}: {objective} ({kind_label(objective)}; {reading(objective).heading})"
    table = Table(title=Text(safe(title)))
    for column in ("", "value", "spill bytes", "registers", "occupancy", "instructions"):
        table.add_column(column, justify="right" if column else "left")
    chosen_label = "chosen on the front" if result.front is not None else "chosen"
    for label, trial in ((_baseline_label(report), result.baseline), (f"{chosen_label} (#{result.chosen.number})", result.chosen)):
        table.add_row(*cells(label, *metric_cells(trial, objective)))
    out.print(table)
    acf_flags = report.space.nvcc_args(_config(result.chosen))
    out.print(f"best flags: {safe(shlex.join(acf_flags)) or '(compiler defaults)'}", markup=False)
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
    if note := _launch_note(report):
        out.print(f"note: {safe(note)}", markup=False)
    for line in _to_time_lines(report):
        out.print(line, markup=False)
    calls = counters.compiler_calls
    note = " — every result came from the database" if calls == 0 else ""
    if counters.verify_calls:
        note = f" ({counters.verify_calls} of them to check rows this run did not build)"
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
    out.print(f"wrote {safe(report.acf_path)}", markup=False)


def to_time_entries(report: app.TuneReport) -> list[dict[str, Any]]:
    """The run's candidates to time, as the ACF records them (`results.to_time`)."""
    from compileiq.results import to_time

    result = report.result
    return to_time.entries(result.to_time, result.baseline, result.study.key.objective,
                           to_time.kernel_argument(report.kernel.source), report.space, report.kernel.shipped)


def _launch_note(report: app.TuneReport) -> str | None:
    from compileiq.results.evidence import assumed_launch

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


def _config(trial: Trial) -> Any:
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
    occupancy = f"{m['occupancy']:.0%}" if "occupancy" in m else "-"
    return [value, str(m.get("spill_bytes", "-")), str(m.get("registers", "-")), occupancy, str(m.get("instructions", "-"))]


def _baseline_label(report: app.TuneReport) -> str:
    from compileiq.results.explain import baseline_label

    shipped = report.kernel.shipped
    return baseline_label(report.result.study, report.result.baseline, shipped.origin if shipped else None)


def report_json(report: app.TuneReport) -> dict[str, Any]:
    result, counters = report.result, report.result.counters
    objective = result.study.key.objective
    return {
        "study": study_json(result.study, result.chosen, len(result.trials)),
        "objective": objective_json(objective),
        "baseline": trial_json(result.baseline, objective),
        "baseline_label": _baseline_label(report),
        "best": trial_json(result.chosen, objective),
        "best_args": list(report.space.nvcc_args(_config(result.chosen))),
        "acf": str(report.acf_path),
        "counters": {"compiler_calls": counters.compiler_calls, "verify_calls": counters.verify_calls,
                     "verify_ptxas_calls": counters.verify_ptxas_calls, "frontend_calls": counters.frontend_calls,
                     "ptxas_calls": counters.ptxas_calls, "build_cache_hits": counters.build_cache_hits,
                     "shared_builds": counters.shared_builds,
                     "same_code_reuses": counters.same_code_reuses, "new_trials": counters.new_trials,
                     "compile_seconds": round(counters.compile_seconds, 3),
                     "compile_wait_seconds": round(counters.compile_wait_seconds, 3),
                     "worker_start_seconds": round(counters.worker_start_seconds, 3),
                     "nodes": dict(counters.nodes), "transfers": vars(counters.transfers)},
        "wall_seconds": round(result.wall_seconds, 3),
        "exhausted": result.exhausted,
        "budget": result.budget,
        "search_trials": result.search_trials,
        "extra_trials": result.extra_trials,
        "stopped": result.stopped,
        "warm_start": result.warm_start,
        "to_time": to_time_entries(report),
        "launch_note": _launch_note(report),
        "confirmation": _confirmation_json(result.confirmation),
    }


def _confirmation_json(confirmation: Any) -> dict[str, Any] | None:
    """A runtime run's confirmation: the same keys and values as the ACF's [objective] (None: static)."""
    from compileiq.results.evidence import confirmation_table

    return None if confirmation is None else confirmation_table(confirmation)


def objective_json(objective: str) -> dict[str, Any]:
    """The objective with its kind, unit and direction (`core.readings`): how its values read.
    Several objectives have no one unit or direction: each is given in `objectives`, in order."""
    if "," in objective:
        each = [_reading_json(name) for name in objective.split(",")]
        return {"name": objective, "kind": kind_label(objective), "objectives": each}
    return {"name": objective, "kind": kind_label(objective)} | _reading_json(objective)


def _reading_json(objective: str) -> dict[str, Any]:
    read = reading(objective)
    data = {"name": objective, "unit": read.unit, "better": read.better}
    return data | ({"value_is": read.minimised_as} if read.minimised_as else {})


def study_json(study: Study, chosen: Trial | None, trials: int | None = None) -> dict[str, Any]:
    """The study with its chosen trial (`results.explain`: the ACF's), not merely its lowest value."""
    return study_fields(study, trials, *((chosen.number, chosen.value) if chosen is not None else (None, None)))


def study_fields(study: Study, trials: int | None, number: int | None, value: float | None) -> dict[str, Any]:
    data: dict[str, Any] = {"id": study.id, "name": study.name, "kernel": study.key.kernel,
                            "objective": study.key.objective, "arch": study.key.arch, "evaluator": study.key.evaluator}
    if trials is not None:
        data["trials"] = trials
    return data | {"chosen": number, "best": value, "best_shown": reading(study.key.objective).shown(value),
                   "created_at": study.created_at.isoformat()}


def trial_json(trial: Trial, objective: str, refused: str | None = None) -> dict[str, Any]:
    """A trial; `value_shown` is its value as people read it (occupancy, not its shortfall); its
    metrics as the ACF's evidence states them (each kernel's launch where tune.toml gives several)."""
    from compileiq.results.evidence import shown_metrics

    return {"number": trial.number, "state": trial.state.value, "value": trial.value,
            "value_shown": reading(objective).shown(trial.value), **objective_values(trial, objective),
            "refused": refused, "reason": trial.reason, "config": trial.config, "metrics": shown_metrics(trial.metrics),
            "code_hash": trial.code_hash, "purpose": trial.purpose}


def objective_values(trial: Trial, objective: str) -> dict[str, Any]:
    """Several objectives: each one's value ("values", lower is better, as the front gives them) and
    as people read it ("values_shown"); `value` is the first's alone. Nothing for one objective."""
    if "," not in objective:
        return {}
    from compileiq.results.pareto import values_of

    names = objective.split(",")
    values = values_of(trial, names)
    if values is None:
        return {"values": None, "values_shown": None}
    return {"values": dict(zip(names, values, strict=True)),
            "values_shown": {n: reading(n).shown(v) for n, v in zip(names, values, strict=True)}}
