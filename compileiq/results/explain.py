"""Why a study chose what it chose, from its recorded trials alone (nothing is built here).

The baseline is the study's first trial (the compiler defaults, or with --compile-commands the
build that ships; always claimed first); the winner is the best trial; the chosen config replays
the tuner's simplification over recorded results; the ablation path runs from the baseline to the
chosen config over recorded results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compileiq.core.records import Study, Trial, TrialState
from compileiq.core.space import SearchSpace, SpaceError, load_space
from compileiq.evaluate import eligibility
from compileiq.results import multi_objective
from compileiq.results.ablation import Ablation, ablation_path, recorded
from compileiq.results.pareto import Front
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

    @property
    def runtime(self) -> bool:
        return "time" in multi_objective.objectives_of(self.study.key.objective)

    @property
    def to_time(self) -> tuple[Trial, ...]:
        """Trials the static rules refused only for a trade-off a GPU must judge (`eligibility`)."""
        if self.study.key.evaluator != "static" or self.baseline is None or self.chosen is None:
            return ()
        return eligibility.candidates_to_time(self.trials, self.chosen, self.baseline, self.study.key.objective)


def explain(study: Study, trials: Sequence[Trial], pick: str = "knee") -> Explanation:
    """`pick`: the rule that chooses on the front of a study of several objectives."""
    trials = tuple(trials)
    baseline = trials[0] if trials else None
    if multi_objective.is_multi(study.key.objective) and baseline is not None:
        return _explain_front(study, trials, baseline, pick)
    winner = _search_winner(study, trials, baseline)
    if baseline is None or winner is None:
        return Explanation(study, trials, baseline, winner, None, None)
    chosen = winner
    if winner.config_key != baseline.config_key:
        exact = study.key.evaluator != "static"
        chosen = simplify(winner, recorded_space(baseline), recorded(trials), exact).chosen
    return Explanation(study, trials, baseline, winner, chosen, ablation_path(baseline, chosen, recorded(trials)))


def _explain_front(study: Study, trials: tuple[Trial, ...], baseline: Trial, pick: str) -> Explanation:
    """The tuner's choice for several objectives: the pick on the front of the trials that may win,
    simplified to the same machine code; no ablation path (a trade-off has no single gain)."""
    if baseline.state is not TrialState.COMPLETE:
        return Explanation(study, trials, baseline, None, None, None)
    objectives = multi_objective.objectives_of(study.key.objective)
    refuse = eligibility.study_refusal(baseline, study.key.objective, study.key.evaluator == "static")
    choice = multi_objective.choose(trials, baseline, objectives, pick, refuse, "time" in objectives)
    winner = chosen = choice.chosen
    if winner.config_key != baseline.config_key:
        chosen = simplify(winner, recorded_space(baseline), recorded(trials), True).chosen
    return Explanation(study, trials, baseline, winner, chosen, None, choice.front)


def _search_winner(study: Study, trials: Sequence[Trial], baseline: Trial | None) -> Trial | None:
    """The tuner's own rule (`eligibility.choose`): for a static objective only trials that may win,
    strictly better than the baseline, the fewest changed settings among equals."""
    if baseline is None or baseline.state is not TrialState.COMPLETE:
        return best(trials)
    refuse = eligibility.study_refusal(baseline, study.key.objective, study.key.evaluator == "static")
    return eligibility.choose(trials, baseline, refuse)


def best(trials: Sequence[Trial]) -> Trial | None:
    complete = [t for t in trials if t.state is TrialState.COMPLETE and t.value is not None]
    return min(complete, key=lambda t: (t.value, t.number), default=None)


def changed_settings(trial: Trial, baseline: Trial | None) -> dict[str, Any]:
    """The trial's settings that differ from the baseline's, plus its macros (always shown)."""
    base = baseline.config if baseline else {}
    return {k: v for k, v in sorted(trial.config.items()) if k.startswith("define.") or base.get(k) != v}


def recorded_space(baseline: Trial) -> SearchSpace:
    """A stand-in space whose defaults are the baseline's values (all the simplification reads)."""
    return baseline_space(baseline.config)


def baseline_label(study: Study, baseline: Trial | None, origin: str | None = None) -> str:
    """How every view names the study's first trial: "baseline (defaults)" when it is the compiler
    defaults, else the build the project ships ("your build: compile_commands.json" where the run
    knows the file)."""
    if baseline is None or not _shipped_values(study, baseline):
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
