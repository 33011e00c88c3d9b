"""Local search around the incumbents: the searcher's exploitation on plateaus.

Compiler settings make plateaus: many configurations compile to the same code, so the best value
seen is shared by dozens of them, and a tree surrogate fitted on those ties predicts exactly the
incumbent's value with no spread there. Expected improvement is then zero on the whole plateau and
the batch goes exploring elsewhere, while the better configuration is often one setting away from
an incumbent (spmv_sell's register count: -O1 gives 24 registers, a cap of 24 with
--override-directive-values gives 24, both together give 22).

So one slot of each batch is a "polish" pick: among the untried configurations one setting away
from an incumbent (every configuration that shares the best value), the one the surrogate
predicts lowest; where it predicts a tie (the plateau), the one an additive model of the settings'
main effects predicts lowest. The additive model is what sees that two settings which each
reached the plateau on their own may do better together (TPE's independent densities see the
same thing; a tree ensemble, which predicts leaf means, never predicts below the best seen).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

MAIN_EFFECT_RIDGE = 1.0  # the additive model's ridge penalty (values are ranks in [0, 1.5])
MAX_INCUMBENTS = 32  # incumbents whose neighbourhoods are searched (a random few of more ties)
TIE = 1e-9  # surrogate means closer than this are a tie

Predict = Callable[[np.ndarray], np.ndarray]


def neighbours(rows: np.ndarray, cardinality: np.ndarray) -> np.ndarray:
    """Every distinct row one setting away from one of `rows` (rows of value indices), `rows`
    themselves included."""
    if not len(rows):
        return rows.reshape(0, len(cardinality))
    blocks = []
    for column, values in enumerate(cardinality.tolist()):
        block = np.repeat(rows, values, axis=0)
        block[:, column] = np.tile(np.arange(values, dtype=rows.dtype), len(rows))
        blocks.append(block)
    return np.unique(np.concatenate(blocks), axis=0)


def incumbents(
    rows: np.ndarray, values: Sequence[float | None], rng: np.random.Generator
) -> np.ndarray:
    """The rows that share the best value seen (at most MAX_INCUMBENTS of them, drawn at random)."""
    finite = [v for v in values if v is not None and np.isfinite(v)]
    if not finite:
        return rows[:0]
    best = min(finite)
    tied = np.flatnonzero([v is not None and v == best for v in values])
    if len(tied) > MAX_INCUMBENTS:
        tied = rng.choice(tied, size=MAX_INCUMBENTS, replace=False)
    return rows[tied]


def one_hot(rows: np.ndarray, cardinality: np.ndarray) -> np.ndarray:
    offsets = np.concatenate([[0], np.cumsum(cardinality)[:-1]])
    codes = np.zeros((len(rows), int(cardinality.sum())))
    for column, offset in enumerate(offsets.tolist()):
        codes[np.arange(len(rows)), offset + rows[:, column]] = 1.0
    return codes


def main_effects(rows: np.ndarray, values: Sequence[float], cardinality: np.ndarray) -> Predict:
    """A ridge regression of `values` on each setting's value (one-hot codes, no interactions):
    the additive model that predicts a combination of two good settings below either alone."""
    codes = one_hot(rows, cardinality)
    target = np.asarray(values, dtype=float)
    mean = float(target.mean()) if len(target) else 0.0
    gram = codes.T @ codes + MAIN_EFFECT_RIDGE * np.eye(codes.shape[1])
    weights = np.linalg.solve(gram, codes.T @ (target - mean))
    return lambda candidates: one_hot(candidates, cardinality) @ weights + mean


def polish(
    candidates: np.ndarray,
    surrogate_mean: Predict,
    main_effect: Predict,
    rng: np.random.Generator,
) -> int | None:
    """Index of the candidate to polish with: the lowest surrogate mean, ties broken by the
    additive model, then at random. None when there is no candidate."""
    if not len(candidates):
        return None
    mean = surrogate_mean(candidates)
    tied = np.flatnonzero(mean <= mean.min() + TIE)
    additive = main_effect(candidates[tied])
    lowest = tied[np.flatnonzero(additive <= additive.min() + TIE)]
    return int(rng.choice(lowest))
