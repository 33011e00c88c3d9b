"""What an ACF says about a tuning result: the objective's numbers, the evidence, the provenance."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from compileiq.core.errors import CompileIQError
from compileiq.core.readings import reading
from compileiq.core.records import RUNTIME_KIND, STATIC_KIND, Trial, TrialState
from compileiq.core.space import Config, SearchSpace
from compileiq.core.static_score import StaticMetrics
from compileiq.core.toolchain import Toolchain
from compileiq.evaluate import eligibility, unscored_views
from compileiq.evaluate.stats import SPEEDUP_IS
from compileiq.results import ablation, multi_objective, to_time
from compileiq.results import evidence_wording as wording
from compileiq.results.acf import AcfContent
from compileiq.results.launch_note import assumed_launch
from compileiq.results.pareto import values_of
from compileiq.source.base_flags import path_problem, quoted_path_problem
from compileiq.source.entry_names import kernel_names
from compileiq.source.shipped import to_remove
from compileiq.source.spec import KernelSpec, ShippedBuild, SourceBundle


class EvidenceError(CompileIQError):
    """A result an ACF must not be written from (an unfinished trial, no machine code)."""


EVIDENCE_KEYS = (*StaticMetrics.FIELDS, "block_size", "dynamic_smem", "median_ms", "iqr_ms", "min_ms", "samples", "device")
SHOWN_KEYS = (*EVIDENCE_KEYS, "launch_by_kernel")  # what `shown_metrics` may give of them, in the ACF's order


def acf_content(result: Any, spec: KernelSpec, space: SearchSpace, toolchain: Toolchain, database: str,
                acf_path: Path, bundle: SourceBundle, narrowed: Mapping[str, Any] | None = None) -> AcfContent:
    """`result` is a tune.TuneResult (not imported: tune pulls in skopt). The kernel's path is
    recorded relative to the ACF's folder, so a clone of the repository elsewhere can gate it.
    `narrowed`: how the options narrowed or widened the space (--only, --exclude, --allow-*), which
    a re-tune repeats (`provenance.searched`)."""
    chosen = result.chosen
    source_path = Path(os.path.relpath(spec.source, Path(acf_path).expanduser().resolve().parent)).as_posix()
    objective = objective_table(result)
    first = {**objective, "name": objective["objectives"][0]} if "objectives" in objective else objective
    # the key keeps its name (readers of older ACFs); `against` says what its "defaults" values are:
    # the compiler defaults, or the build as shipped
    against = eligibility.against(spec.shipped)
    vs_defaults = {"against": against,
                   **eligibility.justification(chosen, result.baseline, result.baseline.config, first, against)}
    if registers := unscored_views.registers_text(result.baseline.metrics, chosen.metrics):
        vs_defaults["unscored_registers"] = registers  # information, as every view says it: no rule holds them
    if occupancy := unscored_views.occupancy_text(result.baseline.metrics, chosen.metrics):
        vs_defaults["unscored_occupancy"] = occupancy  # what the rules let the objective trade, as every view says it
    evidence = {**evidence_table(result, database), "vs_defaults": vs_defaults}
    if note := assumed_launch(spec, chosen):
        evidence["launch"] = {"assumed": True, "note": note}
    if candidates := getattr(result, "to_time", ()):
        evidence["to_time"] = to_time.entries(candidates, result.baseline, result.study.key.objective,
                                              to_time.kernel_argument(spec.source), space, spec.shipped)
    mode, metric_regex = spec.timed_as()  # how its timed runs reported their time, for the gate to compare
    return AcfContent(
        kernel=spec.name, source_name=spec.source.name, source_path=source_path,
        source_sha256=bundle.sha256, arch=spec.arch,
        nvcc_version=toolchain.nvcc_version, ptxas_version=toolchain.ptxas_version,
        toolchain_build=toolchain.nvcc_build, space=space, config=Config.of(chosen.config),
        fixed_defines=spec.fixed_define_args(), objective=objective,
        evidence=evidence,
        provenance={"study": result.study.name, "study_id": result.study.id, "trial": chosen.number,
                    "trials_in_study": len(result.trials), "search_trials": result.search_trials,
                    "budget": result.budget, "stopped": result.stopped, "database": database,
                    **({"warm_start": warm} if (warm := getattr(result, "warm_start", "")) else {}),
                    **({"searched": dict(narrowed)} if narrowed else {}),
                    ALLOWED_RISKS: allowed_risks(spec, narrowed or {})},
        base_flags=base_flags(spec), settings_sha256=spec.settings_sha256(), restrictions=spec.restrictions,
        settings_identities=spec.settings_sha256s(), entries=spec.entries,
        baseline=baseline_table(spec.shipped, chosen.config, acf_path) if spec.shipped is not None else None,
        mode=mode, metric_regex=metric_regex,
    )  # fmt: skip


ALLOWED_RISKS = "allowed_risks"  # [provenance]: the risk classes beyond "safe" the search could propose


def allowed_risks(spec: KernelSpec, narrowed: Mapping[str, Any]) -> list[str]:
    """The risk classes the search was allowed (--allow-numerics/--allow-semantics, or tune.toml's
    allow_*), always written: the gate holds a numerics-changing setting the ACF turns on to it
    where the build that ships does not set that setting (`gating.risk_settings`)."""
    return [risk for risk in ("numerics", "semantics")
            if narrowed.get(f"allow_{risk}") is True or getattr(spec, f"allow_{risk}") is True]


def baseline_table(build: ShippedBuild, chosen: Mapping[str, Any], acf_path: Path) -> dict[str, Any]:
    """`[baseline]`: the build the tuning started from (the shipped compile command, and where its
    database lies from the ACF's folder, for a re-tune; which of the database's commands for the
    file it is, and the others', where it has several), which of its flags were searched (from which
    value), which were fixed (applied or not, and why), and which the chosen settings need removed
    from the command (appending flags cannot turn one off)."""
    flags = [*(s.flag for s in build.settings), *(f.flag for f in build.fixed)]
    folder = Path(acf_path).expanduser().resolve().parent
    where = Path(os.path.relpath(build.path, folder)).as_posix() if build.path else ""
    return {"source": build.source, "database": build.origin,
            **({"path": where} if where and quoted_path_problem(where) is None else {}),
            **({"output": build.output} if build.output else {}),
            **({"other_outputs": list(build.others)} if build.others else {}),
            "shipped_flags": list(dict.fromkeys(flags)),
            "searched": [{"setting": s.name, "value": s.value, "flag": s.flag} for s in build.settings],
            "fixed": [{"flag": f.flag, "applied": f.applied, "why": f.why} for f in build.fixed],
            "remove": list(to_remove(build.settings, chosen))}


def base_flags(spec: KernelSpec) -> tuple[str, ...]:
    """What a rebuild needs besides the tuned settings: the nvcc_flags, then every include folder
    the build used (tune.toml's include_dirs too), relative to the kernel's folder as tune.toml
    gives them; a folder with nothing but the root in common with it stays absolute. A folder
    whose resolved path the ACF could not hold (a link to a name with a space) is left out. A
    folder the flags name through a symlink is recorded as they name it (`/usr/local/cuda/include`,
    not the `cuda-13.0` it links to today: after an upgrade the link names the new headers)."""
    folder = spec.source.parent
    named = _as_named(spec)
    includes: list[str] = []
    for d in spec.include_dirs:
        n = named.get(d, d)
        relative = os.path.relpath(n, folder) if os.path.commonpath([n, folder]) != n.anchor else None
        includes += [spec.include_flag(d, p) for p in (relative, n.as_posix(), d.as_posix())
                     if p is not None and path_problem(p) is None][:1]
    return spec.nvcc_flags.flags + tuple(includes)


def _as_named(spec: KernelSpec) -> dict[Path, Path]:
    """Each include folder of the base flags (resolved, as `spec.include_dirs` holds it) to the
    folder as the flags name it, normalised with its links kept (where that names the same folder)."""
    named: dict[Path, Path] = {}
    for name in (*spec.nvcc_flags.include_dirs, *spec.nvcc_flags.system_dirs):
        given = spec.source.parent / name
        plain = Path(os.path.normpath(given))
        try:
            if plain.resolve() == given.resolve():
                named.setdefault(given.resolve(), plain)
        except (OSError, RuntimeError):  # a symlink loop: refused where the folder is read
            continue
    return named


def objective_table(result: Any) -> dict[str, Any]:
    key = result.study.key
    if getattr(result, "front", None) is not None:
        return front_objective_table(result)
    runtime = key.objective == "time"
    baseline, best = result.baseline.value, result.chosen.value
    read = reading(key.objective)
    table: dict[str, Any] = {"name": key.objective, "kind": RUNTIME_KIND if runtime else STATIC_KIND,
                             "direction": "minimise", "evaluator": key.evaluator, "unit": read.unit,
                             "better": read.better}
    if read.minimised_as:  # the recorded values are what the search minimised, not what people read
        table["value_is"] = read.minimised_as
        table.update({f"{name}_shown": read.shown(value) for name, value in
                      (("baseline", result.baseline.value), ("best", result.chosen.value)) if value is not None})
    if baseline is not None:
        table["baseline"] = baseline
    if best is not None:
        table["best"] = best
    table["improved"] = bool(baseline is not None and best is not None and best < baseline)
    if result.confirmation is not None:
        table.update(confirmation_table(result.confirmation))
    return table


def front_objective_table(result: Any) -> dict[str, Any]:
    """Several objectives: each one's value for the defaults and for the choice, and the pick rule."""
    objectives = result.front.objectives
    runtime = "time" in objectives
    table: dict[str, Any] = {"name": result.study.key.objective, "objectives": list(objectives),
                             "kind": RUNTIME_KIND if runtime else STATIC_KIND, "direction": "minimise",
                             "evaluator": result.study.key.evaluator, "pick": result.front.rule,
                             "pick_rule": multi_objective.PICK_RULES}
    if runtime:
        table["unit"] = "ms"
    baseline, chosen = values_of(result.baseline, objectives), values_of(result.chosen, objectives)
    if baseline is not None:
        table["baseline"] = dict(zip(objectives, baseline, strict=True))
    if chosen is not None:
        table["best"] = dict(zip(objectives, chosen, strict=True))
    table["improved"] = bool(baseline is not None and chosen is not None and chosen != baseline)
    if minimised := _minimised(objectives):
        table["values_are"] = minimised  # occupancy: its shortfall, what the search minimises
        for name, values in (("baseline", baseline), ("best", chosen)):
            if values is not None:
                table[f"{name}_shown"] = _shown(objectives, values, minimised)
    return table


def _minimised(objectives: tuple[str, ...]) -> dict[str, str]:
    """The objectives whose recorded value is not the one people read, and what it is (occupancy: its shortfall)."""
    return {o: r.minimised_as for o in objectives if (r := reading(o)).minimised_as}


def _shown(objectives: tuple[str, ...], values: tuple[float, ...], minimised: dict[str, str]) -> dict[str, Any]:
    """The values of the objectives recorded as something else, as people read them (occupancy, not its shortfall)."""
    return {o: reading(o).shown(v) for o, v in zip(objectives, values, strict=True) if o in minimised}


def front_rows(result: Any) -> list[dict[str, Any]]:
    """`[[evidence.front]]`: each front point's values per objective and its settings that differ
    from the defaults (the picked point is the chosen trial, with its values: `pareto.with_chosen`)."""
    base, objectives = result.baseline.config, result.front.objectives
    minimised = _minimised(objectives)
    return [{"trial": p.trial.number, "values": dict(zip(objectives, p.values, strict=True)),
             **({"values_shown": _shown(objectives, p.values, minimised)} if minimised else {}),
             "settings": {k: v for k, v in sorted(p.trial.config.items()) if base.get(k) != v}}
            for p in result.front.points]


def confirmation_table(confirmation: Any) -> dict[str, Any]:
    """What a runtime confirmation decided, as the ACF's [objective] and `tune --json` both give it.
    Screening values are one quick run each; the speedup is the interleaved confirmation's."""
    table: dict[str, Any] = {"confirmed_finalists": len(confirmation.confirmed), "improved": not confirmation.keeps_baseline}
    if not confirmation.confirmed:  # nothing measured against the baseline: no threshold to record
        table["verdict"] = "nothing to confirm: no screened variant had other machine code than the baseline's"
        return table
    table["confirmation_delta"] = confirmation.delta
    if confirmation.keeps_baseline:
        table["verdict"] = "no candidate was faster than the baseline beyond the noise threshold"
        return table
    comparison = confirmation.winner.comparison
    table.update(verdict=comparison.verdict.value, speedup=1.0 / comparison.estimate,
                 speedup_interval_95=[1.0 / comparison.high, 1.0 / comparison.low],
                 speedup_is=SPEEDUP_IS, confirmation_rounds=comparison.rounds)
    if confirmation.winner.median_ms is not None:  # what `gate --device` holds a rebuild to:
        table["confirmed_median"] = confirmation.winner.median_ms  # `best` is one screening run
    return table


def evidence_table(result: Any, database: str = "the database") -> dict[str, Any]:
    arch = result.study.key.arch  # what both were built for: `kernel.arch` must say the same (`acf_checks.check_arch`)
    table: dict[str, Any] = {name: {**evidence(trial, source(trial, result, database)), "arch": arch}
                             for name, trial in (("baseline", result.baseline), ("best", result.chosen))}
    if result.simplification is not None:
        table["simplified"] = {
            "search_winner_trial": result.winner.number,
            "dropped": list(result.simplification.dropped),
            "kept": list(result.simplification.kept),
            "rule": "a setting is dropped when resetting it to the compiler default gives the same "
                    "machine code (or, for static objectives, an objective no worse)",
        }
    if getattr(result, "ablation", None) is not None:
        table["contribution"] = ablation.evidence_rows(result.ablation)
    if getattr(result, "front", None) is not None:
        table["front"] = front_rows(result)
        table["pick"] = {"rule": result.front.rule, "trial": result.chosen.number}
    return table


def evidence(trial: Trial, origin: str) -> dict[str, Any]:
    if trial.state is not TrialState.COMPLETE or not trial.code_hash:
        raise EvidenceError(f"trial #{trial.number} is {trial.state.value} without machine code; no ACF was written")
    shown = shown_metrics(trial.metrics)
    found = {name: shown[name] for name in SHOWN_KEYS if shown.get(name) is not None}
    return {**found, "trial": trial.number, "code_hash": trial.code_hash, "worker": trial.worker, "source": origin}


def scoring_text(metrics: Mapping[str, Any], chosen: Mapping[str, Any] | None, objective: str) -> str | None:
    """What the objective scored where tune.toml's entries left kernels out, and what the `chosen`
    trial's settings did to the others' registers and occupancy (`unscored_views.scoring_text`), for the
    views that may not read `evaluate` (the report)."""
    return unscored_views.scoring_text(metrics, chosen, objective)


def shown_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's metrics as the ACF's evidence states them, for every view to show: where tune.toml's
    [launch.NAME] tables gave kernels their own launch, each scored kernel's (`launch_by_kernel`, by
    the names tune.toml gives them) instead of the top-level block size and dynamic shared memory, which
    scored nothing; the per-entry compiler report (`entries`) and the raw per-entry launch left out."""
    shown = {name: value for name, value in metrics.items() if name not in ("entries", "launch")}
    if by_kernel := launch_by_kernel(metrics):
        shown.pop("block_size", None)
        shown.pop("dynamic_smem", None)
        shown["launch_by_kernel"] = by_kernel
    return shown


def launch_by_kernel(metrics: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Each scored kernel's launch facts where tune.toml's [launch.NAME] tables gave some kernel its
    own (a trial's `launch` metric): {kernel: {block_size, dynamic_smem}}; else empty."""
    launch = metrics.get("launch")
    if not isinstance(launch, dict):
        return {}
    found = {str(name): {"block_size": int(facts[0]), "dynamic_smem": int(facts[1])} for name, facts in launch.items()
             if isinstance(facts, list | tuple) and len(facts) == 2 and all(type(f) is int for f in facts)}
    return dict(zip(kernel_names(tuple(found)), found.values(), strict=True))


def source(trial: Trial, result: Any, database: str) -> str:
    """Where a trial's evidence comes from: a build this run made, a row it found and rebuilt to the
    same result (a static objective's ACF cites no other), a row whose rebuild disagreed (the
    baseline's: quarantined and replaced by the rebuild), this run's reading of the build cache,
    or a row it found in the database (a runtime objective's: not rebuilt here)."""
    origin = result.origins.get(trial.id)
    if origin == "compiled":
        return wording.written(wording.COMPILED)
    if origin == "verified":
        return wording.written(wording.VERIFIED, database, trial.worker)
    if origin == "replaced":
        return wording.written(wording.REPLACED, database, trial.worker)
    if origin is not None:
        return wording.written(wording.CACHED)
    return wording.written(wording.RECORDED, database, trial.worker)
