"""The kernel spec (a .cu file plus its optional tune.toml) and the source bundle shipped to workers.

A tuned define's first listed value is its default: the baseline configuration uses it.
"""

from __future__ import annotations

import hashlib
import math
import posixpath
import re
import shutil
import subprocess
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path, PurePosixPath
from typing import Any

from compileiq.errors import UsageError

TUNE_FILE = "tune.toml"
DEFAULT_ARCH = "sm_90"
DEFAULT_BLOCK_SIZE = 256
MAX_TIMEOUT_S = 86400  # a day: also refuses inf and nan
CUDA_SUFFIXES = (".cu", ".cuh")
Values = tuple[int | str, ...]

_ARCH_RE = re.compile(r"sm_\d+[a-z]?")
_NAME_RE = re.compile(r"[A-Za-z_]\w*")
_LAUNCH_BOUNDS_RE = re.compile(r"__launch_bounds__\s*\(\s*(\d+|[A-Za-z_]\w*)\s*[,)]")
_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.MULTILINE)


class KernelError(UsageError):
    """A kernel file or its tune.toml is missing or invalid."""


@dataclass(frozen=True)
class KernelSpec:
    """Everything the tuner needs to know about one kernel source file."""

    name: str
    source: Path
    arch: str
    entries: tuple[str, ...]
    block_size: int | str
    dynamic_smem: int
    defines: tuple[tuple[str, str], ...]
    tuned_defines: tuple[tuple[str, tuple[int | str, ...]], ...]
    include_dirs: tuple[Path, ...]
    compile_timeout_s: float
    allow_numerics: bool
    allow_semantics: bool
    # Measuring on a GPU (objective time): output tolerance against the baseline, how the
    # executable reports its time, and extra arguments for it (e.g. --set n=4096).
    rtol: float = 1e-5
    atol: float = 1e-6
    mode: str = "harness"  # "harness" (compileiq/harness.cuh) or "program" (its own timing line)
    metric_regex: str | None = None  # program mode: the time in ms is the regex's first group
    run_args: tuple[str, ...] = ()

    def block_size_for(self, config_values: Mapping[str, Any]) -> int:
        """Threads per block under a config; a define-named size reads ``define.NAME``.

        A config without that key gets the define's default (its first listed value).
        """
        if isinstance(self.block_size, int):
            return self.block_size
        key = f"define.{self.block_size}"
        value = config_values.get(key, self.default_values()[key])
        try:
            return int(value)
        except (TypeError, ValueError):
            raise KernelError(f"{key} = {value!r} is not a block size") from None

    def fixed_define_args(self) -> tuple[str, ...]:
        """The ``-DNAME=VALUE`` arguments of the fixed defines."""
        return tuple(f"-D{name}={value}" for name, value in self.defines)

    def default_values(self) -> dict[str, int | str]:
        """Each tuned define's default (first listed) value, keyed ``define.NAME``."""
        return {f"define.{name}": values[0] for name, values in self.tuned_defines}


# tune.toml's top-level keys: the spec's own fields, with [tune.defines] under "tune".
_TOP_KEYS = {f.name for f in fields(KernelSpec)} - {"name", "source", "tuned_defines"} | {"tune"}


@dataclass(frozen=True)
class SourceBundle:
    """A kernel's source and quoted-include headers as bytes, for a worker with no shared disk."""

    main: str
    files: tuple[tuple[str, bytes], ...]
    include_args: tuple[str, ...]
    sha256: str

    def write_to(self, directory: Path) -> Path:
        """Materialise the bundle under ``directory``; return the main file's path."""
        for rel, content in self.files:
            if PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts:
                raise KernelError(f"unsafe path in source bundle: {rel}")
            target = directory / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        return directory / self.main


