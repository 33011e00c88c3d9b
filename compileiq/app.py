"""Wiring for the commands: kernel spec + search space + toolchain + store + workers -> a result.

The CLI parses options into these frozen option objects and calls one function; everything that
decides something lives here or below, never in the CLI.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compileiq.build.workers import Workers
from compileiq.build.workers.backends import check_options, open_workers
from compileiq.build.workers.ray_setup import kill_started
from compileiq.core.errors import CompileIQError, UsageError
from compileiq.core.metric_ranges import MAX_BUDGET
from compileiq.core.output_file import check_target
from compileiq.core.processes import compiler_memory_problem
from compileiq.core.records import first_line
from compileiq.core.space import SearchSpace
from compileiq.core.space_files import load_space
from compileiq.core.tool_environment import ignored_note
from compileiq.core.toolchain import Toolchain, find_toolchain
from compileiq.evaluate.stats import FINALISTS, MAX_FINALISTS
from compileiq.results import acf, acf_replace, acf_rerun, evidence
from compileiq.source import notes, restrictions
from compileiq.source.kernel import bundle_sources, load_spec, study_identities
from compileiq.source.spec import TUNE_FILE, KernelSpec, SourceBundle
from compileiq.store import Store
from compileiq.store.database_url import database_url, sqlite_file
from compileiq.tuning import option_checks, space_choice, study_lookup
from compileiq.tuning.limits import check_patience, parse_duration
from compileiq.tuning.progress import Progress
from compileiq.tuning.startup import EarlyWorkers, PhaseProgress

if TYPE_CHECKING:  # tune imports search, which imports skopt (~1.5 s): only `tune` pays for it
    from compileiq.search.loading import SearchLoad
    from compileiq.tuning.request import TuneRequest, TuneResult

DEFAULT_STORE_DIR = Path("store")


@dataclass(frozen=True)
class TuneOptions:
    kernel: Path
    objective: str = "static"
    budget: int = 40
    strategy: str = "bayes"
    seed: int = 0
    surrogate: str = "ET"
    batch_size: int = 8
    out: Path | None = None
    db: str | None = None
    study: str | None = None
    workers: str = "ray"
    ray_address: str | None = None
    resume: bool = False
    arch: str | None = None
    allow_numerics: bool = False
    allow_semantics: bool = False
    only: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    simplify: bool = True
    warm_start: bool = True  # start from earlier studies of this kernel and other kernels' lessons
    stale_after: float = 300.0  # seconds without a heartbeat before another tuner retries a trial
    program: bool = False  # time a program with its own main (overrides tune.toml's mode)
    compile_commands: Path | None = None  # a compilation database: the file's own flags become the base
    compile_output: str | None = None  # of several commands there for the file, the one whose `output` this is
    metric_regex: str | None = None  # program mode: the time in ms is the first group
    time_budget: str | None = None  # "90s", "10m", "1h": no search trial starts after it
    patience: int | None = None  # stop after this many batches in a row without a better best
    pick: str | None = None  # several objectives: knee (default) | first | weights=a:0.7,b:0.3
    stream: bool = False  # keep batch_size variants compiling, a new one as each finishes
    force: bool = False  # replace an existing ACF even when it holds more evidence (acf_replace)
    finalists: int = FINALISTS  # --objective time: screened variants confirmed against the baseline
    # the process ends when the run is interrupted (the CLI): a Ctrl-C while the embedded Ray still
    # starts kills the start instead of waiting for it (a library process waits, then shuts it down)
    ends_on_interrupt: bool = False


@dataclass(frozen=True)
class TuneReport:
    result: TuneResult
    acf_path: Path
    space: SearchSpace
    kernel: KernelSpec
    database: str
    acf_unchanged: bool = False  # the ACF held this choice already and was left byte for byte (`acf_rerun`)


def _check(options: TuneOptions, measured: bool = False) -> None:
    from compileiq.results import multi_objective

    option_checks.check_objective(options.objective, options.ray_address, measured)
    if options.pick is not None:
        multi_objective.check_pick(options.pick, multi_objective.parse(options.objective))
    if (options.program or options.metric_regex) and not _timed(options.objective):
        raise UsageError("--program and --metric-regex apply to --objective time")
    if options.metric_regex is not None:
        option_checks.check_regex(options.metric_regex)
    option_checks.check_range("--budget", options.budget, 1, MAX_BUDGET)
    option_checks.check_range("--batch-size", options.batch_size, 1, option_checks.MAX_BATCH_SIZE)
    option_checks.check_range("--finalists", options.finalists, 1, MAX_FINALISTS)
    if options.finalists != FINALISTS and not _timed(options.objective):
        raise UsageError("--finalists applies to --objective time (static objectives confirm nothing)")
    option_checks.check_range("--seed", options.seed, 0, option_checks.SEED_LIMIT - 1)
    if not 0 < options.stale_after <= option_checks.MAX_STALE_AFTER_S:  # also refuses nan
        raise UsageError(f"--stale-after must be greater than 0 and at most {option_checks.MAX_STALE_AFTER_S:g} seconds, "
                         f"got {options.stale_after:g}")
    check_options(options.workers, options.ray_address)  # before the study gets a trial claimed
    if problem := compiler_memory_problem():  # a bad value would otherwise be the default, unsaid
        raise UsageError(problem)
    if options.time_budget is not None:
        parse_duration(options.time_budget)
    check_patience(options.patience)


def narrowed(options: TuneOptions) -> dict[str, Any]:
    """The options that made the search other than the default one, as the ACF records them for a
    re-tune: --only, --exclude, --allow-numerics, --allow-semantics, --strategy, --seed (only those
    given)."""
    given = {"only": list(options.only), "exclude": list(options.exclude),
             "allow_numerics": options.allow_numerics, "allow_semantics": options.allow_semantics,
             "strategy": options.strategy if options.strategy != "bayes" else "", "seed": options.seed}
    return {key: value for key, value in given.items() if value}


def tuning_space(spec: KernelSpec, toolchain: Toolchain, options: TuneOptions, legacy: bool = False) -> SearchSpace:
    """The installed compiler's space as the options narrow it for this kernel (`space_choice`)."""
    choice = space_choice.Selection(options.only, options.exclude, options.allow_numerics, options.allow_semantics)
    return space_choice.searched_space(spec, load_space(toolchain.nvcc_version), choice, legacy)


