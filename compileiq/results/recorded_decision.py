"""What a run records of its choice (`runs.decision`), and whether every view follows that record.

A run row is as untrusted as a trial row: its recorded choice is followed only when it names a
complete trial with the value it recorded (`followed_choice`), by a pick rule that parses for the
study's objectives, and the tuner could have chosen it (`unsound_choice`); `explain` replays the
study's rules otherwise. The study list checks the same record against the two rows it reads
(`listed_choice`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from compileiq.core.errors import UsageError
from compileiq.core.metric_ranges import MAX_PICK_RULE
from compileiq.core.records import (
    ACF_NOT_WRITTEN,
    RunRecord,
    Study,
    StudySummary,
    Trial,
    TrialState,
    chosen_number,
    first_line,
    latest_decision,
    unchosen,
)

__all__ = ["latest_decision"]  # the one rule (`records.latest_decision`), which every view reads through here
from compileiq.evaluate import eligibility
from compileiq.results import multi_objective
from compileiq.results.ablation import MAX_FORBIDDEN
from compileiq.results.pareto import check_rule


def decision(result: Any) -> dict[str, Any]:
    """What a run records of its choice (`Store.finish_run`): the trial its ACF cites, and whether a
    confirmation (runtime measurements no trial row holds) decided it."""
    cited = (result.baseline, result.chosen)
    checked = sorted({t.number for t in cited if result.origins.get(t.id) in ("compiled", "verified")})
    replaced = sorted({t.number for t in cited if result.origins.get(t.id) == "replaced"})  # quarantined, rebuilt
    static = result.study.key.evaluator == "static"
    by = "confirmation" if result.confirmation is not None else "rules"
    picked = {"pick": result.front.rule} if getattr(result, "front", None) is not None else {}
    # the configurations the ablation path met that tune.toml's restrictions forbid: the views' path skips them too
    forbidden = getattr(getattr(result, "ablation", None), "forbidden", ())
    # what each row held when this run checked it: a later edit of the row is no longer vouched for
    digests = {str(t.number): row_digest(t) for t in cited if t.number in (*checked, *replaced)} if static else {}
    return {"chosen": result.chosen.number, "value": result.chosen.value, "by": by,
            "verified": checked if static else [], **({"replaced": replaced} if static and replaced else {}), **picked,
            **({"forbidden": list(forbidden)} if forbidden else {}), **({"digests": digests} if digests else {})}


def row_digest(trial: Trial) -> str:
    """What a run records of a row it checked (`decision`): a digest of its result, metrics and code,
    which `explain` holds the row to before it says the run verified it."""
    held = [trial.config_key, trial.value, trial.metrics, trial.code_hash]
    return hashlib.sha256(json.dumps(held, sort_keys=True, default=repr).encode()).hexdigest()[:32]


def recorded_digest(run: RunRecord, number: int) -> str | None:
    """The digest `run` recorded of row `number` when it checked it; None where it recorded none (a
    run of a release before digests were recorded, or its digests removed since): the views then
    vouch for nothing on that run's word (`explain.Explanation.provenance`)."""
    digests = run.decision.get("digests") if isinstance(run.decision, dict) else None
    found = digests.get(str(number)) if isinstance(digests, dict) else None
    return found if isinstance(found, str) else None


def recorded_forbidden(run: RunRecord | None) -> tuple[str, ...]:
    """The macro settings (`ablation.macro_key`) a run recorded as forbidden by tune.toml's
    restrictions (`decision`); a row is untrusted: anything but a short list of strings is none
    (a forged one can only leave a configuration out of the views' ablation path)."""
    found = run.decision.get("forbidden") if run is not None and isinstance(run.decision, dict) else None
    if not isinstance(found, list) or len(found) > MAX_FORBIDDEN:
        return ()
    return tuple(k for k in found if isinstance(k, str) and len(k) <= 4096)


def unsimplified(simplify: bool) -> dict[str, Any]:
    """What a run records when it was told not to simplify (`--no-simplify`): its choice is the
    search's winner as searched, and every view replays it so (`recorded_simplify`)."""
    return {} if simplify else {"simplify": False}


