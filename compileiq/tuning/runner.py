"""Evaluate claimed trials: build cache -> compile on workers -> evaluate -> record.

Every result is written to the database the moment it is known, so a killed run loses only the
variants that were in flight.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from compileiq.build.compile import (
    Build,
    BuildStatus,
)
from compileiq.build.workers import Transfers, VariantJob, VariantResult, Workers
from compileiq.core.errors import CompileIQError
from compileiq.core.records import NODE_KEY, BuildRecord, Trial, TrialOutcome, TrialState
from compileiq.core.space import Config, remember
from compileiq.evaluate import eligibility
from compileiq.evaluate.metrics import NAMING_FAILURES, Evaluation
from compileiq.store import Store
from compileiq.store.group_commit import GroupCommit
from compileiq.tuning.build_records import build_from_record, build_record, deterministic
from compileiq.tuning.jobs import Jobs, Target
from compileiq.tuning.progress import Evaluator, Outcome, Progress, RunCounters
from compileiq.tuning.shared_builds import Heartbeat, SharedBuilds

HEARTBEAT_EVERY_S = 10.0
TRANSIENT_KEY = "build_status"  # in a failed trial's metrics: the compiler timed out or crashed


# Streaming: given the trials finished so far in this run() call and those still running, the
# tuner claims more to start now (none: wait for more results).
Refill = Callable[[Sequence[Trial], Sequence[Trial]], Sequence[Trial]]



class TrialRunner:
    """Turns claimed trials into finished ones; opens the workers only when something must compile."""

    def __init__(
        self,
        target: Target,
        store: Store,
        evaluator: Evaluator,
        open_workers: Callable[[], Workers],
        progress: Progress,
        heartbeat_every_s: float = HEARTBEAT_EVERY_S,
        worker: str = "",
        stale_after_s: float = 300.0,
        gone: Callable[[str], bool] = lambda worker: False,
    ) -> None:
        self._heartbeat_every_s = heartbeat_every_s
        self._jobs = Jobs(target)  # what a config compiles to, and the keys its builds are cached under
        self._shared = SharedBuilds(self._jobs.ptx_key, store, worker, stale_after_s, gone)
        self._target = target
        self._store = store
        self._evaluator = evaluator
        self._open_workers = open_workers
        self._workers: Workers | None = None
        self._progress = progress
        self.counters = RunCounters()
        self.origins: dict[int, str] = {}  # trial id -> "compiled" or "build cache", for trials this run finished
        self._by_code: dict[str, Trial] = {}
        self._claimed: dict[int, tuple[Trial, str]] = {}  # compiling now: trial id -> (trial, build key)
        self._refusal: Callable[[Trial], str | None] = lambda trial: None
        # what `best` ranks against: the study's baseline (the tuner sets it: the shipped build where
        # there is one), as decide and explain rank
        self.baseline: dict[str, Any] = target.space.default_config().as_dict()
        self._complete: list[Trial] = []  # every complete trial seen, for `best`
        self._seen: set[int] = set()  # ids of the trials in `_complete` (told twice: once)
        self._baseline_done = False  # a complete trial of `baseline` is among them
        self._best: Trial | None = None  # the trial the tuner's rule would choose now, kept as they arrive
        self._best_known = True  # False: the rule changed, recompute on the next `best()`
        self._commit: GroupCommit | None = None  # during `run`: results wait here (group commit)
        self._configs: dict[str, Config] = {}

    @property
    def refusal(self) -> Callable[[Trial], str | None]:
        """The tuner's rule: why a trial may not be chosen (None when it may); `best` names none it refuses."""
        return self._refusal

    @refusal.setter
    def refusal(self, rule: Callable[[Trial], str | None]) -> None:
        self._refusal = rule
        self.rules_changed()

    def rules_changed(self) -> None:
        """`refusal` now answers differently (the tuner learned its reference): recompute `best`."""
        self._best_known = False

    def remember(self, trials: Sequence[Trial]) -> None:
        """Note finished trials' machine code, so identical code is reported as a reuse."""
        for trial in trials:
            if trial.state is not TrialState.COMPLETE or trial.value is None or trial.id in self._seen:
                continue
            if trial.code_hash and trial.code_hash not in self._by_code:
                self._by_code[trial.code_hash] = trial
            self._seen.add(trial.id)
            self._complete.append(trial)
            if trial.config == self.baseline:
                self._baseline_done = True
            if self._best_known and self._better(trial) and self._refusal(trial) is None:
                self._best = trial

    def run(self, batch: Sequence[Trial], refill: Refill | None = None) -> list[Trial]:
        """Finish the claimed trials, beating their heartbeat throughout (a cache hit's
        evaluation can take as long as a compile: a runtime objective measures it). With
        `refill`, the trials it hands over while compiles run are started and finished too."""
        if not batch:
            return []
        with Heartbeat(self._store, [trial.id for trial in batch], self._heartbeat_every_s, self._shared) as beat:
            with GroupCommit(self._store) as self._commit:
                try:
                    finished: list[Trial] = []
                    jobs = self._start(batch, finished)
                    if jobs:
                        self._compile_and_record(jobs, finished, refill, beat)
                finally:
                    self._commit = None
            return finished

    def flush(self) -> None:
        """Make every result recorded so far durable (before the tuner asks or claims)."""
        if self._commit is not None:
            self._commit.flush()

    def _start(self, batch: Sequence[Trial], finished: list[Trial]) -> list[VariantJob]:
        """Record the cache hits among `batch` (into `finished`); the compile jobs of the rest."""
        jobs: list[VariantJob] = []
        if not batch:
            return jobs
        keys = {trial.id: self._jobs.build_key(self.config_of(trial)) for trial in batch}
        cache = self._store.get_builds(set(keys.values()))
        hits = []
        for trial in batch:
            cached = cache.get(keys[trial.id])
            if cached is None or not deterministic(cached):
                self._claimed[trial.id] = (trial, keys[trial.id])
                jobs.append(self._job(trial))
            else:
                hits.append((trial, cached))
        if jobs and self._workers is None:  # where this batch compiles is said before any of its trial lines
            self._start_workers()
        for trial, cached in hits:
            self.counters.build_cache_hits += 1
            finished.append(self._record(trial, build_from_record(cached), "build cache"))
        return jobs

    def close(self) -> None:
        if self._workers is not None:
            self.counters.transfers = getattr(self._workers, "transfers", Transfers())  # Ray ships; others may not say
            self.counters.compiled_where = getattr(self._workers, "compiled_where", None)  # before close: an early Ray's
            self._workers.close()
            self._workers = None

    def _compile_and_record(
        self, jobs: list[VariantJob], finished: list[Trial], refill: Refill | None, beat: Heartbeat
    ) -> None:
        running = {job.tag for job in jobs}

        def more() -> list[VariantJob]:
            trials = refill(finished, _Compiling(running, self._claimed)) if refill else ()
            beat.add([trial.id for trial in trials])
            fresh = self._start(trials, finished)
            running.update(job.tag for job in fresh)
            return fresh

        try:
            workers = self._workers or self._start_workers()
            results = iter(workers.run(jobs, more if refill is not None else None, self._shared.before_assemble))
            while (result := self._wait(results)) is not None:
                trial, key = self._claimed.pop(result.tag)
                running.discard(result.tag)
                finished.append(self._record_compiled(trial, result, key))
        except Exception as error:  # workers, database, a bug: no claim stays running (Ctrl-C and a
            # closed pipe are the tuner's to hand back, with their own reason)
            reason = str(error) if isinstance(error, CompileIQError) else type(error).__name__
            self._release(running, reason)
            raise
        finally:
            for tag in running:
                self._claimed.pop(tag, None)
            self._shared.release_all()

    def _release(self, trial_ids: set[int], reason: str) -> None:
        """Hand claimed trials back (retryable) when the run fails: they were never tried."""
        try:
            for trial_id in sorted(trial_ids):
                self._store.finish_trial(
                    trial_id, state=TrialState.FAILED, value=None, reason=f"not compiled: {reason}",
                    metrics={}, code_hash=None, compile_seconds=None, retryable=True,
                )  # fmt: skip
        except CompileIQError:
            pass  # the database itself failed: the caller reports the first error; heartbeats go stale

    def _wait(self, results: Iterator[VariantResult]) -> VariantResult | None:
        start = time.perf_counter()
        result = next(results, None)
        self.counters.compile_wait_seconds += time.perf_counter() - start
        return result

    def _start_workers(self, why: str = "") -> Workers:
        """Start the workers at the first compile of the run (none when nothing compiles), saying
        where compiles go, and, past the first trial, why only now (`why`: what compiles)."""
        start = time.perf_counter()
        self._workers = self._open_workers()
        self.counters.worker_start_seconds += time.perf_counter() - start
        recorded = self.counters.new_trials
        after = (f": the build cache held this run's {recorded} trial{'s' if recorded != 1 else ''} before"
                 if recorded and not why else "")
        self._progress.note(f"{why or 'compiling'} on {self._workers.description}{after}")
        return self._workers

    def _record_compiled(self, trial: Trial, result: VariantResult, build_key: str) -> Trial:
        source, ptx_key = self._shared.assembled(result)
        self._count_compile(result, assembled=source is None)
        self.counters.shared_builds += int(source is not None)
        record = build_record(build_key, result.build, ptx_key) if result.build.status.deterministic else None
        return self._record(trial, result.build, source or "compiled", record, result.node)

    def _count_compile(self, result: VariantResult, assembled: bool = True) -> None:
        counters = self.counters
        counters.frontend_calls += int(result.ptx_compiled)
        counters.frontend_seconds += result.ptx.seconds if result.ptx_compiled else 0.0
        if assembled:  # else the build came from a ptxas run counted where it ran
            counters.ptxas_calls += int(result.ptx.status is BuildStatus.OK)
            counters.ptxas_seconds += result.build.seconds
        counters.compile_seconds = counters.frontend_seconds + counters.ptxas_seconds
        if result.node:
            counters.nodes[result.node] = counters.nodes.get(result.node, 0) + 1

    def record_judged(self, trial: Trial, build: Build, evaluation: Evaluation) -> Trial:
        """Finish a trial judged without the evaluator (screened out before it was measured)."""
        return self._record(trial, build, "screened", evaluation=evaluation)

    def _record(
        self, trial: Trial, build: Build, source: str, record: BuildRecord | None = None, node: str = "",
        evaluation: Evaluation | None = None,
    ) -> Trial:
        """Evaluate and finish the trial; `record` (a fresh build) is cached in the same write."""
        self.origins[trial.id] = source
        if build.ok and build.code_hash in self._by_code:
            source = f"same code as #{self._by_code[build.code_hash].number}"
            self.counters.same_code_reuses += 1
        evaluation = evaluation or self._evaluator.evaluate(build, self.config_of(trial))
        metrics = evaluation.metrics
        if not build.status.deterministic:  # a later run tries it again (see reopen_transient)
            metrics = {**metrics, TRANSIENT_KEY: build.status.value}
        if node:
            metrics = {**metrics, NODE_KEY: node}
        outcome = TrialOutcome(trial.id, TrialState.COMPLETE if evaluation.value is not None else TrialState.FAILED,
                               _float(evaluation.value), evaluation.reason, metrics, build.code_hash,
                               _float(build.seconds), build=record)
        if self._commit is not None:  # in a run: written with the results that arrive with it
            self._commit.add(outcome)
            finished = replace(trial, state=outcome.state, value=outcome.value, reason=outcome.reason,
                               metrics=metrics, code_hash=outcome.code_hash, retryable=False,
                               compile_seconds=outcome.compile_seconds, finished_at=datetime.now(UTC))
        else:
            finished = self._store.finish_trial(
                trial.id, state=outcome.state, value=evaluation.value, reason=evaluation.reason, metrics=metrics,
                code_hash=build.code_hash, compile_seconds=build.seconds, build=record,
            )  # fmt: skip
        self.remember([finished])
        self.counters.new_trials += 1
        refused = self._refusal(finished) if finished.state is TrialState.COMPLETE else None
        self._progress.trial(Outcome(finished, source, refused, self.baseline_pending), self.best())
        return finished

    def reopen_transient(self, trials: Sequence[Trial]) -> int:
        """Make the trials that an earlier run lost to a compiler timeout or crash, or could not
        score for want of a kernel it recognised (an older compileiq's naming), retryable, so that
        this run tries them again (once: it records its own outcome as final)."""
        lost = [t for t in trials if t.state is TrialState.FAILED and not t.retryable
                and (TRANSIENT_KEY in t.metrics or any(words in (t.reason or "") for words in NAMING_FAILURES))]
        for trial in lost:
            self._store.hand_back(trial, trial.reason)
        return len(lost)

    @property
    def baseline_pending(self) -> bool:
        """No result of the baseline is known yet (another tuner is building it): `best` is the best
        so far, before the rules that hold every trial to the baseline apply."""
        return not self._baseline_done

    def best(self) -> Trial | None:
        """The trial the tuner's rule would choose now: the best that may win, in the order every
        view ranks by (`eligibility.rank`: the baseline first among equals); one check per result."""
        if not self._best_known:
            allowed = [t for t in self._complete if self._refusal(t) is None]
            self._best = min(allowed, key=lambda t: eligibility.rank(t, self.baseline), default=None)
            self._best_known = True
        return self._best

    def _better(self, trial: Trial) -> bool:
        best = self._best
        return best is None or eligibility.rank(trial, self.baseline) < eligibility.rank(best, self.baseline)

    def prebuild(self, configs: Sequence[Config]) -> dict[str, Build]:
        """Each config's build (config key -> Build) without a trial: from the build cache, else
        compiled now and cached, so that a trial of the same config later is a cache hit."""
        keys = [self._jobs.build_key(config) for config in configs]
        cache = self._store.get_builds(set(keys))
        builds: dict[str, Build] = {}
        jobs = []
        for index, (config, key) in enumerate(zip(configs, keys)):
            cached = cache.get(key)
            if cached is not None and deterministic(cached):
                builds[config.key] = build_from_record(cached)
            else:
                jobs.append(self._jobs.job(index, config))
        if jobs:
            workers = self._workers or self._start_workers()
            by_tag = {job.tag: job for job in jobs}
            for result in workers.run(jobs):
                self._count_compile(result)
                if result.build.status.deterministic:
                    ptx_key = self._jobs.ptx_key_of(by_tag[result.tag], result)
                    self._store.put_build(build_record(keys[result.tag], result.build, ptx_key))
                builds[configs[result.tag].key] = result.build
        return builds

    def rebuild(self, trials: Sequence[Trial]) -> list[tuple[Build, Evaluation]]:
        """Compile the trials' configs in this run, past the build cache, and score them: the check of
        rows this run did not build (`verify`). All in one batch on the workers (as parallel as they
        are, as the search compiles), each answer in the order of `trials`. The cache then holds each
        deterministic build, over any record under its key (one the rebuild may have contradicted);
        a timed-out or crashed one is not cached (it says nothing about the row it was to check)."""
        if not trials:
            return []
        configs = [self.config_of(trial) for trial in trials]
        workers = self._workers or self._start_workers("rebuilding the rows the ACF cites that this run did not build, "
                                                       "to check them,")
        jobs = [self._jobs.job(index, config) for index, config in enumerate(configs)]
        builds: dict[int, Build] = {}
        self.counters.verify_batches += 1
        for result in workers.run(jobs):
            self._count_compile(result)
            self.counters.verify_frontend_calls += int(result.ptx_compiled)
            self.counters.verify_ptxas_calls += int(result.ptx.status is BuildStatus.OK)
            if result.build.status.deterministic:
                config = configs[result.tag]
                self._store.replace_build(build_record(self._jobs.build_key(config), result.build,
                                                       self._jobs.ptx_key_of(jobs[result.tag], result)))
            builds[result.tag] = result.build
        return [(builds[index], self._evaluator.evaluate(builds[index], config)) for index, config in enumerate(configs)]

    def _job(self, trial: Trial) -> VariantJob:
        return self._jobs.job(trial.id, self.config_of(trial))

    def config_of(self, trial: Trial) -> Config:
        """The trial's config (one `Config` per config key: each trial's is needed several times)."""
        config = self._configs.get(trial.config_key)
        return config if config is not None else remember(self._configs, trial.config_key, Config.of(trial.config))


class _Compiling(Sequence[Trial]):
    """The trials compiling now, as a refill sees them: their count at once, the trials
    themselves only if it asks (a refill runs per result and seldom needs them)."""

    def __init__(self, running: set[int], claimed: dict[int, tuple[Trial, str]]) -> None:
        self._running, self._claimed = running, claimed

    def __len__(self) -> int:
        return len(self._running)

    @cached_property
    def _trials(self) -> list[Trial]:
        return [self._claimed[tag][0] for tag in sorted(self._running)]

    def __getitem__(self, index: Any) -> Any:
        return self._trials[index]

    def __iter__(self) -> Iterator[Trial]:
        return iter(self._trials)


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)