def full_space(kernel: Path | None, arch: str | None = None,
               compile_commands: Path | None = None, compile_output: str | None = None
               ) -> tuple[SearchSpace, KernelSpec | None]:
    """Every parameter of the installed compiler's space, plus the kernel's macros when given (with
    the base flags and include folders of its compile command, as `tune --compile-commands` reads it)."""
    spec = kernel_spec(kernel, arch, compile_commands, compile_output) if kernel is not None else None
    space = load_space(find_toolchain().nvcc_version)
    tuned = {name: list(values) for name, values in spec.tuned_defines} if spec else {}
    space = space.with_defines(tuned) if tuned else space
    if spec is None:
        return space, None
    return space_choice.without_capped(space, spec).restricted(restrictions.of_spec(spec)), spec


def default_acf_path(kernel: str, objective: str) -> Path:
    """store/<kernel>.<objective>.acf.toml: tuning one kernel for two objectives keeps two ACFs
    (several objectives joined by "+": store/k.registers+instructions.acf.toml)."""
    return DEFAULT_STORE_DIR / f"{kernel}.{objective.replace(',', '+')}.acf.toml"


def _timed(objective: str) -> bool:
    return "time" in objective.replace(" ", "").split(",")


def kernel_spec(kernel: Path, arch: str | None, compile_commands: Path | None,
                compile_output: str | None = None) -> KernelSpec:
    """The kernel's spec; with a compilation database, the file's real compile command adds its
    -I/-D/-std/device switches to the base flags and names the arch (unless --arch does)."""
    spec = load_spec(kernel, arch=arch)
    if compile_commands is None:
        if compile_output is not None:
            raise UsageError("--compile-output chooses a command of --compile-commands: give the database too")
        return spec
    from compileiq.source.compile_db import read_command
    from compileiq.source.kernel import with_base_flags
    from compileiq.source.shipped import other_archs, under_register_cap

    command = read_command(compile_commands, kernel, load_space(find_toolchain().nvcc_version), spec, compile_output)
    spec = with_base_flags(spec, command.base_flags, f"{compile_commands}: the command for {kernel.name}")
    default = command.shipped.default_arch if command.shipped is not None else ""
    overridden = ((f"{command.arch} that the compile command gives" if not default else
                   f"{default}, nvcc's default, which the compile command builds as it names no arch: `flags` then "
                   f"gives -arch={arch}, which replaces the command's default arch ({arch} code alone)")
                  if arch and command.arch is not None and arch not in command.archs else spec.arch_overridden)
    tuned = arch or command.arch or spec.arch
    shipped = other_archs(under_register_cap(command.shipped, spec.nvcc_flags), command.arch_flags, tuned)
    left_out = tuple(a for a in command.archs if a != tuned)
    spec = replace(spec, arch=tuned, shipped=shipped, arch_overridden=overridden, archs_left_out=left_out)
    from compileiq.build.host_check import checked
    from compileiq.source.shipped_macros import check_shipped_macro_defaults, shipped_host_level

    level = shipped_host_level(spec)  # the command's, as the shipped build has it
    spec = checked(spec, find_toolchain().nvcc)  # its set-aside host -O: checked against the device code
    check_shipped_macro_defaults(spec, find_toolchain().nvcc, level)  # a macro it gives no -D: the kernel's own value
    return spec  # (after the host check: the baseline's flags hold the level where it is applied)


