"""The tuning loop: ask -> claim -> compile -> evaluate -> record -> tell, then simplify the winner.

The database is the state: a run (or a resumed or concurrent one) rebuilds its searcher from the
study's finished trials, claims each configuration by inserting a row, and records every result,
failures included, as soon as it is known.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from compileiq.errors import CompileIQError
from compileiq.kernel import KernelSpec, SourceBundle, bundle_sources
from compileiq.metrics import StaticEvaluator
from compileiq.runner import Progress, RunCounters, Target, TrialRunner
from compileiq.search import Observation, Searcher, SearchSettings
from compileiq.simplify import Simplification, simplify
from compileiq.space import Config, SearchSpace
from compileiq.store import Store, Study, StudyKey, Trial, TrialState
from compileiq.toolchain import Toolchain
from compileiq.workers import Workers

WAIT_FOR_OTHERS_S = 1.0


class BaselineError(CompileIQError):
    """The kernel does not build with the compiler's default settings."""


@dataclass(frozen=True)
class TuneRequest:
    kernel: KernelSpec
    space: SearchSpace
    objective: str
    budget: int
    search: SearchSettings = field(default_factory=SearchSettings)
    batch_size: int = 8
    study_name: str | None = None
    resume: bool = False
    stale_after_s: float = 300.0
    simplify: bool = True


@dataclass(frozen=True)
class TuneResult:
    study: Study
    baseline: Trial
    winner: Trial  # the search's best trial
    chosen: Trial  # what the ACF records: the winner with every setting that made no difference dropped
    simplification: Simplification | None
    trials: tuple[Trial, ...]
    counters: RunCounters
    wall_seconds: float
    exhausted: bool  # the space ran out of untried configurations before the budget


def study_key(request: TuneRequest, bundle: SourceBundle, toolchain: Toolchain) -> StudyKey:
    return StudyKey(
        kernel=request.kernel.name,
        source_sha256=bundle.sha256,
        space_id=request.space.id,
        space_sha256=request.space.sha256,
        toolchain=toolchain.nvcc_build,
        arch=request.kernel.arch,
        evaluator=StaticEvaluator.kind,
        objective=request.objective,
    )


class Tuner:
    """Runs one tuning request against a store."""

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
        self._progress = progress
        self._bundle = bundle_sources(request.kernel)
        target = Target(request.kernel, request.space, self._bundle, toolchain)
        evaluator = StaticEvaluator(request.objective, request.kernel)
        self._runner = TrialRunner(target, store, evaluator, open_workers, progress)
        self._searcher = Searcher(request.space, request.search)
        self._worker_name = f"{socket.gethostname()}:{os.getpid()}"
        self._baseline = request.space.default_config()

    def run(self) -> TuneResult:
        request = self._request
        key = study_key(request, self._bundle, self._toolchain)
        study = self._store.get_or_create_study(key, request.study_name)
        self._store.fail_stale_trials(study.id, 0.0 if request.resume else request.stale_after_s)
        self._progress.started(study, request.budget, self._sync(study))
        try:
            exhausted = self._search(study)
            result = self._result(study, exhausted)
        finally:
            self._runner.close()
        return result

    def _search(self, study: Study) -> bool:
        """Run batches until the budget is spent; True if the space ran out first."""
        while (remaining := self._request.budget - self._sync(study)) > 0:
            batch = self._claim_batch(study, min(remaining, self._request.batch_size))
            if batch:
                finished = self._runner.run(batch)
                self._check_baseline(finished)
                self._searcher.set_frontend_cost(self._runner.counters.frontend_cost_ratio)
                self._searcher.tell([_observation(t) for t in finished if _counts(t)])
            elif self._store.trials(study.id, {TrialState.RUNNING}):
                time.sleep(WAIT_FOR_OTHERS_S)  # other tuners hold the rest: wait for their results
            else:
                return True
        return False

    def _sync(self, study: Study) -> int:
        """Tell the searcher every finished trial (ours and other processes'); count them."""
        finished = [t for t in self._store.trials(study.id) if _counts(t)]
        self._searcher.tell([_observation(t) for t in finished])
        self._runner.remember(finished)
        self._check_baseline(finished)
        return len(finished)

    def _claim_batch(self, study: Study, count: int) -> list[Trial]:
        trials = self._store.trials(study.id)
        taken = {t.config_key for t in trials if not _retryable(t)}
        candidates = [Config.of(t.config) for t in trials if _retryable(t)]
        if self._baseline.key not in taken | {c.key for c in candidates}:
            candidates.insert(0, self._baseline)
        if (wanted := count - len(candidates)) > 0:
            candidates += self._searcher.ask(wanted, exclude=sorted(taken | {c.key for c in candidates}))
        return self._claim(study, candidates[:count])

    def _claim(self, study: Study, configs: Sequence[Config]) -> list[Trial]:
        claimed = []
        for config in configs:
            trial = self._store.claim_trial(study.id, config.key, config.as_dict(), self._worker_name)
            if trial is not None:
                claimed.append(trial)
        return claimed

    def evaluate(self, study: Study, configs: Sequence[Config]) -> list[Trial]:
        """Finished trials for these configs: recorded ones as they are, the rest evaluated now."""
        recorded = {t.config_key: t for t in self._store.trials(study.id) if _counts(t)}
        fresh = self._claim(study, [c for c in configs if c.key not in recorded])
        for trial in self._runner.run(fresh):
            recorded[trial.config_key] = trial
        return [recorded[c.key] for c in configs if c.key in recorded]

    def _check_baseline(self, trials: Sequence[Trial]) -> None:
        for trial in trials:
            if trial.config_key == self._baseline.key and trial.state is TrialState.FAILED and not trial.retryable:
                lines = (trial.reason or "unknown error").strip().splitlines()
                name = self._request.kernel.source.name
                raise BaselineError(f"{name} does not build with default settings: {lines[0] if lines else ''}")

    def _result(self, study: Study, exhausted: bool) -> TuneResult:
        trials = self._store.trials(study.id)
        baseline = next(t for t in trials if t.config_key == self._baseline.key)
        winner = _best(trials) or baseline
        simplification = None
        if self._request.simplify and winner is not baseline:
            simplification = simplify(winner, self._request.space, lambda cs: self.evaluate(study, cs))
        chosen = simplification.chosen if simplification else winner
        wall = time.perf_counter() - self._runner.counters.started
        final = tuple(self._store.trials(study.id))
        return TuneResult(study, baseline, winner, chosen, simplification, final, self._runner.counters, wall, exhausted)


def _best(trials: Sequence[Trial]) -> Trial | None:
    complete = [t for t in trials if t.state is TrialState.COMPLETE and t.value is not None]
    return min(complete, key=lambda t: (t.value, t.number), default=None)


def _retryable(trial: Trial) -> bool:
    return trial.state is TrialState.FAILED and trial.retryable


def _counts(trial: Trial) -> bool:
    return trial.state is TrialState.COMPLETE or (trial.state is TrialState.FAILED and not trial.retryable)


def _observation(trial: Trial) -> Observation:
    return Observation(Config.of(trial.config), trial.value if trial.state is TrialState.COMPLETE else None)
