"""Several objectives at once: `--objective registers,instructions` and the choice on its front.

The tuple is the study's objective (and so part of its identity). Each trial records the first
objective as its value (static objectives) or its measured time (`time`), and every trial
records all static metrics, so the front is computed from the recorded trials (`pareto.front`);
nothing else is stored.

The choice obeys the same no-harm rules as a single static objective (`eligibility`): a trial
that adds spills, lowers occupancy without a spill gain, or lowers ptxas's optimisation without
a spill or occupancy gain is left off the front it is chosen from; the defaults are always
eligible (on the front unless a trial dominates them). Pick rules (`pareto`): `knee` is the
front point nearest the ideal point (each objective at its best on the front) after scaling
every objective to [0, 1] over the front; `first` is the
best on the first objective (ties broken by the next); `weights=a:0.7,b:0.3` the smallest
weighted sum of those scaled values. Among trials with the picked values, the one with the
fewest settings changed from the defaults is chosen (the defaults first).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compileiq.core.errors import UsageError
from compileiq.core.records import Trial
from compileiq.results.pareto import (
    OBJECTIVES,
    Front,
    check_rule,
    front,
    parse_objectives,
    values_of,
)

MAX_OBJECTIVES = 3
PICK_RULES = ("knee: the front point nearest the ideal point (each objective at its best on the front) after scaling "
              "each objective to [0, 1] over the front; first: the best on the first objective; weights=a:W,b:W: the "
              "smallest weighted sum of the scaled values; among equal values the fewest changed settings")
Refusal = Callable[[Trial], str | None]


def parse(text: str) -> str:
    """The canonical objective text: one name as given, or a comma-separated tuple of 2-3 distinct
    objectives (spaces dropped); UsageError for a malformed tuple."""
    if "," not in text:
        return text
    names = tuple(n.strip() for n in text.split(","))
    unknown = [n for n in names if n not in OBJECTIVES]
    if unknown or len(set(names)) != len(names) or len(names) > MAX_OBJECTIVES:
        raise UsageError(f"--objective takes one objective or 2-{MAX_OBJECTIVES} distinct ones from "
                         f"{', '.join(OBJECTIVES)}, comma-separated (e.g. registers,instructions); got {text[:80]!r}")
    return ",".join(names)


def objectives_of(objective: str) -> tuple[str, ...]:
    return tuple(objective.split(","))


def is_multi(objective: str) -> bool:
    return "," in objective


def check_pick(rule: str, objective: str) -> None:
    if not is_multi(objective):
        raise UsageError("--pick applies to several objectives, e.g. --objective registers,instructions")
    check_rule(rule, objectives_of(objective))


def check_view_pick(study: str, objective: str, pareto: str | None, pick: str | None) -> None:
    """A view's `--pick` (show, report) applies to a front: `--pareto`'s, or a study of several
    objectives' own. Refused otherwise, as `tune` refuses it: ignored, any rule (even a misspelt
    one) read as accepted."""
    if pick is not None and pareto is None and not is_multi(objective):
        raise UsageError(f"--pick applies to several objectives: study {study} has one ({objective}); "
                         "or pick on the front of --pareto's, e.g. --pareto registers,instructions")


def view_objectives(study: str, objective: str, pareto: str | None, pick: str | None) -> tuple[str, ...] | None:
    """`--pareto`'s objectives (None without it), once the view's `--pick` is checked (`check_view_pick`)."""
    check_view_pick(study, objective, pareto, pick)
    return parse_objectives(pareto) if pareto else None


@dataclass(frozen=True)
class Choice:
    front: Front  # over the trials that may win (the baseline among them)
    chosen: Trial
    refused: tuple[Trial, ...]  # complete trials left off by the no-harm rules


def no_worse(objectives: Sequence[str]) -> Callable[[Trial, Trial], bool]:
    """(result, winner) -> whether the result is no worse than the winner on every objective: a
    static trade-off's simplification drops a setting that changes the code but none of the values."""
    def each(trial: Trial, reference: Trial) -> bool:
        mine, theirs = values_of(trial, objectives), values_of(reference, objectives)
        return mine is not None and theirs is not None and all(a <= b for a, b in zip(mine, theirs, strict=True))
    return each


def choose(trials: Sequence[Trial], baseline: Trial, objectives: Sequence[str], rule: str, refuse: Refusal,
           runtime: bool) -> Choice:
    """The front of the trials that may win and the trial the pick rule chooses on it."""
    allowed = [t for t in trials if refuse(t) is None]
    kept = {t.number for t in allowed}
    refused = tuple(t for t in trials if t.number not in kept and values_of(t, objectives) is not None)
    trade_offs = front(allowed, objectives, rule, runtime, baseline)  # equal values: the fewest changed settings
    return Choice(trade_offs, trade_offs.pick.trial if trade_offs.pick is not None else baseline, refused)