def with_ray_address(options: TuneOptions) -> TuneOptions:
    """Ray's convention: without --ray-address, RAY_ADDRESS names the cluster (ignored by --workers local)."""
    if options.ray_address or options.workers != "ray" or not os.environ.get("RAY_ADDRESS"):
        return options
    return replace(options, ray_address=os.environ["RAY_ADDRESS"])


def tune(options: TuneOptions, progress: Progress, *, measurers: Sequence[Any] | None = None) -> TuneReport:
    """Tune one kernel and write its ACF; the result also stays in the database.

    ``measurers``: for benchmarks and tests only (the CLI never passes it), the measurers that
    time `--objective time` instead of this machine's or the cluster's GPUs, e.g. a recorded
    landscape's `evaluate.replay.ReplayMeasurer`, whose results are labelled ``replay:<file>``."""
    from compileiq.results import multi_objective

    phases = PhaseProgress(progress)  # start-up phases, shown after the study line
    options = with_ray_address(options)
    options = replace(options, objective=multi_objective.parse(options.objective))
    _check(options, measured=measurers is not None)
    spec = kernel_spec(options.kernel, options.arch, options.compile_commands, options.compile_output)
    path = options.out or default_acf_path(spec.name, options.objective)
    check_target(path)  # before the run: a bad --out must not cost a whole run
    inputs = _inputs(options, spec)
    acf_replace.check(path, acf_replace.Held(), options.force, inputs=inputs)  # not even --force replaces an input
    acf.check_writable(path)
    spec = spec.measured_as(options.program, options.metric_regex)  # part of the study identity
    toolchain = find_toolchain()
    space = tuning_space(spec, toolchain, options)
    if note := ignored_note():  # run_tool leaves them out of every compile
        progress.note(note)
    if spec.arch_overridden is not None:
        progress.note(f"note: --arch {spec.arch} overrides the arch {spec.arch_overridden}")
    for line in notes.arch_notes(spec):
        progress.note(f"note: {line}")
    if spec.shipped is not None:
        from compileiq.source.shipped import describe

        for line in describe(spec.shipped):
            progress.note(line)
    time_budget_s = parse_duration(options.time_budget) if options.time_budget is not None else None
    from compileiq.evaluate.screening import ScreeningPolicy
    from compileiq.search.settings import SearchSettings
    from compileiq.tuning.request import TuneRequest
    from compileiq.tuning.search_start import start_search

    request = TuneRequest(
        kernel=spec, space=space, objective=options.objective, budget=options.budget,
        search=SearchSettings(options.strategy, options.seed, options.surrogate),
        batch_size=options.batch_size, study_name=options.study, resume=options.resume,
        simplify=options.simplify, stale_after_s=options.stale_after, time_budget_s=time_budget_s,
        warm_start=options.warm_start, legacy_space=tuning_space(spec, toolchain, options, legacy=True),
        patience=options.patience, pick=options.pick or "knee", stream=options.stream,
        screening=ScreeningPolicy() if options.objective == "time" else None,  # compile 3x, measure 1x
    )  # fmt: skip
    search = start_search(request, phases)  # scikit-optimize loads while the sources bundle and the baseline compiles
    try:  # a searcher in a process of its own (`RemoteSearcher`) is closed however the run ends
        return _run(options, request, space, toolchain, (path, inputs), phases, measurers, search)
    finally:
        search.close()  # the run closed it already unless it failed before its start (a load still running included)


