"""The end of a run: from the study's trials to the one choice every view renders.

One objective: the search's winner, simplified (each setting that made no difference reset to
the baseline's value), replayed through `explain` for a static objective (so a view and the ACF
can never differ), confirmed against the baseline for a runtime one, then ablated (each setting's
share of the gain). Several objectives: the pick on the front of the trials that may win,
simplified (static: a setting goes when no objective gets worse; with `time`: when the machine
code stays the same); neither confirmation nor ablation applies to a trade-off. With
--no-simplify the search's winner stays as searched (the replay too), and the ablation builds
nothing: it reads the recorded results, as out of time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from compileiq.core.records import SCREEN, SEARCH, Study, Trial, TrialState
from compileiq.core.space import Config, SearchSpace
from compileiq.evaluate import eligibility
from compileiq.evaluate.confirm import Confirmation
from compileiq.evaluate.timed_key import trial_timed_key
from compileiq.results import multi_objective
from compileiq.results.ablation import Ablation, ablation_path, never
from compileiq.results.ablation import recorded as ablation_recorded
from compileiq.results.explain import explain
from compileiq.results.pareto import Front, with_chosen
from compileiq.results.simplify import Simplification, lower_or_equal_value, simplify

Evaluate = Callable[[Sequence[Config], str], list[Trial]]  # configs, purpose -> finished trials
Confirm = Callable[[Sequence[Trial], Trial, int, Callable[[str], None]], Confirmation]
MAX_PASSES = 3  # a static decision is made again when its own builds change the replayed winner


def shrink_allowance(budget: int) -> int:
    """The most configs shrinking the candidates to time may ask for in one decision: half the
    budget. They are refused by the objective, so no view offers them as the choice; a budget-8 run
    that kept its baseline built 40 of them (5x what the user set) to list three shorter commands."""
    return max(budget, 0) // 2


class Allowance:
    """The configs one decision's shrinking of the candidates to time may ask for (`shrink_allowance`):
    each distinct one counts once, built now or read where recorded (a resumed run counts alike)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.keys, self.noted = limit, set[str](), False

    def take(self, configs: Sequence[Config]) -> list[Config]:
        """Those of `configs` within the allowance, in order (each counted)."""
        taken = []
        for config in configs:
            if config.key not in self.keys and len(self.keys) >= self.limit:
                continue
            self.keys.add(config.key)
            taken.append(config)
        return taken


@dataclass(frozen=True)
class Decision:
    winner: Trial  # the search's best trial
    chosen: Trial  # what the ACF records
    simplification: Simplification | None
    trials: tuple[Trial, ...]  # the study's trials once the decision was made
    confirmation: Confirmation | None = None
    ablation: Ablation | None = None
    front: Front | None = None
    shrink_builds: int = 0  # the configs shrinking the candidates to time asked for (at most `shrink_allowance`)


