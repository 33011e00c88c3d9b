"""The kernel spec (a .cu file plus its optional tune.toml) and the source bundle shipped to workers.

A tuned define's first listed value is its default: the baseline configuration uses it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from compileiq.base_flags import BaseFlags, path_problem
from compileiq.errors import UsageError
from compileiq.output_file import not_regular

TUNE_FILE = "tune.toml"
DEFAULT_ARCH = "sm_90"
ARCH = re.compile(r"sm_[1-9]\d{1,2}[af]?")  # what --arch, tune.toml and an ACF accept: sm_90, sm_90a, sm_100f
DEFAULT_BLOCK_SIZE = 256
DEPENDENCY_TIMEOUT_S = 120.0
MAX_TIMEOUT_S = 86400  # a day: also refuses inf and nan
CUDA_SUFFIXES = (".cu", ".cuh")
Values = tuple[int | str, ...]


class KernelError(UsageError):
    """A kernel file or its tune.toml is missing or invalid."""


@dataclass(frozen=True)
class LaunchFacts:
    """How one entry is launched: threads per block and dynamic shared memory, each an integer
    or an arithmetic expression over macros (``2*BLOCK*sizeof(float)``)."""

    entry: str
    block_size: str | None = None
    dynamic_smem: str | None = None


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
    nvcc_flags: BaseFlags = field(default_factory=BaseFlags)  # what the code needs to build at all
    launch: tuple[LaunchFacts, ...] = ()  # per-entry launch facts ([launch.NAME] tables)
    block_size_given: bool = False  # block_size set in tune.toml (else from __launch_bounds__)

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

    def settings(self) -> dict[str, Any]:
        """Every tune.toml setting that changes a build or a score, as plain JSON data."""
        return {
            "entries": list(self.entries), "block_size": [self.block_size, self.block_size_given],
            "dynamic_smem": self.dynamic_smem, "defines": [list(d) for d in self.defines],
            "tuned_defines": [[name, list(values)] for name, values in self.tuned_defines],
            "nvcc_flags": list(self.nvcc_flags.flags),
            "launch": [[f.entry, f.block_size, f.dynamic_smem] for f in self.launch],
            "rtol": self.rtol, "atol": self.atol, "mode": self.mode,
            "metric_regex": self.metric_regex, "run_args": list(self.run_args),
        }  # fmt: skip

    def settings_sha256(self) -> str:
        text = json.dumps(self.settings(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class SourceBundle:
    """A kernel's source and every header it reads (outside the toolchain) as bytes, for a
    worker with no shared disk, with the arguments that build it there."""

    main: str
    files: tuple[tuple[str, bytes], ...]
    include_args: tuple[str, ...]
    sha256: str  # the files, their paths and the arguments below
    base_args: tuple[str, ...] = ()  # the kernel's base flags (and -x cu for a header), no -I

    @property
    def relocatable(self) -> bool:
        """Built with -rdc=true: ptxas must assemble its PTX with --compile-only."""
        return "-rdc=true" in self.base_args

    def write_to(self, directory: Path) -> Path:
        """Materialise the bundle under ``directory``; return the main file's path."""
        for rel, content in self.files:
            if PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts or path_problem(rel):
                raise KernelError(f"unsafe path in source bundle: {rel!r}")
            target = directory / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        return directory / self.main


