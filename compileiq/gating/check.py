"""The CI gate: rebuild each kernel with its ACF and check the result against the ACF's evidence.

Without a GPU the checks are exact static rules (spills, occupancy, registers, machine code,
stale source or toolchain, and `worse-than-default`: the ACF against a build with the compiler's
defaults), each with a configurable severity: the same inputs give the same verdict. With a GPU
the interleaved A/B statistic (`stats.interleaved`) compares the ACF's flags with the compiler
defaults and with the recorded value.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Protocol, TypeVar

from compileiq.core.bounded_read import is_file
from compileiq.core.errors import CompileIQError, UsageError
from compileiq.core.output_file import not_regular
from compileiq.core.records import first_line
from compileiq.core.tool_environment import ignored_note
from compileiq.core.toolchain import Toolchain, find_toolchain
from compileiq.evaluate import measure
from compileiq.evaluate.stats import TimingSamplers, interleaved_runs
from compileiq.gating import macro_settings, risk_settings, scored_kernels
from compileiq.gating.locate import Target, locate
from compileiq.gating.lowered_settings import lowered_hits
from compileiq.gating.measuring import (
    Sources,
    in_recorded_order,
    rebuild,
    rebuild_defaults,
    recorded_baseline_of,
    recorded_of,
    sources,
)
from compileiq.gating.occupancy_evidence import occupancy_hits, same_macros
from compileiq.gating.retune import recorded_program_options, retune_command, retune_needs
from compileiq.gating.rules import (
    Defaults,
    Finding,
    Measured,
    Recorded,
    Severity,
    base_flag_hits,
    baseline_evidence_hits,
    default_hits,
    findings,
    severities,
    static_hits,
)
from compileiq.gating.shipped_command import shipped_command_hits
from compileiq.gating.timing_rules import Timing, compare_timing, describe, timing_hits
from compileiq.source.base_flags import overridden_cap, replaced_cap
from compileiq.source.spec import TUNE_FILE, metric_regex_problem

__all__ = [  # what callers reach through this module: the orchestration, and what it gates with
    "BAD_INPUT", "AcfResult", "GateOptions", "GateReport", "Measured", "Target", "TimingSource", "evaluate",
    "locate", "measuring_problem", "rebuild", "rebuild_defaults", "recorded_of", "resolve_mode", "retune_command",
    "run",
]


class TimingSource(Protocol):
    def samplers(self, target: Target, baseline: Defaults) -> TimingSamplers: ...  # the ACF's build and the baseline's


_T = TypeVar("_T")

BAD_INPUT = "bad-input"  # the finding of an ACF that could not be checked (not a rule: no --rule turns it off)


@dataclass(frozen=True)
class AcfResult:
    acf: str
    kernel: str
    kernel_path: str
    findings: tuple[Finding, ...]
    recorded: Recorded | None  # None: bad input, nothing was built
    measured: Measured | None
    timing: Timing | None = None
    notes: tuple[str, ...] = ()  # which compilation database the ACF was held to, an applied ACF

    @classmethod
    def unchecked(cls, acf: str, problem: str) -> AcfResult:
        """An ACF (or its kernel, tune.toml) that cannot be checked: bad input, reported in every
        report beside the others' verdicts instead of leaving CI with none (exit 2 all the same)."""
        return cls(acf, "-", "", (Finding(BAD_INPUT, Severity.ERROR, "-", "-", problem),), None, None)

    @property
    def bad_input(self) -> bool:
        return self.recorded is None

    @property
    def passed(self) -> bool:
        return not any(f.severity is Severity.ERROR for f in self.findings)

    @property
    def verdict(self) -> str:
        return "ERROR" if self.bad_input else "PASS" if self.passed else "FAIL"


@dataclass(frozen=True)
class GateReport:
    mode: str  # "static" or "timing"
    note: str
    severities: tuple[tuple[str, Severity], ...]
    results: tuple[AcfResult, ...]
    inputs: tuple[Path, ...] = ()  # every file the gate read (ACFs, kernels, their headers...): no report replaces one

    @property
    def passed(self) -> bool:
        return all(result.passed for result in self.results)

    @property
    def exit_code(self) -> int:
        """0 pass, 1 regression, 2 bad input (which beats a regression)."""
        return 2 if any(r.bad_input for r in self.results) else 0 if self.passed else 1


@dataclass(frozen=True)
class GateOptions:
    acfs: tuple[Path, ...]
    kernel: Path | None = None
    rules: tuple[str, ...] = ()
    device: bool | None = None  # None: use a GPU when one is visible
    seed: int = 0
    program: bool = False  # time the kernel as a program that prints its time (as tune's --program)
    metric_regex: str | None = None  # program mode: the time in ms is the first group (as tune's)
    compile_commands: Path | None = None  # the compilation database that ships (as tune's --compile-commands)


