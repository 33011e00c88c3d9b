"""What the gate builds and reads: the ACF's recorded evidence, the kernel's sources, the ACF's
build and the baseline's (the compiler defaults, or the build that ships), each as static metrics."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from compileiq.build.compile import AssembleJob, Build, FrontendJob, assemble, emit_ptx
from compileiq.core import implied
from compileiq.core.errors import CompileIQError, UsageError
from compileiq.core.space import Config
from compileiq.core.space_files import load_space
from compileiq.core.static_score import StaticMetrics
from compileiq.core.toolchain import Toolchain
from compileiq.evaluate import eligibility, launch_bound
from compileiq.evaluate.launch_bound import Bounds
from compileiq.evaluate.metrics import StaticEvaluator
from compileiq.evaluate.unscored import Unscored
from compileiq.gating import kernel_settings
from compileiq.gating.flag_order import same_code_order
from compileiq.gating.locate import Target
from compileiq.gating.recorded_launch import ScoredKernel, recorded_launch
from compileiq.gating.rules import Defaults, Measured, Recorded
from compileiq.results import acf as acf_file
from compileiq.results.evidence import shown_metrics
from compileiq.source.base_flags import CAPPED
from compileiq.source.kernel import bundle_sources
from compileiq.source.spec import KernelSpec, SourceBundle


def recorded_of(acf: acf_file.Acf) -> Recorded:
    """The ACF's [evidence.best] as the rules read it, its metrics read by `StaticMetrics` (the one
    reader of a recorded row); UsageError where it lacks one, or an instructions ACF its count."""
    best = acf.evidence.get("best")
    objectives = acf.objective.get("objectives") or [acf.objective.get("name")]
    if (read := _recorded(acf, best)) is not None and (read.code_instructions is not None
                                                       or "instructions" not in objectives):
        return replace(read, instructions=read.code_instructions if "instructions" in objectives else None)
    raise UsageError(f"{acf.path}: no usable [evidence.best] to gate against")


def recorded_baseline_of(acf: acf_file.Acf) -> Recorded | None:
    """The ACF's [evidence.baseline] as the `evidence` rule reads it; None where it lacks a number
    (an older ACF): the best's evidence is still checked."""
    return _recorded(acf, acf.evidence.get("baseline"))


def _recorded(acf: acf_file.Acf, table: Any) -> Recorded | None:
    """An evidence table's metrics and code (its instruction count, and the launch its occupancy was
    scored at, where it records them)."""
    if (read := StaticMetrics.recorded(table)) is None or "code_hash" not in table:
        return None
    metrics, counted = read
    return Recorded(metrics.spill_bytes, metrics.registers, metrics.occupancy, str(table["code_hash"]),
                    acf.source_sha256, acf.toolchain_build, None, str(acf.data["kernel"].get("settings_sha256", "")),
                    metrics.instructions if counted else None, recorded_launch(table), acf.entries)


@dataclass(frozen=True)
class Sources:
    """The files one ACF's two builds read (`nvcc -M`): the kernel's own settings' (the baseline's)
    and the ACF's build's, the same bundle where their base flags agree."""

    own: SourceBundle
    built: SourceBundle
    flags_only: bool = False  # `built` hashes otherwise than the ACF records, but its sources read as tuned do not


def sources(target: Target, toolchain: Toolchain) -> Sources:
    """The kernel's sources as both builds preprocess them; CompileIQError where they cannot be
    (a header removed, an include folder gone). Where the ACF's build's bundle hashes otherwise than
    it records, whether only the build flags changed: the hash holds the base flags and include
    folders with the files, so the sources are read again with the base flags it records."""
    # `nvcc -M`: once for both builds, where their base flags agree; in the ACF's order where only moved
    own = bundle_sources(in_recorded_order(target), toolchain.nvcc)
    built = own if target.built_spec is target.spec else bundle_sources(target.built_spec, toolchain.nvcc)
    if built.sha256 == target.acf.source_sha256:
        return Sources(own, built)
    try:
        tuned = bundle_sources(kernel_settings.as_tuned(target.recorded_spec or target.spec, target.acf), toolchain.nvcc)
    except CompileIQError:  # its flags no longer read the sources (a folder gone): they are not the same
        return Sources(own, built)
    return Sources(own, built, tuned.sha256 == target.acf.source_sha256)