def study_identity(spec: KernelSpec, bundle: SourceBundle) -> str:
    """sha256 of the sources (with their build arguments) and the build- and score-relevant
    tune.toml settings: two runs with the same identity are the same study."""
    text = json.dumps({"sources": bundle.sha256, "settings": spec.settings()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


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

    ``arch`` overrides the file's arch; without either, the GPU's arch or sm_90. Whether the
    file holds a kernel is the compiled module's to say (a kernel may live in an included file).
    """
    from compileiq.kernel_toml import parse_spec

    source = Path(cu_path).expanduser().resolve()
    if kind := not_regular(source):  # checked before anything opens it: reading a named pipe blocks
        raise KernelError(f"{cu_path} is {kind}, not a regular file: give the kernel's .cu or .cuh file")
    if not source.is_file():
        raise KernelError(f"kernel file not found: {cu_path}")
    if source.suffix not in CUDA_SUFFIXES:
        raise KernelError(f"{cu_path} is not a CUDA source: expected a {' or '.join(CUDA_SUFFIXES)} file")
    if problem := path_problem(source.name):
        raise KernelError(f"kernel file name: {problem}")
    return parse_spec(source, arch)


def bundle_sources(spec: KernelSpec, nvcc: str | None = None) -> SourceBundle:
    """The main file and every file the compiler reads for it, except the toolchain's own and the
    compileiq harness (from `nvcc -M` with the spec's include folders, defines and base flags)."""
    from compileiq.compile import harness_include_dir
    from compileiq.dependencies import compiler_dependencies
    from compileiq.toolchain import find_toolchain

    nvcc = nvcc or find_toolchain().nvcc
    root = spec.source.parent
    toolchain_dirs = _toolchain_dirs(nvcc)
    top = _bundle_top(root, spec.include_dirs, toolchain_dirs)
    dirs = [(d, _bundle_dir(d, top, i)) for i, d in enumerate(spec.include_dirs)]
    base_args = spec.nvcc_flags.flags + (("-x", "cu") if spec.source.suffix == ".cuh" else ())
    defaults = tuple(f"-D{k.removeprefix('define.')}={v}" for k, v in spec.default_values().items())
    includes = tuple(f"-I{_relative(d, root)}" for d, _ in dirs) + (f"-I{harness_include_dir()}",)
    args = (f"-arch={spec.arch}", *spec.nvcc_flags.flags, *spec.fixed_define_args(), *defaults, *includes)
    # the preprocessor alone, once per run: not held to the per-variant compile timeout
    found = compiler_dependencies(nvcc, root, spec.source.name, args, max(spec.compile_timeout_s, DEPENDENCY_TIMEOUT_S),
                                  [d for d, _ in dirs])
    files: dict[str, bytes] = {}
    for path in found:
        rel = _bundle_path(path, root, top, dirs, toolchain_dirs)
        if rel is not None:
            files[rel] = path.read_bytes()
    include_args = tuple(f"-I{rel}" for _, rel in dirs)
    main = spec.source.relative_to(top).as_posix()
    if problem := path_problem(main):
        raise KernelError(f"kernel file {problem}")
    digest = hashlib.sha256(json.dumps([main, include_args, base_args]).encode())
    for rel, content in files.items():
        digest.update(f"{rel}\0{len(content)}\0".encode())
        digest.update(content)
    return SourceBundle(main, tuple(files.items()), include_args, digest.hexdigest(), base_args)


def _relative(directory: Path, root: Path) -> str:
    text = os.path.relpath(directory, root)
    if problem := path_problem(text):
        raise KernelError(f"include folder: {problem}")
    return text


def _toolchain_dirs(nvcc: str) -> tuple[Path, ...]:
    from compileiq.compile import harness_include_dir

    cuda = Path(os.path.normpath(Path(nvcc).resolve().parent.parent))
    return (cuda, Path(os.path.normpath(harness_include_dir().resolve())), Path("/usr"), Path("/opt"))


def _bundle_top(root: Path, include_dirs: tuple[Path, ...], toolchain: tuple[Path, ...]) -> Path:
    """The folder the bundle mirrors: the kernel's, or the nearest one above it that also holds
    the project's include folders, so that a quoted ``#include "../../test/util.h"`` finds the
    same file in the bundle as on disk. Include folders of the toolchain or the system (/usr,
    /opt), or with nothing but the filesystem's root in common with the kernel's, go to inc<N>/:
    the bundle never depends on where the project lies."""
    project = [d for d in include_dirs if not any(d.is_relative_to(t) for t in toolchain)]
    top = Path(os.path.commonpath([root, *project]))
    return root if top == Path(top.anchor) else top


def _bundle_dir(directory: Path, top: Path, index: int) -> str:
    if directory.is_relative_to(top):
        return directory.relative_to(top).as_posix() or "."
    return f"inc{index}"


def _bundle_path(path: Path, root: Path, top: Path, dirs: list[tuple[Path, str]],
                 toolchain: tuple[Path, ...]) -> str | None:
    """Where a dependency goes in the bundle; None for a toolchain or system header."""
    if any(path.is_relative_to(d) for d in toolchain[:2]):
        return None
    rel: str | None = None
    if path.is_relative_to(root):
        rel = path.relative_to(top).as_posix()
    else:
        for directory, bundle_dir in dirs:
            if path.is_relative_to(directory):
                rel = PurePosixPath(bundle_dir, path.relative_to(directory).as_posix()).as_posix()
                break
    if rel is None:
        if any(path.is_relative_to(d) for d in toolchain[2:]):
            return None
        raise KernelError(
            f"{path} reaches outside the kernel folder and its include_dirs: a worker would not "
            "find it; add its folder (or one above it) to include_dirs in tune.toml"
        )
    if problem := path_problem(rel):
        raise KernelError(f"header {problem}")
    return rel
