"""The tuning loop: ask -> claim -> compile -> evaluate -> record -> tell.

The database is the state: a run (or a resumed or concurrent one) rebuilds its searcher from the
study's finished trials, claims each configuration by inserting a row, and records every result,
failures included, as soon as it is known.
"""

from __future__ import annotations

import hashlib
import json
import socket
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from compileiq.compile import AssembleJob, Build, BuildStatus, EntryResources, FrontendJob
from compileiq.errors import CompileIQError
from compileiq.kernel import KernelSpec, SourceBundle, bundle_sources
from compileiq.metrics import StaticEvaluator
from compileiq.search import Observation, Searcher, SearchSettings
from compileiq.space import Config, SearchSpace
from compileiq.store import BuildRecord, Store, Study, StudyKey, Trial, TrialState
from compileiq.toolchain import Toolchain
from compileiq.workers import VariantJob, VariantResult, Workers

HEARTBEAT_EVERY_S = 10.0


class BaselineError(CompileIQError):
    """The kernel does not build with the compiler's default settings."""


@dataclass(frozen=True)
class TuneRequest:
    kernel: KernelSpec
    space: SearchSpace
    objective: str
    budget: int
    search: SearchSettings = SearchSettings()
    batch_size: int = 8
    study_name: str | None = None
    resume: bool = False
    stale_after_s: float = 300.0


@dataclass(frozen=True)
class Outcome:
    """What happened to one trial in this run (for progress display)."""

    trial: Trial
    source: str  # "compiled", "build cache" or "same code as #N"


@dataclass
class RunCounters:
    frontend_calls: int = 0
    ptxas_calls: int = 0
    build_cache_hits: int = 0
    same_code_reuses: int = 0
    new_trials: int = 0
    compile_seconds: float = 0.0
    started: float = field(default_factory=time.perf_counter)

    @property
    def compiler_calls(self) -> int:
        return self.frontend_calls + self.ptxas_calls


@dataclass(frozen=True)
class TuneResult:
    study: Study
    baseline: Trial
    best: Trial
    trials: tuple[Trial, ...]
    counters: RunCounters
    wall_seconds: float
    exhausted: bool  # the space ran out of untried configurations before the budget


class Progress(Protocol):
    def started(self, study: Study, budget: int, finished: int) -> None: ...

    def trial(self, outcome: Outcome, best: Trial | None) -> None: ...

    def note(self, message: str) -> None: ...


def study_key(request: TuneRequest, bundle: SourceBundle, toolchain: Toolchain) -> StudyKey:
    return StudyKey(
        kernel=request.kernel.name,
        source_sha256=bundle.sha256,
        space_id=request.space.id,
        space_sha256=request.space.sha256,
        toolchain=toolchain.nvcc_build,
        arch=request.kernel.arch,
        evaluator="static",
        objective=request.objective,
    )


