"""Why a study chose what it chose, from its recorded trials alone (nothing is built here).

The baseline is the study's first trial (the compiler defaults, or with --compile-commands the
build that ships; always claimed first); the winner is the best trial; the ablation path runs from
the baseline to the chosen config over recorded results. The chosen config is the one the ACF
holds: the trial the study's latest deciding run recorded (`runs.decision`), when it names a
complete trial with the value it recorded (`followed_choice`); else (an imported study, an older
database, a run row that names no such trial) the tuner's rules replayed over the recorded results.
Where the replay now gives another trial than the run chose (a row changed since), every view says
so (`Explanation.notes`) instead of switching silently.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from compileiq.core.errors import UsageError
from compileiq.core.metric_ranges import MAX_PICK_RULE
from compileiq.core.records import (
    MAX_TRIAL_NUMBER,
    RunRecord,
    Study,
    StudySummary,
    Trial,
    TrialState,
    first_line,
)
from compileiq.core.space import SearchSpace, SpaceError
from compileiq.core.space_files import load_space
from compileiq.evaluate import eligibility
from compileiq.results import multi_objective, shipped_origin
from compileiq.results.ablation import Ablation, ablation_path, recorded
from compileiq.results.pareto import (
    Front,
    check_rule,
    dominates,
    front,
    values_of,
    with_chosen,
    with_pick,
)
from compileiq.results.simplify import baseline_space, simplify


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
    notes: tuple[str, ...] = ()  # one line each, that every view prints: the rows now give another trial, ...

    def provenance(self, trial: Trial) -> str:
        """Whether this database vouches for the row: "verified by run N" (a run of this database
        built it again and agreed, or built it itself, before an ACF cited it), "quarantined and
        replaced by run N's rebuild" (the row disagreed with that run's rebuild, was quarantined and now holds the
        rebuild: the baseline), "recorded by run N" (its worker ran a tune here), else "not
        recorded by a run of this database" (`db import`, or written by something that never tuned
        here). Run rows are this database's own record; the latest run that checked a row says."""
        checked_by, first_run_of = self._vouched
        if trial.number in checked_by:
            run, how = checked_by[trial.number]
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
                    checked_by.update((n, (run.id, how)) for n in numbers if type(n) is int and n in cited)
            first_run_of.setdefault(run.worker, run.id)
        return checked_by, first_run_of

    def _cited_by(self, run: RunRecord, by_number: dict[int, Trial]) -> set[int]:
        """The rows a run row may vouch for: those its ACF cites (the baseline and its choice, what
        `decision` records), and only when its choice is one the tuner could have made here (a
        forged run row naming a refused trial vouches for nothing); never a trial the rules refuse."""
        chosen = _sound(self.study, by_number, self.baseline, self.refusal, run)
        if not isinstance(chosen, Trial):
            return set()
        return {t.number for t in (self.baseline, chosen) if t is not None and self.refusal(t) is None}

    def front_of(self, objectives: Sequence[str], rule: str) -> Front:
        """The front of `objectives` (a view's --pareto) over the trials the study's rules let win:
        a refused trial (one that adds spills, say) is never offered as a pick."""
        return front([t for t in self.trials if self.refusal(t) is None], objectives, rule, self.runtime)

    @property
    def runtime(self) -> bool:
        return "time" in multi_objective.objectives_of(self.study.key.objective)

    def refusal(self, trial: Trial) -> str | None:
        """Why the study's rules refuse this trial (it may not be chosen), or None when it may be."""
        return self._refuse(trial)

    @cached_property
    def _refuse(self) -> eligibility.Refusal:
        """The study's rules, their refusals naming the baseline as `baseline_label` does (a build
        with settings of its own is the project's, not the compiler defaults)."""
        origin = shipped_origin.recorded_origin(self.runs)  # the run's word: a build of fixed flags alone is one too
        shipped = origin is not None or (self.baseline is not None and bool(_shipped_values(self.study, self.baseline)))
        against = shipped_origin.shipped_name(origin) if shipped else eligibility.DEFAULTS
        return eligibility.study_refusal(self.baseline, self.study.key.objective, self.study.key.evaluator == "static",
                                         against)

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