def detect_arch() -> str | None:
    """The first GPU's ``sm_XY`` via nvidia-smi, or None without a usable nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    cmd = [smi, "--query-gpu=compute_cap", "--format=csv,noheader"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    first = (proc.stdout.strip().splitlines() or [""])[0].strip()
    match = re.fullmatch(r"(\d+)\.(\d+)", first)
    return f"sm_{match.group(1)}{match.group(2)}" if match else None


def load_spec(cu_path: Path, *, arch: str | None = None) -> KernelSpec:
    """Load a kernel's spec from ``cu_path`` and the tune.toml beside it (if any).

    ``arch`` overrides the file's arch; without either, the GPU's arch or sm_90.
    """
    source = Path(cu_path).expanduser().resolve()
    if not source.is_file():
        raise KernelError(f"kernel file not found: {cu_path}")
    text = source.read_text(errors="replace")
    if source.suffix not in CUDA_SUFFIXES or "__global__" not in text:
        raise KernelError(f"{cu_path} is not a CUDA source: no __global__ function found")
    toml_path = source.parent / TUNE_FILE
    raw = _read_toml(toml_path) if toml_path.is_file() else {}
    return _Parser(toml_path, raw, source, text).spec(arch)


def bundle_sources(spec: KernelSpec) -> SourceBundle:
    """Collect the main file and every header it reaches through ``#include "..."``."""
    root = spec.source.parent
    dirs = [(d, _bundle_dir(d, root, i)) for i, d in enumerate(spec.include_dirs)]
    files: dict[str, bytes] = {}
    _collect(spec.source, spec.source.name, dirs, files)
    digest = hashlib.sha256()
    for rel, content in files.items():
        digest.update(f"{rel}\0{len(content)}\0".encode())
        digest.update(content)
    include_args = tuple(f"-I{rel}" for _, rel in dirs)
    return SourceBundle(spec.source.name, tuple(files.items()), include_args, digest.hexdigest())


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        reason = " ".join(str(exc).split())
        raise KernelError(f"{path}: malformed TOML: {reason}") from None


MODES = ("harness", "program")


class _Parser:
    """Validates one tune.toml; every error names the file and the key."""

    def __init__(self, path: Path, raw: dict[str, Any], source: Path, text: str) -> None:
        self.path, self.raw, self.source, self.text = path, raw, source, text

    def fail(self, key: str, problem: str) -> KernelError:
        return KernelError(f"{self.path}: {key}: {problem}")

    def spec(self, arch: str | None) -> KernelSpec:
        if set(self.raw) - _TOP_KEYS:
            raise self.fail(min(set(self.raw) - _TOP_KEYS), "unknown key")
        defines, tuned = self.defines(), self.tuned_defines()
        if both := set(dict(defines)) & set(dict(tuned)):
            raise self.fail(f"tune.defines.{min(both)}", "also set in [defines]")
        return KernelSpec(
            name=self.source.stem,
            source=self.source,
            arch=self.arch(arch),
            entries=tuple(self.str_list("entries") or ()),
            block_size=self.block_size(dict(defines), dict(tuned)),
            dynamic_smem=self.integer("dynamic_smem", 0, 0),
            defines=defines,
            tuned_defines=tuned,
            include_dirs=self.include_dirs(),
            compile_timeout_s=self.timeout(),
            allow_numerics=self.flag("allow_numerics"),
            allow_semantics=self.flag("allow_semantics"),
            rtol=self.tolerance("rtol", 1e-5),
            atol=self.tolerance("atol", 1e-6),
            mode=self.mode(),
            metric_regex=self.metric_regex(),
            run_args=tuple(self.str_list("run_args") or ()),
        )

    def tolerance(self, key: str, default: float) -> float:
        value = self.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
            raise self.fail(key, "must be a finite number >= 0")
        return float(value)

    def mode(self) -> str:
        value = self.raw.get("mode", "harness")
        if value not in MODES:
            raise self.fail("mode", f"must be one of: {', '.join(MODES)}")
        return str(value)

    def metric_regex(self) -> str | None:
        value = self.raw.get("metric_regex")
        if value is None:
            return None
        try:
            groups = re.compile(value).groups if isinstance(value, str) else 0
        except re.error as exc:
            raise self.fail("metric_regex", f"not a regular expression: {exc}") from None
        if groups < 1:
            raise self.fail("metric_regex", "must be a regular expression with a group for the time in ms")
        return str(value)

    def arch(self, override: str | None) -> str:
        value = self.raw.get("arch")
        if value is not None and (not isinstance(value, str) or not _ARCH_RE.fullmatch(value)):
            raise self.fail("arch", f"{value!r} is not an arch like 'sm_90'")
        if override is not None and not _ARCH_RE.fullmatch(override):
            raise KernelError(f"{override!r} is not an arch like 'sm_90'")
        return override or value or detect_arch() or DEFAULT_ARCH

    def str_list(self, key: str) -> list[str] | None:
        value = self.raw.get(key)
        ok = isinstance(value, list) and value and all(isinstance(v, str) and v for v in value)
        if value is not None and not ok:
            raise self.fail(key, "must be a non-empty list of non-empty strings")
        return value

    def integer(self, key: str, default: int, low: int, high: int = 2**31 - 1) -> int:
        value = self.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(key, f"must be an integer from {low} to {high}")
        return value

    def timeout(self) -> float:
        value = self.raw.get("compile_timeout_s", 60)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TIMEOUT_S:
            raise self.fail("compile_timeout_s", f"must be a positive number of seconds, at most {MAX_TIMEOUT_S}")
        return float(value)

    def flag(self, key: str) -> bool:
        value = self.raw.get(key, False)
        if not isinstance(value, bool):
            raise self.fail(key, "must be true or false")
        return value

    def include_dirs(self) -> tuple[Path, ...]:
        names = self.str_list("include_dirs") or []
        dirs = tuple((self.source.parent / d).resolve() for d in names)
        missing = [d for d in dirs if not d.is_dir()]
        if missing:
            raise self.fail("include_dirs", f"not a directory: {missing[0]}")
        return dirs

    def table(self, key: str, raw: Any) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise self.fail(key, "must be a table")
        bad = [name for name in raw if not _NAME_RE.fullmatch(name)]
        if bad:
            raise self.fail(f"{key}.{bad[0]}", "not a valid macro name")
        return raw

    def defines(self) -> tuple[tuple[str, str], ...]:
        table = self.table("defines", self.raw.get("defines", {}))
        for name, value in table.items():
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise self.fail(f"defines.{name}", "must be an integer, float or string")
        return tuple(sorted((name, str(value)) for name, value in table.items()))

    def tuned_defines(self) -> tuple[tuple[str, Values], ...]:
        tune = self.raw.get("tune", {})
        if not isinstance(tune, dict):
            raise self.fail("tune", "must be a table")
        if set(tune) - {"defines"}:
            raise self.fail(f"tune.{min(set(tune) - {'defines'})}", "unknown key")
        table = self.table("tune.defines", tune.get("defines", {}))
        return tuple((name, self.values(name, vals)) for name, vals in table.items())

    def values(self, name: str, values: Any) -> Values:
        key = f"tune.defines.{name}"
        if not isinstance(values, list) or not values:
            raise self.fail(key, "must be a non-empty list of values")
        if any(isinstance(v, bool) or not isinstance(v, int | str) for v in values):
            raise self.fail(key, "values must be integers or strings")
        if len(set(values)) != len(values):
            raise self.fail(key, "values must be distinct")
        return tuple(values)

    def block_size(self, defines: dict[str, str], tuned: dict[str, Values]) -> int | str:
        value = self.raw.get("block_size")
        if value is None:
            return self.launch_bounds(defines, tuned)
        if isinstance(value, str):
            values = tuned.get(value)
            if values is None:
                raise self.fail("block_size", f"{value!r} is not a tuned define")
            if not all(isinstance(v, int) and 0 < v <= 1024 for v in values):
                raise self.fail("block_size", f"tuned define {value!r} has a non-block-size value")
            return value
        return self.integer("block_size", DEFAULT_BLOCK_SIZE, 1, 1024)

    def launch_bounds(self, defines: dict[str, str], tuned: dict[str, Values]) -> int | str:
        match = _LAUNCH_BOUNDS_RE.search(self.text)
        token = match.group(1) if match else ""
        if token in tuned and all(isinstance(v, int) for v in tuned[token]):
            return token
        token = defines.get(token) or self.source_define(token) or token
        return int(token) if token.isdigit() and int(token) > 0 else DEFAULT_BLOCK_SIZE

    def source_define(self, name: str) -> str | None:
        if not _NAME_RE.fullmatch(name):
            return None
        pattern = rf"^[ \t]*#[ \t]*define[ \t]+{name}[ \t]+(\d+)\b"
        match = re.search(pattern, self.text, re.MULTILINE)
        return match.group(1) if match else None


