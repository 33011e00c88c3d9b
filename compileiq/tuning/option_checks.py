"""The checks of a run's options that need no kernel and no database: the objective (and whether
a GPU is there for time), ranges of counts, a metric regex. `app` runs them before anything is
read or claimed, so that a bad option is one line and nothing recorded is touched."""

from __future__ import annotations

from compileiq.core.errors import UsageError
from compileiq.evaluate.metrics import STATIC_OBJECTIVES
from compileiq.source.spec import metric_regex_problem

MAX_BATCH_SIZE = 4096
MAX_STALE_AFTER_S = 7 * 24 * 3600.0
SEED_LIMIT = 2**32  # numpy's generators take seeds in [0, 2**32)


def check_objective(objective: str, ray_address: str | None = None, measured: bool = False) -> None:
    """``measured``: measurers are given (a replay), so time needs no GPU here."""
    from compileiq.results import multi_objective

    ray_address = ray_address or ("given measurers" if measured else None)
    if multi_objective.is_multi(objective):
        objectives = multi_objective.objectives_of(multi_objective.parse(objective))
        if "time" in objectives and not ray_address and not gpu_visible():
            raise UsageError(f"--objective {objective}: time needs a GPU and none is visible here; use static "
                             "objectives (spills, registers, occupancy, instructions) or --ray-address of a Ray "
                             "cluster with GPU nodes")
        return
    if objective == "time" and not ray_address and not gpu_visible():
        raise UsageError(
            "--objective time needs a GPU and none is visible here; use a static objective "
            f"({', '.join(STATIC_OBJECTIVES)}) or --ray-address of a Ray cluster with GPU nodes"
        )
    if objective not in (*STATIC_OBJECTIVES, "time"):
        raise UsageError(f"unknown objective {objective!r}; choose one of: {', '.join(STATIC_OBJECTIVES)}, time")


def check_regex(text: str) -> None:
    if problem := metric_regex_problem(text):
        raise UsageError(f"--metric-regex: {problem}")


def gpu_visible() -> bool:
    from compileiq.evaluate import measure

    return measure.gpu_visible()


def check_range(option: str, value: int, low: int, high: int) -> None:
    if value < low:
        raise UsageError(f"{option} must be at least {low}, got {value}")
    if value > high:
        raise UsageError(f"{option} must be at most {high}, got {value}")