def explain(study: Study, trials: Sequence[Trial], pick: str | None = None, runs: Sequence[RunRecord] = ()) -> Explanation:
    """The study's choice as its ACF holds it. `runs`: the study's runs (`Store.runs`); the latest
    that recorded a decision names the chosen trial when `followed_choice` accepts it (else the
    choice is replayed from the trials, as the tuner makes it: `runs` empty, the tuner's own call).
    `pick`: a user's rule for the front of a study of several objectives (`--pick`), replayed with
    it; None: the rule the latest run recorded (`recorded_pick`)."""
    trials, runs = tuple(trials), tuple(runs)
    trials, foreign = _of_the_study(trials)
    asked = pick if pick is not None and multi_objective.is_multi(study.key.objective) else None
    rule = asked if asked is not None else recorded_pick(study, runs)
    replayed = replace(_explain(study, trials, rule), runs=runs, decided_by=REPLAYED)
    run = latest_decision(runs)
    followed = _sound(study, {t.number: t for t in trials}, replayed.baseline, replayed.refusal, run) if run else None
    chosen = followed if isinstance(followed, Trial) else None
    if asked is not None:
        return replace(replayed, decided_by=f"--pick {asked}, replayed over its trials",
                       notes=(*foreign, *_differs(replayed, chosen, run, f"--pick {asked} gives")))
    if run is None:
        notes: tuple[str, ...] = ("no run of this database recorded a choice: replayed from its trials",) if trials else ()
        return replace(replayed, notes=(*foreign, *notes))
    if chosen is None:
        why = _unfollowed(run, rule, followed)
        return replace(replayed, decided_by=why if why.startswith("pick rule") else REPLAYED, notes=(*foreign, why))
    if study.key.evaluator != "static" and run.decision is not None and run.decision.get("by") == "confirmation":
        by = f"the confirmation of run {run.id} ({first_line(run.worker, 80)})"
    else:
        by = f"run {run.id} ({first_line(run.worker, 80)}), whose ACF holds it"
    # a runtime choice rests on its confirmation's measurements, which no row holds: not replayed
    notes = _differs(replayed, chosen, run, "the rows now give") if study.key.evaluator == "static" else ()
    return replace(_following(trials, replayed, chosen), decided_by=by, notes=(*foreign, *notes))


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
    return (f"{gives} #{replayed.chosen.number}: {changed}run {run.id} chose #{chosen.number}, its ACF's choice",)


def _following(trials: tuple[Trial, ...], replayed: Explanation, chosen: Trial) -> Explanation:
    """The replay with `chosen` (a run's recorded choice) as the choice: its ablation path, or its
    point picked on the replayed front."""
    if replayed.chosen is not None and replayed.chosen.number == chosen.number:
        return replayed
    if replayed.front is not None:
        return replace(replayed, chosen=chosen, front=with_pick(replayed.front, chosen))
    if multi_objective.is_multi(replayed.study.key.objective) or replayed.baseline is None:
        return replace(replayed, chosen=chosen)
    return replace(replayed, chosen=chosen, ablation=ablation_path(replayed.baseline, chosen, recorded(trials)))


def _unfollowed(run: RunRecord, rule: str, why: str | Trial | None = None) -> str:
    """Why the latest deciding run's record is not the choice: a pick rule alone (what `db import`
    records), a choice that names no complete trial with its recorded value, or one the tuner
    could never have made (`why`, from `_sound`)."""
    decision = run.decision or {}
    if isinstance(why, str):
        return f"run {run.id}'s recorded choice was not followed: {why}; replayed from its trials"
    if "pick" in decision and "chosen" not in decision:
        source = "from an imported export" if decision.get("pick") == rule else "(an imported export's does not parse)"
        return (f"pick rule {rule} {source}, not decided by a run of this database (run {run.id}: "
                f"{first_line(run.stopped or run.worker, 80)}); replayed over its trials")
    return (f"run {run.id}'s recorded choice names no complete trial with its recorded value (or no valid pick "
            "rule): not followed; replayed from its trials")


def latest_decision(runs: Sequence[RunRecord]) -> RunRecord | None:
    """The latest run that recorded a decision (a JSON object; what the study list reads too)."""
    return max((r for r in runs if isinstance(r.decision, dict)), key=lambda r: r.id, default=None)


