"""A kernel on disk: its spec loaded from the .cu file and tune.toml, and every file its build reads
gathered into the source bundle shipped to workers."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path, PurePosixPath

from compileiq.core.bounded_read import is_dir
from compileiq.core.output_file import not_regular
from compileiq.source.base_flags import parse_base_flags, path_problem
from compileiq.source.spec import KernelError, KernelSpec, SourceBundle, resolved

DEPENDENCY_TIMEOUT_S = 120.0
CUDA_SUFFIXES = (".cu", ".cuh")


def study_identities(spec: KernelSpec, bundle: SourceBundle) -> tuple[str, ...]:
    """sha256 of the sources (with their build arguments) and the build- and score-relevant
    tune.toml settings, once per identity of the settings (`KernelSpec.identities`: this release's
    first, then the one releases before 2026-12-06 gave, where other): two runs with the same
    identity are the same study, and a study under any of them is one of this kernel's."""
    return tuple(hashlib.sha256(json.dumps({"sources": bundle.sha256, "settings": s}, sort_keys=True).encode()).hexdigest()
                 for s in spec.identities())


def study_identity(spec: KernelSpec, bundle: SourceBundle) -> str:
    """This release's study identity (`study_identities`)."""
    return study_identities(spec, bundle)[0]


def load_spec(cu_path: Path, *, arch: str | None = None) -> KernelSpec:
    """Load a kernel's spec from ``cu_path`` and the tune.toml beside it (if any).

    ``arch`` overrides the file's arch; without either, the GPU's arch or sm_90. Whether the
    file holds a kernel is the compiled module's to say (a kernel may live in an included file).
    """
    from compileiq.source.kernel_toml import parse_spec

    source = resolved(Path(cu_path), "kernel file")
    if kind := not_regular(source):  # checked before anything opens it: reading a named pipe blocks
        raise KernelError(f"{cu_path} is {kind}, not a regular file: give the kernel's .cu or .cuh file")
    if not source.is_file():
        raise KernelError(f"kernel file not found: {cu_path}")
    if source.suffix not in CUDA_SUFFIXES:
        raise KernelError(f"{cu_path} is not a CUDA source: expected a {' or '.join(CUDA_SUFFIXES)} file")
    if problem := path_problem(source.name):
        raise KernelError(f"kernel file name: {problem}")
    return parse_spec(source, arch)


def with_base_flags(spec: KernelSpec, args: Sequence[str], where: str) -> KernelSpec:
    """The spec with more base flags (a compile command's, or those an ACF recorded), validated like
    tune.toml's: its -I folders, relative to the kernel's folder, join the include folders after
    tune.toml's own; a flag given twice counts once, so tune.toml's flags followed by an ACF's
    (which begin with them) give the flags `tune` built with, in its order."""
    flags = parse_base_flags([*spec.nvcc_flags.as_args(), *args], where)
    folders = [resolved(spec.source.parent / d, "include folder") for d in flags.include_dirs]
    system = [resolved(spec.source.parent / d, "include folder") for d in flags.system_dirs]
    if missing := [f for f in [*folders, *system] if not is_dir(f)]:
        raise KernelError(f"{where}: include folder {missing[0]} is not a directory")
    return replace(spec, nvcc_flags=flags, include_dirs=tuple(dict.fromkeys([*spec.include_dirs, *folders, *system])),
                   system_dirs=tuple(dict.fromkeys([*spec.system_dirs, *system])))


