"""The `compileiq` command: typed options, one library call each, rich or plain rendering."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer._click.exceptions import NoArgsIsHelpError

from compileiq import __version__, app, gate_report, gate_rules
from compileiq import gate as gate_lib
from compileiq.errors import CompileIQError, UsageError
from compileiq.runner import Outcome
from compileiq.store import Store, Study, Trial, TrialState

cli = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Tune nvcc/ptxas settings of a CUDA kernel; record the evidence; gate CI on it.")
db_cli = typer.Typer(no_args_is_help=True, help="Database maintenance.")
cli.add_typer(db_cli, name="db")
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, soft_wrap=True)

DbOption = Annotated[str | None, typer.Option("--db", help="SQLAlchemy URL; default $COMPILEIQ_DB or sqlite:///store/compileiq.db")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document for scripts.")]
STATIC_LABEL = "static estimate"
RUNTIME_LABEL = "GPU runtime, ms"


def _kind(objective: str) -> str:
    """How values of this objective are labelled everywhere they are shown."""
    return RUNTIME_LABEL if objective == "time" else STATIC_LABEL


class LineProgress:
    """Progress as plain lines (pipes, CI logs) or a live status line on a terminal."""

    def __init__(self, quiet: bool) -> None:
        self._quiet = quiet
        self._live = err.is_terminal
        self._budget = 0
        self._done = 0
        self._status: Any = None

    def started(self, study: Study, budget: int, finished: int) -> None:
        self._budget, self._done = budget, finished
        self.note(f"study {study.name} (#{study.id}): {finished}/{budget} trials already recorded; "
                  f"objective {study.key.objective} ({_kind(study.key.objective)})")
        if self._live and not self._quiet:
            self._status = err.status("tuning…")
            self._status.start()

    def trial(self, outcome: Outcome, best: Trial | None) -> None:
        self._done += 1
        trial = outcome.trial
        shown = f"{trial.value:g}" if trial.value is not None else f"FAILED ({_first_line(trial.reason, 120)})"
        best_text = f"{best.value:g} (#{best.number})" if best and best.value is not None else "-"
        step = f"{self._done}/{self._budget}" if self._done <= self._budget else "simplify"
        line = f"[{step}] #{trial.number} {shown}  best {best_text}  [{outcome.source}]"
        if self._status is not None:
            self._status.update(line)
        if not self._quiet:
            err.print(line, markup=False)

    def note(self, message: str) -> None:
        if not self._quiet:
            err.print(message, markup=False)

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()


@cli.command()
def tune(
    kernel: Annotated[Path, typer.Argument(help="The .cu file (a tune.toml beside it is read if present).")],
    objective: Annotated[str, typer.Option(help="static | spills | registers | occupancy | instructions (static estimates); time needs a GPU")] = "static",
    budget: Annotated[int, typer.Option(help="Trials in the study, baseline included.")] = 40,
    strategy: Annotated[str, typer.Option(help="bayes | random | exhaustive")] = "bayes",
    seed: Annotated[int, typer.Option(help="Seed: the same seed reproduces a run.")] = 0,
    surrogate: Annotated[str, typer.Option(help="skopt surrogate for bayes: ET | RF | GP")] = "ET",
    batch_size: Annotated[int, typer.Option(help="Variants compiled in parallel per batch.")] = 8,
    out_file: Annotated[Path | None, typer.Option("--out", help="ACF path; default store/<kernel>.acf.toml")] = None,
    db: DbOption = None,
    study: Annotated[str | None, typer.Option(help="Study name (share one study between runs/people).")] = None,
    workers: Annotated[str, typer.Option(help="ray | local (threads, no Ray)")] = "ray",
    ray_address: Annotated[str | None, typer.Option(help="Join a running Ray cluster (HOST:PORT).")] = None,
    resume: Annotated[bool, typer.Option(help="Take over an interrupted study: retry its in-flight trials now.")] = False,
    arch: Annotated[str | None, typer.Option(help="Override the target, e.g. sm_90.")] = None,
    allow_numerics: Annotated[bool, typer.Option(help="Search numerics-changing flags (fast math, ftz...).")] = False,
    allow_semantics: Annotated[bool, typer.Option(help="Search flags that assume things about the code (-restrict, maxntid).")] = False,
    only: Annotated[str | None, typer.Option(help="Comma-separated parameter names to search (others stay default).")] = None,
    exclude: Annotated[str | None, typer.Option(help="Comma-separated parameter names to leave at default.")] = None,
    program: Annotated[bool, typer.Option(help="--objective time: the kernel file is a program with its own main that prints its time.")] = False,
    metric_regex: Annotated[str | None, typer.Option(help="Program mode: a regex whose first group is the time in ms (default: a JSON line with time_ms).")] = None,
    simplify: Annotated[bool, typer.Option(help="Drop the winner's settings that make no difference (recompiles each).")] = True,
    stale_after: Annotated[float, typer.Option(hidden=True, help="Seconds without a heartbeat before another tuner retries a running trial.")] = 300.0,
    as_json: JsonOption = False,
) -> None:
    """Search compiler settings for KERNEL and write the advanced-control file."""
    options = app.TuneOptions(
        kernel=kernel, objective=objective, budget=budget, strategy=strategy, seed=seed,
        surrogate=surrogate, batch_size=batch_size, out=out_file, db=db, study=study,
        workers=workers, ray_address=ray_address, resume=resume, arch=arch,
        allow_numerics=allow_numerics, allow_semantics=allow_semantics,
        only=_names(only), exclude=_names(exclude), simplify=simplify, stale_after=stale_after,
        program=program, metric_regex=metric_regex,
    )  # fmt: skip
    progress = LineProgress(quiet=as_json)
    try:
        report = app.tune(options, progress)
    finally:
        progress.close()
    if as_json:
        print(json.dumps(_report_json(report), indent=2))
    else:
        _print_report(report)


@cli.command()
def show(
    study: Annotated[str | None, typer.Argument(help="Study name or id; omit to list studies.")] = None,
    top: Annotated[int, typer.Option(help="Trials to show.")] = 10,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """List studies, or the best trials of one study."""
    store = Store.open(app.database_url(db))
    try:
        if study is None:
            rows = [(s, store.trials(s.id)) for s in store.list_studies()]
            _emit(as_json, [_study_json(s, t) for s, t in rows], lambda: _studies_table(rows))
        else:
            found = store.find_study(study)
            trials = store.trials(found.id)
            ranked = _ranked(trials)[:top]
            failed = [t for t in trials if t.state is TrialState.FAILED]
            baseline = trials[0].config if trials else {}
            data = {"study": _study_json(found, trials), "trials": [_trial_json(t) for t in ranked],
                    "failed": [_trial_json(t) for t in failed]}
            _emit(as_json, data, lambda: _trials_table(found, ranked, baseline))
            if failed and not as_json:
                out.print(f"{len(failed)} failed trial(s), e.g. #{failed[0].number}: {_first_line(failed[0].reason, 200)}",
                          markup=False)
    finally:
        store.close()


@cli.command()
def flags(
    acf_file: Annotated[Path, typer.Argument(metavar="FILE", help="An .acf.toml written by `compileiq tune`.")],
    stage: Annotated[str, typer.Option(help="all (one-step nvcc) | frontend | ptxas (direct ptxas call)")] = "all",
    arch: Annotated[bool, typer.Option(help="Include -arch=.")] = True,
) -> None:
    """Print the ACF's compiler arguments for a build: nvcc $(compileiq flags k.acf.toml) ..."""
    if stage not in ("all", "frontend", "ptxas"):
        raise UsageError(f"--stage must be all, frontend or ptxas, got {stage!r}")
    print(shlex.join(app.read_acf(acf_file).flags(stage, with_arch=arch)))