def _inputs(options: TuneOptions, spec: KernelSpec) -> tuple[tuple[str, Path], ...]:
    """The files a run reads that its ACF must never replace, whatever --force says."""
    found = [("kernel source", spec.source), (TUNE_FILE, spec.source.parent / TUNE_FILE)]
    if options.compile_commands is not None:
        found.append(("compilation database (--compile-commands)", options.compile_commands))
    if (database := sqlite_file(database_url(options.db))) is not None:
        found.append(("database (--db)", database))
    return tuple(found)


def _run(options: TuneOptions, request: TuneRequest, space: SearchSpace, toolchain: Toolchain,
         out: tuple[Path, tuple[tuple[str, Path], ...]], phases: PhaseProgress, measurers: Sequence[Any] | None,
         search: SearchLoad[Any] | None) -> TuneReport:
    """Bundle the sources, open the store, check the ACF may be replaced, run, write the ACF at
    `out` (its path, and the run's inputs it must not replace)."""
    from compileiq.tuning.tuner import Tuner

    path, inputs = out

    spec = request.kernel
    bundling = phases.starting("bundling sources (nvcc -M)")
    bundle = bundle_sources(spec, toolchain.nvcc)  # `nvcc -M`: once per run
    bundling.done("sources bundled")
    inputs += tuple(("source (a file nvcc -M lists)", Path(origin)) for origin in bundle.origins)  # whatever its name
    store = Store.open(database_url(options.db))
    try:
        workers = _workers(options, phases)  # with Ray: it starts now, in the background
        try:
            evaluator = (_time_evaluator(options, spec, space, toolchain, store, workers, bundle, measurers)
                         if _timed(options.objective) else None)
            if evaluator is None:  # a study recorded on the space older releases searched: continued on it
                request, search, space = study_lookup.on_recorded_space(store, request, bundle, toolchain, search)
            planned = _planned(options, request, bundle, toolchain, store if evaluator is None else None)
            acf_replace.check(path, planned, options.force, inputs=inputs)  # again at write time, with the run's evidence
            result = Tuner(request, store, toolchain, workers, phases, evaluator, bundle, search).run()
        finally:
            workers.close()  # the run closed them already unless it failed before compiling
        try:  # the run's decision is recorded: where no ACF is written, its row says so
            content = evidence.acf_content(result, spec, space, toolchain, store.url_for_display, path, bundle,
                                           narrowed(options))
            facts = acf_rerun.StudyFacts(
                first_trial_at=min((t.started_at for t in result.trials), default=None),
                search_trials=result.search_trials,
                other_studies=store.other_kernels_studies(result.study.key, study_identities(request.kernel, bundle)))
            unchanged = acf.write_or_keep(path, content, options.force, inputs, phases.note, facts)
        except (CompileIQError, OSError) as error:
            if result.run_id is not None:
                how = "refused" if isinstance(error, UsageError) else "failed"
                store.acf_not_written(result.run_id, f"{how}: {first_line(str(error))}")
            raise
    finally:
        store.close()
    return TuneReport(result, path, space, spec, store.url_for_display, unchanged)