def _sound(study: Study, trials: dict[int, Trial], baseline: Trial | None, refuse: Callable[[Trial], str | None],
           run: RunRecord) -> Trial | str | None:
    """The trial the run recorded as its choice, when `followed_choice` accepts it and the tuner
    could have chosen it (`unsound_choice`); else why not (a line), or None (no such trial)."""
    choice = recorded_choice(run.decision)
    found = trials.get(choice[0]) if choice is not None else None
    if found is None or followed_choice(study, run.decision, found.state, found.value) is None:
        return None
    return unsound_choice(study, found, baseline, refuse) or found


def unsound_choice(study: Study, chosen: Trial, baseline: Trial | None,
                   refuse: Callable[[Trial], str | None]) -> str | None:
    """Why a run row's recorded choice could never have been the tuner's (None: it could): a
    config of other parameters than the baseline's, a trial the study's rules refuse (what every
    view refuses), or, for one static objective, a trial other than the baseline that is not
    strictly better than it (the tuner keeps the baseline then). A run row is untrusted."""
    if baseline is not None and set(chosen.config) != set(baseline.config):
        return f"#{chosen.number}'s config does not have the study's parameters"
    if refused := refuse(chosen):
        return f"the study's rules refuse #{chosen.number} ({refused})"
    static_single = study.key.evaluator == "static" and not multi_objective.is_multi(study.key.objective)
    if (static_single and baseline is not None and chosen.number != baseline.number
            and baseline.state is TrialState.COMPLETE and baseline.value is not None
            and not (chosen.value is not None and chosen.value < baseline.value)):
        return f"#{chosen.number} is not better than the baseline #{baseline.number}, which the tuner keeps then"
    return None


def listed_choice(summary: StudySummary) -> tuple[int, float] | None:
    """(trial, value) the study list shows as chosen: the latest run's recorded choice when
    `followed_choice` accepts the row it names and the tuner could have chosen it against the
    study's baseline row (`unsound_choice`, as every view checks it; the list reads those two rows
    alone and replays nothing)."""
    choice = followed_choice(summary.study, summary.decision, summary.named_state, summary.named_value)
    if choice is None or summary.named is None:
        return None
    static = summary.study.key.evaluator == "static"
    refuse = eligibility.study_refusal(summary.baseline, summary.study.key.objective, static)
    return None if unsound_choice(summary.study, summary.named, summary.baseline, refuse) else choice


def followed_choice(study: Study, decision: Any, state: TrialState | None, value: float | None) -> tuple[int, float] | None:
    """(trial number, value) of a run's recorded choice that every view shows as chosen: the trial
    it names is complete with the value the run recorded (`state`, `value`: that row now), and for
    several objectives the rule it chose by parses. A run row is as untrusted as a trial row: any
    other record is not followed, and the choice is replayed from the trials."""
    choice = recorded_choice(decision)
    if choice is None or state is not TrialState.COMPLETE or value != choice[1]:
        return None
    if multi_objective.is_multi(study.key.objective) and _valid_rule(study, decision.get("pick")) is None:
        return None
    return choice


def _explain(study: Study, trials: tuple[Trial, ...], pick: str) -> Explanation:
    baseline = trials[0] if trials else None
    if multi_objective.is_multi(study.key.objective) and baseline is not None:
        return _explain_front(study, trials, baseline, pick)
    winner = _search_winner(study, trials, baseline)
    if baseline is None or winner is None:
        return Explanation(study, trials, baseline, winner, None, None)
    chosen = winner
    if winner.config_key != baseline.config_key:
        exact = study.key.evaluator != "static"
        refuse = eligibility.study_refusal(baseline, study.key.objective, not exact)
        chosen = simplify(winner, recorded_space(baseline), recorded(trials), exact,
                          allowed=lambda t: refuse(t) is None).chosen
    return Explanation(study, trials, baseline, winner, chosen, ablation_path(baseline, chosen, recorded(trials)))


