"""Trade-offs between objectives: the Pareto front of a study's recorded trials, and one pick.

Every complete trial records all static metrics, so the front of any objectives (lower is better
for each, occupancy as its shortfall) is read from the study without building anything. In a
runtime study "time" is the trial's measured value. The front is over what the search recorded:
a search aimed at one objective samples the front unevenly.

Pick rules: `first`: the best in the first objective, ties broken by the next; `knee`: the point
nearest the ideal (every objective at its best on the front) after scaling each objective to
[0, 1] over the front; `weights=w1,w2,...` (or `weights=name:w,name:w`, by objective name): the
lowest weighted sum of those scaled values. Among trials with equal values the front shows, and a
rule picks, one trial (`tie_break`): the recorded choice, else the fewest settings changed from
the baseline, then the earliest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from compileiq.core.errors import UsageError
from compileiq.core.records import Trial, TrialState
from compileiq.core.static_score import StaticMetrics
from compileiq.evaluate.metrics import objective_value

OBJECTIVES = ("spills", "registers", "occupancy", "instructions", "time")


@dataclass(frozen=True)
class FrontPoint:
    trial: Trial
    values: tuple[float, ...]  # one per objective, lower is better


@dataclass(frozen=True)
class Front:
    objectives: tuple[str, ...]
    points: tuple[FrontPoint, ...]  # non-dominated, sorted by the first objective
    others: tuple[FrontPoint, ...]  # the dominated complete trials
    pick: FrontPoint | None
    rule: str


def parse_objectives(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in OBJECTIVES]
    if unknown or len(names) < 2 or len(set(names)) != len(names):
        raise UsageError(f"--pareto takes two or more distinct objectives from {', '.join(OBJECTIVES)}, "
                         f"comma-separated (e.g. registers,instructions); got {text!r}")
    return names


def front(trials: Sequence[Trial], objectives: Sequence[str], rule: str = "knee", runtime: bool = False,
          baseline: Trial | None = None, chosen: Trial | None = None) -> Front:
    """The front of `objectives` over `trials` and the rule's pick; each value vector stands for its
    trials by one (`tie_break`: `chosen`, a view's recorded choice, else the fewest settings changed
    from `baseline`, then the earliest)."""
    if "time" in objectives and not runtime:
        raise UsageError("the time objective needs a runtime study (--objective time)")
    weights = _weights(rule, tuple(objectives))
    scored = [p for t in trials if (p := _point(t, objectives)) is not None]
    order = tie_break(baseline, chosen)
    kept: dict[tuple[float, ...], FrontPoint] = {}
    for p in sorted(scored, key=lambda p: (p.values, order(p.trial))):  # one trial per value vector
        kept.setdefault(p.values, p)
    points = [p for p in kept.values() if not any(dominates(q.values, p.values) for q in kept.values())]
    on_front = {p.trial.number for p in points}
    others = tuple(p for p in scored if p.trial.number not in on_front)
    return Front(tuple(objectives), tuple(points), others, _pick(points, rule, weights, order), rule)


def tie_break(baseline: Trial | None, chosen: Trial | None = None) -> Callable[[Trial], tuple[int, int, int]]:
    """The one order among trials of equal values (the pick rules' "among equal values the fewest
    changed settings"): the recorded choice first, then the fewest settings changed from the
    baseline's config (the baseline itself first), then the earliest. Every front and every pick
    breaks ties by it, so a view's front shows the trial the study chose, not an equal one."""
    base = baseline.config if baseline is not None else None

    def key(trial: Trial) -> tuple[int, int, int]:
        changed = sum(1 for k, v in trial.config.items() if base.get(k) != v) if base is not None else 0
        return int(chosen is None or trial.number != chosen.number), changed, trial.number
    return key


def with_chosen(trade_offs: Front, chosen: Trial | None) -> Front:
    """The front as the ACF and every view list it: the picked point is the chosen trial (the pick
    simplified), with the chosen trial's own values. The pick's unsimplified trial, or its values
    beside the chosen number, made the ACF's [[evidence.front]] contradict its [evidence.best]."""
    pick = trade_offs.pick
    if pick is None or chosen is None or chosen.number == pick.trial.number:
        return trade_offs
    shown = FrontPoint(chosen, values_of(chosen, trade_offs.objectives) or pick.values)
    points = tuple(shown if p is pick else p for p in trade_offs.points)
    return replace(trade_offs, points=points, pick=shown)


def with_pick(trade_offs: Front, chosen: Trial) -> Front:
    """The front with `chosen` (a run's recorded choice, which the rows may no longer give) as its
    picked point: its point on the front, else its own values beside the front (off it now)."""
    point = next((p for p in trade_offs.points if p.trial.number == chosen.number), None)
    if point is None and (values := values_of(chosen, trade_offs.objectives)) is not None:
        point = FrontPoint(chosen, values)
    return replace(trade_offs, pick=point)


def values_by_objective(objectives: Sequence[str], trial: Trial) -> tuple[float | None, ...]:
    """A trial's recorded (minimised) value of each objective: its value for one objective; with
    several, each read from its metrics (`values_of`); None where it has none."""
    if len(objectives) == 1:
        return (trial.value,)
    return values_of(trial, objectives) or (None,) * len(objectives)


def values_of(trial: Trial, objectives: Sequence[str]) -> tuple[float, ...] | None:
    """The trial's value per objective (lower is better), or None when it records no such result."""
    point = _point(trial, objectives)
    return point.values if point is not None else None


def _point(trial: Trial, objectives: Sequence[str]) -> FrontPoint | None:
    if trial.state is not TrialState.COMPLETE or trial.value is None:
        return None
    metrics = StaticMetrics.of(trial.metrics)
    if metrics is None:
        return None
    values = tuple(trial.value if name == "time" else objective_value(name, metrics) for name in objectives)
    return FrontPoint(trial, values)


def dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    """Whether `a` is no worse than `b` in every objective (lower is better) and better in one."""
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b


def check_rule(rule: str, objectives: Sequence[str]) -> None:
    """UsageError unless `rule` is a pick rule for these objectives."""
    _weights(rule, tuple(objectives))


def _weights(rule: str, objectives: tuple[str, ...]) -> tuple[float, ...]:
    count = len(objectives)
    if rule in ("knee", "first"):
        return (1.0,) * count
    name, _, text = rule.partition("=")
    parts = [part.strip() for part in text.split(",")]
    try:
        if all(":" in part for part in parts):  # weights=registers:0.7,instructions:0.3
            named = {key.strip(): float(w) for key, _, w in (part.partition(":") for part in parts)}
            weights = tuple(named[o] for o in objectives) if len(named) == len(parts) == count else ()
        else:
            weights = tuple(float(w) for w in parts)
    except (ValueError, KeyError):
        weights = ()
    if (name != "weights" or len(weights) != count or not all(math.isfinite(w) and w >= 0 for w in weights)
            or not any(weights)):
        plain = ",".join(f"W{i + 1}" for i in range(count))
        by_name = ",".join(f"{o}:W{i + 1}" for i, o in enumerate(objectives))
        raise UsageError(f"--pick must be knee, first or weights={plain} (or weights={by_name}; non-negative, "
                         f"one per objective); got {rule[:80]!r}")
    return weights


def _pick(points: Sequence[FrontPoint], rule: str, weights: tuple[float, ...],
          order: Callable[[Trial], tuple[int, int, int]]) -> FrontPoint | None:
    if not points:
        return None
    if rule == "first":
        return min(points, key=lambda p: (p.values, order(p.trial)))
    columns = list(zip(*(p.values for p in points), strict=True))
    low = [min(c) for c in columns]
    span = [(max(c) - min(c)) or 1.0 for c in columns]

    def scaled(p: FrontPoint) -> list[float]:
        return [(v - lo) / s for v, lo, s in zip(p.values, low, span, strict=True)]

    if rule == "knee":
        return min(points, key=lambda p: (sum(x * x for x in scaled(p)), order(p.trial)))
    return min(points, key=lambda p: (sum(w * x for w, x in zip(weights, scaled(p), strict=True)), order(p.trial)))
