"""The CI gate: rebuild each kernel with its ACF and check the result against the ACF's evidence.

Without a GPU the checks are exact static rules (spills, occupancy, registers, machine code,
stale source or toolchain, and `worse-than-default`: the ACF against a build with the compiler's
defaults), each with a configurable severity: the same inputs give the same verdict. With a GPU
the interleaved A/B statistic (`stats.interleaved`) compares the ACF's flags with the compiler
defaults and with the recorded value.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from compileiq.build.compile import AssembleJob, FrontendJob, assemble, emit_ptx
from compileiq.core.errors import UsageError
from compileiq.core.output_file import not_regular
from compileiq.core.records import first_line
from compileiq.core.space import Config
from compileiq.core.space_files import load_space
from compileiq.core.tool_environment import ignored_note
from compileiq.core.toolchain import Toolchain, find_toolchain
from compileiq.evaluate import eligibility, measure
from compileiq.evaluate.metrics import StaticEvaluator
from compileiq.evaluate.stats import TimingSamplers, interleaved_runs
from compileiq.gating import kernel_settings, macro_settings, risk_settings
from compileiq.gating.retune import path_from_here, recorded_program_options, retune_command
from compileiq.gating.rules import (
    BaseFlagDifference,
    Defaults,
    Finding,
    Measured,
    Recorded,
    Severity,
    Timing,
    base_flag_hits,
    baseline_evidence_hits,
    compare_timing,
    default_hits,
    describe,
    findings,
    severities,
    static_hits,
    timing_hits,
)
from compileiq.gating.shipped_command import shipped_command_hits
from compileiq.results import acf as acf_file
from compileiq.source.kernel import bundle_sources
from compileiq.source.shipped import under_register_cap
from compileiq.source.spec import KernelSpec, ShippedBuild, SourceBundle, metric_regex_problem


@dataclass(frozen=True)
class Target:
    """One ACF and the kernel source it is checked against."""

    acf: acf_file.Acf
    acf_label: str  # the ACF path as given
    kernel_label: str  # the kernel path as found (relative when it was given relative)
    spec: KernelSpec  # the kernel's own settings (tune.toml, its compile command): the baseline's build
    measuring_args: tuple[str, ...] = ()  # the gate's --program/--metric-regex, for a re-tune command
    acf_spec: KernelSpec | None = None  # the ACF's build where its base flags are not the kernel's: tune.toml and them
    base_difference: BaseFlagDifference = field(default_factory=lambda: BaseFlagDifference((), ()))  # the ACF's base flags against the kernel's
    settings_origin: str = "tune.toml"  # where the kernel's base flags were read
    recorded_spec: KernelSpec | None = None  # tune.toml and the ACF's base flags: the settings it records
    shipped_now: tuple[ShippedBuild | None] | None = None  # the named compile command's build now, where read
    compile_commands: Path | None = None  # the gate's --compile-commands: the database that ships
    notes: tuple[str, ...] = ()  # what the report says besides the findings (which database held it)
    applied: bool = False  # the compile command now ships the ACF's choice (`kernel_settings`)

    @property
    def built_spec(self) -> KernelSpec:
        return self.acf_spec if self.acf_spec is not None else self.spec


class TimingSource(Protocol):
    def samplers(self, target: Target, baseline: Defaults) -> TimingSamplers: ...  # the ACF's build and the baseline's


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


# --- locating -----------------------------------------------------------------------------------


def locate(path: Path, kernel: Path | None = None, program: bool = False, metric_regex: str | None = None,
           compile_commands: Path | None = None) -> Target:
    """Read an ACF (validated) and find its kernel; UsageError when either is wrong. `program` and
    `metric_regex` are the gate's --program and --metric-regex: how a timed gate runs the kernel;
    `compile_commands` its --compile-commands, the database that ships (default: the ACF's own)."""
    acf = acf_file.read(path)
    found = kernel if kernel is not None else _find_source(acf)
    if kind := not_regular(found):
        raise UsageError(f"--kernel {found} is {kind}, not a regular file")
    if not found.is_file():
        raise UsageError(f"--kernel {found}: file not found")
    if found.stem != acf.kernel:
        raise UsageError(f"{path} is the ACF of kernel {acf.kernel!r}, not of {found} (kernel {found.stem!r})")
    own = kernel_settings.current(found, acf, compile_commands)  # the base flags are the kernel's, never the ACF's word
    if problem := macro_settings.restriction_problem(own.tune_toml, acf):  # tune.toml's, not the ACF's copy
        raise UsageError(problem)
    spec = own.spec.measured_as(program, metric_regex)
    recorded = kernel_settings.as_recorded(own.tune_toml.measured_as(program, metric_regex), acf)  # as `flags --all`
    if acf.shipped is not None:  # the baseline it was tuned from is part of its settings
        spec = replace(spec, shipped=under_register_cap(acf.shipped, spec.nvcc_flags))
        recorded = replace(recorded, shipped=under_register_cap(acf.shipped, recorded.nvcc_flags))
    measuring = ["--program"] * program + (["--metric-regex", metric_regex] if metric_regex is not None else [])
    differ = kernel_settings.difference(spec, acf.base)
    return Target(acf, str(path), os.path.normpath(found), spec, tuple(measuring), recorded if differ else None,
                  differ, own.origin, recorded,  # store/../k.cu reads k.cu
                  (own.shipped,) if own.command_read else None, compile_commands, _held_notes(found, acf, own),
                  own.applied)


def _held_notes(found: Path, acf: acf_file.Acf, own: kernel_settings.KernelSettings) -> tuple[str, ...]:
    """Which compilation database the ACF was held to (its [baseline] chose it unless the gate's
    --compile-commands did: a reviewer should see which), and whether its command applies the ACF."""
    if own.database is None:
        return ()
    why = "--compile-commands" if own.given else "named by the ACF's [baseline]; pass --compile-commands to name the one that ships"
    database = path_from_here(str(own.database))
    named = kernel_settings.named_database(acf)
    if own.given and named is not None and path_from_here(str(named)) != database:  # the same command there is no finding
        why += f"; the ACF's [baseline] names {path_from_here(str(named))}"
    notes = [f"held to the compile command for {found.name} in {database} ({why})"]
    if own.applied:
        notes.append(f"applied: the compile command in {database} builds the ACF's choice; its baseline is the "
                     "build the ACF records (before the change)")
    return tuple(notes)


def _find_source(acf: acf_file.Acf) -> Path:
    given = Path(acf.source_path)
    tried = [given] if given.is_absolute() else [acf.path.parent / given, given]  # relative to the ACF
    tried.append(acf.path.parent / str(acf.data["kernel"].get("source", given.name)))
    for candidate in dict.fromkeys(tried):
        if candidate.is_file():
            return candidate
    names = ", ".join(str(c) for c in dict.fromkeys(tried))
    raise UsageError(f"{acf.path}: kernel source not found (tried {names}); pass --kernel PATH")


def recorded_of(acf: acf_file.Acf) -> Recorded:
    best = acf.evidence.get("best")
    if isinstance(best, dict):
        try:
            objectives = acf.objective.get("objectives") or [acf.objective.get("name")]
            instructions = int(best["instructions"]) if "instructions" in objectives else None
            code_instructions = int(best["instructions"]) if "instructions" in best else None
            return Recorded(int(best["spill_bytes"]), int(best["registers"]), float(best["occupancy"]),
                            str(best["code_hash"]), acf.source_sha256, acf.toolchain_build, instructions,
                            str(acf.data["kernel"].get("settings_sha256", "")), code_instructions)
        except (KeyError, TypeError, ValueError):
            pass
    raise UsageError(f"{acf.path}: no usable [evidence.best] to gate against")


def recorded_baseline_of(acf: acf_file.Acf) -> Recorded | None:
    """The ACF's [evidence.baseline] as the `evidence` rule reads it; None where it lacks a number
    (an older ACF): the best's evidence is still checked."""
    base = acf.evidence.get("baseline")
    if not isinstance(base, dict):
        return None
    try:
        instructions = int(base["instructions"]) if "instructions" in base else None
        return Recorded(int(base["spill_bytes"]), int(base["registers"]), float(base["occupancy"]),
                        str(base["code_hash"]), acf.source_sha256, acf.toolchain_build, None,
                        str(acf.data["kernel"].get("settings_sha256", "")), instructions)
    except (KeyError, TypeError, ValueError):
        return None


# --- measuring ----------------------------------------------------------------------------------


def rebuild(target: Target, toolchain: Toolchain, bundle: SourceBundle) -> Measured:
    """Build with exactly the ACF's arguments (two stages) and read its static metrics."""
    acf = target.acf
    return _measure(target, target.built_spec, toolchain, bundle, acf.frontend_args, acf.ptxas_args, acf.controls)


def rebuild_defaults(target: Target, toolchain: Toolchain, bundle: SourceBundle, acf_build: Measured) -> Defaults:
    """Build the baseline `tune` started from: the compiler's defaults (tuned macros at tune.toml's
    first value), or the shipped build an ACF's [baseline] records; note what in the ACF could
    justify departing from it."""
    acf, spec = target.acf, target.spec
    space = load_space(acf.nvcc_version)
    # tune.toml's macros the ACF searched, at tune.toml's first value; never a macro tune.toml does not
    # tune (`macro_settings`); one left out of the search (--exclude) is left out of both builds, as in `tune`
    searched = {name: [values[0]] for name, values in spec.tuned_defines if f"define.{name}" in acf.controls}
    if searched:
        space = space.with_defines(searched)
    # the build that ships: as its compile command gives it now, where the ACF names one still there
    build = target.shipped_now[0] if target.shipped_now is not None else acf.shipped
    shipped = build.values() if build is not None else {}
    config = space.default_config().with_values(shipped)
    frontend, ptxas = space.frontend_args(config), space.ptxas_args(config)
    controls = space.default_config().with_values(acf.controls).as_dict()
    lowered = eligibility.lowered_optimisation(controls, config.as_dict())
    gain = eligibility.recorded_runtime_gain(acf.objective)
    same = (frontend, ptxas) == (acf.frontend_args, acf.ptxas_args)
    same = same and target.built_spec is target.spec
    built = acf_build if same else _measure(target, spec, toolchain, bundle, frontend, ptxas, config.as_dict())
    name = build.name if build is not None else (acf.shipped.name if acf.shipped is not None else eligibility.DEFAULTS)
    return Defaults(built.failure, built.spill_bytes, built.occupancy, lowered, gain, name, frontend, ptxas, built)


def _measure(target: Target, spec: KernelSpec, toolchain: Toolchain, bundle: SourceBundle,
             frontend_args: tuple[str, ...], ptxas_args: tuple[str, ...], controls: Mapping[str, object]) -> Measured:
    """Build with these arguments and `spec`'s base flags (in `bundle`); the settings it reports are
    the kernel's own (`target.spec`), what the ACF's recorded settings are held to."""
    acf, settings = target.acf, target.spec.settings_sha256()
    # the kernel's own fixed macros (tune.toml's [defines]), never the ACF's word (`macro_settings`)
    frontend = FrontendJob(toolchain.nvcc, bundle, acf.arch, (*frontend_args, *spec.fixed_define_args()),
                           spec.compile_timeout_s)
    build = assemble(AssembleJob(toolchain.ptxas, acf.arch, ptxas_args, spec.compile_timeout_s),
                     emit_ptx(frontend))
    evaluation = StaticEvaluator("spills", spec, bundle).evaluate(build, Config.of(controls))
    if evaluation.value is None:
        reason = (evaluation.reason or "unknown").strip().splitlines()[0]
        return Measured(bundle.sha256, toolchain.nvcc_build, failure=reason, settings_sha256=settings)
    m = evaluation.metrics
    return Measured(bundle.sha256, toolchain.nvcc_build, None, int(m["spill_bytes"]),
                    int(m["registers"]), float(m["occupancy"]), build.code_hash or "", int(m["instructions"]),
                    settings)


# --- the gate -----------------------------------------------------------------------------------


def evaluate(target: Target, table: Mapping[str, Severity], toolchain: Toolchain,
             timing: TimingSource | None = None, seed: int = 0,
             progress: Callable[[str], None] | None = None) -> AcfResult:
    """Rebuild one kernel with its ACF, apply the rules (and time it when a source is given;
    `progress` hears when timing starts and its verdict: minutes of GPU runs on some machines)."""
    recorded = recorded_of(target.acf)
    own = bundle_sources(target.spec, toolchain.nvcc)  # `nvcc -M`: once for both builds, where their base flags agree
    bundle = own if target.built_spec is target.spec else bundle_sources(target.built_spec, toolchain.nvcc)
    measured = rebuild(target, toolchain, bundle)
    retune = retune_command(target, measured)
    hits = static_hits(recorded, measured, retune)
    shipped = shipped_command_hits(replace(target, spec=target.recorded_spec or target.spec), retune)  # vs the ACF's
    named = [] if shipped else base_flag_hits(target.base_difference, target.settings_origin, retune)
    named += macro_settings.macro_hits(target.spec, target.acf, retune)
    if shipped or named:  # they say which settings: the settings hash alone says less
        hits = [hit for hit in hits if hit.rule != "stale-settings"]
    hits += shipped + named + risk_settings.risk_hits(target, target.applied, retune)
    defaults = rebuild_defaults(target, toolchain, own, measured)
    hits += default_hits(measured, defaults, timed=timing is not None, objective=str(target.acf.objective.get("name", "")))
    hits += baseline_evidence_hits(recorded_baseline_of(target.acf), defaults)
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
        visible: Callable[[], bool] = measure.gpu_visible, progress: Callable[[str], None] | None = None) -> GateReport:
    """Check every ACF; all inputs are validated before anything is built."""
    if not options.acfs:
        raise UsageError("give at least one ACF file")
    if options.kernel is not None and len(options.acfs) > 1:
        raise UsageError("--kernel applies to a single ACF; give one ACF with it")
    if options.metric_regex is not None and (problem := metric_regex_problem(options.metric_regex)):
        raise UsageError(f"--metric-regex: {problem}")
    if (database := options.compile_commands) is not None:
        if kind := not_regular(database):
            raise UsageError(f"--compile-commands {database} is {kind}, not a compilation database")
        if not database.is_file():
            raise UsageError(f"--compile-commands {database}: file not found")
    table = severities(options.rules)
    mode, note = resolve_mode(options.device, visible, timing)
    if progress is not None and (ignored := ignored_note()):  # run_tool leaves them out of every rebuild
        progress(ignored)
    checked = [_checked_target(path, options, mode, progress) for path in options.acfs]
    toolchain = find_toolchain()
    source = timing if mode == "timing" else None
    results = tuple(found if isinstance(found, AcfResult) else evaluate(found, table, toolchain, source, options.seed,
                                                                          progress) for found in checked)
    return GateReport(mode, note, tuple(table.items()), results)


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
    except UsageError as error:
        return AcfResult.unchecked(str(path), first_line(str(error)))
