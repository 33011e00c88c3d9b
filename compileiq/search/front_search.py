"""A search aimed at the Pareto front of several objectives: ParEGO inside the `Searcher`.

Each batch member gets its own scalarisation of the objectives, the augmented Chebyshev function
of ParEGO (Knowles 2006), over objectives scaled to [0, 1] by the range seen so far:

    f(x) = max_i(w_i * z_i(x)) + 0.05 * sum_i(w_i * z_i(x))

with weights w drawn uniformly from the simplex; the surrogate is refitted on f and the member
is the expected-improvement pick of the single-objective searcher (cost-aware, distinct from
the members before it). One member per batch takes a weight vector all but on one objective
(rotating through the objectives), so that the front's ends, which `first` picks and the scaling
spans, are searched for on purpose and not only when a random weight happens to lean that way.

Why this and not ranking by non-domination: ranks put every front point at the same value, so the
surrogate cannot tell which part of the front still has room (the gaps and the ends), and the
expected improvement of a rank is flat along the whole front; a fixed weighted sum finds one
point only, and never the concave parts of the front. Random Chebyshev weights reach every part
of the front, concave or not, and keep the single-objective machinery (initial design, tree
surrogate, expected improvement, front-end compile cost) unchanged. Failed trials and trials
that may not win (`eligibility`) are worse than any scalarised value, as in single-objective
search.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compileiq.core.space import Config, SearchSpace
from compileiq.search.searcher import Observation, Searcher, SearchSettings

AUGMENT = 0.05  # ParEGO's rho
AXIS_LEAN = 0.98  # an end-of-front member's weight on its objective


def chebyshev(vectors: Sequence[tuple[float, ...] | None], weights: Sequence[float]) -> list[float | None]:
    """Augmented Chebyshev values of the vectors, each objective scaled to [0, 1] over them."""
    finite = [v for v in vectors if v is not None]
    if not finite:
        return [None] * len(vectors)
    columns = list(zip(*finite, strict=True))
    low = [min(c) for c in columns]
    span = [(max(c) - min(c)) or 1.0 for c in columns]
    values: list[float | None] = []
    for vector in vectors:
        if vector is None:
            values.append(None)
            continue
        terms = [w * (x - lo) / s for w, x, lo, s in zip(weights, vector, low, span, strict=True)]
        values.append(max(terms) + AUGMENT * sum(terms))
    return values


class FrontSearcher(Searcher):
    """Proposes batches aimed at the front of `objectives` objectives (see the module's docstring).

    Observations carry one value per objective in `values` (`value` None: failed or may not win).
    Random and exhaustive search are unchanged: they are the yardsticks."""

    def __init__(self, space: SearchSpace, settings: SearchSettings, objectives: int) -> None:
        super().__init__(space, settings)
        self._objectives = objectives
        self._initial = settings.initial_points
        self._weights_rng = np.random.default_rng([settings.seed, objectives])
        self._keys: set[str] = set()
        self._vectors: list[tuple[float, ...] | None] = []
        self._batches = 0

    def tell(self, observations: Sequence[Observation], fit: bool = True) -> None:
        for observation in observations:
            if observation.config.key in self._keys:
                continue
            self._keys.add(observation.config.key)
            usable = observation.value is not None and len(observation.values) == self._objectives
            self._vectors.append(tuple(observation.values) if usable else None)
        super().tell(observations, fit)

    def ask(self, count: int, exclude: Sequence[str] = ()) -> list[Config]:
        in_step = len(self._vectors) == self.observations  # a config told twice under two keys: plain search
        if not self._bayes or self.observations < self._initial or not in_step:
            return super().ask(count, exclude)
        chosen: list[Config] = []
        taken = list(exclude)
        for member in range(count):
            self.refit(chebyshev(self._vectors, self.weights(member)))
            found = super().ask(1, exclude=taken)
            if not found:
                break
            chosen += found
            taken.append(found[0].key)
        self._batches += 1
        return chosen

    def weights(self, member: int) -> tuple[float, ...]:
        """The batch member's weight vector: the first leans on one objective (rotating per batch),
        the rest are uniform on the simplex."""
        k = self._objectives
        if member == 0:
            axis = self._batches % k
            rest = (1.0 - AXIS_LEAN) / (k - 1)
            return tuple(AXIS_LEAN if i == axis else rest for i in range(k))
        return tuple(float(w) for w in self._weights_rng.dirichlet(np.ones(k)))
