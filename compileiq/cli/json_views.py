"""The JSON documents of the `compileiq` command (`--json`): a run's report, a study, a trial, an
objective. One module for every JSON shape, so that each is built once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from compileiq.cli.console import kind_label
from compileiq.cli.render import baseline_label_of, config_of, launch_note, to_time_entries
from compileiq.core.readings import reading
from compileiq.core.records import Study, Trial
from compileiq.evaluate import unscored_views

if TYPE_CHECKING:
    from compileiq import app


def report_json(report: app.TuneReport) -> dict[str, Any]:
    from compileiq.results.recorded_sources import kernel_path  # the path the run recorded

    result, counters = report.result, report.result.counters
    objective = result.study.key.objective
    return {
        "study": study_json(result.study, result.chosen, len(result.trials), kernel_path(report.kernel.source)),
        "objective": objective_json(objective, result.baseline.metrics, result.chosen.metrics),
        "baseline": trial_json(result.baseline, objective),
        "baseline_label": baseline_label_of(report),
        "best": trial_json(result.chosen, objective),
        "best_args": list(report.space.nvcc_args(config_of(result.chosen))),
        "acf": str(report.acf_path),
        "acf_unchanged": report.acf_unchanged,  # it held this choice already: left byte for byte
        "counters": {"compiler_calls": counters.compiler_calls, "verify_calls": counters.verify_calls,
                     "verify_ptxas_calls": counters.verify_ptxas_calls, "verify_batches": counters.verify_batches,
                     "frontend_calls": counters.frontend_calls,
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
        "launch_note": launch_note(report),
        "confirmation": _confirmation_json(result.confirmation),
    }


def _confirmation_json(confirmation: Any) -> dict[str, Any] | None:
    """A runtime run's confirmation: the same keys and values as the ACF's [objective] (None: static)."""
    from compileiq.results.evidence import confirmation_table

    return None if confirmation is None else confirmation_table(confirmation)


def objective_json(objective: str, baseline: Mapping[str, Any] | None = None,
                   chosen: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The objective with its kind, unit and direction (`core.readings`): how its values read.
    Several objectives have no one unit or direction: each is given in `objectives`, in order. Where
    tune.toml's entries left kernels unscored (the `baseline` trial's metrics say so), `scored` names
    the kernels it scored and, with the `chosen` trial's metrics, what its settings did to the others'
    registers and occupancy, and what the rules held them to (`unscored_views.scored`)."""
    found = unscored_views.scored(baseline, chosen, objective) if baseline is not None else None
    scored = {"scored": found} if found is not None else {}
    if "," in objective:
        each = [_reading_json(name) for name in objective.split(",")]
        return {"name": objective, "kind": kind_label(objective), "objectives": each} | scored
    return {"name": objective, "kind": kind_label(objective)} | _reading_json(objective) | scored


def _reading_json(objective: str) -> dict[str, Any]:
    read = reading(objective)
    data = {"name": objective, "unit": read.unit, "better": read.better}
    return data | ({"value_is": read.minimised_as} if read.minimised_as else {})


def study_json(study: Study, chosen: Trial | None, trials: int | None = None, path: str | None = None) -> dict[str, Any]:
    """The study with its chosen trial (`results.explain`: the ACF's), not merely its lowest value."""
    number, value = (chosen.number, chosen.value) if chosen is not None else (None, None)
    return study_fields(study, trials, number, value, path)


def study_fields(study: Study, trials: int | None, number: int | None, value: float | None,
                 path: str | None = None) -> dict[str, Any]:
    """The study's fields; `path`: its kernel's path as its latest deciding run recorded it
    (`recorded_sources`; None where none did)."""
    data: dict[str, Any] = {"id": study.id, "name": study.name, "kernel": study.key.kernel, "kernel_path": path,
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