def evaluate(target: Target, found: Sources, table: Mapping[str, Severity], toolchain: Toolchain,
             timing: TimingSource | None = None, seed: int = 0,
             progress: Callable[[str], None] | None = None) -> AcfResult:
    """Rebuild one kernel with its ACF, apply the rules (and time it when a source is given;
    `progress` hears when timing starts and its verdict: minutes of GPU runs on some machines)."""
    recorded = recorded_of(target.acf)
    own = found.own
    measured = rebuild(target, toolchain, found.built)
    retune = retune_command(target, measured)
    hits = static_hits(recorded, measured, retune, found.flags_only)
    shipped = shipped_command_hits(replace(target, spec=target.recorded_spec or target.spec), retune)  # vs the ACF's
    # one that says a compile command differs names the base flags itself; one that found none for an ACF
    # tuned from the defaults (`_untuned_from`) says nothing of tune.toml's
    says_command = any(hit.command for hit in shipped) or (shipped and target.acf.shipped is not None)
    own_flags, subject = target.spec.nvcc_flags, f"the kernel's {target.spec.nvcc_flags.register_cap}"
    capped = (replaced_cap(own_flags, target.acf.base, subject) if target.acf.base.register_cap
              else overridden_cap(own_flags, target.acf.controls, subject))
    named = [] if says_command else base_flag_hits(target.base_difference, target.settings_origin, retune, capped)
    named += macro_settings.macro_hits(target.spec, target.acf, retune)
    if any(hit.command for hit in shipped + named):  # they say which settings changed (each with the re-tune):
        hits = [hit for hit in hits if hit.rule != "stale-settings"]  # the hash alone says less; one that says
    # a compile command was not checked (gone, unreadable) says nothing of tune.toml: its change is still said
    hits += shipped + named + risk_settings.risk_hits(target, target.applied, retune) + lowered_hits(target)
    evidence = [hit for hit in hits if hit.rule == "evidence"]  # said below, unless another scoring's numbers
    hits = [hit for hit in hits if hit.rule != "evidence"]
    needs = retune_needs(target, toolchain.nvcc_version)  # said in each finding, the command kept bare
    hits = [replace(hit, needs=needs) if hit.command else hit for hit in hits]
    defaults = rebuild_defaults(target, toolchain, own, measured)
    baseline = recorded_baseline_of(target.acf)
    objective = str(target.acf.objective.get("name", ""))
    hits += default_hits(measured, defaults, timed=timing is not None, objective=objective, baseline=baseline)
    hits += scored_kernels.unscored_hits(measured, defaults, objective) + scored_kernels.bound_hits(measured, defaults)
    evidence += baseline_evidence_hits(baseline, defaults)
    held, unvouched = occupancy_hits((("best", recorded, measured), ("baseline", baseline, defaults.build)),
                                     same_macros(target.acf, defaults.frontend_args))  # where its settings hash is not the kernel's
    evidence, hits = evidence + held, hits + unvouched
    if evidence and scored_kernels.scoring_changed(target.acf, in_recorded_order(target), recorded, measured,
                                                   baseline, defaults):  # the rebuilds give them under its entries
        stale = scored_kernels.stale_scoring_hit(target.acf, target.spec, retune)  # said instead: not an edit
        evidence = [replace(stale, needs=needs)]
    hits += evidence
    measured_timing = None
    if timing is not None and measured.failure is None:  # timed against the same baseline as the rules
        tell = progress or (lambda _: None)
        fewest, most = interleaved_runs()
        tell(f"{target.acf_label}: timing its build against {defaults.name} on the GPU, interleaved "
             f"({fewest} to {most} runs of the measuring program)")
        measured_timing = compare_timing(timing.samplers(target, defaults), seed=seed, against=defaults.name)
        tell(f"{target.acf_label}: {describe(measured_timing.vs_default)} against {defaults.name}")
        hits += timing_hits(measured_timing)
    return AcfResult(target.acf_label, target.acf.kernel, target.kernel_label, findings(hits, table),
                     recorded, measured, measured_timing, target.notes)


def measuring_problem(target: Target) -> str:
    """Why a timed gate cannot time this ACF as it was tuned ("" if it can): the ACF records how its
    timed runs reported their time (the measuring harness, or a program's printed line and the
    pattern that read it); timed the other way, the gate would measure something else. The ACF's
    pattern is never used to measure (a forged one could read any number the program prints): the
    gate's own --program/--metric-regex, or tune.toml, say how to time it."""
    acf, spec = target.acf, target.spec
    tuned, gated = (acf.mode, acf.metric_regex), spec.timed_as()
    if acf.mode is None or tuned == gated:  # an older ACF records no mode
        return ""
    if acf.mode == "program":
        flags = shlex.join(recorded_program_options(acf))
        fix = f"run the gate with {flags}, or set mode = \"program\" and that metric_regex in tune.toml"
    else:
        fix = "run the gate without --program and --metric-regex, and without mode = \"program\" in tune.toml"
    return f"{target.acf_label} was timed {_timed_as(*tuned)}, but this gate would time it {_timed_as(*gated)}: {fix}"


def _timed_as(mode: str | None, regex: str | None) -> str:
    if mode != "program":
        return "with the measuring harness"
    return f"as a program read with {regex!r}" if regex else "as a program (its time from a JSON line's time_ms)"


