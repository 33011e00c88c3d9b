"""What one nvcc option implies for others: the one model of it. `--use_fast_math` implies
`--ftz=true --prec-div=false --prec-sqrt=false --fmad=true` (nvcc --help), and an explicit option
beside it wins, wherever it stands (`-ftz=false --use_fast_math` keeps denormals: checked with
`nvcc -dryrun`, which hands cicc -ftz=0). A config records each setting's value, and a setting at
the compiler's default renders nothing, so `nvcc.ftz = false` beside `nvcc.use_fast_math = true`
would build with ftz on: where a build sets it so on purpose (the shipped command, an ACF's
controls), the setting is spelled out even at its default (`spelled_out`). Every space a build of
recorded values is rendered from (`tune`'s, an ACF's, the gate's rebuild of the build that ships) is
made by `build_space`, so that each renders the same build of the same values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from compileiq.core.space import SearchSpace, Value, same

IMPLIES: dict[str, dict[str, Value]] = {
    "nvcc.use_fast_math": {"nvcc.ftz": True, "nvcc.prec_div": False, "nvcc.prec_sqrt": False, "nvcc.fmad": True},
}


def implied(values: Mapping[str, Value]) -> dict[str, Value]:
    """The values the settings in ``values`` that are on imply for others (empty when none is on)."""
    return {name: value for on, implies in IMPLIES.items() if values.get(on) is True
            for name, value in implies.items()}


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