def _planned(options: TuneOptions, request: Any, bundle: SourceBundle, toolchain: Toolchain,
             static: Store | None) -> acf_replace.Held:
    """What the run's ACF will hold, as far as it is known before the run: its study (a runtime
    objective's default name holds the GPU, known once measured: `static` is the store of a static
    run) and whether it simplifies."""
    from compileiq.evaluate.metrics import StaticEvaluator
    from compileiq.tuning.study_lookup import planned_name

    name = options.study or (planned_name(static, request, bundle, toolchain, StaticEvaluator.kind)
                             if static is not None else None)
    kernel = tuple((bundle.sha256, settings) for settings in request.kernel.settings_sha256s())  # each identity
    return acf_replace.Held(study=name, dropped=None if options.simplify else 0,
                            simplified=None if options.simplify else False, kernel=kernel,
                            source=acf_replace.kernel_file(request.kernel.source))


def _workers(options: TuneOptions, phases: PhaseProgress) -> SharedWorkers | EarlyWorkers:
    """Ray starts in the background at once (the baseline compiles locally meanwhile); local
    threads, and the runtime objective (which opens Ray for its GPU first), open on first use."""
    opener = lambda: open_workers(options.workers, options.ray_address)
    # an embedded Ray takes seconds to start: the baseline compiles on a local thread meanwhile; a
    # cluster joined by address answers in about a second, and every variant compiles on it
    if options.workers == "ray" and not options.ray_address and not _timed(options.objective):
        return EarlyWorkers(opener, phases, abort=kill_started if options.ends_on_interrupt else None)
    return SharedWorkers(opener)


class SharedWorkers:
    """Opens the workers once, on first use, for every part of a run that compiles (the runner
    closes them at the end of the run)."""

    def __init__(self, opener: Callable[[], Workers]) -> None:
        self._opener = opener
        self._workers: Workers | None = None

    def __call__(self) -> Workers:
        if self._workers is None:
            self._workers = self._opener()
        return self._workers

    def close(self) -> None:
        """Close the workers if they were opened (closing twice is harmless)."""
        if self._workers is not None:
            self._workers.close()
            self._workers = None


def _time_evaluator(options: TuneOptions, spec: KernelSpec, space: SearchSpace, toolchain: Toolchain,
                    store: Store, workers: Callable[[], Workers], bundle: SourceBundle,
                    given: Sequence[Any] | None = None) -> Any:
    """The runtime evaluator: screening runs take turns on every GPU of this machine, or of the Ray
    cluster (one measuring actor each), or on the ``given`` measurers; confirmation runs on the first."""
    from compileiq.evaluate.measurer_pool import MeasurerPool
    from compileiq.evaluate.measuring_actors import open_gpu_measurers, open_local_measurers
    from compileiq.evaluate.metrics import StaticEvaluator
    from compileiq.evaluate.timing import TimeEvaluator, TimingTarget

    measurers: list[Any] = (list(given) if given is not None else open_local_measurers() if options.workers == "local"
                            else open_gpu_measurers(options.ray_address))
    if not measurers:
        raise UsageError("--objective time: no GPU found (none on this machine, or in the Ray cluster)")
    target = TimingTarget(
        nvcc=toolchain.nvcc, bundle=bundle, arch=spec.arch, space=space,
        fixed_defines=spec.fixed_define_args(), timeout_s=spec.compile_timeout_s, run_args=spec.run_args,
        rtol=spec.rtol, atol=spec.atol, program_regex=spec.metric_regex, program=spec.mode == "program",
        static=StaticEvaluator("static", spec, bundle), ptx_arch=spec.ptx_arch,
    )  # fmt: skip
    pool = MeasurerPool(measurers)
    return TimeEvaluator(target, store, workers, pool, confirm_on=pool.first, finalists=options.finalists)


def read_acf(path: Path) -> acf.Acf:
    return acf.read(path)


def flags_refusal(found: acf.Acf, fmt: str, stage: str, with_arch: bool) -> str:
    """Why `flags` (the command and the API alike) may not print the ACF's flags ("" when it may):
    tuned macros tune.toml no longer offers, or arch words that, appended to the build's command,
    would stop nvcc."""
    from compileiq.gating.macro_settings import flags_problem
    from compileiq.results import arch_replace

    return flags_problem(found) or arch_replace.broken(found, fmt, stage, with_arch) or ""
