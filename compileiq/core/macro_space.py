"""What a space's restrictions allow of its tuned macros (``define.*`` parameters): which values some
allowed combination holds (the "never built" note, the search's macro design) and how many
combinations are allowed (`compileiq space`). The enumeration itself is `macro_combinations`."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from math import prod
from typing import Protocol

from compileiq.core.macro_combinations import AllowedMacros, Parameter, Restriction, Value


class _Config(Protocol):
    def as_dict(self) -> dict[str, Value]: ...


class SearchSpace(Protocol):  # core.space.SearchSpace (which imports this module), as read here
    @property
    def parameters(self) -> Sequence[Parameter]: ...

    @property
    def restriction(self) -> Restriction | None: ...

    def allowed_macros(self) -> AllowedMacros | None: ...

    def default_config(self) -> _Config: ...

    def allows(self, config: Mapping[str, Value]) -> bool: ...

COUNTED_COMBINATIONS = 1 << 21  # restricted macro combinations counted one by one at most


def allowed_values(space: SearchSpace, most: int) -> tuple[set[tuple[str, Value]], bool]:
    """(define.NAME, value) for each value of a searched macro (one with several values) that
    some combination the restrictions allow holds, and whether that is known: every value, and
    False, where the restricted macros' combinations could be neither enumerated
    (`allowed_macros`) nor looked through (more than `most`)."""
    macros = [p for p in space.parameters if p.name.startswith("define.") and len(p.values) > 1]
    every = {(p.name, v) for p in macros for v in p.values}
    if space.restriction is None:
        return every, True
    enumerated = space.allowed_macros()
    if enumerated is not None:
        if not enumerated.combinations:
            return set(), True
        searched = {p.name for p in macros}
        found = {(p.name, v) for p in macros if p.name not in enumerated.names for v in p.values}
        found.update((name, value) for combination in enumerated.combinations
                     for name, value in zip(enumerated.names, combination, strict=True) if name in searched)
        return found, True
    if prod(len(p.values) for p in macros) > most:
        return every, False
    base = space.default_config().as_dict()
    found = set()
    for values in itertools.product(*(p.values for p in macros)):
        if space.allows(base | {p.name: v for p, v in zip(macros, values, strict=True)}):
            found.update((p.name, v) for p, v in zip(macros, values, strict=True))
    return found, True


def combination_count(space: SearchSpace) -> tuple[int | None, int]:
    """(allowed, all) combinations of the tuned macros (``define.*`` parameters); allowed is
    None where the restricted macros have more than COUNTED_COMBINATIONS to try."""
    macros = [p for p in space.parameters if p.name.startswith("define.")]
    total = prod(len(p.values) for p in macros)
    if space.restriction is None:
        return total, total
    read = [p for p in macros if p.name in space.restriction.names]
    others = total // max(prod(len(p.values) for p in read), 1)
    if (enumerated := space.allowed_macros()) is not None:
        return len(enumerated.combinations) * others, total
    names = [p.name for p in read]
    if prod(len(p.values) for p in read) > COUNTED_COMBINATIONS:
        return None, total
    allowed = sum(space.restriction.allows(dict(zip(names, values)))
                  for values in itertools.product(*(p.values for p in read)))
    return allowed * others, total


UNEVALUATED_CHECKED = 1 << 16  # restricted macro combinations tried one by one for `unevaluable_count`


def unevaluable_count(space: SearchSpace) -> int | None:
    """How many combinations of the tuned macros a restriction cannot even evaluate (a value past
    the evaluator's bound, a division by zero): not allowed, but not because a condition is false,
    so the count shown beside the allowed one; None where not counted (too many, or unknown)."""
    restriction = space.restriction
    broken = getattr(restriction, "first_broken", None)
    if restriction is None or broken is None:
        return 0 if restriction is None else None
    macros = [p for p in space.parameters if p.name.startswith("define.")]
    read = [p for p in macros if p.name in restriction.names]
    if prod(len(p.values) for p in read) > UNEVALUATED_CHECKED:
        return None
    others = prod(len(p.values) for p in macros) // max(prod(len(p.values) for p in read), 1)
    names = [p.name for p in read]
    failed = sum(1 for values in itertools.product(*(p.values for p in read))
                 if (why := broken(dict(zip(names, values)))) is not None and why.startswith("cannot evaluate"))
    return failed * others

