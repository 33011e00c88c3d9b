"""The macro combinations a kernel's restrictions allow, enumerated: one macro set after another,
a partial combination dropped as soon as the restriction says no completion can hold.

Restrictions can allow a handful of a huge product (``A == 1 and B == 1`` over 1000 x 1000
values; ``A + ... + H == 8`` over 199**8): a sampler drawing from the whole product kept none,
spent minutes rejecting, and the search stopped after the baseline with flag settings left at the
one allowed combination. With the allowed set in hand the searcher samples macros from it (and
`space` counts it) in milliseconds. Where the restriction cannot be bounded this way (``A % B``
over large lists) the walk gives up after WORK steps: None, and callers sample as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

Value = bool | int | str  # core.space's (which imports this module)


class Parameter(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def values(self) -> tuple[Value, ...]: ...


class Restriction(Protocol):  # core.space.Restriction, as far as it is read here
    @property
    def names(self) -> frozenset[str]: ...

    def allows(self, values: Mapping[str, Value]) -> bool: ...

    def may_allow(self, ranges: Mapping[str, tuple[int, int]]) -> bool: ...

WORK = 30_000  # restriction checks one enumeration may spend (each tens of microseconds)


@dataclass(frozen=True)
class AllowedMacros:
    """The combinations of the macros a restriction reads that it allows."""

    names: tuple[str, ...]  # define.NAME, in the space's order
    combinations: tuple[tuple[Value, ...], ...]  # each allowed one, values as listed, in listed order


class _TooMuch(Exception):
    pass


def allowed_combinations(parameters: Sequence[Parameter], restriction: Restriction,
                         work: int = WORK) -> AllowedMacros | None:
    """Every combination of the parameters ``restriction`` reads that it allows, or None where
    finding them would take more than ``work`` checks (or a read macro has values that are not
    integers, which the restriction cannot bound)."""
    read = [p for p in parameters if p.name in restriction.names]
    if not all(isinstance(v, int) and not isinstance(v, bool) for p in read for v in p.values):
        return None
    names = tuple(p.name for p in read)
    numbers = {p.name: [int(v) for v in p.values] for p in read}
    ranges = {name: (min(values), max(values)) for name, values in numbers.items()}
    found: list[tuple[Value, ...]] = []
    left = [work]

    def walk(depth: int, chosen: dict[str, Value]) -> None:
        parameter = read[depth]
        for value in parameter.values:
            left[0] -= 1
            if left[0] < 0:
                raise _TooMuch
            chosen[parameter.name] = value
            if depth == len(read) - 1:
                if restriction.allows(chosen):
                    found.append(tuple(chosen[name] for name in names))
            elif restriction.may_allow(_set(ranges, chosen)):
                walk(depth + 1, chosen)
        del chosen[parameter.name]

    if not read:
        return AllowedMacros((), ((),) if restriction.allows({}) else ())
    try:
        if restriction.may_allow(ranges):
            walk(0, {})
    except _TooMuch:
        return None
    return AllowedMacros(names, tuple(found))


def _set(ranges: Mapping[str, tuple[int, int]], chosen: Mapping[str, Value]) -> dict[str, tuple[int, int]]:
    return {**ranges, **{name: (int(value), int(value)) for name, value in chosen.items()}}
