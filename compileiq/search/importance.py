"""Which settings matter across the whole study: an ExtraTrees surrogate's impurity importance.

The only module that imports scikit-learn directly (it comes with scikit-optimize). Each
parameter is encoded by the index of its value among the values the study recorded; failed
trials are left out. A complement to the ablation path, not a replacement: it describes the
search's sample, interactions included, not one path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compileiq.core.records import Trial, TrialState

MIN_TRIALS = 8
METHOD = "impurity importance of an ExtraTrees surrogate (200 trees, seed 0) fitted on the complete trials"


@dataclass(frozen=True)
class Importance:
    setting: str
    share: float  # this parameter's share of the surrogate's total importance (sums to 1)


@dataclass(frozen=True)
class Importances:
    items: tuple[Importance, ...]  # largest first
    trials: int  # complete trials the surrogate was fitted on
    note: str  # why there is nothing to show, when items is empty


def surrogate_importance(trials: Sequence[Trial], value: Callable[[Trial], float | None] = lambda t: t.value,
                         what: str = "objective value") -> Importances:
    """`value`: what a trial scored (several objectives: one of them, `what` naming it)."""
    scored = [(t, v) for t in trials if t.state is TrialState.COMPLETE and (v := value(t)) is not None]
    complete = [t for t, _ in scored]
    names = sorted({name for t in complete for name in t.config})
    varying = [n for n in names if len({repr(t.config.get(n)) for t in complete}) > 1]
    if len(complete) < MIN_TRIALS:
        return Importances((), len(complete), f"needs at least {MIN_TRIALS} complete trials")
    values = [float(v) for _, v in scored]
    if not varying:
        return Importances((), len(complete), "no setting varies across the trials")
    if max(values) == min(values):
        return Importances((), len(complete), f"every trial has the same {what}")
    from sklearn.ensemble import ExtraTreesRegressor

    codes = {n: sorted({repr(t.config.get(n)) for t in complete}) for n in varying}
    rows = [[codes[n].index(repr(t.config.get(n))) for n in varying] for t in complete]
    model = ExtraTreesRegressor(n_estimators=200, random_state=0).fit(rows, values)
    shares = [float(s) for s in model.feature_importances_]
    items = sorted((Importance(n, s) for n, s in zip(varying, shares, strict=True)), key=lambda i: (-i.share, i.setting))
    return Importances(tuple(items), len(complete), "")