def bundle_sources(spec: KernelSpec, nvcc: str | None = None) -> SourceBundle:
    """The main file and every file the compiler reads for it, except the toolchain's own and the
    compileiq harness (from `nvcc -M` with the spec's include folders, defines and base flags)."""
    from compileiq.core.toolchain import find_toolchain
    from compileiq.source import enumerators
    from compileiq.source.dependencies import compiler_dependencies

    nvcc = nvcc or find_toolchain().nvcc
    root = spec.source.parent
    toolchain_dirs = _toolchain_dirs(nvcc)
    base_args = spec.nvcc_flags.flags + (("-x", "cu") if spec.source.suffix == ".cuh" else ())
    # the preprocessor alone, once per run: not held to the per-variant compile timeout
    found = compiler_dependencies(nvcc, root, spec.source.name, preprocessor_args(spec),
                                  max(spec.compile_timeout_s, DEPENDENCY_TIMEOUT_S), list(spec.include_dirs))
    top = _bundle_top(root, spec.include_dirs, toolchain_dirs)
    read = _Reader()
    top, carried = _above_included(top, root, spec.include_dirs, toolchain_dirs, found, read)
    dirs = [(d, _bundle_dir(d, top, i)) for i, d in enumerate(spec.include_dirs)]
    files: dict[str, bytes] = {}
    origins: list[str] = []
    for path in found:
        rel = _bundle_path(path, root, top, dirs, toolchain_dirs, carried)
        if rel is not None:
            files[rel] = read(path)
            origins.append(str(root / path))  # nvcc -M ran in `root`
    include_args = tuple(spec.include_flag(d, rel) for d, rel in dirs)
    main = spec.source.relative_to(top).as_posix()
    if problem := path_problem(main):
        raise KernelError(f"kernel file {problem}")
    digest = hashlib.sha256(json.dumps([main, include_args, base_args]).encode())
    for rel, content in files.items():
        digest.update(f"{rel}\0{len(content)}\0".encode())
        digest.update(content)
    named = enumerators.wanted([*spec.entries, *(f.entry for f in spec.launch)])
    return SourceBundle(main, tuple(files.items()), include_args, digest.hexdigest(), base_args,
                        enumerators.resolve(named, found), tuple(origins))


def preprocessor_args(spec: KernelSpec, macros: Mapping[str, int | str | None] | None = None) -> tuple[str, ...]:
    """The arguments that preprocess the kernel (run in its folder) as its default build does:
    the arch, base flags, fixed macros, each tuned macro at its first value (or `macros`' value;
    None: no -D for it) and the include folders, relative to the kernel's folder."""
    from compileiq.source.harness import harness_include_dir

    values = {name: values[0] for name, values in spec.tuned_defines} | dict(macros or {})
    defaults = tuple(f"-D{name}={value}" for name, value in values.items() if value is not None)
    root = spec.source.parent
    includes = tuple(spec.include_flag(d, _relative(d, root)) for d in spec.include_dirs) + (f"-I{harness_include_dir()}",)
    return (f"-arch={spec.arch}", *spec.nvcc_flags.flags, *spec.fixed_define_args(), *defaults, *includes)


HARNESS_PARTS = ("compileiq", "harness.cuh")  # `#include <compileiq/harness.cuh>`


def _relative(directory: Path, root: Path) -> str:
    text = os.path.relpath(directory, root)
    if problem := path_problem(text):
        raise KernelError(f"include folder: {problem}")
    return text


def _toolchain_dirs(nvcc: str) -> tuple[Path, ...]:
    from compileiq.core.toolchain import cuda_root
    from compileiq.source.harness import harness_include_dir

    cuda = cuda_root(nvcc)
    return (cuda, Path(os.path.normpath(harness_include_dir().resolve())), *SYSTEM_DIRS)


# Where the system's headers live: a file there is not bundled unless a project file reaches it by a
# quoted relative #include (a project may itself lie under /opt or /usr: a Docker image's /opt/app).
SYSTEM_DIRS = (Path("/usr"), Path("/opt"))


class _Reader:
    """Each file's bytes, read once: the scan for quoted includes and the bundle read the same files."""

    def __init__(self) -> None:
        self._read: dict[Path, bytes] = {}

    def __call__(self, path: Path) -> bytes:
        if path not in self._read:
            self._read[path] = path.read_bytes()
        return self._read[path]


def _bundle_top(root: Path, include_dirs: tuple[Path, ...], toolchain: tuple[Path, ...]) -> Path:
    """The folder the bundle mirrors: the kernel's, or the nearest one above it that also holds
    the project's include folders, so that a quoted ``#include "../../test/util.h"`` finds the
    same file in the bundle as on disk. Include folders of the toolchain or the system (/usr,
    /opt), or with nothing but the filesystem's root in common with the kernel's, go to inc<N>/:
    the bundle never depends on where the project lies."""
    project = [d for d in include_dirs if not any(d.is_relative_to(t) for t in toolchain) and not _harness_folder(d)]
    top = Path(os.path.commonpath([root, *project]))
    return root if top == Path(top.anchor) else top


