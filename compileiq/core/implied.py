"""What one nvcc option implies for others: the one model of it. `--use_fast_math` implies
`--ftz=true --prec-div=false --prec-sqrt=false --fmad=true` (nvcc --help), and an explicit option
beside it wins, wherever it stands (`-ftz=false --use_fast_math` keeps denormals: checked with
`nvcc -dryrun`, which hands cicc -ftz=0). A config records each setting's value, and a setting at
the compiler's default renders nothing, so `nvcc.ftz = false` beside `nvcc.use_fast_math = true`
would build with ftz on: where a build sets it so on purpose (the shipped command, an ACF's
controls), the setting is spelled out even at its default (`spelled_out`). Every space a build of
recorded values is rendered from (`tune`'s, an ACF's, the gate's rebuild of the build that ships) is
made by `build_space`, so that each renders the same build of the same values.

The other way round, `--use_fast_math --ftz=true` builds what `--use_fast_math` alone builds (nvcc
hands cicc the same options, and the PTX is the same): where the implied setting's default renders
nothing, the two configurations are `twins`, and the search proposes (and `distinct_size` counts)
only the one at the default (`canonical`), as the shipped `--use_fast_math` and `simplify` write it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from itertools import product
from math import prod

from compileiq.core.space import SearchSpace, Value, canonical_key, same

IMPLIES: dict[str, dict[str, Value]] = {
    "nvcc.use_fast_math": {"nvcc.ftz": True, "nvcc.prec_div": False, "nvcc.prec_sqrt": False, "nvcc.fmad": True},
}


def implied(values: Mapping[str, Value]) -> dict[str, Value]:
    """The values the settings in ``values`` that are on imply for others (empty when none is on)."""
    return {name: value for on, implies in IMPLIES.items() if values.get(on) is True
            for name, value in implies.items()}


def without_implied(values: Mapping[str, Value]) -> dict[str, Value]:
    """``values`` without each setting at the value another of them that is on implies
    (`--use_fast_math --ftz=true`: `--use_fast_math`, the same build): what a study's identity
    names of a shipped build, so that twins are one study, as the gate calls them one build."""
    implies = implied(values)
    return {name: value for name, value in values.items() if name not in implies or not same(value, implies[name])}


def overridden(values: Mapping[str, Value]) -> frozenset[str]:
    """The settings in ``values`` whose value differs from what another of them implies
    (`--use_fast_math --prec-div=true`): a build of them must spell these out."""
    return frozenset(name for name, value in implied(values).items()
                     if name in values and not same(values[name], value))


def spelled_out(space: SearchSpace, values: Mapping[str, Value]) -> SearchSpace:
    """``space`` with each setting `overridden` in ``values`` rendered even at its default
    (`--ftz=false`, `--prec-div=true`), so that a build of ``values`` is the build they stand for."""
    names = overridden(values)
    if not any(p.name in names and not p.render_default for p in space.parameters):
        return space
    return replace(space, parameters=tuple(replace(p, render_default=True) if p.name in names else p
                                           for p in space.parameters))


def implied_by(values: Mapping[str, Value], name: str) -> str | None:
    """The setting in ``values`` that is on and implies a value for ``name`` (``nvcc.use_fast_math``
    for ``nvcc.ftz``), where ``values`` does not set ``name`` itself; else None."""
    if name in values:
        return None
    return next((on for on, implies in IMPLIES.items() if values.get(on) is True and name in implies), None)


def effective(values: Mapping[str, Value], defaults: Mapping[str, Value], name: str) -> Value | None:
    """The value a build of ``values`` has for ``name``: its own, else the one a setting of it
    implies (`--use_fast_math`: ftz on), else the compiler's default."""
    return values.get(name, implied(values).get(name, defaults.get(name)))


def build_space(space: SearchSpace, defines: Mapping[str, Sequence[Value]], values: Mapping[str, Value]) -> SearchSpace:
    """The space a build of ``values`` is rendered from: ``space`` with a -D choice per macro of
    ``defines`` after it (its first value the default), and each setting of ``values`` that
    contradicts what another implies spelled out (`spelled_out`). `tune`'s searched space, an
    ACF's (`acf.settled`) and the gate's rebuild of the shipped baseline are all made by it."""
    return spelled_out(space.with_defines(defines) if defines else space, values)


Twin = tuple[str, str, Value]  # (setting, other, value): see `twins`


def twins(space: SearchSpace) -> tuple[Twin, ...]:
    """(setting, other, value) where a config of ``space`` with ``setting`` on and ``other`` at
    ``value`` builds the same code as the one with ``other`` at its default: ``setting`` implies
    ``value``, which is not the default, and the default renders nothing (`--use_fast_math
    --ftz=true` is `--use_fast_math`; not so beside a shipped `-ftz=false`, spelled out)."""
    have = {p.name: p for p in space.parameters}
    return tuple((on, name, value) for on, implies in IMPLIES.items()
                 if on in have and have[on].allows(True)
                 for name, value in implies.items()
                 if (p := have.get(name)) is not None and p.allows(value) and not same(value, p.default)
                 and not p.argv(p.default))


def canonical(space: SearchSpace, values: Mapping[str, Value]) -> dict[str, Value]:
    """``values`` with each setting that is a twin's (`twins`) at its default: the one
    configuration of those that build the same code that the search proposes."""
    found = dict(values)
    for on, name, value in twins(space):
        if found.get(on) is True and name in found and same(found[name], value):
            found[name] = space.parameter(name).default
    return found


def build_key(space: SearchSpace, values: Mapping[str, Value]) -> str:
    """The key (`Config.key`) of the configuration of ``values``'s build: the same for twins."""
    return canonical_key(canonical(space, values))


def distinct_size(space: SearchSpace) -> int:
    """How many configurations of ``space`` build distinct code as far as `twins` go:
    `SearchSpace.size` with each set of twins counted once."""
    pairs = twins(space)
    if not pairs:
        return space.size()
    params = [space.parameter(name) for name in sorted({n for on, other, _ in pairs for n in (on, other)})]
    names = [p.name for p in params]
    combinations = [dict(zip(names, values)) for values in product(*(p.values for p in params))]
    kept = sum(1 for values in combinations if canonical(space, values) == values)
    # the twins' parameters vary independently of the others only while size() is the plain product
    # (no restriction or cross-parameter rule counted in): else this count would be silently wrong
    if space.size() != prod(len(p.values) for p in space.parameters):  # a programming error, under -O too
        raise RuntimeError("SearchSpace.size() is no longer a plain product: distinct_size needs updating")
    return space.size() // len(combinations) * kept
