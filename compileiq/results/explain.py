"""Why a study chose what it chose, from its recorded trials alone (nothing is built here).

The baseline is the study's first trial (the compiler defaults, or with --compile-commands the
build that ships; always claimed first); the winner is the best trial; the chosen config replays
the tuner's simplification over recorded results; the ablation path runs from the baseline to the
chosen config over recorded results.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from compileiq.core.errors import UsageError
from compileiq.core.metric_ranges import MAX_PICK_RULE
from compileiq.core.records import RunRecord, Study, Trial, TrialState
from compileiq.core.space import SearchSpace, SpaceError
from compileiq.core.space_files import load_space
from compileiq.evaluate import eligibility
from compileiq.results import multi_objective
from compileiq.results.ablation import Ablation, ablation_path, recorded
from compileiq.results.pareto import Front, check_rule, front, with_chosen
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
    decided_by: str = ""  # a runtime objective's: the run whose confirmation chose (else replayed)
    runs: tuple[RunRecord, ...] = ()  # the study's runs: who recorded and who verified which row

    def provenance(self, trial: Trial) -> str:
        """Whether this database vouches for the row: "verified by run N" (a run of this database
        built it again and agreed, or built it itself, before an ACF cited it), "recorded by run N"
        (its worker ran a tune here), else "not recorded by a run of this database" (`db import`,
        or written by something that never tuned here). Run rows are this database's own record."""
        verified_by, first_run_of = self._vouched
        if trial.number in verified_by:
            return f"verified by run {verified_by[trial.number]}"
        if trial.worker and trial.worker in first_run_of:
            return f"recorded by run {first_run_of[trial.worker]}"
        return "not recorded by a run of this database"

    @cached_property
    def _vouched(self) -> tuple[dict[int, int], dict[str, int]]:
        """(trial number -> the latest run that verified it, worker -> its first run), read once."""
        verified_by: dict[int, int] = {}
        first_run_of: dict[str, int] = {}
        for run in sorted(self.runs, key=lambda r: r.id):
            verified = run.decision.get("verified") if isinstance(run.decision, dict) else None
            if isinstance(verified, list):
                verified_by.update((n, run.id) for n in verified if type(n) is int)
            first_run_of.setdefault(run.worker, run.id)
        return verified_by, first_run_of

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
        return eligibility.study_refusal(self.baseline, self.study.key.objective, self.study.key.evaluator == "static")

    def ranked(self) -> list[Trial]:
        """The complete trials as every view lists them: the chosen one first, then those that may
        be chosen, then the refused ones, each group in `eligibility.rank` order."""
        base = self.baseline.config if self.baseline is not None else {}
        chosen = self.chosen.number if self.chosen is not None else None
        complete = [t for t in self.trials if t.state is TrialState.COMPLETE and t.value is not None]
        return sorted(complete, key=lambda t: (t.number != chosen, self.refusal(t) is not None,
                                               eligibility.rank(t, base)))

    def status(self, trial: Trial) -> str:
        """"chosen", "baseline", "may be chosen" or "refused: <why>": what every view says of a trial."""
        if self.chosen is not None and trial.number == self.chosen.number:
            return "chosen"
        if refused := self.refusal(trial):
            return f"refused: {refused}"
        if self.baseline is not None and trial.number == self.baseline.number:
            return "baseline"
        return "may be chosen"

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


def explain(study: Study, trials: Sequence[Trial], pick: str | None = None, runs: Sequence[RunRecord] = ()) -> Explanation:
    """The study's choice, as its tuner made it and its ACF holds it. `pick`: the rule that chooses
    on the front of a study of several objectives (None: the rule its latest run recorded); `runs`:
    the study's runs (`Store.runs`), whose recorded confirmation decides a runtime objective's
    choice (measurements the trials lack)."""
    rule = pick if pick is not None else recorded_pick(study, runs)
    return replace(_explain(study, tuple(trials), rule, tuple(runs)), runs=tuple(runs))


def _explain(study: Study, trials: tuple[Trial, ...], pick: str, runs: tuple[RunRecord, ...]) -> Explanation:
    baseline = trials[0] if trials else None
    if multi_objective.is_multi(study.key.objective) and baseline is not None:
        return _explain_front(study, trials, baseline, pick)
    winner = _search_winner(study, trials, baseline)
    if baseline is None or winner is None:
        return Explanation(study, trials, baseline, winner, None, None)
    if (confirmed := _confirmed(study, trials, runs)) is not None:
        chosen, run = confirmed
        return Explanation(study, trials, baseline, winner, chosen, ablation_path(baseline, chosen, recorded(trials)),
                           decided_by=f"the confirmation of run {run.id} ({run.worker})")
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
    by = "confirmation" if result.confirmation is not None else "rules"
    picked = {"pick": result.front.rule} if getattr(result, "front", None) is not None else {}
    return {"chosen": result.chosen.number, "value": result.chosen.value, "by": by,
            "verified": checked if result.study.key.evaluator == "static" else [], **picked}


def recorded_pick(study: Study, runs: Sequence[RunRecord]) -> str:
    """The pick rule the study's latest run chose its front's point by (what its ACF holds), so that
    every view shows that choice; "knee" (tune's default) when no run recorded a valid one. A run
    row is untrusted: a rule that does not parse for the study's objectives is not used."""
    for run in sorted(runs, key=lambda r: r.id, reverse=True):
        rule = run.decision.get("pick") if isinstance(run.decision, dict) else None
        if isinstance(rule, str):
            try:
                if len(rule) > MAX_PICK_RULE:
                    raise UsageError("a pick rule longer than any valid one")
                check_rule(rule, multi_objective.objectives_of(study.key.objective))
            except UsageError:
                return "knee"
            return rule
        if isinstance(run.decision, dict):
            break  # the latest run that decided, without a rule: before rules were recorded
    return "knee"


def recorded_choice(decision: Any) -> tuple[int, float] | None:
    """(trial number, value) of a run's recorded choice, when the row holds both as it should (the
    study list reads them instead of every trial; a damaged or forged row is not shown as a choice)."""
    if not isinstance(decision, dict):
        return None
    number, value = decision.get("chosen"), decision.get("value")
    if type(number) is not int or not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return (number, float(value)) if math.isfinite(value) else None


def _confirmed(study: Study, trials: tuple[Trial, ...], runs: Sequence[RunRecord]) -> tuple[Trial, RunRecord] | None:
    """The trial the latest run's confirmation chose, when it names a complete trial of the study.
    A run row is as untrusted as a trial row: anything else in it is ignored (the choice is replayed)."""
    if study.key.evaluator == "static":
        return None
    for run in sorted(runs, key=lambda r: r.id, reverse=True):
        decided = run.decision
        if not isinstance(decided, dict) or decided.get("by") != "confirmation":
            continue
        number = decided.get("chosen")
        found = next((t for t in trials if type(number) is int and t.number == number), None)
        if found is not None and found.state is TrialState.COMPLETE and found.value is not None:
            return found, run
        return None
    return None


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
