"""What a run reports while it works: each trial's outcome (`Progress`), what scores a build
(`Evaluator`), and the counts of compiler calls and cache hits (`RunCounters`)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Protocol

from compileiq.build.compile import Build
from compileiq.build.workers import Transfers
from compileiq.core.records import Study, Trial
from compileiq.core.space import Config
from compileiq.evaluate.metrics import Evaluation


@dataclass(frozen=True)
class Outcome:
    """What happened to one trial in this run (for progress display)."""

    trial: Trial
    source: str  # "compiled", "build cache" or "same code as #N"
    refused: str | None = None  # why the study's rules refuse it (it may not be chosen)
    baseline_pending: bool = False  # the study's baseline has no result yet (another tuner builds it):
    # "best" is the best so far, not yet held to the baseline's rules nor ranked beside it


class Progress(Protocol):
    def started(self, study: Study, budget: int, finished: int) -> None: ...

    def trial(self, outcome: Outcome, best: Trial | None) -> None: ...

    def note(self, message: str) -> None: ...


class Evaluator(Protocol):
    """Scores one build: `StaticEvaluator` (compiler output) or `TimeEvaluator` (GPU runtime)."""

    @property
    def kind(self) -> str: ...  # "static", or the device model

    def evaluate(self, build: Build, config: Config) -> Evaluation: ...


class SilentProgress:
    """A progress sink that shows nothing (library use, benchmarks, tests)."""

    def started(self, study: Study, budget: int, finished: int) -> None:
        pass

    def trial(self, outcome: Outcome, best: Trial | None) -> None:
        pass

    def note(self, message: str) -> None:
        pass


@dataclass
class RunCounters:
    frontend_calls: int = 0
    ptxas_calls: int = 0
    verify_frontend_calls: int = 0  # of the calls above: rebuilds that checked rows this run did not build
    verify_ptxas_calls: int = 0
    verify_batches: int = 0  # the workers' runs those rebuilds took (each rebuilds every row one step reads)
    build_cache_hits: int = 0
    shared_builds: int = 0  # ptxas skipped: a build of the same PTX and flags (this run's or another tuner's)
    same_code_reuses: int = 0
    new_trials: int = 0
    compile_seconds: float = 0.0  # compiler wall time, summed over variants
    compile_wait_seconds: float = 0.0  # time the loop waited for workers
    worker_start_seconds: float = 0.0  # starting (or joining) Ray
    started: float = field(default_factory=time.perf_counter)

    frontend_seconds: float = 0.0
    ptxas_seconds: float = 0.0
    nodes: dict[str, int] = field(default_factory=dict)  # Ray node -> variants its ptxas built this run
    transfers: Transfers = field(default_factory=Transfers)  # what the driver shipped to the workers
    compiled_where: str | None = None  # an embedded Ray's start: how many variants local threads built meanwhile

    @property
    def compiler_calls(self) -> int:
        return self.frontend_calls + self.ptxas_calls

    @property
    def verify_calls(self) -> int:
        return self.verify_frontend_calls + self.verify_ptxas_calls

    @property
    def frontend_cost_ratio(self) -> float:
        """Mean nvcc front-end time over mean ptxas time, as measured in this run (nan if unknown)."""
        if not self.frontend_calls or not self.ptxas_calls or not self.ptxas_seconds:
            return math.nan
        return (self.frontend_seconds / self.frontend_calls) / (
            self.ptxas_seconds / self.ptxas_calls
        )