def recorded_simplify(run: RunRecord | None) -> bool:
    """Whether the choice a run recorded was simplified (`unsimplified`): a replay of its rules
    simplifies the winner over the recorded results only then. A run row is untrusted: anything but
    `false` is the default (a forged one can only make the replay keep the search's winner as it is)."""
    found = run.decision.get("simplify") if run is not None and isinstance(run.decision, dict) else None
    return found is not False


def unwritten(run: RunRecord) -> str | None:
    """Why the run's ACF was not written (`Store.acf_not_written`: its write was refused after the
    run), else None. A run row is untrusted: only a string marks it, shown as one short line (a
    forged one can only make the views say the run's ACF was not written)."""
    found = run.decision.get(ACF_NOT_WRITTEN) if isinstance(run.decision, dict) else None
    return first_line(found, 300) if isinstance(found, str) else None


def recorded_pick(study: Study, runs: Sequence[RunRecord]) -> str:
    """The pick rule the study's latest deciding run chose its front's point by (what its ACF
    holds), so that every view shows that choice; "knee" (tune's default) when that run recorded
    no valid one. A run row is untrusted: a rule that does not parse for the study's objectives is
    not used."""
    run = latest_decision(runs)
    rule = run.decision.get("pick") if run is not None and run.decision is not None else None
    return _valid_rule(study, rule) or "knee"


def recorded_choice(decision: Any) -> tuple[int, float] | None:
    """(trial number, value) of a run's recorded choice, when the row holds both as it should (the
    study list reads them instead of every trial; a damaged or forged row is not shown as a choice,
    nor one that also says its run stopped before it chose: `explain` replays those)."""
    number = chosen_number(decision)
    if number is None or unchosen(decision) is not None:
        return None
    value = decision.get("value")
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except OverflowError:  # an integer past a float's range (a forged 10**400)
        return None
    return (number, value) if math.isfinite(value) else None


def changed_choice(run: RunRecord | None, trials: Sequence[Trial]) -> tuple[tuple[Trial, ...], tuple[str, ...]]:
    """The trials the views replay from, less the row of the run's recorded choice where that row
    now holds another value than the run recorded of it (for a static objective, one its rebuild
    verified), and the line every view prints for it. A forged chosen row is never shown as the
    choice's evidence: it is skipped like any untrusted row (nothing in the database changes; the
    next `tune` rebuilds and quarantines it). The study's first row is its baseline and is kept,
    said so."""
    choice = recorded_choice(run.decision) if run is not None else None
    found = next((t for t in trials if choice is not None and t.number == choice[0]), None)
    if (run is None or choice is None or found is None or found.state is not TrialState.COMPLETE
            or found.value is None or found.value == choice[1]):
        return tuple(trials), ()
    numbers = run.decision.get("verified") if isinstance(run.decision, dict) else None
    verified = isinstance(numbers, list) and any(type(n) is int and n == found.number for n in numbers)
    said = (f"its row holds {_number(found.value)}, not the {_number(choice[1])} run {run.id} recorded of its "
            f"choice{' and verified by a rebuild' if verified else ''} (the row changed since that run)")
    if found is trials[0]:
        kept = (f"trial #{found.number}, the study's baseline and run {run.id}'s recorded choice: {said}; kept as the "
                "baseline, replayed from its trials; re-tune to rebuild it")
        return tuple(trials), (kept,)
    skipped = (f"skipped trial #{found.number}, run {run.id}'s recorded choice: {said}; replayed from its trials "
               "without it; re-tune to rebuild it")
    return tuple(t for t in trials if t is not found), (skipped,)


def _number(value: float) -> str:
    """A value as short as it reads back the same (two values that differ never print alike)."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


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


def sound_choice(study: Study, trials: dict[int, Trial], baseline: Trial | None,
                 refuse: Callable[[Trial], str | None], run: RunRecord) -> Trial | str | None:
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


def _valid_rule(study: Study, rule: Any) -> str | None:
    """`rule` when it is a pick rule for the study's objectives, else None."""
    if not isinstance(rule, str) or len(rule) > MAX_PICK_RULE:
        return None
    try:
        check_rule(rule, multi_objective.objectives_of(study.key.objective))
    except UsageError:
        return None
    return rule