def _above_included(top: Path, root: Path, include_dirs: tuple[Path, ...], toolchain: tuple[Path, ...],
                    found: Sequence[Path], read: _Reader) -> tuple[Path, frozenset[Path]]:
    """The bundle's top folder, raised to hold every file the build reads outside the kernel's
    folder and its include folders that a project file reaches by a quoted relative include (a
    ``#include "../../common/x.h"``, as PolyBench and Rodinia write them, that nvcc finds with no
    -I): the kernel's code chose to read it, so it ships with the kernel, in the same place
    relative to it, even under /usr or /opt (a project that lies there). Scanned: the files of the
    kernel's folder and of its include folders, and those carried, in turn. Not
    above the nearest folder they share with the kernel's: a file that shares none but the
    filesystem's root stays outside (`_bundle_path` says so). Returns the top folder and those files."""
    project_dirs = [d for d in include_dirs if not any(d.is_relative_to(t) for t in toolchain)]
    outside = {p for p in found
               if not p.is_relative_to(root) and not any(p.is_relative_to(d) for d in (*project_dirs, *toolchain[:2]))
               and p.parts[-2:] != HARNESS_PARTS}
    carried: set[Path] = set()
    own = [p for p in found if not any(p.is_relative_to(t) for t in toolchain[:2]) and p.parts[-2:] != HARNESS_PARTS]
    scan = [p for p in own if p.is_relative_to(root) or any(p.is_relative_to(d) for d in include_dirs)] if outside else []
    while scan:  # an absolute #include would not find it in the bundle: relative ones only
        new = (_quoted_relative_includes(scan, read) & outside) - carried
        carried |= new
        scan = sorted(new)
    if not carried:
        return top, frozenset()
    above = Path(os.path.commonpath([top, *(p.parent for p in carried)]))
    if above == Path(above.anchor):
        return top, frozenset(p for p in carried if p.is_relative_to(top))
    return above, frozenset(carried)


def _quoted_relative_includes(files: Sequence[Path], read: _Reader) -> set[Path]:
    """The files that the given files' ``#include "a/b.h"`` lines name by a path relative to the
    including file's folder (normalised): those a bundle that keeps their places still finds."""
    from compileiq.source.dependencies import quoted_includes

    reached: set[Path] = set()
    for path in files:
        try:
            text = read(path)[: 4 << 20].decode(errors="replace")
        except OSError:
            continue
        reached.update(Path(os.path.normpath(path.parent / name)) for name in quoted_includes(text)
                       if not name.startswith("/"))
    return reached


def _harness_folder(directory: Path) -> bool:
    """An include folder that holds the measuring harness and nothing else (a compileiq checkout's
    compileiq/include, which the bundled kernels name): the installed harness's folder stands in
    for it, so where compileiq is installed never changes the bundle (`_bundle_path`)."""
    try:
        return (directory / "compileiq" / "harness.cuh").is_file() and [p.name for p in directory.iterdir()] == ["compileiq"]
    except OSError:
        return False


def _bundle_dir(directory: Path, top: Path, index: int) -> str:
    if directory.is_relative_to(top):
        return directory.relative_to(top).as_posix() or "."
    return f"inc{index}"


def _bundle_path(path: Path, root: Path, top: Path, dirs: list[tuple[Path, str]],
                 toolchain: tuple[Path, ...], carried: frozenset[Path] = frozenset()) -> str | None:
    """Where a dependency goes in the bundle; None for a toolchain or system header, and for the
    measuring harness wherever it was found: every compile passes the installed one's folder, and a
    kernel whose include_dirs reach a compileiq checkout's copy (the bundled kernels do) would
    otherwise hash differently by where compileiq is installed (another study, a false stale-source)."""
    if any(path.is_relative_to(d) for d in toolchain[:2]) or path.parts[-2:] == HARNESS_PARTS:
        return None
    rel: str | None = None
    if path.is_relative_to(root) or path in carried:  # carried: a quoted relative include (`_above_included`)
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
            f"{path} lies outside the kernel's folder and its include_dirs, and no #include \"...\" reaches it by a "
            "relative path (an absolute one, or a folder that shares only the filesystem's root with the kernel's): "
            "a worker would not find it; include it by a path relative to the including file, or add its folder to "
            "include_dirs in tune.toml and include it by name"
        )
    if problem := path_problem(rel):
        raise KernelError(f"header {problem}")
    return rel
