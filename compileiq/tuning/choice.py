"""The end of a run: the choice over the study's trials (`decide`) as the run's `TuneResult`. For
a static objective the rows the choice cites are checked against rebuilds first (`verify`), and a
quarantined row makes the choice again, after a batch rebuild of every other row it could make
(`Verifier.sweep`): one batch for a database of forgeries, not one decision per forged row."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compileiq.core.records import SEARCH, Study, Trial
from compileiq.core.space import Config
from compileiq.evaluate import eligibility
from compileiq.results.simplify import baseline_space
from compileiq.store import Store
from compileiq.tuning import baseline
from compileiq.tuning.baseline_reference import RunBaseline
from compileiq.tuning.decide import Allowance, Confirm, Decider, shrink_allowance
from compileiq.tuning.limits import RunClock
from compileiq.tuning.request import TuneRequest, TuneResult
from compileiq.tuning.runner import TrialRunner
from compileiq.tuning.verify import Quarantined, Verifier


@dataclass(frozen=True)
class FinishedSearch:
    """What the choice reads from the run whose search has ended."""

    store: Store
    request: TuneRequest
    objectives: tuple[str, ...]
    static: bool
    held: RunBaseline
    runner: TrialRunner
    clock: RunClock
    evaluate: Callable[[Study, Sequence[Config], str], list[Trial]]  # recorded results, the rest built now
    refusal: Callable[[Trial], str | None]  # why a static objective may not choose a trial
    hold_to: Callable[[eligibility.Reference | None], None]  # the run's reference, as the choice reads it
    note: Callable[[str], None]
    confirm: Confirm | None  # a runtime evaluator's confirmation against the baseline
    worker: str  # this run's tuner, host:pid
    stopped: str  # which limit ended the search
    warm_note: str  # what other kernels' studies proposed


def result(run: FinishedSearch, study: Study, exhausted: bool) -> TuneResult:
    """The choice over the study's trials; for a static objective the rows it cites are checked
    against rebuilds here (`verify`), and a quarantined one makes the choice again."""
    run.held.check(run.evaluate(study, [run.held.config], SEARCH))  # another tuner may hold it
    verifier = Verifier(run.store, run.runner.rebuild, run.runner.origins, run.held.config.key,
                        run.note) if run.static else None
    while True:
        try:
            return _choice(run, study, exhausted, verifier)
        except Quarantined:
            continue


def _choice(run: FinishedSearch, study: Study, exhausted: bool, verifier: Verifier | None) -> TuneResult:
    trials = run.store.trials(study.id)
    base = baseline.finished_baseline(trials, run.held.config.key)
    if verifier is not None:
        verifier.check([base])
    run.hold_to(eligibility.Reference.of(base, run.request.objective, run.held.against) if run.static else None)
    if verifier is not None and verifier.sweep(trials, run.refusal, run.objectives):  # after a forged row: the rest
        trials = run.store.trials(study.id)
    request = run.request
    decider = Decider(study, request.objective, run.objectives, request.pick, run.static,
                      request.simplify, request.ablate, request.search.seed, run.clock.out_of_time,
                      baseline_space(run.held.config.as_dict()), lambda configs, purpose: run.evaluate(study, configs, purpose),
                      lambda: tuple(run.store.trials(study.id)), run.refusal,
                      verifier.check if verifier is not None else None, run.note, run.confirm,
                      verifier.check_results if verifier is not None else None,
                      lambda config: not request.space.allows(config), Allowance(shrink_allowance(request.budget)))
    decision = decider.decide(base, trials)
    wall = time.perf_counter() - run.runner.counters.started
    return TuneResult(study, base, decision.winner, decision.chosen, decision.simplification, decision.trials,
                      run.runner.counters, wall, exhausted, decision.confirmation, decision.ablation,
                      dict(run.runner.origins), run.worker, request.budget, run.stopped,
                      decision.front, run.warm_note, decision.shrink_builds)