class Tuner:
    """Runs one tuning request against a store, with workers opened only if something must compile."""

    def __init__(
        self,
        request: TuneRequest,
        store: Store,
        toolchain: Toolchain,
        open_workers: Callable[[], Workers],
        progress: Progress,
    ) -> None:
        self._request = request
        self._store = store
        self._toolchain = toolchain
        self._open_workers = open_workers
        self._workers: Workers | None = None
        self._progress = progress
        self._bundle = bundle_sources(request.kernel)
        self._evaluator = StaticEvaluator(request.objective, request.kernel)
        self._searcher = Searcher(request.space, request.search)
        self._counters = RunCounters()
        self._worker_name = f"{socket.gethostname()}:{os.getpid()}"
        self._by_code: dict[str, Trial] = {}

    def run(self) -> TuneResult:
        request = self._request
        study = self._store.get_or_create_study(study_key(request, self._bundle, self._toolchain), request.study_name)
        self._store.fail_stale_trials(study.id, 0.0 if request.resume else request.stale_after_s)
        self._progress.started(study, request.budget, self._sync(study))
        exhausted = False
        try:
            while (remaining := request.budget - self._sync(study)) > 0:
                batch = self._claim_batch(study, min(remaining, request.batch_size))
                if not batch:
                    exhausted = not self._running(study)
                    if exhausted:
                        break
                    time.sleep(1.0)
                    continue
                self._evaluate_batch(batch)
        finally:
            if self._workers is not None:
                self._workers.close()
        return self._result(study, exhausted)

    def _sync(self, study: Study) -> int:
        """Tell the searcher every finished trial (ours and other processes'); count them."""
        finished = [t for t in self._store.trials(study.id) if _counts(t)]
        self._searcher.tell([_observation(t) for t in finished])
        for trial in finished:
            if trial.code_hash and trial.state is TrialState.COMPLETE:
                self._by_code.setdefault(trial.code_hash, trial)
        return len(finished)

    def _running(self, study: Study) -> bool:
        return bool(self._store.trials(study.id, {TrialState.RUNNING}))

    def _claim_batch(self, study: Study, count: int) -> list[Trial]:
        trials = self._store.trials(study.id)
        taken = {t.config_key for t in trials if not _retryable(t)}
        candidates = [Config.of(t.config) for t in trials if _retryable(t)]
        baseline = self._request.space.default_config()
        if baseline.key not in taken and baseline.key not in {c.key for c in candidates}:
            candidates.insert(0, baseline)
        wanted = count - len(candidates)
        if wanted > 0:
            candidates += self._searcher.ask(wanted, exclude=sorted(taken | {c.key for c in candidates}))
        claimed = []
        for config in candidates[: max(count, 1)]:
            trial = self._store.claim_trial(study.id, config.key, config.as_dict(), self._worker_name)
            if trial is not None:
                claimed.append(trial)
        return claimed

    def _evaluate_batch(self, batch: Sequence[Trial]) -> None:
        jobs: list[VariantJob] = []
        finished: list[Trial] = []
        for trial in batch:
            cached = self._store.get_build(self._build_key(Config.of(trial.config)))
            if cached is not None:
                self._counters.build_cache_hits += 1
                finished.append(self._record(trial, _build_from_record(cached), "build cache"))
            else:
                jobs.append(self._job(trial))
        if jobs:
            finished += self._compile_and_record(batch, jobs)
        self._searcher.tell([_observation(t) for t in finished if _counts(t)])

    def _compile_and_record(self, batch: Sequence[Trial], jobs: list[VariantJob]) -> list[Trial]:
        by_id = {t.id: t for t in batch}
        workers = self._workers or self._start_workers()
        finished, beat = [], time.monotonic()
        for result in workers.run(jobs):
            finished.append(self._record_compiled(by_id[result.tag], result))
            if time.monotonic() - beat > HEARTBEAT_EVERY_S:
                self._store.heartbeat([j.tag for j in jobs])
                beat = time.monotonic()
        return finished

    def _start_workers(self) -> Workers:
        self._workers = self._open_workers()
        self._progress.note(f"compiling on {self._workers.description}")
        return self._workers

    def _record_compiled(self, trial: Trial, result: VariantResult) -> Trial:
        counters = self._counters
        counters.frontend_calls += int(result.ptx_compiled)
        counters.ptxas_calls += int(result.ptx.status is BuildStatus.OK)
        counters.compile_seconds += result.build.seconds + (result.ptx.seconds if result.ptx_compiled else 0.0)
        build = result.build
        self._store.put_build(_build_record(self._build_key(Config.of(trial.config)), build))
        return self._record(trial, build, "compiled")

    def _record(self, trial: Trial, build: Build, source: str) -> Trial:
        if build.ok and build.code_hash in self._by_code:
            source = f"same code as #{self._by_code[build.code_hash].number}"
            self._counters.same_code_reuses += 1
        evaluation = self._evaluator.evaluate(build, Config.of(trial.config))
        finished = self._store.finish_trial(
            trial.id,
            state=TrialState.COMPLETE if evaluation.value is not None else TrialState.FAILED,
            value=evaluation.value,
            reason=evaluation.reason,
            metrics=evaluation.metrics,
            code_hash=build.code_hash,
            compile_seconds=build.seconds,
        )
        if build.ok and build.code_hash:
            self._by_code.setdefault(build.code_hash, finished)
        self._counters.new_trials += 1
        self._check_baseline(finished)
        self._progress.trial(Outcome(finished, source), self._best_so_far(finished))
        return finished

    def _best_so_far(self, latest: Trial) -> Trial | None:
        complete = [t for t in self._by_code.values() if t.value is not None]
        return min(complete, key=lambda t: (t.value, t.number), default=None)

    def _check_baseline(self, trial: Trial) -> None:
        if trial.config_key == self._request.space.default_config().key and trial.state is TrialState.FAILED:
            first_line = (trial.reason or "").splitlines()[0] if trial.reason else "unknown error"
            raise BaselineError(
                f"{self._request.kernel.source.name} does not build with default settings: {first_line}"
            )

    def _job(self, trial: Trial) -> VariantJob:
        config, spec, tools = Config.of(trial.config), self._request.kernel, self._toolchain
        space = self._request.space
        frontend_args = (*space.frontend_args(config), *spec.fixed_define_args())
        return VariantJob(
            tag=trial.id,
            frontend=FrontendJob(tools.nvcc, self._bundle, spec.arch, frontend_args, spec.compile_timeout_s),
            assemble=AssembleJob(tools.ptxas, spec.arch, space.ptxas_args(config), spec.compile_timeout_s),
        )

    def _build_key(self, config: Config) -> str:
        space, spec = self._request.space, self._request.kernel
        identity = [
            self._bundle.sha256,
            self._toolchain.nvcc_build,
            spec.arch,
            [*space.frontend_args(config), *spec.fixed_define_args(), *self._bundle.include_args],
            list(space.ptxas_args(config)),
        ]
        return hashlib.sha256(json.dumps(identity).encode()).hexdigest()

    def _result(self, study: Study, exhausted: bool) -> TuneResult:
        trials = tuple(self._store.trials(study.id))
        baseline_key = self._request.space.default_config().key
        baseline = next(t for t in trials if t.config_key == baseline_key)
        complete = [t for t in trials if t.state is TrialState.COMPLETE and t.value is not None]
        best = min(complete, key=lambda t: (t.value, t.number), default=baseline)
        wall = time.perf_counter() - self._counters.started
        return TuneResult(study, baseline, best, trials, self._counters, wall, exhausted)


def _retryable(trial: Trial) -> bool:
    return trial.state is TrialState.FAILED and trial.retryable


def _counts(trial: Trial) -> bool:
    return trial.state is TrialState.COMPLETE or (trial.state is TrialState.FAILED and not trial.retryable)


def _observation(trial: Trial) -> Observation:
    return Observation(Config.of(trial.config), trial.value if trial.state is TrialState.COMPLETE else None)


def _build_record(key: str, build: Build) -> BuildRecord:
    entries = [vars(entry) for entry in build.entries]
    return BuildRecord(key, build.ok, build.message, {"status": build.status.value, "entries": entries}, build.code_hash, build.seconds)


def _build_from_record(record: BuildRecord) -> Build:
    entries = tuple(EntryResources(**entry) for entry in record.metrics.get("entries", []))
    status = BuildStatus(record.metrics.get("status", "ok" if record.ok else "compile_error"))
    return Build(status, record.message, entries, record.code_hash, b"", record.seconds)
