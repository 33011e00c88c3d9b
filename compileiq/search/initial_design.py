"""The search's initial design: its first batches, before a surrogate is fitted.

Corners of a two-level orthogonal array over the ptxas-stage settings, the centre and a Latin
hypercube of middle values, then random picks over a few front-end settings; on a space of macros
alone (every configuration a front end of its own) the corners and middles are made over the
macros, and on a space mixing ptxas settings with more macro combinations than that spreads over,
each run of the ptxas design is paired with a front end of such a design over the front-end
settings. Why this shape: docs/architecture.md, "The initial design".
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from compileiq.search.encoding import Encoding, Row

CORNER_RUNS = 4  # of the first batch at extremes; the rest spread over middle values
DISCOURAGED_WEIGHT = 0.25  # a random pick's weight per discouraged setting it holds

Pick = Callable[[np.ndarray, np.ndarray, int, Callable[[np.ndarray], int]], list[int]]


class InitialDesign:
    """The first batches of one search. Shares the searcher's random generator (so that a seed
    gives one sequence of proposals) and its set of front-end settings compiled or planned."""

    def __init__(self, encoding: Encoding, rng: np.random.Generator, frontends: set[Row], initial_frontends: int) -> None:
        self._encoding = encoding
        self._rng = rng
        self._frontends = frontends  # the searcher's own set: read and added to here
        self._initial_count = initial_frontends
        self._initial_frontends: set[Row] = set()
        self._corners_done = False
        self._discouraged: list[tuple[int, int]] = []  # (column, value index): proposed later
        self._replacement: dict[int, np.ndarray] = {}  # column -> each value index's stand-in (`avoid`)
        self._planned: list[Row] = []  # a space with macros: the front ends of the first batch's runs

    def discourage(self, slots: list[tuple[int, int]]) -> None:
        """Propose these (column, value index) settings later: the corners and middles prefer runs
        without them, the random picks weigh them down."""
        self._discouraged = slots

    def avoid(self, slots: list[tuple[int, int]]) -> None:
        """Never put these (column, value index) settings in a corner or a middle run: each is
        replaced by its column's nearest other value (the higher of two), the rest of the run kept."""
        self._replacement = {}
        for column in sorted({column for column, _ in slots}):
            bad = {index for c, index in slots if c == column}
            size = int(self._encoding.cardinality[column])
            good = [index for index in range(size) if index not in bad]
            if good:
                self._replacement[column] = np.array([_nearest(good, index) for index in range(size)])

    def _replaced(self, row: np.ndarray) -> np.ndarray:
        for column, stand_in in self._replacement.items():
            row[column] = stand_in[row[column]]
        return row

    def _discouraged_in(self, rows: np.ndarray) -> np.ndarray:
        """Per row, how many discouraged settings it holds."""
        counts = np.zeros(len(rows), dtype=np.int64)
        for column, index in self._discouraged:
            counts += rows[:, column] == index
        return counts

    def _preferred(self, rows: np.ndarray, count: int) -> np.ndarray:
        """The first `count` rows, those with fewer discouraged settings first (stable)."""
        if not self._discouraged or not len(rows):
            return rows[:count]
        return rows[np.argsort(self._discouraged_in(rows), kind="stable")][:count]

    def rows(self, pool: np.ndarray, skip: set[Row], count: int, pick: Pick) -> np.ndarray:
        """Up to `count` rows of `pool` (allowed, untried): corners and middle values first (once),
        then random picks over a few front-end settings, chosen by `pick` (the searcher's batch
        choice, which charges a new front end its cost)."""
        if not self._corners_done and not self._ptxas_columns():
            return self._macro_design(pool, count)
        if not self._corners_done and self._encoding.has_macros and self._many_frontends(pool):
            self._planned = self._frontend_plan(pool, count)
            self._initial_frontends = self._frontends | set(self._planned)
        pool = self._initial_pool(pool)
        if self._corners_done:
            corners = pool[:0]
        else:
            corners = self._encoding.allowed(self._corners(pool, skip, min(count, CORNER_RUNS)))
            wanted = count - len(corners)
            middles = self._encoding.allowed(self._middles(  # more to choose from when some are discouraged
                pool, skip | {tuple(r) for r in corners.tolist()}, wanted * (2 if self._discouraged else 1)
            ))
            middles = self._preferred(middles, wanted)
            corners = np.concatenate([middles[:1], corners, middles[1:]])  # the centre first
        self._corners_done = True
        self._frontends.update(self._encoding.frontend(row) for row in corners)
        rest = self._encoding.without(pool, {tuple(row) for row in corners.tolist()})
        weights = DISCOURAGED_WEIGHT ** self._discouraged_in(rest).astype(float)
        random = pick(rest, weights, count - len(corners), lambda w: self._rng.choice(len(w), p=w))
        return np.concatenate([corners, rest[random]])

    def _ptxas_columns(self) -> list[int]:
        encoding = self._encoding
        return [j for j in range(len(encoding.cardinality)) if j not in encoding.frontend_columns]

    def _macro_design(self, pool: np.ndarray, count: int) -> np.ndarray:
        """The first batch of a space of macros alone, where every configuration is a front end of
        its own: the centre, corners of a two-level orthogonal array over every macro (half the
        batch) and a Latin hypercube of middle values, each the nearest allowed untried
        configuration (`pool`). Without it that batch held the 3 random front ends that
        `initial_frontends` allows; the recorded landscapes' optima often lie at a macro's extreme
        (the smallest tile, a resource limit), which random picks rarely reach (docs/benchmarks.md,
        (h6)). Settings other studies refused (`discourage`) are not consulted here."""
        encoding = self._encoding
        self._corners_done = True
        if not len(pool) or count < 1:
            return pool[:0]
        chosen: dict[Row, None] = {}
        signs = self._two_level_signs(len(encoding.cardinality))
        for run in self._rng.permutation(len(signs)):
            if len(chosen) >= count // 2:
                break
            self._add_nearest(pool, np.where(signs[run] > 0, encoding.extreme_high, encoding.extreme_low), chosen)
        corners = list(chosen)
        middles: dict[Row, None] = {}
        for level in self._hypercube(count - len(corners), encoding.extreme_low, encoding.extreme_high):
            self._add_nearest(pool, level, middles)
        order = list(dict.fromkeys([*list(middles)[:1], *corners, *list(middles)[1:]]))  # the centre first
        rows = np.array(order, dtype=pool.dtype).reshape(-1, pool.shape[1])
        self._initial_frontends = self._frontends | {encoding.frontend(row) for row in order}
        return rows

    def _add_nearest(self, pool: np.ndarray, target: np.ndarray, into: dict[Row, None]) -> None:
        """Add to `into` the row of `pool` nearest `target` (value indices, each parameter's range
        scaled to 1) that it does not hold yet; ties broken at random."""
        scale = np.maximum(self._encoding.cardinality - 1, 1)
        distance = (np.abs(pool - target) / scale).sum(axis=1) + 1e-9 * self._rng.random(len(pool))
        for index in np.argsort(distance):
            key = tuple(pool[index].tolist())
            if key not in into:
                into[key] = None
                return

    def _two_level_signs(self, columns: int) -> np.ndarray:
        """Runs (rows) of a two-level orthogonal array over `columns` parameters, as +1/-1, its
        columns drawn at random from a Hadamard matrix's and flipped at random."""
        runs = 8
        while runs - 1 < columns:
            runs *= 2
        signs = _hadamard(runs)[:, 1 + self._rng.permutation(runs - 1)[:columns]]
        return signs * self._rng.choice([-1, 1], size=columns)

    def _hypercube(self, count: int, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        """`count` rows of value indices: the centre (every parameter at its middle value), then a
        Latin hypercube (each parameter's range cut into `count` strata, one value from each,
        shuffled per parameter)."""
        if count < 1:
            return np.zeros((0, len(low)))
        strata = np.stack([self._rng.permutation(count) for _ in low], axis=1)
        levels = low + np.floor((strata + self._rng.random(strata.shape)) * (high - low + 1) / count)
        levels[0] = np.floor(low + (high - low + self._rng.random(len(low))) / 2)
        return np.minimum(levels, high)

    def _corners(self, pool: np.ndarray, skip: set[Row], count: int) -> np.ndarray:
        """Runs of a two-level orthogonal array over the ptxas-stage parameters, each at its
        lowest or highest value: every pair of parameters is seen at all four combinations of
        extremes (the highest register cap with and without --override-directive-values, say),
        where strong compiler effects and two-option interactions usually lie."""
        encoding = self._encoding
        columns = self._ptxas_columns()
        if not columns or not len(pool) or count < 1:
            return pool[:0]
        signs = self._two_level_signs(len(columns))
        runs = len(signs)
        frontends = np.unique(pool[:, encoding.frontend_columns], axis=0)
        low, high = encoding.extreme_low[columns], encoding.extreme_high[columns]
        rows: dict[Row, None] = {}
        order = self._rng.permutation(runs)
        if self._discouraged:  # runs without discouraged extremes first (front-end columns are set below)
            extremes = np.zeros((runs, pool.shape[1]), dtype=pool.dtype)
            extremes[:, columns] = np.where(signs > 0, high, low)
            extremes[:, encoding.frontend_columns] = -1
            order = order[np.argsort(self._discouraged_in(extremes[order]), kind="stable")]
        for number, run in enumerate(order[:count]):
            row = np.empty(pool.shape[1], dtype=pool.dtype)  # every column is set below
            row[columns] = np.where(signs[run] > 0, high, low)
            row[encoding.frontend_columns] = (
                self._planned_frontend(1 + number) if self._planned else frontends[self._rng.integers(len(frontends))]
            )
            row = self._replaced(row)
            if tuple(row.tolist()) not in skip:
                rows[tuple(row.tolist())] = None
        return np.array(list(rows), dtype=pool.dtype).reshape(-1, pool.shape[1])

    def _middles(self, pool: np.ndarray, skip: set[Row], count: int) -> np.ndarray:
        """The centre of the space (every parameter at its middle value, the front-end setting
        nearest the middle), then a Latin hypercube over the value indices: each parameter's
        range cut into `count` strata, one value from each, shuffled per parameter. The batch
        holds middle values (ptxas -O1, a mid register cap) that the corners never try."""
        encoding = self._encoding
        columns = self._ptxas_columns()
        if count < 1 or not len(pool) or not columns:
            return pool[:0]
        frontends = np.unique(pool[:, encoding.frontend_columns], axis=0)
        middle = (encoding.cardinality[encoding.frontend_columns] - 1) / 2
        central = int(np.argmin(np.abs(frontends - middle).sum(axis=1)))
        rows: dict[Row, None] = {}
        low, high = encoding.extreme_low[columns], encoding.extreme_high[columns]
        for _ in range(4):  # a few tries to replace rows that were seen already
            levels = self._hypercube(count, low, high)
            for run in range(count):
                row = np.empty(pool.shape[1], dtype=pool.dtype)
                row[columns] = levels[run]
                if self._planned:
                    row[encoding.frontend_columns] = self._planned_frontend(0 if run == 0 else CORNER_RUNS + run)
                else:
                    pick = central if run == 0 else self._rng.integers(len(frontends))
                    row[encoding.frontend_columns] = frontends[pick]
                key = tuple(self._replaced(row).tolist())
                if key not in skip and len(rows) < count:
                    rows[key] = None
            if len(rows) >= count:
                break
        return np.array(list(rows), dtype=pool.dtype).reshape(-1, pool.shape[1])

    def _many_frontends(self, pool: np.ndarray) -> bool:
        """More front ends than the default and `initial_frontends` others; with fewer the design
        spreads over every one already. (With the plan on those too, the bundled kernels' 2-4
        macro combinations, bsr_spmm `static` went 9 -> 33 evaluations: docs/benchmarks.md, (b2).)"""
        fresh = {tuple(r) for r in pool[:, self._encoding.frontend_columns].tolist()} - self._frontends
        return len(fresh) > self._initial_count

    def _planned_frontend(self, index: int) -> Row:
        return self._planned[index % len(self._planned)]

    def _frontend_plan(self, pool: np.ndarray, count: int) -> list[Row]:
        """The front ends of the first batch's runs on a space with macros, in its order: the
        middle run nearest the centre, CORNER_RUNS corners of a two-level orthogonal array over
        the front-end parameters (each at its smallest or largest value: a macro's by size, not
        as listed), the other middles (a Latin hypercube over the values between), each the
        nearest front end of `pool` (allowed, untried) not planned yet, the nearest of all once
        every one is. The ptxas design keeps its runs; its centre is paired with the first, the
        others with the rest at random. Before, the batch spread over the default front end and
        `initial_frontends` (3) random others, and the model's cost of a new front end kept later
        batches on them: on a user's 27 block-size combinations the search built 4 in 48 trials
        where random search built 22 (docs/benchmarks.md, (b2))."""
        encoding = self._encoding
        columns = encoding.frontend_columns
        frontends = np.unique(pool[:, columns], axis=0)
        ranks = np.stack([encoding.ranks[c][frontends[:, j]] for j, c in enumerate(columns)], axis=1)
        top = (encoding.cardinality[columns] - 1).astype(float)
        macro = np.array([encoding.is_macro[c] for c in columns], dtype=bool)
        # nvcc flags beside the macros break ties only: the runs spread over the macros' values first
        scale = np.maximum(top, 1.0) / np.where(macro, 1.0, 1e-3)
        macros = [tuple(r) for r in frontends[:, macro].tolist()]
        planned: list[Row] = []

        def nearest(target: np.ndarray) -> None:
            distance = (np.abs(ranks - target) / scale).sum(axis=1) + 1e-9 * self._rng.random(len(ranks))
            order = np.argsort(distance)
            seen = {macros[i] for i in range(len(frontends)) if tuple(frontends[i].tolist()) in planned}
            fresh = [i for i in order if macros[i] not in seen] or [
                i for i in order if tuple(frontends[i].tolist()) not in planned] or [int(order[0])]
            planned.append(tuple(frontends[fresh[0]].tolist()))

        # middles: a Latin hypercube over the values the corners leave out (a macro's interior),
        # the run nearest the centre first: 8 runs hold each of 6 listed values of a macro
        runs = max(count - CORNER_RUNS, 1)
        low, high = np.where(top > 1, 1.0, 0.0), np.where(top > 1, top - 1, top)
        strata = np.stack([self._rng.permutation(runs) for _ in columns], axis=1)
        levels = np.minimum(low + np.floor((strata + self._rng.random(strata.shape)) * (high - low + 1) / runs), high)
        levels = levels[np.argsort((np.abs(levels - top / 2) / scale).sum(axis=1), kind="stable")]
        nearest(levels[0])
        signs = np.unique(self._two_level_signs(len(columns)), axis=0)
        for run in np.resize(self._rng.permutation(len(signs)), CORNER_RUNS):
            nearest(np.where(signs[run] > 0, top, 0.0))
        for level in levels[1:]:
            nearest(level)
        # the centre with the ptxas centre, the rest at random: with each ptxas corner tied to
        # macro extremes, no corner met a middle macro (on (b): attention `static` 41 -> 65)
        return planned[:1] + [planned[1 + i] for i in self._rng.permutation(len(planned) - 1)]

    def _initial_pool(self, pool: np.ndarray) -> np.ndarray:
        """The initial design spreads over a few front-end settings only (each costs an nvcc run):
        enough variety for the model to learn their effect, few enough to stay cheap."""
        if not len(pool):
            return pool
        frontends = [tuple(r) for r in pool[:, self._encoding.frontend_columns].tolist()]
        if not self._initial_frontends:
            fresh = sorted(set(frontends) - self._frontends)
            picks = self._rng.permutation(len(fresh))[: self._initial_count]
            self._initial_frontends = self._frontends | {fresh[i] for i in picks}
        keep = np.array([f in self._initial_frontends for f in frontends], dtype=bool)
        return pool[keep] if keep.any() else pool


def _nearest(good: list[int], index: int) -> int:
    """The value index of `good` nearest `index`, the higher of two."""
    return min(good, key=lambda g: (abs(g - index), -g))


def _hadamard(order: int) -> np.ndarray:
    """A Sylvester Hadamard matrix (order a power of two): its columns but the first are the
    two-level orthogonal array of `order` runs."""
    matrix = np.ones((1, 1), dtype=int)
    while len(matrix) < order:
        matrix = np.block([[matrix, matrix], [matrix, -matrix]])
    return matrix
