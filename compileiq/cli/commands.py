"""The `compileiq` command's options and commands (imported through `compileiq.cli`, which
guards the tenths of a second it takes to load): one library call each; rendering lives in `render`,
`listings`, `progress` and `json_views`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

try:  # typer >= 0.20 vendors click; older typer uses the click package
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
except ImportError:  # pragma: no cover - exercised by scripts/test-minimums.sh
    from click.exceptions import ClickException, NoArgsIsHelpError  # type: ignore[no-redef,assignment]

from compileiq.cli import gate_reports, signals
from compileiq.cli.console import err, out, safe
from compileiq.cli.json_views import report_json
from compileiq.cli.listings import (
    print_trials,
    space_json,
    space_table,
    studies_table,
    summary_json,
)
from compileiq.cli.progress import LineProgress
from compileiq.cli.render import emit, print_gate, print_report
from compileiq.core import heap
from compileiq.core.errors import CompileIQError, UsageError
from compileiq.core.file_sniff import REPORT
from compileiq.core.output_file import check_report_target
from compileiq.core.records import first_line
from compileiq.core.version import __version__
from compileiq.gating import rules as gate_rules

cli = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Tune nvcc/ptxas settings of a CUDA kernel; record the evidence; gate CI on it.")
db_cli = typer.Typer(no_args_is_help=True, help="Database maintenance.")


def _print_version(value: bool) -> None:
    if value:
        print(__version__)
        raise typer.Exit()


@cli.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", metavar="", callback=_print_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Tune nvcc/ptxas settings of a CUDA kernel; record the evidence; gate CI on it."""
cli.add_typer(db_cli, name="db")

DbOption = Annotated[str | None, typer.Option("--db", help="SQLAlchemy URL; default $COMPILEIQ_DB or sqlite:///store/compileiq.db")]
CompileOutputOption = Annotated[str | None, typer.Option(metavar="OUTPUT", help="With several commands for the kernel in --compile-commands (one .cu in two targets): the one whose output (e.g. CMakeFiles/app.dir/k.cu.o) to tune; the ACF records it for the gate.")]
JsonOption = Annotated[bool, typer.Option("--json", metavar="", help="Print one JSON document for scripts.")]


