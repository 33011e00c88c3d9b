"""What an ACF says about a tuning result: the objective's numbers, the evidence, the provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compileiq import eligibility
from compileiq.acf import AcfContent
from compileiq.kernel import KernelSpec
from compileiq.records import Trial
from compileiq.space import Config, SearchSpace
from compileiq.toolchain import Toolchain

STATIC_KIND = "static estimate (compiler output, not a runtime)"
RUNTIME_KIND = "runtime (GPU, median of samples)"
EVIDENCE_KEYS = ("spill_bytes", "registers", "occupancy", "instructions", "stack_bytes", "block_size",
                 "median_ms", "iqr_ms", "min_ms", "samples", "device")


def acf_content(result: Any, spec: KernelSpec, space: SearchSpace, toolchain: Toolchain, database: str,
                source_path: Path) -> AcfContent:
    """`result` is a tune.TuneResult (not imported: tune pulls in skopt)."""
    chosen = result.chosen
    objective = objective_table(result)
    vs_defaults = eligibility.justification(chosen, result.baseline, space.default_config().as_dict(), objective)
    return AcfContent(
        kernel=spec.name, source_name=spec.source.name, source_path=str(source_path),
        source_sha256=result.study.key.source_sha256, arch=spec.arch,
        nvcc_version=toolchain.nvcc_version, ptxas_version=toolchain.ptxas_version,
        toolchain_build=toolchain.nvcc_build, space=space, config=Config.of(chosen.config),
        fixed_defines=spec.fixed_define_args(), objective=objective,
        evidence={**evidence_table(result), "vs_defaults": vs_defaults},
        provenance={"study": result.study.name, "study_id": result.study.id, "trial": chosen.number,
                    "trials_in_study": len(result.trials), "database": database},
    )  # fmt: skip


def objective_table(result: Any) -> dict[str, Any]:
    key = result.study.key
    runtime = key.objective == "time"
    baseline, best = result.baseline.value, result.chosen.value
    table: dict[str, Any] = {"name": key.objective, "kind": RUNTIME_KIND if runtime else STATIC_KIND,
                             "direction": "minimise", "evaluator": key.evaluator}
    if runtime:
        table["unit"] = "ms"
    if baseline is not None:
        table["baseline"] = baseline
    if best is not None:
        table["best"] = best
    table["improved"] = bool(baseline is not None and best is not None and best < baseline)
    if result.confirmation is not None:
        table.update(_confirmed(result.confirmation))
    return table


def _confirmed(confirmation: Any) -> dict[str, Any]:
    """Screening values are one quick run each; the speedup is the interleaved confirmation's."""
    table: dict[str, Any] = {"confirmation_delta": confirmation.delta,
                             "improved": not confirmation.keeps_baseline}
    if confirmation.keeps_baseline:
        table["verdict"] = "no candidate was faster than the baseline beyond the noise threshold"
        return table
    comparison = confirmation.winner.comparison
    table.update(verdict=comparison.verdict.value, speedup=1.0 / comparison.estimate,
                 speedup_interval_95=[1.0 / comparison.high, 1.0 / comparison.low],
                 confirmation_rounds=comparison.rounds)
    return table


def evidence_table(result: Any) -> dict[str, Any]:
    table: dict[str, Any] = {"baseline": evidence(result.baseline), "best": evidence(result.chosen)}
    if result.simplification is not None:
        table["simplified"] = {
            "search_winner_trial": result.winner.number,
            "dropped": list(result.simplification.dropped),
            "kept": list(result.simplification.kept),
            "rule": "a setting is dropped when resetting it to the compiler default gives the same "
                    "machine code (or, for static objectives, an objective no worse)",
        }
    return table


def evidence(trial: Trial) -> dict[str, Any]:
    found = {name: trial.metrics[name] for name in EVIDENCE_KEYS if trial.metrics.get(name) is not None}
    return {**found, "trial": trial.number, "code_hash": trial.code_hash or ""}