@dataclass(frozen=True)
class Decider:
    """What the decision needs from the run: its study and objectives, a way to build what it
    asks for (`evaluate`, recorded in the study) and to read the study back (`recorded`)."""

    study: Study
    objective: str
    objectives: tuple[str, ...]
    pick: str  # several objectives: the rule that chooses on the front
    static: bool  # a static objective (else runtimes: noisy, so simplification keeps the same code only)
    simplify: bool
    ablate: bool
    seed: int  # the confirmation's
    out_of_time: bool  # then nothing more is built: recorded results only
    toward_baseline: SearchSpace  # what simplification resets a setting to
    evaluate: Evaluate
    recorded: Callable[[], tuple[Trial, ...]]
    refusal: Callable[[Trial], str | None]  # why a static objective may not choose a trial
    verify: Callable[[Sequence[Trial]], None] | None  # check cited rows against their rebuilds, in one batch (static)
    note: Callable[[str], None]
    confirm: Confirm | None  # a runtime evaluator's confirmation against the baseline
    # check the rows a decision reads in one batch (static), or replace them: those it may read
    verify_result: Callable[[Sequence[Trial]], list[Trial]] | None = None
    forbidden: Callable[[Config], bool] = never  # what tune.toml's restrictions forbid: the ablation never tries it
    shrinking: Allowance = field(default_factory=lambda: Allowance(0))  # shrinking the candidates to time

    def decide(self, baseline: Trial, trials: Sequence[Trial]) -> Decision:
        decision = self._front(baseline, trials) if len(self.objectives) > 1 else self._single(baseline, trials)
        decision = replace(decision, shrink_builds=len(self.shrinking.keys))
        if self.verify is not None and self.static:  # the ACF lists them with their numbers: rebuilt first
            # a forged row is quarantined, and the choice made again
            self.verify(eligibility.candidates_to_time(decision.trials, decision.chosen, baseline, self.objective))
        return decision

    def _simplified(self, winner: Trial, exact: bool) -> Simplification:
        no_worse = multi_objective.no_worse(self.objectives) if len(self.objectives) > 1 else lower_or_equal_value
        return simplify(winner, self.toward_baseline, partial(self._checked, "simplify"), exact,
                        allowed=lambda t: self.refusal(t) is None, no_worse=no_worse)

    def _checked(self, purpose: str, configs: Sequence[Config]) -> list[Trial]:
        """The simplification's or the ablation's results, each one this run built or checked against a
        rebuild (static): a drop is decided on them, so one forged "no gain" row would keep a setting of
        its author's choice (one no static metric sees, e.g. a load cache mode) in an ACF that passes the
        gate, and the ACF cites each setting's contribution from the ablation's. All of one step's rows
        are rebuilt in one batch; a row replaced by its rebuild raises Quarantined (decided again), one
        whose rebuild timed out or crashed is left out (that step has no result for it)."""
        found = self.evaluate(configs, purpose)
        if self.verify_result is not None and self.static:
            return self.verify_result(found)
        return found

    def _single(self, baseline: Trial, trials: Sequence[Trial]) -> Decision:
        if self._shrinks_candidates:  # first: a candidate's code may need no refused setting (a stand-in)
            self._shrink_candidates(trials, eligibility.search_winner(trials, baseline, self.refusal, self.static), baseline)
            trials = self.recorded()
        winner = eligibility.search_winner(trials, baseline, self.refusal, self.static)
        if not self.static:  # a runtime choice rests on its confirmation, which is not replayed
            return self._single_pass(baseline, winner)
        for _ in range(MAX_PASSES):
            decision = self._single_pass(baseline, winner)
            replayed = explain(self.study, decision.trials, self.pick, simplify=self.simplify)
            chosen, replayed_winner = replayed.chosen, replayed.winner
            if chosen is None or replayed_winner is None or chosen.number == decision.chosen.number:
                return decision
            # What this pass built gave a refused search result its stand-in (the same code, settings
            # that may win) or its repair (`eligibility.repaired`): the winner every view replays is
            # now that one, so decide from it.
            self.note(f"trial #{replayed_winner.number}, built to decide, takes the place of a refused search result "
                      "(its machine code, or its settings at the default level, allowed): deciding again from it")
            winner, replayed_choice = replayed_winner, chosen
        # Passes ran out: the choice is the one every view replays, its ablation from what is recorded.
        ablation = (ablation_path(baseline, replayed_choice, ablation_recorded(decision.trials), self.forbidden,
                                  self.refusal)
                    if self.ablate else None)
        return replace(decision, chosen=replayed_choice, ablation=ablation)

    def _single_pass(self, baseline: Trial, winner: Trial) -> Decision:
        """From the search's winner to the choice: verified, simplified, replayed (static),
        confirmed (runtime), ablated; then the candidates to time shrunk."""
        self._verified(winner, baseline)
        simplification = None
        if self.simplify and winner is not baseline and self.out_of_time:
            self.note("out of time: the winner is not simplified")
        elif self.simplify and winner is not baseline:
            simplification = self._simplified(winner, exact=not self.static)  # timings are noisy: same code only
        final = self.recorded()
        chosen = self._decided(simplification.chosen if simplification else winner, final)
        if self.verify is not None:
            self.verify([chosen])  # a row that agrees is left as it is: `final` still holds
        confirmation = None
        if self.confirm is not None:
            self.note("confirming the fastest variants against the baseline (interleaved rounds)")
            confirmation = self.confirm(final, baseline, self.seed, self.note)
            chosen = confirmed_choice(confirmation, final, baseline, chosen)
        ablation = None
        if self.ablate and chosen is not baseline:  # without simplification, built by nothing: see `_ablation_builds`
            ablation = ablation_path(baseline, chosen, partial(self._checked, "ablation") if self._ablation_builds
                                     else ablation_recorded(final), self.forbidden, self.refusal)
            final = self.recorded()
        if self._shrinks_candidates:  # those the first pass did not reach (already shrunk: recorded, not built)
            self._shrink_candidates(final, chosen, baseline)
            final = self.recorded()
        return Decision(winner, chosen, simplification, final, confirmation, ablation)

    @property
    def _ablation_builds(self) -> bool:
        """Whether the ablation builds the path's missing steps: not out of time, and not under
        --no-simplify, whose choice is the search's winner as searched: a path over its many changed
        settings costs builds quadratic in their number (27 for 7, after a budget of 4), more than
        the simplification it turned off, and its results never change the choice (each view replays
        the run without simplification); it reads the recorded results alone, as every view does."""
        return self.simplify and not self.out_of_time

    @property
    def _shrinks_candidates(self) -> bool:
        return self.static and self.simplify and not self.out_of_time

    def _shrink_candidates(self, trials: Sequence[Trial], choice: Trial, baseline: Trial) -> None:
        """Each candidate to time better than `choice`, shrunk to the settings its machine code
        needs (same code only): what a GPU would be asked to time, and where that needs no refused
        setting, a result that may win as it is (`eligibility.stand_ins`). Each starts from the search's
        result, so a rerun asks for the same configs in the same order (recorded: nothing built) and
        spends the allowance (`shrinking`) alike; past it nothing more is built, and a candidate is
        listed as far as it was shrunk (every view lists its code's recorded trial with the fewest
        changed settings)."""
        searched = [t for t in trials if t.purpose in (SEARCH, SCREEN)]
        for candidate in eligibility.candidates_to_time(searched, choice, baseline, self.objective):
            simplify(candidate, self.toward_baseline, self._shrink_builds, True)

    def _shrink_builds(self, configs: Sequence[Config]) -> list[Trial]:
        """`configs` built (or read where recorded) for a candidate's shrinking, those within its allowance."""
        asked = self.shrinking.take(configs)
        if len(asked) < len(configs) and not self.shrinking.noted:
            self.shrinking.noted = True
            self.note(f"the candidates to time are shrunk with at most {self.shrinking.limit} builds (half the "
                      "budget): those listed may keep settings their machine code does not need")
        return self.evaluate(asked, "simplify") if asked else []

    def _front(self, baseline: Trial, trials: Sequence[Trial]) -> Decision:
        runtime = not self.static
        first = multi_objective.choose(eligibility.search_results(trials, self.refusal, baseline.config), baseline,
                                       self.objectives, self.pick, self.refusal, runtime)
        self._verified_front(first.front, baseline)
        winner = first.chosen
        self._verified(winner, baseline)
        simplification = None
        if self.simplify and winner is not baseline and not self.out_of_time:
            simplification = self._simplified(winner, exact=runtime)  # static: no objective worse
        final = self.recorded()
        chosen = self._decided(simplification.chosen if simplification else winner, final)
        if self.verify is not None:
            self.verify([chosen])  # a row that agrees is left as it is: `final` still holds
        trade_offs = multi_objective.choose(eligibility.search_results(final, self.refusal, baseline.config), baseline, self.objectives,
                                            self.pick, self.refusal, runtime).front
        self._verified_front(trade_offs, baseline)
        return Decision(winner, chosen, simplification, final, front=with_chosen(trade_offs, chosen))

    def _verified_front(self, trade_offs: Front, baseline: Trial) -> None:
        """Every point of a front checked against a rebuild: the pick scales each objective over
        the front, so one forged point moves the knee (and the ACF lists them all with their numbers): in one batch."""
        if self.verify is not None:
            self.verify([point.trial for point in trade_offs.points if point.trial is not baseline])

    def _verified(self, winner: Trial, baseline: Trial) -> None:
        """The search's winner checked against a rebuild before anything starts from it: a forged
        row simplified first leads to real trials with its machine code, which pass their own check
        while the choice rests on the forgery (`verify` raises to choose again)."""
        if self.verify is not None and winner is not baseline:
            self.verify([winner])

    def _decided(self, chosen: Trial, trials: Sequence[Trial]) -> Trial:
        """The choice every view shows (`explain`, over the recorded `trials`), which the ACF holds
        too: for a static objective it is the tuner's own choice replayed, so the two can never
        differ. A runtime objective's choice also rests on its confirmation, which is not replayed."""
        if not self.static:
            return chosen
        decided = explain(self.study, trials, self.pick, simplify=self.simplify).chosen
        return decided if decided is not None else chosen


def confirmed_choice(confirmation: Confirmation, trials: Sequence[Trial], baseline: Trial, simplified: Trial) -> Trial:
    """The confirmed winner, as its simplest trial with the same machine code built with the same
    macros (`timed_key`: what was timed); else the baseline."""
    if confirmation.winner is None:
        return baseline
    timed = confirmation.winner.candidate.timed
    if trial_timed_key(simplified) == timed:
        return simplified
    same = [t for t in trials if trial_timed_key(t) == timed and t.state is TrialState.COMPLETE]
    return min(same, key=lambda t: (eligibility.changed_settings(t, baseline), t.number))