def _explain_front(study: Study, trials: tuple[Trial, ...], baseline: Trial, pick: str) -> Explanation:
    """The tuner's choice for several objectives: the pick on the front of the trials that may win,
    simplified (static: to no objective worse; with `time`: to the same machine code); no ablation
    path (a trade-off has no single gain)."""
    if baseline.state is not TrialState.COMPLETE:
        return Explanation(study, trials, baseline, None, None, None)
    objectives = multi_objective.objectives_of(study.key.objective)
    refuse = eligibility.study_refusal(baseline, study.key.objective, study.key.evaluator == "static")
    choice = multi_objective.choose(eligibility.search_results(trials, refuse, baseline.config), baseline, objectives, pick, refuse,
                                    "time" in objectives)
    winner = chosen = choice.chosen
    if winner.config_key != baseline.config_key:
        chosen = simplify(winner, recorded_space(baseline), recorded(trials), "time" in objectives,
                          allowed=lambda t: refuse(t) is None, no_worse=multi_objective.no_worse(objectives)).chosen
    return Explanation(study, trials, baseline, winner, chosen, None, with_chosen(choice.front, chosen))


def decision(result: Any) -> dict[str, Any]:
    """What a run records of its choice (`Store.finish_run`): the trial its ACF cites, and whether a
    confirmation (runtime measurements no trial row holds) decided it."""
    cited = (result.baseline, result.chosen)
    checked = sorted({t.number for t in cited if result.origins.get(t.id) in ("compiled", "verified")})
    replaced = sorted({t.number for t in cited if result.origins.get(t.id) == "replaced"})  # quarantined, rebuilt
    static = result.study.key.evaluator == "static"
    by = "confirmation" if result.confirmation is not None else "rules"
    picked = {"pick": result.front.rule} if getattr(result, "front", None) is not None else {}
    return {"chosen": result.chosen.number, "value": result.chosen.value, "by": by,
            "verified": checked if static else [], **({"replaced": replaced} if static and replaced else {}), **picked}


def recorded_pick(study: Study, runs: Sequence[RunRecord]) -> str:
    """The pick rule the study's latest deciding run chose its front's point by (what its ACF
    holds), so that every view shows that choice; "knee" (tune's default) when that run recorded
    no valid one. A run row is untrusted: a rule that does not parse for the study's objectives is
    not used."""
    run = latest_decision(runs)
    rule = run.decision.get("pick") if run is not None and run.decision is not None else None
    return _valid_rule(study, rule) or "knee"


def _valid_rule(study: Study, rule: Any) -> str | None:
    """`rule` when it is a pick rule for the study's objectives, else None."""
    if not isinstance(rule, str) or len(rule) > MAX_PICK_RULE:
        return None
    try:
        check_rule(rule, multi_objective.objectives_of(study.key.objective))
    except UsageError:
        return None
    return rule


def recorded_choice(decision: Any) -> tuple[int, float] | None:
    """(trial number, value) of a run's recorded choice, when the row holds both as it should (the
    study list reads them instead of every trial; a damaged or forged row is not shown as a choice)."""
    if not isinstance(decision, dict):
        return None
    number, value = decision.get("chosen"), decision.get("value")
    if type(number) is not int or not 0 <= number <= MAX_TRIAL_NUMBER:
        return None  # names no trial (a forged 10**23 overflowed every query of it)
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except OverflowError:  # an integer past a float's range (a forged 10**400)
        return None
    return (number, value) if math.isfinite(value) else None


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


def baseline_label(study: Study, baseline: Trial | None, origin: str | None = None) -> str:
    """How every view names the study's first trial: "baseline (defaults)" when it is the compiler
    defaults, else the build the project ships ("your build: compile_commands.json" where the run
    knows the file: then it is that build even where it sets no searched setting, its fixed flags
    such as nvcc's -maxrregcount being applied to it)."""
    if origin is None and (baseline is None or not _shipped_values(study, baseline)):
        return "baseline (defaults)"
    return f"baseline (your build: {origin})" if origin else "baseline (your build)"


def _shipped_values(study: Study, baseline: Trial) -> dict[str, Any]:
    """The baseline's compiler settings that are not the compiler's defaults (the study's space)."""
    version = study.key.space_id.removeprefix("nvcc-").partition("+")[0]
    try:
        defaults = load_space(version).default_config().as_dict()
    except SpaceError:  # a space this install does not have: no defaults to compare with
        return {}
    return {k: v for k, v in baseline.config.items() if k in defaults and defaults[k] != v}
