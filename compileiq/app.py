"""Wiring for the commands: kernel spec + search space + toolchain + store + workers -> a result.

The CLI parses options into these frozen option objects and calls one function; everything that
decides something lives here or below, never in the CLI.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compileiq import acf
from compileiq.errors import UsageError
from compileiq.kernel import KernelSpec, load_spec
from compileiq.metrics import STATIC_OBJECTIVES
from compileiq.runner import Progress
from compileiq.space import Config, SearchSpace, load_space
from compileiq.store import Store
from compileiq.toolchain import Toolchain, find_toolchain
from compileiq.workers import Workers, check_options, open_workers

if TYPE_CHECKING:  # tune imports search, which imports skopt (~1.5 s): only `tune` pays for it
    from compileiq.tune import TuneResult

DEFAULT_DB = "sqlite:///store/compileiq.db"
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
    stale_after: float = 300.0  # seconds without a heartbeat before another tuner retries a trial


@dataclass(frozen=True)
class TuneReport:
    result: TuneResult
    acf_path: Path
    space: SearchSpace
    kernel: KernelSpec
    database: str


def database_url(option: str | None) -> str:
    return option or os.environ.get("COMPILEIQ_DB") or DEFAULT_DB


def check_objective(objective: str) -> None:
    if objective == "time":
        raise UsageError(
            "--objective time needs a GPU and none is visible here; use a static objective "
            f"({', '.join(STATIC_OBJECTIVES)}) or --ray-address of a Ray cluster with GPU nodes"
        )
    if objective not in STATIC_OBJECTIVES:
        raise UsageError(f"unknown objective {objective!r}; choose one of: {', '.join(STATIC_OBJECTIVES)}, time")


def _check(options: TuneOptions) -> None:
    check_objective(options.objective)
    if options.budget < 1:
        raise UsageError(f"--budget must be at least 1, got {options.budget}")
    if options.batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {options.batch_size}")
    if not options.stale_after > 0:
        raise UsageError(f"--stale-after must be a positive number of seconds, got {options.stale_after}")
    check_options(options.workers, options.ray_address)  # before the study gets a trial claimed


def tuning_space(spec: KernelSpec, toolchain: Toolchain, options: TuneOptions) -> SearchSpace:
    space = load_space(toolchain.nvcc_version).select(
        allow_numerics=options.allow_numerics or spec.allow_numerics,
        allow_semantics=options.allow_semantics or spec.allow_semantics,
        only=list(options.only) or None,
        exclude=list(options.exclude),
    )
    tuned = {name: list(values) for name, values in spec.tuned_defines}
    return space.with_defines(tuned) if tuned else space


def tune(options: TuneOptions, progress: Progress) -> TuneReport:
    """Tune one kernel and write its ACF; the result also stays in the database."""
    _check(options)
    spec = load_spec(options.kernel, arch=options.arch)
    toolchain = find_toolchain()
    space = tuning_space(spec, toolchain, options)
    from compileiq.search import SearchSettings  # after the checks: bad input fails fast
    from compileiq.tune import Tuner, TuneRequest

    request = TuneRequest(
        kernel=spec,
        space=space,
        objective=options.objective,
        budget=options.budget,
        search=SearchSettings(options.strategy, options.seed, options.surrogate),
        batch_size=options.batch_size,
        study_name=options.study,
        resume=options.resume,
        simplify=options.simplify,
        stale_after_s=options.stale_after,
    )
    url = database_url(options.db)
    store = Store.open(url)
    try:
        result = Tuner(request, store, toolchain, lambda: _workers(options), progress).run()
        path = options.out or DEFAULT_STORE_DIR / f"{spec.name}.acf.toml"
        acf.write(path, _acf_content(result, spec, space, toolchain, store.url_for_display, options.kernel))
    finally:
        store.close()
    return TuneReport(result, path, space, spec, store.url_for_display)


def _workers(options: TuneOptions) -> Workers:
    return open_workers(options.workers, options.ray_address)


def _acf_content(
    result: TuneResult, spec: KernelSpec, space: SearchSpace, toolchain: Toolchain, database: str,
    source_path: Path,
) -> acf.AcfContent:
    best = result.chosen
    return acf.AcfContent(
        kernel=spec.name,
        source_name=spec.source.name,
        source_path=str(source_path),
        source_sha256=result.study.key.source_sha256,
        arch=spec.arch,
        nvcc_version=toolchain.nvcc_version,
        ptxas_version=toolchain.ptxas_version,
        toolchain_build=toolchain.nvcc_build,
        space=space,
        config=Config.of(best.config),
        fixed_defines=spec.fixed_define_args(),
        objective=_objective_table(result),
        evidence=_evidence_table(result),
        provenance={
            "study": result.study.name,
            "study_id": result.study.id,
            "trial": best.number,
            "trials_in_study": len(result.trials),
            "database": database,
        },
    )


def _objective_table(result: TuneResult) -> dict[str, Any]:
    key = result.study.key
    baseline, best = result.baseline.value, result.chosen.value
    table: dict[str, Any] = {"name": key.objective, "kind": "static estimate (compiler output, not a runtime)",
                             "direction": "minimise", "evaluator": key.evaluator}
    if baseline is not None:
        table["baseline"] = baseline
    if best is not None:
        table["best"] = best
    table["improved"] = bool(baseline is not None and best is not None and best < baseline)
    return table


def _evidence_table(result: TuneResult) -> dict[str, Any]:
    table = {"baseline": _evidence(result.baseline), "best": _evidence(result.chosen)}
    if result.simplification is not None:
        table["simplified"] = {
            "search_winner_trial": result.winner.number,
            "dropped": list(result.simplification.dropped),
            "kept": list(result.simplification.kept),
            "rule": "a setting is dropped when resetting it to the compiler default gives the same machine code or an objective no worse",
        }
    return table


def _evidence(trial: Any) -> dict[str, Any]:
    keep = ("spill_bytes", "registers", "occupancy", "instructions", "stack_bytes", "block_size")
    evidence = {name: trial.metrics[name] for name in keep if name in trial.metrics}
    evidence["trial"] = trial.number
    evidence["code_hash"] = trial.code_hash or ""
    return evidence


def read_acf(path: Path) -> acf.Acf:
    return acf.read(path)
