"""The search-space files: one declarative TOML per compiler and version (nvcc-V.toml,
ptxas-V.toml in search_spaces/), read, checked and merged into a `SearchSpace`."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any, cast

from compileiq.core.space import Parameter, SearchSpace, SpaceError, Stage, no_duplicates, same

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


def load_space(compiler_version: str, directory: Path | None = None) -> SearchSpace:
    """Load and merge nvcc-V.toml and ptxas-V.toml; "13.0.88" falls back to "13.0"."""
    d = directory or _default_directory()
    versions = available_versions(d)
    v = compiler_version
    v = v if v in versions else ".".join(v.split(".")[:2])
    if v not in versions:
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
    for v in p.values:
        for token in p.argv(v) + p.forwarded(v):
            if re.search(r"[\s,]", token):
                raise SpaceError(f"renders {token!r}: argv tokens hold no spaces or commas")
            if problem := unsafe_option(token):
                raise SpaceError(f"renders {token!r}: {problem}")
    return p


# Options a search-space file may never render (it is data, from COMPILEIQ_SEARCH_SPACES too): they
# run another program, write or read files, or stop the build from compiling. Also every -X<tool>
# but -Xptxas (the host compiler, the linker).
UNSAFE_OPTIONS = frozenset({
    "-ccbin", "--compiler-bindir", "--run", "-run", "--run-args", "-run-args", "-o", "--output-file", "-odir",
    "--output-directory", "--keep", "-keep", "--keep-dir", "-keep-dir", "--save-temps", "-save-temps", "--dryrun",
    "-dryrun", "-E", "--preprocess", "--options-file", "-optf", "-include", "--pre-include", "-I", "--include-path",
    "-isystem", "--system-include", "-L", "--library-path", "-l", "--library", "-M", "-MD", "-MMD", "-MF", "-MT",
    "--dependency-output", "--generate-dependencies", "--generate-dependencies-with-compile", "-time", "--time",
    "-fdevice-time-trace", "--fdevice-time-trace", "-D", "--define-macro", "-U", "--undefine-macro",
    "--compiler-options", "--linker-options", "--archive-options", "--nvlink-options", "--input-as-string",
})
MAX_INT_VALUES = 65536  # an int parameter's range: a register cap has 256


def unsafe_option(token: str) -> str | None:
    """Why a rendered argument may not reach a compiler, or None: an option in UNSAFE_OPTIONS (with
    its value joined by `=` or not), or -X<tool> but -Xptxas."""
    name = token.split("=", 1)[0]
    joined = name.startswith(("-I", "-L", "-D", "-U", "-o", "-l")) and name not in ("-lineinfo",)  # -Ifoo, -ofile
    if name in UNSAFE_OPTIONS or joined or (name.startswith("-X") and name != "-Xptxas"):
        return "an option that runs another program, writes or reads files, or defines macros is never searched"
    return None