@cli.command()
def tune(
    kernel: Annotated[Path, typer.Argument(metavar="KERNEL.cu", help="The .cu file (a tune.toml beside it is read if present).")],
    objective: Annotated[str, typer.Option(metavar="[static|spills|registers|occupancy|instructions|time]", help="static | spills | registers | occupancy | instructions (static estimates); time needs a GPU; or 2-3 of them comma-separated (registers,instructions): the Pareto front")] = "static",
    pick: Annotated[str | None, typer.Option("--pick", help="Several objectives: the point of the front the ACF takes: knee (nearest the ideal point, scaled; default) | first (best first objective) | weights=a:0.7,b:0.3 (smallest weighted sum, scaled)")] = None,
    budget: Annotated[int, typer.Option(help="Search trials in the study, baseline included (simplification and ablation builds are extra and free).")] = 40,
    time_budget: Annotated[str | None, typer.Option(metavar="DURATION", help="Start no search trial after this long, e.g. 90s, 10m, 1h; running ones finish and the ACF is written.")] = None,
    patience: Annotated[int | None, typer.Option(metavar="BATCHES", help="Stop after this many batches in a row without a better best.")] = None,
    strategy: Annotated[str, typer.Option(metavar="[bayes|random|exhaustive]", help="bayes | random | exhaustive")] = "bayes",
    seed: Annotated[int, typer.Option(help="Seed: the same seed reproduces a run in the same database (the warm start reads its other studies; with --no-warm-start the seed alone).")] = 0,
    surrogate: Annotated[str, typer.Option(metavar="[ET|RF|GP]", help="skopt surrogate for bayes: ET | RF | GP")] = "ET",
    batch_size: Annotated[int, typer.Option(help="Variants compiled in parallel per batch.")] = 8,
    stream: Annotated[bool, typer.Option("--stream", metavar="", help="Keep --batch-size variants compiling, starting one as each finishes (a cluster's workers never wait for a batch's slowest; not reproducible by --seed).")] = False,
    out_file: Annotated[Path | None, typer.Option("--out", help="ACF path; default store/<kernel>.<objective>.acf.toml")] = None,
    force: Annotated[bool, typer.Option("--force", metavar="", help="Replace the ACF at the path even if it holds more evidence (another study, more search trials, a simplification or a confirmation this run lacks).")] = False,
    db: DbOption = None,
    study: Annotated[str | None, typer.Option(help="Study name (share one study between runs/people).")] = None,
    workers: Annotated[str, typer.Option(metavar="[ray|local]", help="ray | local (threads, no Ray)")] = "ray",
    ray_address: Annotated[str | None, typer.Option(help="Join a running Ray cluster: HOST:PORT, or auto (the one started on this machine); default $RAY_ADDRESS.")] = None,
    resume: Annotated[bool, typer.Option(metavar="", help="Take over an interrupted study: retry the trials of tuners silent for 30 s now (a live tuner's are left to it).")] = False,
    arch: Annotated[str | None, typer.Option(help="Override the target, e.g. sm_90.")] = None,
    compile_commands: Annotated[Path | None, typer.Option(help="A compile_commands.json (CMake, Bear): the kernel file's own -I/-D/-std/arch become the base flags; its tuned flags (fast math, -Xptxas, -maxrregcount) are the baseline.")] = None,
    compile_output: CompileOutputOption = None,
    allow_numerics: Annotated[bool, typer.Option(metavar="", help="Search numerics-changing flags (fast math, ftz...).")] = False,
    allow_semantics: Annotated[bool, typer.Option(metavar="", help="Search flags that assume things about the code (-restrict, maxntid).")] = False,
    only: Annotated[str | None, typer.Option(help="Comma-separated parameter names to search; a kernel's macros are searched too unless one is named; the others stay at the baseline (the default, or the shipped build's value).")] = None,
    exclude: Annotated[str | None, typer.Option(help="Comma-separated parameter names to keep at the baseline (the default, or the shipped build's value).")] = None,
    program: Annotated[bool, typer.Option(metavar="", help="--objective time: the kernel file is a program with its own main that prints its time.")] = False,
    metric_regex: Annotated[str | None, typer.Option(help="Program mode: a regex whose first group is the time in ms (default: a JSON line with time_ms).")] = None,
    finalists: Annotated[int, typer.Option(help="--objective time: how many of the fastest screened variants are confirmed against the baseline (each 20 to 60 runs of the measuring program, after 20 for the baseline's A/A); fewer where a run is slow to start.")] = 4,
    simplify: Annotated[bool, typer.Option(metavar="", help="Drop the winner's settings that make no difference (recompiles each).")] = True,
    warm_start: Annotated[bool, typer.Option(metavar="", help="Start from the database's other studies: this kernel's results, then what other kernels' studies chose (tried first) and refused (tried later).")] = True,
    stale_after: Annotated[float, typer.Option(hidden=True, help="Seconds without a heartbeat before another tuner retries a running trial.")] = 300.0,
    as_json: JsonOption = False,
) -> None:
    """Search compiler settings for KERNEL and write the advanced-control file."""
    from compileiq import app

    options = app.TuneOptions(
        kernel=kernel, objective=objective, budget=budget, strategy=strategy, seed=seed,
        surrogate=surrogate, batch_size=batch_size, out=out_file, db=db, study=study,
        workers=workers, ray_address=ray_address, resume=resume, arch=arch,
        allow_numerics=allow_numerics, allow_semantics=allow_semantics,
        only=_names(only, "--only"), exclude=_names(exclude, "--exclude"), simplify=simplify, stale_after=stale_after,
        warm_start=warm_start, program=program, metric_regex=metric_regex, compile_commands=compile_commands,
        compile_output=compile_output, time_budget=time_budget, patience=patience, pick=pick, stream=stream,
        force=force, finalists=finalists, ends_on_interrupt=True,
    )  # fmt: skip
    progress = LineProgress(live=False, hold=True) if as_json else LineProgress()  # stdout: one document
    try:
        report = app.tune(options, progress)
    except BaseException as error:
        progress.close(failed=True)  # an error stays one line: progress held back is dropped
        signals.noted(error)  # Ctrl-C: what the run handed back, for the line `main` says
        raise
    held = "left unchanged in" if report.acf_unchanged else "written to"
    signals.finished(f"the run had finished, its choice recorded in its study and {held} {safe(str(report.acf_path))} "
                     "(its summary cut short)")  # a Ctrl-C while it prints says so
    progress.close()
    if as_json:
        print(json.dumps(report_json(report), indent=2))
    else:
        print_report(report)