def resolve_mode(requested: bool | None, visible: Callable[[], bool], timing: TimingSource | None) -> tuple[str, str]:
    """("static" | "timing", a note for the report); UsageError when a GPU was asked for in vain."""
    if requested is False:
        return "static", "static rules only (--static)"
    has_gpu = visible()
    if requested and not has_gpu:
        raise UsageError("--device: no GPU is visible (nvidia-smi -L failed); run with --static")
    if has_gpu and timing is None:
        if requested:
            raise UsageError("--device: no timing source was given; run with --static")
        return "static", "static rules only (a GPU is visible but no timing source was given)"
    if not has_gpu:
        return "static", "static rules only (no GPU visible)"
    return "timing", "static rules and the interleaved A/B timing statistic"


def run(options: GateOptions, timing: TimingSource | None = None,
        visible: Callable[[], bool] = measure.gpu_visible, progress: Callable[[str], None] | None = None,
        before_builds: Callable[[tuple[Path, ...]], None] | None = None) -> GateReport:
    """Check every ACF; all inputs (the ACFs, their kernels' settings and sources) are validated
    before anything is built. An ACF that cannot be checked, whether found so then or while it is
    built, is a bad-input result naming it, beside the other ACFs' verdicts. `before_builds` hears
    every file the gate reads (its sources as `nvcc -M` lists them) once they are known, before
    any build: the CLI refuses a report path that names one there."""
    if not options.acfs:
        raise UsageError("give at least one ACF file")
    if options.kernel is not None and len(options.acfs) > 1:
        raise UsageError("--kernel applies to a single ACF; give one ACF with it")
    if options.metric_regex is not None and (problem := metric_regex_problem(options.metric_regex)):
        raise UsageError(f"--metric-regex: {problem}")
    if (database := options.compile_commands) is not None:
        if kind := not_regular(database):
            raise UsageError(f"--compile-commands {database} is {kind}, not a compilation database")
        if not is_file(database):
            raise UsageError(f"--compile-commands {database}: file not found")
    table = severities(options.rules)
    mode, note = resolve_mode(options.device, visible, timing)
    if progress is not None and (ignored := ignored_note()):  # run_tool leaves them out of every rebuild
        progress(ignored)
    checked = [_checked_target(path, options, mode, progress) for path in options.acfs]
    toolchain = find_toolchain()
    ready = [found if isinstance(found, AcfResult) else _unless_bad(found, partial(_with_sources, found, toolchain))
             for found in checked]  # every kernel's sources before any build
    inputs = _inputs(options, ready)
    if before_builds is not None:
        before_builds(inputs)
    source = timing if mode == "timing" else None
    results = [done if isinstance(done, AcfResult) else _unless_bad(done[0], partial(
        evaluate, *done, table, toolchain, source, options.seed, progress)) for done in ready]
    return GateReport(mode, note, tuple(table.items()), tuple(results), inputs)


def _inputs(options: GateOptions, ready: list[tuple[Target, Sources] | AcfResult]) -> tuple[Path, ...]:
    """The files the gate reads: the ACFs, the compilation database, each kernel, its tune.toml
    and every file its builds' `nvcc -M` listed, whatever their names."""
    found = [*options.acfs, *((options.compile_commands,) if options.compile_commands else ())]
    for done in ready:
        if not isinstance(done, AcfResult):
            target, sources = done
            found += [target.spec.source, target.spec.source.parent / TUNE_FILE]
            found += [Path(origin) for origin in (*sources.own.origins, *sources.built.origins)]
    return tuple(dict.fromkeys(found))


def _with_sources(target: Target, toolchain: Toolchain) -> tuple[Target, Sources]:
    return target, sources(target, toolchain)


def _unless_bad(target: Target, step: Callable[[], _T]) -> _T | AcfResult:
    """`step` for one ACF, or its error as that ACF's bad-input result (a header its kernel no
    longer finds, a compile command that no longer reads): the other ACFs are still gated."""
    try:
        return step()
    except CompileIQError as error:
        return AcfResult.unchecked(target.acf_label, f"{target.acf_label}: {first_line(str(error))}")


def _checked_target(path: Path, options: GateOptions, mode: str,
                    progress: Callable[[str], None] | None) -> Target | AcfResult:
    """The ACF located and validated, or its bad input as an unchecked result (the other ACFs are
    still gated, and every report says which one could not be)."""
    try:
        target = locate(path, options.kernel, options.program, options.metric_regex, options.compile_commands)
        recorded_of(target.acf)
        if problem := measuring_problem(target):
            if mode == "timing":
                raise UsageError(problem)
            if progress is not None:  # static rules only (its stale-settings re-tune keeps the mode)
                progress(f"note: {problem}")
        if progress is not None:
            for note in target.notes:
                progress(f"note: {path}: {note}")
        return target
    except CompileIQError as error:  # any of the ACF's inputs (not only a UsageError), as `_unless_bad`
        return AcfResult.unchecked(str(path), first_line(str(error)))