@cli.command()
def gate(
    acf_files: Annotated[list[Path], typer.Argument(metavar="ACF", help="ACF files written by `compileiq tune`.")],
    kernel: Annotated[Path | None, typer.Option(help="The kernel source (one ACF only); default: the ACF's kernel.path.")] = None,
    rule: Annotated[list[str] | None, typer.Option(help="NAME=error|warn|off; repeatable. Rules: " + ", ".join(gate_rules.RULE_NAMES))] = None,
    markdown: Annotated[Path | None, typer.Option(help="Write a markdown summary (e.g. for $GITHUB_STEP_SUMMARY).")] = None,
    junit: Annotated[Path | None, typer.Option(help="Write JUnit XML (one testcase per ACF).")] = None,
    device: Annotated[bool | None, typer.Option("--device/--static", help="Time on the GPU / static rules only; default: the GPU when one is visible.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Rebuild each kernel with its ACF and check it against the ACF's evidence (exit 0 pass, 1 regression, 2 bad input)."""
    options = gate_lib.GateOptions(acfs=tuple(acf_files), kernel=kernel, rules=tuple(rule or ()), device=device)
    from compileiq.timing import HarnessTiming

    report = gate_lib.run(options, HarnessTiming())
    if markdown is not None:
        gate_report.write(markdown, gate_report.markdown(report))
    if junit is not None:
        gate_report.write(junit, gate_report.junit(report))
    if as_json:
        print(json.dumps(gate_report.as_json(report), indent=2))
    else:
        _print_gate(report)
    raise typer.Exit(report.exit_code)


def _print_gate(report: gate_lib.GateReport) -> None:
    table = Table(title=f"compileiq gate ({report.mode})")
    for column in ("ACF", "kernel", "verdict", "findings"):
        table.add_column(column)
    for result in report.results:
        findings = "\n".join(f"{f.severity.value} {f.rule}: {f.recorded} -> {f.measured}" for f in result.findings)
        table.add_row(*(Text(cell) for cell in (result.acf, result.kernel, result.verdict, findings or "-")))
    out.print(table)
    for result in report.results:
        for finding in result.findings:
            out.print(f"{result.acf}: {gate_report.finding_line(finding)}", markup=False)
    out.print(gate_report.summary_line(report), markup=False)


@db_cli.command("upgrade")
def db_upgrade(db: DbOption = None) -> None:
    """Create or migrate the database schema to this version of compileiq."""
    store = Store.open(app.database_url(db))
    try:
        revision = store.upgrade()
        out.print(f"{store.url_for_display}: schema at revision {revision}", markup=False)
    finally:
        store.close()


@db_cli.command("export")
def db_export(
    study: Annotated[str, typer.Argument(help="Study name or id.")],
    out_file: Annotated[Path, typer.Option("--out", "-o", help="File to write (gzip when it ends in .gz).")],
    db: DbOption = None,
) -> None:
    """Write a study, its trials, builds and measurements to a checksummed JSON file."""
    from compileiq import exchange

    done = exchange.export_to_file(app.database_url(db), study, out_file)
    out.print(f"exported study {done.study}: {done.trials} trials, {done.builds} builds, "
              f"{done.measurements} measurements -> {done.path}", markup=False)


@db_cli.command("import")
def db_import(
    in_file: Annotated[Path, typer.Argument(metavar="FILE", help="A file written by `compileiq db export`.")],
    db: DbOption = None,
) -> None:
    """Merge an exported study into this database (one transaction; importing twice changes nothing)."""
    from compileiq import exchange

    done = exchange.import_from_file(app.database_url(db), in_file)
    verb = "created" if done.created else "merged into"
    note = "" if done.changed else " (nothing new)"
    out.print(f"{verb} study {done.study.name}: {done.trials_added} trials added, {done.trials_kept} kept, "
              f"{done.trials_skipped} unfinished skipped; {done.builds_added} builds and "
              f"{done.measurements_added} measurements added{note}", markup=False)


@cli.command("version")
def version() -> None:
    """Print the version."""
    print(__version__)


@cli.command("include-dir")
def include_dir() -> None:
    """Print the directory of the measuring harness header (nvcc -I "$(compileiq include-dir)")."""
    from compileiq.measure import include_dir as harness_include_dir

    print(harness_include_dir())


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip()) if text else ()


def _first_line(text: str | None, limit: int = 400) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0][:limit] if lines else "unknown"


def _ranked(trials: list[Trial]) -> list[Trial]:
    """Best first; among equal values the one with the fewest changed settings first."""
    complete = [t for t in trials if t.state is TrialState.COMPLETE and t.value is not None]
    baseline = trials[0].config if trials else {}
    return sorted(complete, key=lambda t: (t.value, _changed_count(t, baseline), t.number))


def _changed_count(trial: Trial, baseline: dict[str, Any]) -> int:
    return sum(1 for k, v in trial.config.items() if baseline.get(k) != v)


def _emit(as_json: bool, data: Any, table: Any) -> None:
    if as_json:
        print(json.dumps(data, indent=2, default=str))
    else:
        out.print(table())


def _print_report(report: app.TuneReport) -> None:
    result = report.result
    counters = result.counters
    table = Table(title=f"{report.kernel.name}: {result.study.key.objective} ({_kind(result.study.key.objective)}, lower is better)")
    for column in ("", "value", "spill bytes", "registers", "occupancy", "instructions"):
        table.add_column(column, justify="right" if column else "left")
    for label, trial in (("baseline (defaults)", result.baseline), (f"best (#{result.chosen.number})", result.chosen)):
        table.add_row(label, *_metric_cells(trial))
    out.print(table)
    acf_flags = report.space.nvcc_args(_config(result.chosen))
    out.print(f"best flags: {shlex.join(acf_flags) or '(compiler defaults)'}", markup=False)
    if result.simplification is not None and result.simplification.dropped:
        dropped = result.simplification.dropped
        out.print(f"simplified: search winner #{result.winner.number} -> #{result.chosen.number}; "
                  f"{len(dropped)} setting(s) made no difference and were dropped: {', '.join(dropped)}", markup=False)
    if result.confirmation is not None:
        out.print(_confirmation_line(result.confirmation), markup=False)
    calls = counters.compiler_calls
    note = " — every result came from the database" if calls == 0 else ""
    out.print(f"compiler calls: {calls} (nvcc front end {counters.frontend_calls}, ptxas {counters.ptxas_calls}); "
              f"build cache hits {counters.build_cache_hits}; same machine code {counters.same_code_reuses}{note}", markup=False)
    out.print(f"trials: {counters.new_trials} new, {len(result.trials)} in study {result.study.name}; "
              f"{result.wall_seconds:.1f} s" + ("; search space exhausted" if result.exhausted else ""), markup=False)
    out.print(f"wrote {report.acf_path}", markup=False)


def _confirmation_line(confirmation: Any) -> str:
    if confirmation.keeps_baseline:
        return (f"confirmed: no variant beat the baseline beyond ±{confirmation.delta:.1%} "
                "(the A/A noise threshold); the ACF keeps the compiler defaults")
    c = confirmation.winner.comparison
    return (f"confirmed: {c.verdict.value}, speedup {1 / c.estimate:.3f}x "
            f"(95% interval {1 / c.high:.3f}-{1 / c.low:.3f}x, {c.rounds} interleaved rounds)")


def _config(trial: Trial) -> Any:
    from compileiq.space import Config

    return Config.of(trial.config)


def _metric_cells(trial: Trial) -> list[str]:
    m = trial.metrics
    value = f"{trial.value:g}" if trial.value is not None else "failed"
    occupancy = f"{m['occupancy']:.0%}" if "occupancy" in m else "-"
    return [value, str(m.get("spill_bytes", "-")), str(m.get("registers", "-")), occupancy, str(m.get("instructions", "-"))]


def _report_json(report: app.TuneReport) -> dict[str, Any]:
    result, counters = report.result, report.result.counters
    return {
        "study": _study_json(result.study, list(result.trials)),
        "objective": {"name": result.study.key.objective, "kind": _kind(result.study.key.objective)},
        "baseline": _trial_json(result.baseline),
        "best": _trial_json(result.chosen),
        "best_args": list(report.space.nvcc_args(_config(result.chosen))),
        "acf": str(report.acf_path),
        "counters": {"compiler_calls": counters.compiler_calls, "frontend_calls": counters.frontend_calls,
                     "ptxas_calls": counters.ptxas_calls, "build_cache_hits": counters.build_cache_hits,
                     "same_code_reuses": counters.same_code_reuses, "new_trials": counters.new_trials,
                     "compile_seconds": round(counters.compile_seconds, 3),
                     "compile_wait_seconds": round(counters.compile_wait_seconds, 3),
                     "worker_start_seconds": round(counters.worker_start_seconds, 3)},
        "wall_seconds": round(result.wall_seconds, 3),
        "exhausted": result.exhausted,
    }


def _study_json(study: Study, trials: list[Trial]) -> dict[str, Any]:
    ranked = _ranked(trials)
    return {"id": study.id, "name": study.name, "kernel": study.key.kernel, "objective": study.key.objective,
            "arch": study.key.arch, "evaluator": study.key.evaluator, "trials": len(trials),
            "best": ranked[0].value if ranked else None, "created_at": study.created_at.isoformat()}


def _trial_json(trial: Trial) -> dict[str, Any]:
    return {"number": trial.number, "state": trial.state.value, "value": trial.value, "reason": trial.reason,
            "config": trial.config, "metrics": {k: v for k, v in trial.metrics.items() if k != "entries"},
            "code_hash": trial.code_hash}


def _studies_table(rows: list[tuple[Study, list[Trial]]]) -> Table:
    table = Table(title="studies")
    for column in ("id", "name", "kernel", "objective", "arch", "trials", "best"):
        table.add_column(column)
    for study, trials in rows:
        ranked = _ranked(trials)
        best = f"{ranked[0].value:g}" if ranked else "-"
        table.add_row(str(study.id), study.name, study.key.kernel, study.key.objective, study.key.arch, str(len(trials)), best)
    return table


def _trials_table(study: Study, trials: list[Trial], baseline: dict[str, Any]) -> Table:
    table = Table(title=f"{study.name}: best trials ({study.key.objective}, {_kind(study.key.objective)})")
    for column in ("#", "value", "spill bytes", "registers", "occupancy", "instructions", "non-default settings"):
        table.add_column(column)
    for trial in trials:
        table.add_row(str(trial.number), *_metric_cells(trial), _changes(trial, baseline))
    return table


def _changes(trial: Trial, baseline: dict[str, Any]) -> str:
    """The trial's settings that differ from the baseline's (the compiler defaults), short names."""
    parts = [f"{k.partition('.')[2]}={v}" for k, v in sorted(trial.config.items())
             if k.startswith("define.") or baseline.get(k) != v]
    return " ".join(parts) or "(defaults)"


def main(argv: list[str] | None = None) -> None:
    """Entry point: domain errors become one line on stderr and a non-zero exit."""
    command = typer.main.get_command(cli)
    try:  # typer >= 0.2x vendors click: its exceptions are typer's, not the `click` package's
        code = command.main(args=argv, prog_name="compileiq", standalone_mode=False)
    except CompileIQError as error:
        err.print(f"error: {_first_line(str(error))}", markup=False)
        sys.exit(error.exit_code)
    except NoArgsIsHelpError as error:
        error.show()
        sys.exit(error.exit_code)
    except typer.TyperException as error:  # usage errors: unknown option, bad value...
        err.print(f"error: {_first_line(error.format_message())}", markup=False)
        sys.exit(error.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        code = 130
    if code == 130:  # typer turns Ctrl-C into a returned 130 when not standalone
        err.print("interrupted: finished trials are saved; rerun with --resume to continue", markup=False)
    if isinstance(code, int) and code:
        sys.exit(code)