@cli.command()
def show(
    study: Annotated[str | None, typer.Argument(help="Study name or id; omit to list studies.")] = None,
    top: Annotated[int, typer.Option(help="Trials to show.")] = 10,
    db: DbOption = None,
    as_json: JsonOption = False,
    why: Annotated[bool, typer.Option("--why", metavar="", help="Each setting's contribution (ablation path) and the surrogate importance.")] = False,
    pareto: Annotated[str | None, typer.Option("--pareto", help="The Pareto front of the recorded trials for these objectives, e.g. registers,instructions (a study of several objectives shows its own front by default).")] = None,
    pick: Annotated[str | None, typer.Option("--pick", help="With --pareto, or for a study of several objectives: knee | first | weights=W1,W2,... (default: the rule the study's latest run chose by, else knee)")] = None,
) -> None:
    """List studies, or the best trials of one study."""
    from compileiq.results import multi_objective
    from compileiq.store import Store
    from compileiq.store.database_url import database_url

    if top < 1:
        raise UsageError(f"--top must be at least 1, got {top}")
    store = Store.open(database_url(db), create=False)  # only reads: a mistyped path is an error, not a new file
    try:
        if study is None:
            from compileiq.cli.listings import listed_studies

            summaries, choices, kernels, baselines = listed_studies(store)  # one aggregate, recorded choices and paths, replays
            emit(as_json, [summary_json(*row) for row in zip(summaries, choices, kernels, baselines, strict=True)],
                 lambda: studies_table(summaries, choices, kernels, baselines))  # only where no recorded choice is followed
        else:
            found = store.find_study(study)
            multi_objective.check_view_pick(found.name, found.key.objective, pareto, pick)  # as tune refuses it
            trials = store.trials(found.id)
            runs = store.runs(found.id)
            if not why and pareto is None and "," in found.key.objective:
                if as_json:  # the trials as for one objective, each objective's value, and the front
                    print_trials(found, trials, runs, top, as_json, pick)
                    return
                pareto = found.key.objective  # several objectives: the front is the result
            if why or pareto:
                from compileiq.cli.why import print_pareto, print_why

                if pareto:
                    print_pareto(found, trials, pareto, pick, as_json, runs)
                else:
                    print_why(found, trials, as_json, runs)
                return
            print_trials(found, trials, runs, top, as_json)
    finally:
        store.close()


@cli.command()
def flags(
    acf_file: Annotated[Path, typer.Argument(metavar="FILE", help="An .acf.toml written by `compileiq tune`.")],
    stage: Annotated[str, typer.Option(metavar="[all|frontend|ptxas]", help="all (one-step nvcc) | frontend | ptxas (direct ptxas call)")] = "all",
    arch: Annotated[bool, typer.Option(metavar="", help="Include -arch=.")] = True,
    fmt: Annotated[str, typer.Option("--format", metavar="[args|optf|cmake|bazel|json]", help="args (shell words) | optf (nvcc --options-file) | cmake | bazel | json")] = "args",
    with_base: Annotated[bool, typer.Option("--all", metavar="", help="Add the base flags the code needs (tune.toml nvcc_flags and include_dirs, or the compile command's): what a rebuild needs.")] = False,
) -> None:
    """Print the ACF's compiler arguments for a build: nvcc $(compileiq flags k.acf.toml) ..."""
    from compileiq import app
    from compileiq.results import acf, flag_formats, flag_notes

    found = acf.read(acf_file)
    if problem := app.flags_refusal(found, fmt, stage, arch):  # macros; arch words that stop nvcc
        raise UsageError(problem)
    text = flag_formats.render(found, fmt, stage, with_arch=arch, with_base=with_base)
    print(text, end="" if text.endswith("\n") else "\n", flush=True)  # before the notes: never mid-line on a terminal
    for note in flag_notes.notes(found, fmt, stage, arch, with_base).lines:  # the JSON's "notes" too
        err.print(safe(note), markup=False, highlight=False)  # stderr: stdout stays pasteable