def rebuild(target: Target, toolchain: Toolchain, bundle: SourceBundle) -> Measured:
    """Build with exactly the ACF's arguments (two stages) and read its static metrics."""
    acf = target.acf
    ptxas, controls = with_commands_cap(target)
    if ptxas == acf.ptxas_args:
        return _measure(target, target.built_spec, toolchain, bundle, acf.frontend_args, ptxas, controls)
    # built with the command's cap: the settings it was built from are the command's now, not those tuned
    now = target.shipped_now[0] if target.shipped_now is not None else None
    settings = replace(in_recorded_order(target), shipped=now).settings_sha256()
    cap = next((s.part or s.flag for s in now.settings if s.name == CAPPED), "") if now is not None else ""
    measured = _measure(target, target.built_spec, toolchain, bundle, acf.frontend_args, ptxas, controls, settings)
    return replace(measured, command_cap=cap or f"ptxas.maxrregcount = {controls[CAPPED]}")


def with_commands_cap(target: Target) -> tuple[tuple[str, ...], Mapping[str, object]]:
    """The ACF's ptxas arguments and settings as its flags appended to the command that ships build
    them: a ptxas register cap the command gained or changed since tuning (`-Xptxas --maxrregcount=48`)
    stays where the ACF's flags give none (its choice was the build as shipped then, no cap), as ptxas
    takes the last --maxrregcount it is given (13.0: "incompatible redefinition for option
    'maxrregcount', the last value of this option was used"), and the ACF's comes after the command's.
    nvcc's own -maxrregcount is a base flag (`kernel_settings.as_applied`); a cap the command shipped
    when tuned that the ACF's choice drops is in its [baseline].remove, to be taken out."""
    acf = target.acf
    now = target.shipped_now[0] if target.shipped_now is not None else None
    cap = now.values().get(CAPPED) if now is not None else None
    tuned = acf.shipped.values().get(CAPPED) if acf.shipped is not None else None
    if cap is None or cap == tuned or any(a.lstrip("-").startswith("maxrregcount") for a in acf.ptxas_args):
        return acf.ptxas_args, acf.controls
    space = load_space(acf.nvcc_version)
    return (*space.ptxas_args(space.default_config().with_values({CAPPED: cap})), *acf.ptxas_args), \
        {**acf.controls, CAPPED: cap}


def rebuild_defaults(target: Target, toolchain: Toolchain, bundle: SourceBundle, acf_build: Measured) -> Defaults:
    """Build the baseline `tune` started from: the compiler's defaults (tuned macros at tune.toml's
    first value), or the shipped build an ACF's [baseline] records; note what in the ACF could
    justify departing from it."""
    acf, spec = target.acf, target.spec
    # the build that ships: as its compile command gives it now, where the ACF names one still there
    build = target.shipped_now[0] if target.shipped_now is not None else acf.shipped
    shipped = build.values() if build is not None else {}
    # tune.toml's macros the ACF searched, at tune.toml's first value, or the value the command ships
    # (-DTM=8, one of tune.toml's), as in `tune`; never a macro tune.toml does not tune (`macro_settings`);
    # one left out of the search (--exclude) is left out of both builds, as in `tune`
    searched = {name: [next((v for v in values if v == shipped.get(f"define.{name}")), values[0])]
                for name, values in spec.tuned_defines if f"define.{name}" in acf.controls or f"define.{name}" in shipped}
    # the space `tune` built the baseline in: `-ftz=false --use_fast_math` spelled out (rev50b #1)
    space = implied.build_space(load_space(acf.nvcc_version), searched, shipped)
    shipped = {k: v for k, v in shipped.items() if not k.startswith("define.")} | {
        f"define.{name}": value[0] for name, value in searched.items() if f"define.{name}" in shipped}
    config = space.default_config().with_values(shipped)
    frontend, ptxas = space.frontend_args(config), space.ptxas_args(config)
    controls = space.default_config().with_values(acf.controls).as_dict()
    lowered = eligibility.lowered_optimisation(controls, config.as_dict())
    gain = eligibility.recorded_runtime_gain(acf.objective)
    same = (frontend, ptxas) == (acf.frontend_args, with_commands_cap(target)[0])  # the ACF as it builds there
    same = same and target.built_spec is target.spec
    built = acf_build if same else _measure(target, spec, toolchain, bundle, frontend, ptxas, config.as_dict())
    name = build.name if build is not None else (acf.shipped.name if acf.shipped is not None else eligibility.DEFAULTS)
    # a bound the ACF's --maxntid lowers in its cubin, where the baseline's build keeps it (`launch_bound.lowered`)
    bounds = launch_bound.lowered(acf_build.bounds, controls, config.as_dict()) if acf_build.failure is None else ()
    return Defaults(built.failure, built.spill_bytes, built.occupancy, lowered, gain, name, frontend, ptxas, built,
                    bounds)


