"""The Bayesian search's surrogate: scikit-optimize's space and tree ensembles, fitted once per
batch, and expected improvement read from them. The one importer of scikit-optimize (and of
scikit-learn's `clone`); the searcher (`searcher`) decides what to ask with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.tree import DecisionTreeRegressor, ExtraTreeRegressor
from skopt import Optimizer
from skopt.acquisition import gaussian_ei
from skopt.learning import ExtraTreesRegressor, RandomForestRegressor
from skopt.space import Integer

from compileiq.core.space import Parameter, SearchSpace
from compileiq.search.settings import SearchSettings


def new_optimizer(space: SearchSpace, settings: SearchSettings) -> Optimizer:
    """skopt's optimizer over the space (every parameter an ordinal), with the configured surrogate."""
    dimensions = [_dimension(p) for p in space.parameters]
    return Optimizer(
        dimensions,
        base_estimator=_estimator(settings),
        n_initial_points=1,
        acq_func="EI",
        acq_optimizer="sampling",
        acq_optimizer_kwargs={"n_points": 64},
        random_state=settings.seed,
    )


def fresh_model(optimizer: Optimizer) -> Any:
    """An unfitted copy of the optimizer's surrogate (a refit starts from it); a tree ensemble's
    trees made by `_QuickClone` (the same trees, fitted from the same random draws)."""
    model = clone(optimizer.base_estimator_)
    quick = _QUICK_TREES.get(type(getattr(model, "estimator", None)))
    if quick is not None:
        model.estimator = quick()
    return model


def features_of(optimizer: Optimizer) -> Callable[[Any], Any]:
    """skopt's point -> model-feature transform; for tree surrogates every dimension is the
    identity, and skopt's column-by-column Python transform cost more than the prediction."""
    space = optimizer.space
    if all(dimension.transform_ == "identity" for dimension in space.dimensions):
        return lambda points: np.asarray(points, dtype=float)
    return space.transform


def predictor(model: Any) -> Any:
    """What predicts with a fitted surrogate: a tree ensemble read in one pass (`OnePassForest`)."""
    return OnePassForest(model) if hasattr(model, "estimators_") else model


def expected_improvement(features: Any, model: Any, best: float, exploration: float) -> np.ndarray:
    """skopt's EI of each row of `features` under the fitted `model` (minimising; `best`: the incumbent)."""
    return np.asarray(gaussian_ei(features, predictor(model), y_opt=best, xi=exploration), dtype=float)


class OnePassForest:
    """A fitted skopt tree ensemble's mean and spread from one walk over each tree.

    The same numbers as the forest's own `predict(X, return_std=True)` (E[Var(y | tree)] +
    Var(E[y | tree]), each leaf's variance floored at `min_variance`), which walks every tree
    three times: a third of the acquisition's cost at a batch's ask.
    """

    def __init__(self, forest: Any) -> None:
        self._forest = forest

    def predict(self, features: Any, return_std: bool = False) -> Any:
        points = np.asarray(features, dtype=np.float32)
        trees = self._forest.estimators_
        means = np.empty((len(trees), len(points)))
        variances = np.empty_like(means)
        features = np.ascontiguousarray(points, dtype=np.float32)  # as each tree's own check makes it
        for index, tree in enumerate(trees):
            leaves = tree.tree_.apply(features)  # the tree itself: its per-call checks cost as much
            means[index] = tree.tree_.value[leaves, 0, 0]
            variances[index] = tree.tree_.impurity[leaves]
        mean = means.mean(axis=0)
        if not return_std:
            return mean
        spread = (np.maximum(variances, self._forest.min_variance) + means**2).mean(
            axis=0
        ) - mean**2
        return mean, np.sqrt(np.maximum(spread, 0.0))


class _QuickClone:
    """A tree that scikit-learn's forests copy without reading its constructor's signature again.

    A forest's fit clones its prototype tree once per tree and reads every tree's parameters twice
    more (to set them and to seed it), each through `inspect.signature`: a third of a refit's CPU
    on 2 cores. The parameter names are the class's own, read once here; a clone is the class
    built from the same parameters, as scikit-learn's own clone builds it. Same fit code, same
    parameters, same random draws: the same trees (test_surrogate holds it).
    """

    _param_names: list[str] | None = None  # each subclass's own, read at its first clone

    @classmethod
    def _get_param_names(cls) -> list[str]:
        names: list[str] | None = cls.__dict__.get("_param_names")
        if names is None:
            names = cls._param_names = super()._get_param_names()  # type: ignore[misc]
        return list(names)

    def __sklearn_clone__(self) -> Any:
        return type(self)(**self.get_params(deep=False))  # type: ignore[attr-defined]


class _QuickExtraTree(_QuickClone, ExtraTreeRegressor):
    """`ExtraTreeRegressor`, cloned quickly."""


class _QuickTree(_QuickClone, DecisionTreeRegressor):
    """`DecisionTreeRegressor`, cloned quickly."""


_QUICK_TREES: dict[type, type] = {ExtraTreeRegressor: _QuickExtraTree, DecisionTreeRegressor: _QuickTree}


def _dimension(parameter: Parameter) -> Integer:
    """Every parameter as an ordinal: int values as they are, choices by their listed order.

    Choice lists are ordered (default first, then rising caps or levels), so tree surrogates
    can split on order; one-hot codes would hide that a cap of 64 lies between 48 and 80.
    """
    low, high = (int(min(parameter.values)), int(max(parameter.values))) if parameter.kind == "int" else (  # type: ignore[arg-type]
        0, len(parameter.values) - 1)
    return Integer(low, max(high, low + 1), name=parameter.name)  # one value (a macro held fixed): skopt needs two


def _estimator(settings: SearchSettings) -> Any:
    """Tree ensembles sized for a refit per batch in well under a second (skopt's own use 100 trees)."""
    forest = {"ET": ExtraTreesRegressor, "RF": RandomForestRegressor}.get(settings.surrogate)
    if forest is None:
        return settings.surrogate
    return forest(
        n_estimators=settings.trees,
        min_samples_leaf=settings.min_samples_leaf,
        random_state=settings.seed,
    )