@cli.command()
def gate(
    acf_files: Annotated[list[Path], typer.Argument(metavar="ACF", help="ACF files written by `compileiq tune`.")],
    kernel: Annotated[Path | None, typer.Option(help="The kernel source (one ACF only); default: the ACF's kernel.path.")] = None,
    rule: Annotated[list[str] | None, typer.Option(help="NAME=error|warn|off; repeatable. Rules: " + ", ".join(gate_rules.RULE_NAMES))] = None,
    markdown: Annotated[Path | None, typer.Option(help="Write a markdown summary (e.g. for $GITHUB_STEP_SUMMARY).")] = None,
    junit: Annotated[Path | None, typer.Option(help="Write JUnit XML (one testcase per ACF).")] = None,
    device: Annotated[bool | None, typer.Option("--device/--static", metavar="", help="Time on the GPU / static rules only; default: the GPU when one is visible.")] = None,
    program: Annotated[bool, typer.Option(metavar="", help="Time the kernel as a program that prints its time, as `tune --program` did.")] = False,
    metric_regex: Annotated[str | None, typer.Option(help="--program: the time in ms is the regex's first group, as `tune --metric-regex` read it.")] = None,
    compile_commands: Annotated[Path | None, typer.Option(help="The compile_commands.json that ships (as tune's): each ACF is held to its kernel's command there, not to the database its [baseline] names.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Rebuild each kernel with its ACF and check it against the ACF's evidence (exit 0 pass, 1 regression, 2 bad input)."""
    from compileiq.gating import check as gate_lib
    from compileiq.gating import ci_reports as gate_report

    gate_reports.check_targets(markdown, junit, tuple(acf_files))  # before any rebuild
    options = gate_lib.GateOptions(acfs=tuple(acf_files), kernel=kernel, rules=tuple(rule or ()), device=device,
                                   program=program, metric_regex=metric_regex, compile_commands=compile_commands)
    from compileiq.evaluate.timing import HarnessTiming

    report = gate_lib.run(options, HarnessTiming(), progress=lambda line: typer.echo(line, err=True),  # stdout: the report
                          before_builds=lambda inputs: gate_reports.check_targets(markdown, junit, inputs))  # its headers too
    problems = gate_reports.write_reports(report, markdown, junit, (*acf_files, *report.inputs))
    if as_json:
        print(json.dumps(gate_report.as_json(report), indent=2))
    else:
        print_gate(report)
    if problems:  # bad input beats a regression
        raise UsageError("; ".join(problems))
    for result in report.results:  # an ACF that could not be checked: one error line each, exit 2
        if result.bad_input:
            err.print(f"error: {safe(result.findings[0].message)}", markup=False)
    raise typer.Exit(report.exit_code)


@db_cli.command("upgrade")
def db_upgrade(db: DbOption = None) -> None:
    """Create or migrate the database schema to this version of compileiq."""
    from compileiq.store import Store
    from compileiq.store.database_url import database_url

    store = Store.open(database_url(db))
    try:
        revision = store.upgrade()
        out.print(f"{store.url_for_display}: schema at revision {revision}", markup=False)
    finally:
        store.close()


@db_cli.command("export")
def db_export(
    study: Annotated[str, typer.Argument(help="Study name or id.")],
    out_file: Annotated[Path, typer.Option("--out", "-o", help="File to write (gzip when it ends in .gz; - for stdout).")],
    db: DbOption = None,
) -> None:
    """Write a study, its trials, builds and measurements to a checksummed JSON file."""
    from compileiq.store import exchange
    from compileiq.store.database_url import database_url

    done = exchange.export_to_file(database_url(db), study, out_file)
    (err if out_file == exchange.STDOUT else out).print(f"exported study {safe(done.study)}: {done.trials} trials, {done.builds} builds, "
              f"{done.measurements} measurements -> {safe(str(done.path))}", markup=False)


@db_cli.command("import")
def db_import(
    in_file: Annotated[Path, typer.Argument(metavar="FILE", help="A file written by `compileiq db export` (- reads standard input).")],
    db: DbOption = None,
) -> None:
    """Merge an exported study into this database (one transaction; importing twice changes nothing)."""
    from compileiq.store import exchange
    from compileiq.store.database_url import database_url

    done = exchange.import_from_file(database_url(db), in_file)
    verb = "created" if done.created else "merged into"
    note = "" if done.changed else " (nothing new)"
    out.print(f"{verb} study {safe(done.study.name)}: {done.trials_added} trials added, {done.trials_kept} kept, "
              f"{done.trials_skipped} unfinished skipped; {done.builds_added} builds and "
              f"{done.measurements_added} measurements added{note}", markup=False)
    if done.rejected:
        out.print(f"{len(done.rejected)} rows of the file rejected (malformed, or not in the study's search space):",
                  markup=False)
        for reason in done.rejected[:20]:
            out.print(f"  {safe(reason)}", markup=False)


@cli.command("space")
def space(
    kernel: Annotated[Path | None, typer.Argument(metavar="[KERNEL.cu]", help="A .cu file: add the macros its tune.toml tunes.")] = None,
    compile_commands: Annotated[Path | None, typer.Option(help="The kernel's compile_commands.json, as tune takes it: its -I/-D find the headers the notes check.")] = None,
    compile_output: CompileOutputOption = None,
    as_json: JsonOption = False,
) -> None:
    """List every parameter that --only/--exclude take: values, default, risk and what it does."""
    from compileiq import app
    from compileiq.source.notes import kernel_notes

    if compile_commands is not None and kernel is None:
        raise UsageError("--compile-commands names the command of a kernel: give the KERNEL.cu too")
    found, spec = app.full_space(kernel, compile_commands=compile_commands, compile_output=compile_output)
    shipped = spec.shipped.values() if spec is not None and spec.shipped is not None else {}
    notes = kernel_notes(spec) if spec else []  # before the table: a kernel that cannot bundle prints none
    emit(as_json, space_json(found, shipped), lambda: space_table(found, spec.source.name if spec else None, shipped))
    for note in notes:
        err.print(f"note: {safe(note)}", markup=False, highlight=False)  # stderr: stdout stays the table


@cli.command("version")
def version() -> None:
    """Print the version."""
    print(__version__)


@cli.command("include-dir")
def include_dir() -> None:
    """Print the directory of the measuring harness header (nvcc -I "$(compileiq include-dir)")."""
    from compileiq.evaluate.measure import include_dir as harness_include_dir

    print(harness_include_dir())


@cli.command()
def report(
    studies: Annotated[list[str], typer.Argument(metavar="STUDY", help="Study name or id (two with --compare).")],
    out_file: Annotated[Path | None, typer.Option("--out", "-o", help="File to write, - for standard output (md: without figures); default report.html (report.md with --format md).")] = None,
    fmt: Annotated[str, typer.Option("--format", metavar="[html|md]", help="html (one self-contained file) | md or markdown (SVG figures beside it)")] = "html",
    compare: Annotated[bool, typer.Option("--compare", metavar="", help="Compare two studies: STUDY_A STUDY_B.")] = False,
    pareto: Annotated[str | None, typer.Option("--pareto", help="Add the Pareto front of these objectives, e.g. registers,instructions.")] = None,
    pick: Annotated[str | None, typer.Option("--pick", help="With --pareto, or for a study of several objectives: knee | first | weights=W1,W2,... (default: the rule the study's latest run chose by, else knee)")] = None,
    db: DbOption = None,
) -> None:
    """Write a report of a study: convergence, the chosen settings and why, trials, failures, provenance."""
    from compileiq.report import compare as report_compare
    from compileiq.report import output as report_lib
    from compileiq.store import Store
    from compileiq.store.database_url import database_url

    if len(studies) != (2 if compare else 1):
        raise UsageError("--compare takes two studies: STUDY_A STUDY_B" if compare else
                         "give one study (or --compare STUDY_A STUDY_B)")
    fmt = report_lib.format_name(fmt)  # `markdown` is `md`
    target = out_file or Path(f"report.{fmt}")
    if not report_lib.to_stdout(target):  # `-o -`: standard output
        check_report_target(target, REPORT)  # before the database is opened: a named pipe would block the write
    store = Store.open(database_url(db), create=False)
    try:
        if compare:
            written = report_compare.write(store, studies[0], studies[1], target, fmt)
        else:
            written = report_lib.write(store, studies[0], target, fmt, pareto, pick)
    finally:
        store.close()
    for path in written:
        out.print(f"wrote {path}", markup=False)


@cli.command("cmake-dir")
def cmake_dir() -> None:
    """Print the directory of compileiq's CMake package: find_package(compileiq CONFIG PATHS "$(compileiq cmake-dir)")."""
    from compileiq.results.flag_formats import cmake_dir as package_cmake_dir

    print(package_cmake_dir())


def _names(text: str | None, option: str) -> tuple[str, ...]:
    if text is None:
        return ()
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise UsageError(f"{option} names no parameter: give comma-separated names, e.g. ptxas.opt_level")
    return names


def main(argv: list[str] | None = None) -> None:
    """Entry point: domain errors become one line on stderr and a non-zero exit."""
    heap.quick_exit()  # under `compileiq.cli.main`: its signals already taken over (`signals.installed`)
    try:
        command = typer.main.get_command(cli)  # tenths of a second of typer's own work: a Ctrl-C there too
        code = command.main(args=argv, prog_name="compileiq", standalone_mode=False)
    except CompileIQError as error:
        err.print(f"error: {safe(first_line(str(error)))}", markup=False)
        sys.exit(error.exit_code)
    except NoArgsIsHelpError as error:
        error.show()
        sys.exit(error.exit_code)
    except ClickException as error:  # usage errors: unknown option, bad value...
        err.print(f"error: {safe(first_line(error.format_message()))}", markup=False)
        sys.exit(error.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        code = 130
    if code == 130:  # typer turns Ctrl-C (and SIGTERM, see signals) into a returned 130 when not standalone
        err.print(signals.line(), markup=False)
        code = signals.exit_code()
    if isinstance(code, int) and code:
        sys.exit(code)