def _bundle_dir(directory: Path, root: Path, index: int) -> str:
    if directory.is_relative_to(root):
        return directory.relative_to(root).as_posix() or "."
    return f"inc{index}"


def _collect(path: Path, rel: str, dirs: list[tuple[Path, str]], files: dict[str, bytes]) -> None:
    content = path.read_bytes()
    if rel in files:
        if files[rel] != content:
            raise KernelError(f"two different headers map to {rel} in the source bundle")
        return
    files[rel] = content
    for name in _INCLUDE_RE.findall(content.decode(errors="replace")):
        found = _resolve(name, path, rel, dirs)
        if found is not None:
            _collect(found[0], found[1], dirs, files)


def _resolve(
    name: str, includer: Path, includer_rel: str, dirs: list[tuple[Path, str]]
) -> tuple[Path, str] | None:
    if PurePosixPath(name).is_absolute():
        return None
    candidates = [(includer.parent, PurePosixPath(includer_rel).parent)]
    candidates += [(directory, PurePosixPath(rel)) for directory, rel in dirs]
    for directory, bundle_dir in candidates:
        if (directory / name).is_file():
            rel = posixpath.normpath(bundle_dir / name)
            if rel.split("/")[0] == "..":
                raise KernelError(
                    f'{includer}: #include "{name}" reaches outside the kernel '
                    "folder; include it relative to an include_dirs entry"
                )
            return directory / name, rel
    return None  # not ours (a toolchain or harness header): the compiler finds it
