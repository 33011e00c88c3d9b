"""Why a study chose what it chose, from its recorded trials alone (nothing is built here).

The baseline is the study's first trial (the compiler defaults, or with --compile-commands the
build that ships; always claimed first); the winner is the best trial; the ablation path runs from
the baseline to the chosen config over recorded results. The chosen config is the one the ACF
holds: the trial the study's latest deciding run recorded (`runs.decision`), when it names a
complete trial with the value it recorded (`recorded_decision.followed_choice`); else (an imported
study, an older database, a run row that names no such trial) the tuner's rules replayed over the
recorded results.
Where the replay now gives another trial than the run chose (a row changed since), every view says
so (`Explanation.notes`) instead of switching silently; where the chosen row itself holds another
value than the run recorded, that row is left out of the replay, said so (`changed_choice`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from compileiq.core.records import RunRecord, Study, Trial, TrialState, first_line, unchosen
from compileiq.core.space import Config, SearchSpace
from compileiq.evaluate import eligibility
from compileiq.results import launch_note, multi_objective, shipped_origin
from compileiq.results.ablation import Ablation, ablation_path, forbidden_keys, never, recorded
from compileiq.results.baseline_labels import shipped_values
from compileiq.results.pareto import Front, dominates, front, values_of, with_chosen, with_pick
from compileiq.results.recorded_decision import (
    changed_choice,
    latest_decision,
    recorded_digest,
    recorded_forbidden,
    recorded_pick,
    recorded_simplify,
    row_digest,
    sound_choice,
    unwritten,
)
from compileiq.results.simplify import baseline_space, simplify
from compileiq.source.spec import ShippedBuild


def _held(run: RunRecord, trial: Trial, how: str) -> str:
    """How `run` checked the row ("verified", "replaced"), "edited" where the row no longer holds what
    the run recorded of it (`recorded_decision.row_digest`: a forged metric under its label), or
    "undigested" where the run recorded no digest of it (an older release's run, or digests deleted)."""
    recorded = recorded_digest(run, trial.number)
    return "undigested" if recorded is None else "edited" if recorded != row_digest(trial) else how


@dataclass(frozen=True)
class Explanation:
    study: Study
    trials: tuple[Trial, ...]
    baseline: Trial | None
    winner: Trial | None
    chosen: Trial | None
    ablation: Ablation | None

    front: Front | None = None  # several objectives: the front of the trials that may win, and its pick
    decided_by: str = ""  # where the choice comes from: a run's record, an imported rule, --pick, or a replay
    runs: tuple[RunRecord, ...] = ()  # the study's runs: who recorded and who verified which row
    notes: tuple[str, ...] = ()  # one line each, that every view prints: the rows now give another trial, an assumed launch, ...

    def provenance(self, trial: Trial) -> str:
        """Whether this database vouches for the row: "verified by run N" (a run of this database
        built it again and agreed, or built it itself, before an ACF cited it), "quarantined and
        replaced by run N's rebuild" (the row disagreed with that run's rebuild, was quarantined and now holds the
        rebuild: the baseline), "recorded by run N" (its worker ran a tune here), else "not
        recorded by a run of this database" (`db import`, or written by something that never tuned
        here). Run rows are this database's own record; the latest run that checked a row says, only
        while the row matches the digest it recorded of it (else: "... not vouched for")."""
        checked_by, first_run_of = self._vouched
        if trial.number in checked_by:
            run, how = checked_by[trial.number]
            if how == "edited":
                return f"edited since run {run} checked it: not vouched for"
            if how == "undigested":
                return f"checked by run {run}, which recorded no digest: not vouched for"
            return f"verified by run {run}" if how == "verified" else f"quarantined and replaced by run {run}'s rebuild"
        if trial.worker and trial.worker in first_run_of:
            return f"recorded by run {first_run_of[trial.worker]}"
        return "not recorded by a run of this database"

    @cached_property
    def _vouched(self) -> tuple[dict[int, tuple[int, str]], dict[str, int]]:
        """(trial number -> the latest run that checked it and how: "verified" or "replaced",
        worker -> its first run), read once."""
        checked_by: dict[int, tuple[int, str]] = {}
        first_run_of: dict[str, int] = {}
        by_number = {t.number: t for t in self.trials}
        for run in sorted(self.runs, key=lambda r: r.id):
            cited = self._cited_by(run, by_number)
            for how in ("verified", "replaced"):
                numbers = run.decision.get(how) if isinstance(run.decision, dict) else None
                if isinstance(numbers, list):
                    checked_by.update((n, (run.id, _held(run, by_number[n], how)))
                                      for n in numbers if type(n) is int and n in cited)
            first_run_of.setdefault(run.worker, run.id)
        return checked_by, first_run_of

    def _cited_by(self, run: RunRecord, by_number: dict[int, Trial]) -> set[int]:
        """The rows a run row may vouch for: those its ACF cites (the baseline and its choice, what
        `decision` records), and only when its choice is one the tuner could have made here (a
        forged run row naming a refused trial vouches for nothing); never a trial the rules refuse."""
        chosen = sound_choice(self.study, by_number, self.baseline, self.refusal, run)
        if not isinstance(chosen, Trial):
            return set()
        return {t.number for t in (self.baseline, chosen) if t is not None and self.refusal(t) is None}

    def front_of(self, objectives: Sequence[str], rule: str) -> Front:
        """The front of `objectives` (a view's --pareto) over the trials the study's rules let win:
        a refused trial (one that adds spills, say) is never offered as a pick."""
        return front([t for t in self.trials if self.refusal(t) is None], objectives, rule, self.runtime,
                     self.baseline, self.chosen)  # the recorded choice stands for its equals (`pareto.tie_break`)

    @property
    def runtime(self) -> bool:
        return "time" in multi_objective.objectives_of(self.study.key.objective)

    def refusal(self, trial: Trial) -> str | None:
        """Why the study's rules refuse this trial (it may not be chosen), or None when it may be."""
        return self._refuse(trial)

    @cached_property
    def against(self) -> str:
        """What the baseline is, in `eligibility.against`'s words (the ACF's vs_defaults.against):
        the compiler defaults, or the project's build as shipped (a build with settings of its own
        is the project's, as `baseline_label` says; the run's word names its database, and a build
        of fixed flags alone is one too)."""
        origin = shipped_origin.recorded_origin(self.runs)
        shipped = origin is not None or (self.baseline is not None and bool(shipped_values(self.study, self.baseline)))
        return eligibility.against(ShippedBuild(origin) if origin else shipped)

    @cached_property
    def _refuse(self) -> eligibility.Refusal:
        """The study's rules, their refusals naming the baseline as `against` does."""
        return eligibility.study_refusal(self.baseline, self.study.key.objective, self.study.key.evaluator == "static",
                                         self.against)

    def ranked(self) -> list[Trial]:
        """The complete trials as every view lists them: the chosen one first, then those that may
        be chosen, then the refused ones, each group in `eligibility.rank` order."""
        base = self.baseline.config if self.baseline is not None else {}
        chosen = self.chosen.number if self.chosen is not None else None
        complete = [t for t in self.trials if t.state is TrialState.COMPLETE and t.value is not None]
        return sorted(complete, key=lambda t: (t.number != chosen, self.refusal(t) is not None,
                                               eligibility.rank(t, base)))

    def status(self, trial: Trial) -> str:
        """"chosen", "baseline", "may be chosen" or "refused: <why>": what every view says of a trial;
        of a trade-off's trial that may win but lies off the front, "dominated by #N" (a front point
        no worse in every objective: no pick rule chooses it)."""
        if self.chosen is not None and trial.number == self.chosen.number:
            return "chosen"
        if refused := self.refusal(trial):
            return f"refused: {refused}"
        if self.baseline is not None and trial.number == self.baseline.number:
            return "baseline"
        if self.front is not None and (off := self._off_the_front(trial)) is not None:
            return off
        return "may be chosen"

    def _off_the_front(self, trial: Trial) -> str | None:
        """Why a trade-off's trial that may win is not on its front, as the front counts it: "dominated
        by #N", or "same values as #N" (the front keeps one trial of equal values: the fewest
        changed settings); None for a front point, or a trial with no values."""
        assert self.front is not None
        values = values_of(trial, self.front.objectives)
        if values is None or any(p.trial.number == trial.number for p in self.front.points):
            return None
        if (over := next((p for p in self.front.points if dominates(p.values, values)), None)) is not None:
            return f"dominated by #{over.trial.number}"
        if (same := next((p for p in self.front.points if p.values == values), None)) is not None:
            return f"same values as #{same.trial.number} on the front"
        return None

    def described(self, trial: Trial) -> str:
        """The status as tables show it: with the row's provenance where an ACF cites the row, or
        where no run of this database recorded it."""
        status, provenance = self.status(trial), self.provenance(trial)
        cited = {t.number for t in (self.chosen, self.baseline) if t is not None}
        if trial.number in cited or provenance.startswith("not "):
            return f"{status} ({provenance})"
        return status

    @property
    def to_time(self) -> tuple[Trial, ...]:
        """Trials the static rules refused only for a trade-off a GPU must judge (`eligibility`)."""
        if self.study.key.evaluator != "static" or self.baseline is None or self.chosen is None:
            return ()
        return eligibility.candidates_to_time(self.trials, self.chosen, self.baseline, self.study.key.objective)


REPLAYED = "the study's rules, replayed over its trials"


def explain(study: Study, trials: Sequence[Trial], pick: str | None = None, runs: Sequence[RunRecord] = (),
            simplify: bool | None = None) -> Explanation:
    """The study's choice as its ACF holds it (`_explain_choice`), with the note `tune` and the ACF
    give where the run scored occupancy at an assumed launch (`launch_note`): every view says it."""
    explained = _explain_choice(study, trials, pick, runs, simplify)
    launch = launch_note.recorded_note(latest_decision(tuple(runs)), explained.chosen)
    return replace(explained, notes=(*explained.notes, launch)) if launch else explained


def _explain_choice(study: Study, trials: Sequence[Trial], pick: str | None = None, runs: Sequence[RunRecord] = (),
                    simplify: bool | None = None) -> Explanation:
    """The study's choice as its ACF holds it. `runs`: the study's runs (`Store.runs`); the latest
    that recorded a decision names the chosen trial when `followed_choice` accepts it (else the
    choice is replayed from the trials, as the tuner makes it: `runs` empty, the tuner's own call).
    `pick`: a user's rule for the front of a study of several objectives (`--pick`), replayed with
    it; None: the rule the latest run recorded (`recorded_pick`). `simplify`: whether the replay
    simplifies the winner over the recorded results (the tuner's own call says; None: as the latest
    deciding run did, `recorded_simplify`: a `--no-simplify` run's choice is the search's winner)."""
    trials, runs = tuple(trials), tuple(runs)
    run = latest_decision(runs)
    trials, foreign = _of_the_study(trials)
    trials, changed = changed_choice(run, trials)  # a recorded choice's row edited since: never its evidence
    foreign = (*foreign, *changed)
    asked = pick if pick is not None and multi_objective.is_multi(study.key.objective) else None
    rule = asked if asked is not None else recorded_pick(study, runs)
    forbidden = forbidden_keys(recorded_forbidden(run))  # what the run's restrictions forbid: the path skips it
    simplified = recorded_simplify(run) if simplify is None else simplify
    replayed = replace(_explain(study, trials, rule, forbidden, simplified, runs), decided_by=REPLAYED)
    followed = sound_choice(study, {t.number: t for t in trials}, replayed.baseline, replayed.refusal, run) if run else None
    chosen = followed if isinstance(followed, Trial) else None
    if asked is not None:
        return replace(replayed, decided_by=f"--pick {asked}, replayed over its trials",
                       notes=(*foreign, *_differs(replayed, chosen, run, f"--pick {asked} gives")))
    if run is None or (stopped := unchosen(run.decision)) is not None:  # a run its baseline stopped chose nothing
        said = f" (run {run.id} stopped before it chose: {stopped})" if run is not None else ""
        notes: tuple[str, ...] = (f"no run of this database recorded a choice{said}: replayed from its trials",) if trials else ()
        return replace(replayed, notes=(*foreign, *notes))
    if chosen is None:
        why = _unfollowed(run, rule, followed)
        return replace(replayed, decided_by=why if why.startswith("pick rule") else REPLAYED,
                       notes=(*foreign, *(() if changed else (why,))))
    confirmed = study.key.evaluator != "static" and run.decision is not None and run.decision.get("by") == "confirmation"
    by = f"{'the confirmation of ' if confirmed else ''}run {run.id} ({first_line(run.worker, 80)})"
    if (not_written := unwritten(run)) is not None:  # its decision stands, recorded; no ACF holds it
        by += f"; its ACF was not written ({not_written})"
    elif not confirmed:
        by += ", whose ACF holds it"
    # a runtime choice rests on its confirmation's measurements, which no row holds: not replayed
    notes = _differs(replayed, chosen, run, "the rows now give") if study.key.evaluator == "static" else ()
    return replace(_following(trials, replayed, chosen, forbidden), decided_by=by, notes=(*foreign, *notes))


def _of_the_study(trials: tuple[Trial, ...]) -> tuple[tuple[Trial, ...], tuple[str, ...]]:
    """The trials whose config has the study's parameters (its baseline's, the first trial: every
    trial of a study sets the same ones, and an import and the study list hold rows to the same),
    and one line for the rows set aside: a damaged or forged row of other parameters is never
    compared, ranked or chosen."""
    if not trials:
        return trials, ()
    names = frozenset(trials[0].config)
    foreign = [t.number for t in trials if frozenset(t.config) != names]
    if not foreign:
        return trials, ()
    shown = ", ".join(f"#{n}" for n in foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
    note = f"skipped {len(foreign)} damaged or forged row(s) whose config does not have the study's parameters: {shown}"
    return tuple(t for t in trials if frozenset(t.config) == names), (note,)


def _differs(replayed: Explanation, chosen: Trial | None, run: RunRecord | None, gives: str) -> tuple[str, ...]:
    """The line every view prints where the replay gives another trial than the run chose."""
    if run is None or chosen is None or replayed.chosen is None or replayed.chosen.number == chosen.number:
        return ()
    changed = "changed since " if gives.startswith("the rows") else ""
    acf = ", its ACF's choice" if unwritten(run) is None else " (its ACF was not written)"
    return (f"{gives} #{replayed.chosen.number}: {changed}run {run.id} chose #{chosen.number}{acf}",)


def _following(trials: tuple[Trial, ...], replayed: Explanation, chosen: Trial,
               forbidden: Callable[[Config], bool]) -> Explanation:
    """The replay with `chosen` (a run's recorded choice) as the choice: its ablation path, or its
    point picked on the replayed front."""
    if replayed.chosen is not None and replayed.chosen.number == chosen.number:
        return replayed
    if replayed.front is not None:
        return replace(replayed, chosen=chosen, front=with_pick(replayed.front, chosen))
    if multi_objective.is_multi(replayed.study.key.objective) or replayed.baseline is None:
        return replace(replayed, chosen=chosen)
    return replace(replayed, chosen=chosen,
                   ablation=ablation_path(replayed.baseline, chosen, recorded(trials), forbidden, replayed.refusal))


def _unfollowed(run: RunRecord, rule: str, why: str | Trial | None = None) -> str:
    """Why the latest deciding run's record is not the choice: a pick rule alone (what `db import`
    records), a choice that names no complete trial with its recorded value, or one the tuner
    could never have made (`why`, from `sound_choice`)."""
    decision = run.decision or {}
    if isinstance(why, str):
        return f"run {run.id}'s recorded choice was not followed: {why}; replayed from its trials"
    if "pick" in decision and "chosen" not in decision:
        source = "from an imported export" if decision.get("pick") == rule else "(an imported export's does not parse)"
        return (f"pick rule {rule} {source}, not decided by a run of this database (run {run.id}: "
                f"{first_line(run.stopped or run.worker, 80)}); replayed over its trials")
    if "chosen" not in decision:  # what `db import` records of what the study started from, and no choice
        return (f"no run of this database recorded a choice (run {run.id}: {first_line(run.stopped or run.worker, 80)}"
                "): replayed from its trials")
    return (f"run {run.id}'s recorded choice names no complete trial with its recorded value (or no valid pick "
            "rule): not followed; replayed from its trials")


def _explain(study: Study, trials: tuple[Trial, ...], pick: str, forbidden: Callable[[Config], bool] = never,
             simplified: bool = True, runs: tuple[RunRecord, ...] = ()) -> Explanation:
    baseline = trials[0] if trials else None
    if multi_objective.is_multi(study.key.objective) and baseline is not None:
        return replace(_explain_front(study, trials, baseline, pick, simplified), runs=runs)
    winner = _search_winner(study, trials, baseline)
    if baseline is None or winner is None:
        return Explanation(study, trials, baseline, winner, None, None, runs=runs)
    chosen = winner
    if simplified and winner.config_key != baseline.config_key:
        exact = study.key.evaluator != "static"
        refuse = eligibility.study_refusal(baseline, study.key.objective, not exact)
        chosen = simplify(winner, recorded_space(baseline), recorded(trials), exact,
                          allowed=lambda t: refuse(t) is None).chosen
    found = Explanation(study, trials, baseline, winner, chosen, None, runs=runs)  # its refusals name the baseline
    return replace(found, ablation=ablation_path(baseline, chosen, recorded(trials), forbidden, found.refusal))


def _explain_front(study: Study, trials: tuple[Trial, ...], baseline: Trial, pick: str,
                   simplified: bool = True) -> Explanation:
    """The tuner's choice for several objectives: the pick on the front of the trials that may win,
    simplified (static: to no objective worse; with `time`: to the same machine code; not where
    `simplified` is False, as a --no-simplify run keeps it); no ablation path (no single gain)."""
    if baseline.state is not TrialState.COMPLETE:
        return Explanation(study, trials, baseline, None, None, None)
    objectives = multi_objective.objectives_of(study.key.objective)
    refuse = eligibility.study_refusal(baseline, study.key.objective, study.key.evaluator == "static")
    choice = multi_objective.choose(eligibility.search_results(trials, refuse, baseline.config), baseline, objectives, pick, refuse,
                                    "time" in objectives)
    winner = chosen = choice.chosen
    if simplified and winner.config_key != baseline.config_key:
        chosen = simplify(winner, recorded_space(baseline), recorded(trials), "time" in objectives,
                          allowed=lambda t: refuse(t) is None, no_worse=multi_objective.no_worse(objectives)).chosen
    return Explanation(study, trials, baseline, winner, chosen, None, with_chosen(choice.front, chosen))


def _search_winner(study: Study, trials: Sequence[Trial], baseline: Trial | None) -> Trial | None:
    """The tuner's own rule (`eligibility.search_winner`): for a static objective only trials that
    may win, strictly better than the baseline, the fewest changed settings among equals."""
    if baseline is None or baseline.state is not TrialState.COMPLETE:
        return best(trials)
    static = study.key.evaluator == "static"
    return eligibility.search_winner(trials, baseline, eligibility.study_refusal(baseline, study.key.objective, static), static)


def best(trials: Sequence[Trial]) -> Trial | None:
    complete = [t for t in trials if t.state is TrialState.COMPLETE and t.value is not None]
    return min(complete, key=lambda t: (t.value, t.number), default=None)


def changed_settings(trial: Trial, baseline: Trial | None) -> dict[str, Any]:
    """The trial's settings that differ from the baseline's: a macro at the baseline's value is not
    one (the ACF counts only those that differ: `evidence.vs_defaults.changed_settings`)."""
    base = baseline.config if baseline else {}
    return {k: v for k, v in sorted(trial.config.items()) if base.get(k) != v}


def recorded_space(baseline: Trial) -> SearchSpace:
    """A stand-in space whose defaults are the baseline's values (all the simplification reads)."""
    return baseline_space(baseline.config)
