"""The tuning loop: ask -> claim -> compile -> evaluate -> record -> tell, then simplify the winner.

The database is the state: a run (or a resumed or concurrent one) rebuilds its searcher from the
study's finished trials, claims each configuration by inserting a row, and records every result,
failures included, as soon as it is known.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from compileiq.build.workers import Workers
from compileiq.core import implied
from compileiq.core.records import SEARCH, Study, Trial, TrialState
from compileiq.core.space import Config
from compileiq.core.toolchain import Toolchain
from compileiq.evaluate import eligibility
from compileiq.evaluate.metrics import StaticEvaluator
from compileiq.results import multi_objective
from compileiq.results.pareto import values_of
from compileiq.results.recorded_decision import decision, unsimplified
from compileiq.search.loading import SearchLoad
from compileiq.search.refit_schedule import BackgroundRefresh
from compileiq.search.search_process import RemoteSearcher
from compileiq.search.settings import Observation
from compileiq.source.kernel import bundle_sources, study_identities
from compileiq.source.macro_effect import check_macros_change_code
from compileiq.source.macros import check_macros_take_effect, source_notes
from compileiq.source.spec import SourceBundle
from compileiq.store import Store
from compileiq.tuning import choice, claims, resume_replay, study_lookup
from compileiq.tuning.baseline_reference import RunBaseline, baseline_reference
from compileiq.tuning.jobs import Target
from compileiq.tuning.limits import RunClock
from compileiq.tuning.nothing_left import EXHAUSTED, stop_reason
from compileiq.tuning.progress import Evaluator, Progress
from compileiq.tuning.request import (
    TuneRequest,
    TuneResult,
    baseline_config,
    searched,
)
from compileiq.tuning.run_row import record_stop, started_from
from compileiq.tuning.runner import HEARTBEAT_EVERY_S, Refill, TrialRunner
from compileiq.tuning.screen_stage import ScreenStage
from compileiq.tuning.search_start import start_search
from compileiq.tuning.streaming import StreamingFeed
from compileiq.tuning.warm_start import Rescoring, earlier_results, warm_start
from compileiq.tuning.warm_start import discouraged as warm_discouraged

if TYPE_CHECKING:  # loaded on a thread of its own (`search_start`): scikit-optimize is slow to import
    from compileiq.search.journal import ReplayRules
    from compileiq.search.searcher import Searcher

WAIT_FOR_OTHERS_S = 1.0
WAIT_FOR_RUNNING_S = 60.0  # simplification waits this long at most for another tuner's trial


class Tuner:
    """Runs one tuning request against a store."""

    def __init__(
        self,
        request: TuneRequest,
        store: Store,
        toolchain: Toolchain,
        open_workers: Callable[[], Workers],
        progress: Progress,
        evaluator: Evaluator | None = None,
        bundle: SourceBundle | None = None,
        search: SearchLoad[Searcher | RemoteSearcher] | None = None,
    ) -> None:
        self._request = request
        self._store = store
        store.check_trials_against(request.space)  # shared rows are untrusted: skip foreign ones
        self._toolchain = toolchain
        self._progress = progress
        self._bundle = bundle or bundle_sources(request.kernel, toolchain.nvcc)
        check_macros_take_effect(request.kernel, self._bundle)
        check_macros_change_code(request.kernel, toolchain.nvcc)
        for unread in source_notes(request.kernel, self._bundle):
            progress.note(f"note: {unread}")
        target = Target(request.kernel, request.space, self._bundle, toolchain)
        self._objectives = multi_objective.objectives_of(request.objective)
        self._multi = len(self._objectives) > 1
        evaluator = evaluator or StaticEvaluator(self._objectives[0], request.kernel, self._bundle)
        self._evaluator = evaluator
        beat = min(HEARTBEAT_EVERY_S, request.stale_after_s / 3)  # well inside others' stale timeout
        self._worker_name = claims.worker_name()
        # a claim of a build is judged as a claim of a trial (`_take_over`): its tuner's process gone, or silent
        stale_after = min(request.stale_after_s, claims.RESUME_STALE_S) if request.resume else request.stale_after_s
        self._runner = TrialRunner(target, store, evaluator, open_workers, progress, beat, self._worker_name,
                                   stale_after, claims.is_gone)
        self._warm_first: list[Config] = []  # earlier studies' best configs: cache hits, tried first
        self._warm_note = ""  # what other kernels' studies proposed, for the provenance
        self._search_load = search or start_search(request)  # loads while the baseline compiles
        self._remote = request.searches_in_a_process and not self._multi
        self._refresh = BackgroundRefresh()  # streaming: the searcher's refits beside the driver
        self._baseline = baseline_config(request.space, request.kernel)
        self._held = RunBaseline(self._baseline, request.kernel, self._bundle, request.objective)
        self._told: set[int] = set()  # ids of the finished trials the searcher knows
        self._journaling = not request.stream and not self._multi  # each claim records the searcher's calls
        self._run_id: int | None = None
        self._resumed_batch: tuple[int, ...] = ()  # --resume: the stopped batch's unfinished trials (`resume_replay`)
        self._held_back: tuple[Trial, ...] = ()  # its finished ones, told with them
        self._cost_base = resume_replay.NO_COUNTERS  # --resume: the compile counters the stopped run recorded
        self._baseline_built = False  # an earlier study of the same sources built the baseline
        self._reference = None  # the defaults' build, for static objectives
        self._runner.refusal = self._refusal
        self._runner.baseline = self._baseline.as_dict()
        self._clock = RunClock(request.limits)
        self._stopped = ""
        self._screening = (ScreenStage(request.screening, request.kernel, self._bundle, self._baseline, self._runner,
                                       evaluator, progress, self._claim)
                           if request.screening is not None and not self._static else None)

    @property
    def _searcher(self) -> Searcher | RemoteSearcher:
        """The searcher, waited for (it loads in the background from the start of the run)."""
        return self._search_load.get()

    @property
    def _reference(self) -> eligibility.Reference | None:
        return self._reference_value

    @_reference.setter
    def _reference(self, reference: eligibility.Reference | None) -> None:
        self._reference_value = reference
        self._runner.rules_changed()  # `refusal` answers by the reference

    def run(self) -> TuneResult:
        request = self._request
        prepare = getattr(self._evaluator, "prepare", None)
        if prepare is not None:  # a runtime evaluator measures the baseline first: reference, device
            self._progress.note("measuring the baseline (the reference for every variant's outputs)")
            prepare(self._baseline)
        study = study_lookup.open_study(self._store, request, self._bundle, self._toolchain, self._evaluator.kind,
                                        self._progress.note)
        try:  # from here on a stopped run has a study to go on with (`claims.release_on_stop`)
            self._take_over(study, announce=True)
            self._runner.reopen_transient(self._store.trials(study.id))
            run_id = self._run_id = self._store.start_run(study.id, self._worker_name, request.limits.as_json())
            self._progress.started(study, request.budget, searched(self._store.trials(study.id)))
            self._progress.note(f"limits: {request.limits.describe()}")
            if self._remote:
                self._progress.note("the searcher runs in a process of its own (streaming a batch of "
                                    f"{request.batch_size}: the driver's time goes to the workers)")
            replaying = request.resume and self._journaling and self._screening is None
            # the stopped run's record as it left it: read before this run claims (the baseline below)
            journal = (self._store.search_journal(study.id), self._store.trials(study.id)) if replaying else None
            if self._static:  # the defaults first: every result the searcher learns is held to them
                self._reference = baseline_reference(self._store, study, self._held, self.evaluate)
            if journal is not None:  # before any call of this run's searcher; told results held to the reference
                self._replay(study, *journal)
            if request.search.strategy == "bayes" and self._static:  # what it can never choose: not proposed
                self._searcher.avoid(eligibility.lowering_settings(request.space, self._baseline.as_dict()))
            # random and exhaustive are yardsticks: no memory; a study whose budget is spent tries
            # nothing, so no warm start claims to be "tried first"
            if request.search.strategy == "bayes" and request.warm_start and \
                    not self._clock.stop_reason(searched(self._store.trials(study.id))):
                rescore = (Rescoring(request.space, request.kernel, request.objective, self._objectives, self._refusal)
                           if self._static else None)  # runtimes are not carried between studies
                warm = warm_start(self._search_load, self._store, study, request, self._baseline, rescore,
                                  self._progress.note, study_identities(request.kernel, self._bundle))
                self._warm_first, self._baseline_built, self._warm_note = list(warm.first), warm.baseline_built, warm.note
            exhausted = self._search(study)
            self._progress.note(f"stopped: {self._stopped}")
            result = choice.result(self._finished_search(), study, exhausted)
            recorded = started_from(request.kernel, self._bundle)  # the shipped build's database, the sources
            self._store.finish_run(run_id, self._stopped, result.search_trials, result.extra_trials,
                                   decision(result) | unsimplified(request.simplify) | recorded)
            result = replace(result, run_id=run_id)  # an ACF refused after the run is said on this row
        except BaseException as error:  # Ctrl-C, a closed pipe, any failure: hand our claims back
            claims.release_on_stop(self._store, study.id, self._worker_name, error, self._progress.note)
            record_stop(self._store, study.id, self._run_id, error, request.kernel, self._bundle)
            raise
        finally:
            self._runner.close()
            if self._remote:
                self._search_load.close()
        return result

    def _take_over(self, study: Study, announce: bool = False) -> bool:
        """Retry the trials of tuners that are gone (or, with --resume, silent for RESUME_STALE_S);
        a live tuner's trials are left to it. True if any trial was handed back."""
        stale_after = self._request.stale_after_s
        if self._request.resume:
            stale_after = min(stale_after, claims.RESUME_STALE_S)
        return claims.take_over_noted(self._store, study.id, self._worker_name, stale_after, self._progress.note,
                                      announce)

    def _search(self, study: Study) -> bool:
        """Run batches until a limit stops the search; True if the space ran out first."""
        self._clock.best = best.value if (best := self._runner.best()) else None
        while True:
            counted, trials = self._sync(study)
            remaining = self._request.budget - counted
            if stop := self._clock.stop_reason(counted):
                self._stopped = stop
                break
            # Before each ask: a tuner that died mid-batch leaves RUNNING trials; retry them
            # once its process is gone (this host) or its heartbeat is stale.
            if self._take_over(study):
                trials = self._store.trials(study.id)
            # The baseline alone first: a kernel that does not build with the compiler's defaults
            # stops the run with its one failed trial, before a batch of variants is compiled.
            alone = not self._baseline_built and not any(t.config_key == self._baseline.key for t in trials)
            count = 1 if alone else min(remaining, self._request.batch_size)
            screen = None if alone or self._reference is None else self._screening
            if screen is not None and (stop := screen.exhausted(self._request.budget)):
                self._stopped = stop
                break
            proposed = candidates = self._candidates(trials, count * (screen.policy.factor if screen else 1))
            if screen is not None and self._reference is not None and proposed:  # a batch refused whole is no end
                candidates = screen.select(study, trials, proposed, count, self._reference)
            batch = self._claim(study, candidates)
            if batch:
                refill = self._refiller(study, counted) if self._request.stream and not alone else None
                try:
                    finished = self._runner.run(batch, refill)
                finally:
                    self._refresh.close()  # the searcher is this thread's again
                self._held.check(finished)
                self._searcher.set_frontend_cost(resume_replay.cost_ratio(self._cost_base, self._runner.counters))
                # in the order claimed, not the order finished (timing): what the searcher learns
                # in another order changes its proposals, and a seed must reproduce a run
                finished, self._held_back = [*self._held_back, *finished], ()
                observations = [self._observation(t) for t in sorted(finished, key=lambda t: t.id) if t.final]
                if refill is not None and not self._multi:  # it refitted on its own schedule: catch up
                    self._searcher.tell(observations, fit=False)
                    self._searcher.fit()
                else:
                    self._searcher.tell(observations)
                self._clock.batch_done(best.value if (best := self._runner.best()) else None)
            elif proposed:
                continue  # other tuners claimed them first (or screening refused them): ask again
            elif self._store.trials(study.id, {TrialState.RUNNING}):
                time.sleep(WAIT_FOR_OTHERS_S)  # other tuners hold the rest: wait for their results
            else:
                self._stopped = stop_reason(self._request.space, len({t.config_key for t in trials}))
                return self._stopped == EXHAUSTED
        return False

    def _refiller(self, study: Study, counted: int) -> Refill:
        """Streaming: claim new variants while others compile (`streaming`)."""
        return StreamingFeed(self._request.batch_size, self._request.budget - counted, self._searcher,
                             self._refresh, self._tell, partial(self._claim, study), self._runner.flush,
                             lambda: self._clock.out_of_time, refit_each_batch=self._multi)

    def _tell(self, trials: Sequence[Trial], fit: bool = True) -> None:
        self._told.update(t.id for t in trials)
        self._searcher.set_frontend_cost(resume_replay.cost_ratio(self._cost_base, self._runner.counters))
        self._searcher.tell([self._observation(t) for t in trials], fit)

    def _sync(self, study: Study) -> tuple[int, list[Trial]]:
        """Tell the searcher every finished trial (ours and other processes'); count them.
        Returns the count and the study's trials as read (one read per batch)."""
        trials = self._store.trials(study.id)
        finished = [t for t in trials if t.final]
        counted = searched(finished)
        if (self._static or self._screening is not None) and self._reference is None:  # another tuner held the baseline: now done?
            self._reference = self._held.reference(finished)
        fresh = [t for t in finished if t.id not in self._told]  # a final trial never changes
        self._told.update(t.id for t in fresh)
        held = {t.id for t in self._held_back}  # --resume: told with the stopped batch's retried trials
        if told := [t for t in fresh if t.id not in held]:  # none yet (a new study's baseline): the searcher may still be loading
            self._searcher.tell([self._observation(t) for t in told])
        self._runner.remember(fresh)
        self._held.check(fresh)
        if self._screening is not None:
            self._screening.count(finished)
        return counted, trials

    def _candidates(self, trials: Sequence[Trial], count: int) -> list[Config]:
        """The baseline, trials to retry, the warm start's best, then the searcher's proposals (after a
        replayed --resume, first the stopped batch's unfinished trials alone, as its run would have)."""
        resumed, self._resumed_batch = self._resumed_batch, ()
        if retried := [Config.of(t.config) for t in trials if t.id in resumed and t.to_retry]:
            return retried[:count]
        taken = {t.config_key for t in trials if not t.to_retry}
        retry = [Config.of(t.config) for t in trials if t.to_retry]
        screened = self._screening.repairs if self._screening is not None else []
        space = self._request.space
        built = {implied.build_key(space, t.config) for t in trials if not t.to_retry}  # a twin's build too
        suggested = [c for c in [*self._warm_first, *self._repairs(trials), *screened]
                     if implied.build_key(space, c.as_dict()) not in built]
        first = {c.key: c for c in [self._baseline, *retry, *suggested] if c.key not in taken and space.allows(c)}
        candidates = list(first.values())[:count]
        picked = {c.key for c in candidates}  # the rest of the warm start's (and repairs) wait for the next batch
        self._warm_first = [c for c in self._warm_first if c.key in first and c.key not in picked]
        if self._screening is not None:
            self._screening.keep_repairs(set(first) - picked)
        if (wanted := count - len(candidates)) > 0:
            candidates += self._searcher.ask(wanted, exclude=sorted(taken | set(first)))
        return candidates[:count]

    def _repairs(self, trials: Sequence[Trial]) -> list[Config]:
        if not self._static or self._multi or self._reference is None:
            return []
        return [Config.of(c) for c in eligibility.repairs(trials, self._reference, self._baseline.as_dict())]

    def _observation(self, trial: Trial) -> Observation:
        """A trial as the searcher learns it (`Observation.of`): a failed or refused one is worse than any other."""
        complete = trial.state is TrialState.COMPLETE
        refused = not complete or self._refusal(trial) is not None
        values = (() if refused else values_of(trial, self._objectives) or ()) if self._multi else None
        return Observation.of(self._runner.config_of(trial), trial.value if complete else None, refused, values)

    def _refusal(self, trial: Trial) -> str | None:
        """Why a static objective may not choose this trial (see `eligibility`); None for `time`."""
        if self._reference is None or not self._static:
            return None
        return eligibility.refusal(trial.config, trial.metrics, self._reference)

    def _claim(self, study: Study, configs: Sequence[Config], purpose: str = SEARCH) -> list[Trial]:
        self._runner.flush()  # the results this run knows are recorded before it claims more
        pairs = [(c.key, c.as_dict()) for c in configs]
        claimed = self._store.claim_trials(study.id, pairs, self._worker_name, purpose=purpose)
        if self._journaling and self._run_id is not None:  # what `resume_replay` replays
            searcher = self._search_load.ready()  # not loaded yet: not asked nor told anything yet
            take = getattr(searcher, "take_journal", None)
            calls = take() if take is not None else []
            if calls or claimed:
                self._store.journal_search(study.id, self._run_id, resume_replay.entry(
                    calls, claimed, purpose, self._cost_base, self._runner.counters))
        return claimed

    def _replay(self, study: Study, rows: Sequence[tuple[int, Any]], before: Sequence[Trial]) -> None:
        """--resume: the searcher replayed from its record, to go on as the stopped run would have
        (`resume_replay`); where it cannot be, rebuilt from the trials as before, and said."""
        found = resume_replay.replayed(rows, self._request, before, self._replay_rules(study))
        if isinstance(found, str):
            self._progress.note(f"--resume: {found}; the searcher is rebuilt from the recorded trials instead, so "
                                "its proposals are not those the uninterrupted run would have made")
        elif found is not None:
            self._search_load = SearchLoad(lambda: found.searcher)
            self._resumed_batch, self._held_back, self._cost_base = found.retry, found.held, found.counters
            self._progress.note(f"--resume: the search replayed from its record ({found.batches} batches asked): "
                                "it goes on with the proposals the uninterrupted run would have made")

    def _replay_rules(self, study: Study) -> ReplayRules:
        """What a replayed record may tell, avoid, discourage and ask: what this run would itself
        (a shared row is untrusted: a forged one must not steer the search)."""
        from compileiq.search.journal import ReplayRules  # with the searcher: numpy
        request, trials = self._request, self._store.trials(study.id)
        final = {t.config_key: t for t in trials if t.final}
        avoid = (frozenset(eligibility.lowering_settings(request.space, self._baseline.as_dict()))
                 if request.search.strategy == "bayes" and self._static else None)
        kernel = study_identities(request.kernel, self._bundle)
        discourage = warm_discouraged(self._store, study, request, self._baseline, kernel)
        warm: dict[str, Observation] = {}  # what the warm start tells of earlier studies (static: rescored)
        if request.search.strategy == "bayes" and request.warm_start and self._static:
            rescore = Rescoring(request.space, request.kernel, request.objective, self._objectives, self._refusal)
            found = earlier_results(self._store, study, rescore, self._baseline, request.batch_size, kernel)
            warm = {o.config.key: o for o in found.observations} if found is not None else {}
        return ReplayRules(lambda key: [*([self._observation(t)] if (t := final.get(key)) else []),
                                        *([o] if (o := warm.get(key)) else [])],
                           request.batch_size, frozenset({self._baseline.key, *(t.config_key for t in trials)}),
                           avoid, discourage)

    def evaluate(self, study: Study, configs: Sequence[Config], purpose: str = SEARCH) -> list[Trial]:
        """Finished trials for these configs: recorded ones as they are, the rest evaluated now.

        A config another tuner is evaluating is waited for (it may go stale and be retried
        here); one still unfinished after WAIT_FOR_RUNNING_S is left out of the answer.
        """
        configs = [c for c in configs if self._request.space.allows(c)]  # a simplification's or
        # ablation's step that breaks tune.toml's restrictions is never built: it has no result
        limit = min(self._request.stale_after_s, WAIT_FOR_RUNNING_S) + 2 * WAIT_FOR_OTHERS_S
        deadline = time.monotonic() + limit
        while True:
            recorded = {t.config_key: t for t in self._store.trials(study.id) if t.final}
            self._runner.remember(list(recorded.values()))  # another tuner's baseline: `best` no longer pending
            missing = [c for c in configs if c.key not in recorded]
            fresh = self._claim(study, missing, purpose)
            for trial in self._runner.run(fresh):
                recorded[trial.config_key] = trial
            if len(fresh) == len(missing) or time.monotonic() > deadline:
                return [recorded[c.key] for c in configs if c.key in recorded]
            time.sleep(WAIT_FOR_OTHERS_S)
            self._take_over(study)

    @property
    def _static(self) -> bool:
        return self._evaluator.kind == StaticEvaluator.kind

    def _hold_to(self, reference: eligibility.Reference | None) -> None:
        self._reference = reference

    def _finished_search(self) -> choice.FinishedSearch:
        """What the choice at the end of the run reads from it (`choice`)."""
        return choice.FinishedSearch(self._store, self._request, tuple(self._objectives), self._static, self._held,
                                     self._runner, self._clock, self.evaluate, self._refusal, self._hold_to,
                                     self._progress.note, getattr(self._evaluator, "confirm", None),
                                     self._worker_name, self._stopped, self._warm_note)