def in_recorded_order(target: Target) -> KernelSpec:
    """The kernel's settings with its base flags in the order the ACF records them, where the
    command only moved them (`flag_order`): a move that builds the same code is the same settings."""
    own, recorded = target.spec, target.recorded_spec
    if recorded is None or not same_code_order(recorded.nvcc_flags.flags, own.nvcc_flags.flags):
        return own
    return replace(own, nvcc_flags=replace(own.nvcc_flags, flags=recorded.nvcc_flags.flags))


def _measure(target: Target, spec: KernelSpec, toolchain: Toolchain, bundle: SourceBundle,
             frontend_args: tuple[str, ...], ptxas_args: tuple[str, ...], controls: Mapping[str, object],
             settings: str | None = None) -> Measured:
    """Build with these arguments and `spec`'s base flags (in `bundle`); the settings it reports are
    the kernel's own (`target.spec`), what the ACF's recorded settings are held to, unless `settings`. Where the ACF
    records other entries than tune.toml's, the same build is also scored under those (`claimed`):
    the gate holds its evidence to that scoring before it calls a change of entries stale settings."""
    acf = target.acf  # an ACF of before 2026-12-06 records the older identity of the same settings
    recorded = acf.data["kernel"].get("settings_sha256")
    own = in_recorded_order(target)
    # the kernel's own fixed macros (tune.toml's [defines]), never the ACF's word (`macro_settings`)
    frontend = FrontendJob(toolchain.nvcc, bundle, acf.ptx_arch(), (*frontend_args, *spec.fixed_define_args()),
                           spec.compile_timeout_s)
    build = assemble(AssembleJob(toolchain.ptxas, acf.arch, ptxas_args, spec.compile_timeout_s),
                     emit_ptx(frontend))
    config, facts = Config.of(controls), (bundle, toolchain.nvcc_build)
    measured = _scored(spec, build, config, facts, own.settings_sha256_as(recorded) if settings is None else settings)
    if acf.entries is None or acf.entries == spec.entries:
        return measured
    claimed = replace(own, entries=acf.entries).settings_sha256_as(recorded)
    return replace(measured, claimed=_scored(replace(spec, entries=acf.entries), build, config, facts, claimed))


def _scored(spec: KernelSpec, build: Build, config: Config, facts: tuple[SourceBundle, str], settings: str) -> Measured:
    """One build's static metrics as `spec` scores them (its entries), reported with `settings`."""
    bundle, toolchain_build = facts
    evaluation = StaticEvaluator("spills", spec, bundle).evaluate(build, config)
    metrics = StaticMetrics.of(evaluation.metrics)
    if evaluation.value is None or metrics is None:
        reason = (evaluation.reason or "unknown").strip().splitlines()[0]
        return Measured(bundle.sha256, toolchain_build, failure=reason, settings_sha256=settings)
    return Measured(bundle.sha256, toolchain_build, None, metrics.spill_bytes, metrics.registers,
                    metrics.occupancy, build.code_hash or "", metrics.instructions, settings,
                    Unscored.of(evaluation.metrics), bounds=Bounds.of(evaluation.metrics),
                    kernels=ScoredKernel.all_of(evaluation.metrics), arch=spec.arch,
                    launch=recorded_launch(shown_metrics(evaluation.metrics)), entries=spec.entries)
