"""The search-space files: one declarative TOML per compiler and version (nvcc-V.toml,
ptxas-V.toml in search_spaces/), read, checked and merged into a `SearchSpace`."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from compileiq.core.space import Parameter, SearchSpace, SpaceError, Stage, no_duplicates, same
from compileiq.core.words import word_problem

STAGES = {"nvcc": "frontend", "ptxas": "ptxas"}
KINDS = ("flag", "choice", "int")
RISKS = ("safe", "numerics", "semantics")
REQUIRED = {"name", "kind", "default", "render", "risk", "help"}
KEYS = REQUIRED | {"values", "low", "high", "ptxas_render"}

SPACES_ENV = "COMPILEIQ_SEARCH_SPACES"  # a directory of nvcc-V.toml/ptxas-V.toml to use instead


def _default_directory() -> Path:
    if override := os.environ.get(SPACES_ENV):
        return Path(override).expanduser()
    package = Path(__file__).resolve().parent.parent
    top = package.parent / "search_spaces"  # a checkout; a wheel carries them inside the package
    return top if top.is_dir() else package / "search_spaces"


def available_versions(directory: Path | None = None) -> list[str]:
    """Compiler versions with both an nvcc-V.toml and a ptxas-V.toml, oldest first."""
    d = directory or _default_directory()
    found = [p.name[len("nvcc-") : -len(".toml")] for p in d.glob("nvcc-*.toml")]
    versions = [v for v in found if (d / f"ptxas-{v}.toml").is_file()]
    return sorted(versions, key=lambda v: [int(x) if x.isdigit() else x for x in v.split(".")])


def space_version(compiler_version: str, directory: Path | None = None) -> str | None:
    """The search space `load_space` loads for this compiler version ("13.0.88" falls back to
    "13.0"), or None where this compileiq has none for it (a newer toolkit)."""
    versions = available_versions(directory or _default_directory())
    v = compiler_version if compiler_version in versions else ".".join(compiler_version.split(".")[:2])
    return v if v in versions else None


def load_space(compiler_version: str, directory: Path | None = None) -> SearchSpace:
    """Load and merge nvcc-V.toml and ptxas-V.toml; "13.0.88" falls back to "13.0"."""
    d = directory or _default_directory()
    versions = available_versions(d)
    v = space_version(compiler_version, d)
    if v is None:
        have = ", ".join(versions) or "none"
        raise SpaceError(f"no search space for nvcc {compiler_version}; available: {have} ({d}/)")
    params = _load_file(d / f"nvcc-{v}.toml", "nvcc", v) + _load_file(
        d / f"ptxas-{v}.toml", "ptxas", v
    )
    return SearchSpace(f"nvcc-{v}+ptxas-{v}", v, params)


def _load_file(path: Path, compiler: str, version: str) -> tuple[Parameter, ...]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SpaceError(f"{path}: malformed TOML: {e}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise SpaceError(f"{path}: malformed TOML: nested too deeply") from None
    except OSError as e:
        raise SpaceError(f"{path}: cannot read: {e.strerror or e}") from None
    header = {k: data.get(k) for k in ("compiler", "version", "stage")}
    if header != {"compiler": compiler, "version": version, "stage": STAGES[compiler]}:
        raise SpaceError(f"{path}: header {header} does not match file name")
    tables = data.get("parameter")
    if not isinstance(tables, list) or not tables:
        raise SpaceError(f"{path}: no [[parameter]] tables")
    try:
        params = tuple(_parameter(t, cast(Stage, STAGES[compiler])) for t in tables)
    except SpaceError as e:
        raise SpaceError(f"{path}: {e}") from None
    no_duplicates(params, str(path))
    return params


def _parameter(table: dict[str, Any], stage: Stage) -> Parameter:
    name = table.get("name", "?")
    try:
        return _checked(_build(table, stage))
    except (KeyError, TypeError, ValueError) as e:
        raise SpaceError(f"parameter {name!r}: bad or missing key {e}") from None
    except SpaceError as e:
        raise SpaceError(f"parameter {name!r}: {e}") from None


def _build(t: dict[str, Any], stage: Stage) -> Parameter:
    if set(t) - KEYS:
        raise SpaceError(f"unknown keys {sorted(set(t) - KEYS)}")
    kind = t["kind"]
    if kind not in KINDS:
        raise SpaceError(f"kind {kind!r} is not one of {KINDS}")
    if kind == "int":
        low, high = int(t["low"]), int(t["high"])
        if not 0 < high - low + 1 <= MAX_INT_VALUES:
            raise SpaceError(f"low {low} to high {high}: an int parameter has 1 to {MAX_INT_VALUES} values")
        values: tuple[Any, ...] = tuple(range(low, high + 1))
    else:
        values = (False, True) if kind == "flag" else tuple(t["values"])
    strs = [t[k] for k in ("name", "render", "risk", "help") if not isinstance(t[k], str)]
    if strs or not isinstance(t.get("ptxas_render", ""), str):
        raise SpaceError("name, render, ptxas_render, risk and help must be strings")
    return Parameter(
        t["name"], stage, kind, values, t["default"], t["render"], t["risk"], t["help"],
        t.get("ptxas_render", ""),
    )  # fmt: skip


def _checked(p: Parameter) -> Parameter:
    if p.risk not in RISKS:
        raise SpaceError(f"risk {p.risk!r} is not one of {RISKS}")
    if not p.values or any(not isinstance(v, bool | int | str) for v in p.values):
        raise SpaceError("values must be a non-empty list of bool, int or str")
    if len({(type(v), v) for v in p.values}) != len(p.values):
        raise SpaceError("duplicate values")
    if not p.allows(p.default) or p.kind == "flag" and p.default is not False:
        raise SpaceError(f"default {p.default!r} not in values (a flag's default is false)")
    if "default" in p.values and not same(p.default, "default"):
        raise SpaceError('a "default" value must be the default')
    if (shape := LOWERING_SHAPES.get(p.name)) is not None and not shape[1](p):
        raise SpaceError(f"must be {shape[0]}: the no-harm rules read its values so (a string \"false\" would pass them)")
    for v in p.values:
        for token in p.argv(v) + p.forwarded(v):
            if problem := word_problem(token):  # nvcc hands -Xptxas values to /bin/sh as they are
                raise SpaceError(f"renders {token!r}: {problem}")
            if problem := unsafe_option(token, p.name):
                raise SpaceError(f"renders {token!r}: {problem}")
    return p


# The options a search-space file may render (it is data, from COMPILEIQ_SEARCH_SPACES too), long
# and short spellings: nvcc's and ptxas's code-generation settings. Anything else is refused: an
# option that runs another program, reads or writes files, defines macros, adds debugging or
# trades optimisation for compile time (-G, -g, -ccbin, -optf, --libdevice-directory, -Ofc, -X...).
CODEGEN_OPTIONS = frozenset({
    "--use_fast_math", "-use_fast_math", "--ftz", "-ftz", "--prec-div", "-prec-div", "--prec-sqrt", "-prec-sqrt",
    "--fmad", "-fmad", "--restrict", "-restrict", "--jump-table-density", "-jtd", "--extra-device-vectorization",
    "-extra-device-vectorization", "--maxrregcount", "-maxrregcount", "--register-usage-level", "-regUsageLevel",
    "--def-load-cache", "-dlcm", "--def-store-cache", "-dscm", "--force-load-cache", "-flcm", "--force-store-cache",
    "-fscm", "--maxntid", "-maxntid", "--minnctapersm", "-minnctapersm", "--optimize-float-atomics",
    "-opt-fp-atomics", "--override-directive-values", "-override-directive-values", "--opt-level", "-O",
    "--allow-expensive-optimizations", "-allow-expensive-optimizations", "--disable-optimizer-constants",
    "-disable-optimizer-consts",
})  # fmt: skip
# Options whose only effect is to switch optimisations off, and the one parameter that may render
# each: the no-harm rules (evaluate/eligibility.LOWERING) know a lowered level by that name alone.
LOWERING_OWNERS = {
    "-O": "ptxas.opt_level", "--opt-level": "ptxas.opt_level",
    "--allow-expensive-optimizations": "ptxas.allow_expensive_optimizations",
    "-allow-expensive-optimizations": "ptxas.allow_expensive_optimizations",
    "--disable-optimizer-constants": "ptxas.disable_optimizer_constants",
    "-disable-optimizer-consts": "ptxas.disable_optimizer_constants",
}  # fmt: skip
# The values of each parameter the no-harm rules judge (evaluate/eligibility.LOWERING), as they read them.
LOWERING_SHAPES: dict[str, tuple[str, Callable[[Parameter], bool]]] = {
    "ptxas.opt_level": ("an int parameter (the level)", lambda p: p.kind == "int"),
    "ptxas.allow_expensive_optimizations": (
        'a choice of "default", true and false',
        lambda p: p.kind == "choice" and all(any(same(v, w) for w in ("default", True, False)) for v in p.values)),
    "ptxas.disable_optimizer_constants": ("a flag", lambda p: p.kind == "flag"),
}
MAX_INT_VALUES = 65536  # an int parameter's range: a register cap has 256


def option_name(token: str) -> str:
    """The option a rendered argument sets: ``-O2`` is ``-O``, ``--maxrregcount=32`` is ``--maxrregcount``."""
    name = token.split("=", 1)[0]
    return "-O" if re.fullmatch(r"-O\d*", name) else name


def unsafe_option(token: str, parameter: str = "") -> str | None:
    """Why a rendered argument of `parameter` may not reach a compiler, or None: an option not in
    CODEGEN_OPTIONS, or one that lowers optimisation rendered by a parameter other than its owner."""
    name = option_name(token)
    if name not in CODEGEN_OPTIONS:
        return ("not a code-generation option of nvcc or ptxas that compileiq searches: an option that runs "
                "another program, reads or writes files, defines macros or adds debugging is never searched")
    owner = LOWERING_OWNERS.get(name)
    if owner is not None and parameter != owner:
        return f"it sets the optimisation level, which only the parameter {owner} may (the no-harm rules know it by that name)"
    return None
