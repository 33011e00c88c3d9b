"""tune.toml's restrictions: conditions over the macros that make a configuration valid at all
(``block_size_x*block_size_y <= 1024``), as Kernel Tuner's and the T1 format's ``Conditions``
write them. Read by launch's safe evaluator (never Python's eval); the searchers propose only
configurations every restriction allows, so nothing else is ever built or counted."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from compileiq.core.space import Value, remember
from compileiq.source.condition_bounds import may_hold
from compileiq.source.launch import ExpressionError, check, evaluate, names

if TYPE_CHECKING:
    from compileiq.source.spec import KernelSpec

MAX_RESTRICTIONS = 64


@dataclass(frozen=True)
class Restrictions:
    """Every restriction of one kernel (a `core.space.Restriction`); a macro the configuration
    does not set (a fixed define, a tuned one left out with --exclude) reads its tune.toml value."""

    texts: tuple[str, ...]
    macros: tuple[tuple[str, int | str], ...]  # fixed defines and each tuned define's default
    names: frozenset[str]  # the parameters read: define.NAME
    _verdicts: dict[tuple[Value | None, ...], bool] = field(default_factory=dict, repr=False, compare=False)

    def allows(self, values: Mapping[str, Value]) -> bool:
        """True when every restriction holds (one that cannot be evaluated, e.g. a division by
        zero under these values, does not)."""
        key: tuple[Value | None, ...] = tuple(values.get(name) for name in sorted(self.names))
        found = self._verdicts.get(key)
        if found is None:
            found = remember(self._verdicts, key, self._holds(values))
        return found

    def _holds(self, values: Mapping[str, Value]) -> bool:
        macros: dict[str, int | str] = dict(self.macros)
        macros.update({k.removeprefix("define."): v for k, v in values.items()
                       if k.startswith("define.") and not isinstance(v, bool)})
        try:
            return all(evaluate(text, macros, condition=True) for text in self.texts)
        except ExpressionError:
            return False

    def may_allow(self, ranges: Mapping[str, tuple[int, int]]) -> bool:
        """False only when no configuration whose macros lie within ``ranges`` (define.NAME: its
        lowest and highest value; a set one, its value twice) is allowed; a macro absent from it
        reads its tune.toml value when that is an integer, else ranges over everything."""
        bounds = {name: (number, number) for name, value in self.macros
                  if (number := _number(value)) is not None}  # an expression naming others: unbounded
        bounds.update({k.removeprefix("define."): v for k, v in ranges.items()})
        return all(may_hold(text, bounds) for text in self.texts)

    def first_broken(self, values: Mapping[str, Value]) -> str | None:
        """How the first restriction these values break breaks ("break 'A < B'", or why it cannot be
        evaluated: a division by zero, a value past the evaluator's bound), or None."""
        macros: dict[str, int | str] = dict(self.macros)
        macros.update({k.removeprefix("define."): v for k, v in values.items() if k.startswith("define.")})
        for text in self.texts:
            try:
                if not evaluate(text, macros, condition=True):
                    return f"break {text!r}"
            except ExpressionError as error:
                return f"cannot evaluate {text!r}: {error}"
        return None


def _number(value: int | str) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = value.strip()
    return int(text) if _INTEGER.fullmatch(text) else None  # "--8" is no number (int() refuses it)


_INTEGER = re.compile(r"-?[0-9]+")


def parse(texts: object, fixed: Mapping[str, str], tuned: Mapping[str, tuple[int | str, ...]],
          known_as: str = "a macro of tune.toml") -> tuple[str, ...]:
    """The restrictions of tune.toml's ``[tune] restrictions``, checked: a list of strings, each an
    allowed condition naming only the kernel's macros, tuned ones with integer values; ValueError
    (with the problem, for the caller to name the key) otherwise. `known_as`: what a name must be,
    as the error says it (a T1 file's conditions name its TuningParameters)."""
    if not isinstance(texts, list) or not all(isinstance(t, str) and t.strip() for t in texts):
        raise ValueError("must be a list of non-empty strings (conditions over the macros)")
    if len(texts) > MAX_RESTRICTIONS:
        raise ValueError(f"at most {MAX_RESTRICTIONS} restrictions")
    known = set(fixed) | set(tuned)
    for index, text in enumerate(texts):
        try:
            check(text, condition=True)
            unknown = sorted(names(text) - known)
        except ExpressionError as error:
            raise ValueError(f"[{index}] {error}") from None
        if unknown:
            have = ", ".join(sorted(known)) or "none"
            raise ValueError(f"[{index}] {text!r} names {unknown[0]!r}, not {known_as} (macros: {have})")
        for name in sorted(names(text) & set(tuned)):
            if not all(isinstance(v, int) for v in tuned[name]):
                raise ValueError(f"[{index}] {text!r} reads {name!r}, whose tuned values are not all integers")
    return tuple(" ".join(t.split()) for t in texts)


def of_spec(spec: KernelSpec) -> Restrictions | None:
    """The restriction a kernel's space applies (None without restrictions)."""
    return restrictions_of(spec.restrictions, dict(spec.defines), dict(spec.tuned_defines))


def restrictions_of(texts: tuple[str, ...], fixed: Mapping[str, str],
                    tuned: Mapping[str, tuple[int | str, ...]]) -> Restrictions | None:
    """The restriction of these texts over these macros (None without restrictions)."""
    if not texts:
        return None
    read = set().union(*(names(t) for t in texts)) & set(tuned)
    macros = {**fixed, **{name: values[0] for name, values in tuned.items()}}
    return Restrictions(texts, tuple(sorted(macros.items())), frozenset(f"define.{n}" for n in read))
