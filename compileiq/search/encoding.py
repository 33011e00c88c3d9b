"""Configurations as rows of value indices: candidate pools as numpy arrays, not Python objects.

A batch ask scores thousands of candidates; building a `Config` (a sorted tuple and a JSON key)
for each cost more than the surrogate itself. Rows are built, filtered and scored as arrays, and
only the chosen few become `Config`s.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from functools import cached_property
from typing import Any

import numpy as np

from compileiq.core import implied
from compileiq.core.space import Config, Parameter, SearchSpace, Value

Row = tuple[int, ...]


def _slot(value: Any) -> tuple[str, Any]:
    return type(value).__name__, value  # True and 1 are different settings


def _coordinates(kind: str, values: tuple[Value, ...]) -> np.ndarray:
    """Each value index's coordinate for the surrogate: an int parameter's own value; a choice
    of numbers (a macro's tile sizes, listed default first) its rank by size, so that a split
    between small and large means one; any other choice its listed index (ordered already:
    "default", then rising caps or levels)."""
    if kind == "int":
        return np.array([int(v) for v in values], dtype=np.int64)  # type: ignore[call-overload]
    if values and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        order = sorted(range(len(values)), key=lambda i: values[i])  # type: ignore[arg-type,return-value]
        ranks = np.empty(len(values), dtype=np.int64)
        ranks[order] = np.arange(len(values))
        return ranks
    return np.arange(len(values), dtype=np.int64)


class Encoding:
    """Maps the configurations of one search space to index rows and back."""

    def __init__(self, space: SearchSpace) -> None:
        self._space = space
        self._parameters = space.parameters
        read = space.restriction.names if space.restriction is not None else frozenset()
        self._restricted = [i for i, p in enumerate(space.parameters) if p.name in read]
        self._verdicts: dict[Row, bool] = {}  # per value indices of the restricted columns
        self._key_rows: dict[str, Row | None] = {}  # configuration keys read (rows_of_keys)
        self._slots = [{_slot(v): i for i, v in enumerate(p.values)} for p in space.parameters]
        self.cardinality = np.array([len(p.values) for p in space.parameters], dtype=np.int64)
        self._coordinates = [_coordinates(p.kind, p.values) for p in space.parameters]
        self.frontend_columns = [i for i, p in enumerate(space.parameters) if p.stage == "frontend"]
        self.is_macro = [p.name.startswith("define.") for p in space.parameters]  # tune.toml's [tune.defines]
        self.has_macros = any(self.is_macro)
        # Each value index's rank in its parameter's order (a macro's by size, see `_coordinates`).
        self.ranks = [np.argsort(np.argsort(c, kind="stable"), kind="stable") for c in self._coordinates]
        # Each parameter's extreme values, as value indices (a choice's "default", unset, is none).
        self.extreme_low = np.array(
            [1 if p.values[0] == "default" and len(p.values) > 2 else 0 for p in space.parameters]
        )
        self.extreme_high = self.cardinality - 1
        # (setting's column, its "on" index, other's column, the implied value's index, the default's):
        # rows with both build what the row with the default builds (`implied.twins`)
        columns = {p.name: c for c, p in enumerate(space.parameters)}
        self._twins = [(columns[on], self._slots[columns[on]][_slot(True)], columns[name],
                        self._slots[columns[name]][_slot(value)],
                        self._slots[columns[name]][_slot(space.parameters[columns[name]].default)])
                       for on, name, value in implied.twins(space)]

    def row(self, config: Config | dict[str, Value]) -> Row:
        values = config.as_dict() if isinstance(config, Config) else config
        return tuple(
            slots[_slot(values[p.name])] for p, slots in zip(self._parameters, self._slots)
        )

    def slot(self, name: str, value: Value) -> tuple[int, int] | None:
        """(column, value index) of a parameter's value; None when the space lacks either."""
        for column, (p, slots) in enumerate(zip(self._parameters, self._slots)):
            if p.name == name:
                index = slots.get(_slot(value)) if p.allows(value) else None
                return None if index is None else (column, index)
        return None

    def rows_of_keys(self, keys: Iterable[str]) -> set[Row]:
        """Rows of configuration keys (JSON); keys of another space are ignored. Each key is read
        once: a run excludes every trial it holds at each ask."""
        rows = set()
        for key in keys:
            if key not in self._key_rows:
                self._key_rows[key] = self._row_of_key(key)
            if (row := self._key_rows[key]) is not None:
                rows.add(row)
        return rows

    def _row_of_key(self, key: str) -> Row | None:
        try:
            return self.row(json.loads(key))
        except (KeyError, ValueError, TypeError):
            return None

    def config(self, row: Iterable[int]) -> Config:
        return Config.of({p.name: p.values[int(i)] for p, i in zip(self._parameters, row)})

    def points(self, rows: np.ndarray) -> list[list[int]]:
        """skopt coordinates (see `_coordinates`) of rows of value indices."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1, len(self.cardinality))
        columns = [coordinates[rows[:, j]] for j, coordinates in enumerate(self._coordinates)]
        return np.stack(columns, axis=1).tolist() if columns else [[] for _ in rows]  # type: ignore[no-any-return]

    def frontend(self, row: Iterable[int]) -> Row:
        values = tuple(row)
        return tuple(values[i] for i in self.frontend_columns)

    @cached_property
    def grid(self) -> np.ndarray:
        """Every row of the space (only for small spaces)."""
        axes = [np.arange(n) for n in self.cardinality]
        return np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(axes))

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """Distinct random rows, uniform over the space."""
        drawn = rng.integers(0, self.cardinality, size=(count, len(self.cardinality)))
        return np.unique(drawn, axis=0)

    @cached_property
    def allowed_macro_rows(self) -> np.ndarray | None:
        """Value indices over the restricted columns (`_restricted`, in order) of each macro
        combination the restriction allows, as `SearchSpace.allowed_macros` enumerates them;
        None without a restriction or where they were not enumerated."""
        enumerated = self._space.allowed_macros() if self.restricted else None
        if enumerated is None:
            return None
        names = [self._parameters[c].name for c in self._restricted]
        if list(enumerated.names) != names:
            return None
        slots = [self._slots[c] for c in self._restricted]
        rows = [[slot[_slot(v)] for slot, v in zip(slots, combination)] for combination in enumerated.combinations]
        return np.array(rows, dtype=np.int64).reshape(len(rows), len(names))

    def allowed_count(self) -> int | None:
        """How many configurations the restriction allows, where its macro combinations were
        enumerated (None otherwise)."""
        macro_rows = self.allowed_macro_rows
        if macro_rows is None:
            return None
        others = [c for c in range(len(self.cardinality)) if c not in self._restricted]
        return len(macro_rows) * int(np.prod(self.cardinality[others], dtype=object))

    def allowed_grid(self) -> np.ndarray:
        """Every row the restriction allows, in grid order (only where `allowed_count` is small)."""
        macro_rows = self.allowed_macro_rows
        assert macro_rows is not None
        width = len(self.cardinality)
        others = [c for c in range(width) if c not in self._restricted]
        axes = [np.arange(self.cardinality[c]) for c in others]
        rest = (np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(axes)) if axes
                else np.zeros((1, 0), dtype=np.int64))
        rows = np.empty((len(macro_rows) * len(rest), width), dtype=np.int64)
        rows[:, self._restricted] = np.repeat(macro_rows, len(rest), axis=0)
        rows[:, others] = np.tile(rest, (len(macro_rows), 1))
        return self.distinct(np.unique(rows, axis=0)) if len(rows) else rows

    def sample_allowed(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """Distinct random rows, uniform over the allowed ones: the restricted columns drawn from
        `allowed_macro_rows`, the others from their values (no rejection: a restriction that
        allows 1 of 10**6 macro combinations gets a full pool at once)."""
        macro_rows = self.allowed_macro_rows
        assert macro_rows is not None and len(macro_rows)
        drawn = rng.integers(0, self.cardinality, size=(count, len(self.cardinality)))
        drawn[:, self._restricted] = macro_rows[rng.integers(0, len(macro_rows), size=count)]
        return self.distinct(np.unique(drawn, axis=0))

    @property
    def restricted(self) -> bool:
        """Whether the space's restriction can refuse a row."""
        return self._space.restriction is not None

    def distinct(self, rows: np.ndarray) -> np.ndarray:
        """`rows` less each twin of another (`implied.twins`: `--use_fast_math --ftz=true`, which
        builds what `--use_fast_math` builds): the search proposes only the one at the default."""
        if not self._twins or not len(rows):
            return rows
        keep = np.ones(len(rows), dtype=bool)
        for on, index, column, implied_index, _ in self._twins:
            keep &= ~((rows[:, on] == index) & (rows[:, column] == implied_index))
        return rows[keep]

    def is_twin(self, row: Row) -> bool:
        """Whether `distinct` drops ``row``."""
        return any(row[on] == index and row[column] == implied_index
                   for on, index, column, implied_index, _ in self._twins)

    def with_twins(self, rows: set[Row]) -> set[Row]:
        """``rows`` and the row each twin among them stands for (`distinct`): what a tried twin
        built is tried too."""
        if not self._twins:
            return rows
        found = set(rows)
        for row in rows:
            values = list(row)
            for on, index, column, implied_index, default_index in self._twins:
                if values[on] == index and values[column] == implied_index:
                    values[column] = default_index
            found.add(tuple(values))
        return found

    def allowed(self, rows: np.ndarray) -> np.ndarray:
        """The rows the space's restriction allows (all of them without one), less twins
        (`distinct`); each combination of the restricted columns' values is judged once."""
        rows = self.distinct(rows)
        if not self.restricted or not len(rows):
            return rows
        columns = self._restricted
        keep = np.fromiter((self._verdict(tuple(r)) for r in rows[:, columns].tolist()), dtype=bool, count=len(rows))
        return rows[keep]

    def _verdict(self, sub: Row) -> bool:
        found = self._verdicts.get(sub)
        if found is None:
            values = {self._parameters[c].name: self._parameters[c].values[i] for c, i in zip(self._restricted, sub)}
            found = self._verdicts[sub] = self._space.allows(values)
        return found

    def without(self, rows: np.ndarray, skip: set[Row]) -> np.ndarray:
        """`rows` less those in `skip`, in their order."""
        if not skip or not len(rows):
            return rows
        if self._radix is not None:  # each row as one number: compared in numpy, not row by row
            skipped = np.asarray(list(skip), dtype=np.int64).reshape(len(skip), -1)
            return rows[~np.isin(rows @ self._radix, skipped @ self._radix)]
        keep = np.fromiter(
            (tuple(r) not in skip for r in rows.tolist()), dtype=bool, count=len(rows)
        )
        return rows[keep]

    @cached_property
    def _radix(self) -> np.ndarray | None:
        """Place values that number every row of the space once (None past int64's range)."""
        if not len(self.cardinality):
            return None
        places = [1]
        for size in self.cardinality[:0:-1].tolist():
            places.append(places[-1] * size)
        if places[-1] * int(self.cardinality[0] if len(self.cardinality) else 1) >= 2**62:
            return None
        return np.array(places[::-1], dtype=np.int64)


def enumerate_space(space: SearchSpace) -> Iterator[Config]:
    """Every configuration the space's restriction allows, defaults first, in a fixed order."""
    names = [p.name for p in space.parameters]
    orders = [_default_first(p) for p in space.parameters]
    for values in itertools.product(*orders):
        values_of = dict(zip(names, values))
        if space.allows(values_of):
            yield Config.of(values_of)


def _default_first(parameter: Parameter) -> list[Any]:
    return [parameter.default] + [v for v in parameter.values if v != parameter.default]
