"""The two-stage compile: PTX once per front-end configuration, ptxas once per variant.

Everything here takes and returns bytes, so it runs unchanged on a Ray worker that shares no
filesystem with the driver.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from compileiq.build.cubin import CubinError, text_sections
from compileiq.build.linkage import stable_ptx
from compileiq.build.resources import EntryResources, parse_resources, thread_bounds
from compileiq.core.processes import (
    COMPILER_MEMORY,
    ToolRun,
    killed_by,
    run_tool,
    scratch_dir,
    scratch_full,
)
from compileiq.core.text import printable
from compileiq.core.words import nvcc_arg_problem, word_problem
from compileiq.source.base_flags import host_level
from compileiq.source.harness import harness_include_dir

if TYPE_CHECKING:
    from compileiq.source.spec import SourceBundle


ATTEMPTS = 2  # a compiler that timed out or crashed gets one more try before it counts
RESOURCE_REPORT_VERSION = 3  # 2: device functions' spills are counted; 3: shared memory read beside a stack clause; part of every build-cache key


class BuildStatus(str, Enum):
    OK = "ok"
    COMPILE_ERROR = "compile_error"  # the compiler refused the input and said why
    TIMEOUT = "timeout"
    CRASHED = "crashed"  # killed by a signal, or exited 0 with missing or unreadable output

    @property
    def deterministic(self) -> bool:
        """The same inputs give the same outcome: worth caching (timeouts and crashes are not)."""
        return self in (BuildStatus.OK, BuildStatus.COMPILE_ERROR)


@dataclass(frozen=True)
class FrontendJob:
    nvcc: str
    bundle: SourceBundle
    arch: str  # the PTX's (-arch=ARCH -ptx): the arch tuned, or the older compute_80 its machine code is made from
    args: tuple[str, ...]
    timeout_s: float


@dataclass(frozen=True)
class PtxResult:
    status: BuildStatus
    ptx: bytes
    seconds: float
    message: str
    relocatable: bool = False  # from -rdc=true: ptxas assembles it with --compile-only
    ptxas_base: tuple[str, ...] = ()  # from the base flags (nvcc's -maxrregcount): after the variant's own, as nvcc hands them


@dataclass(frozen=True)
class AssembleJob:
    ptxas: str
    arch: str
    args: tuple[str, ...]
    timeout_s: float


@dataclass(frozen=True)
class Build:
    status: BuildStatus
    message: str
    entries: tuple[EntryResources, ...]
    code_hash: str | None
    cubin: bytes
    seconds: float  # ptxas wall time of this variant

    @property
    def ok(self) -> bool:
        return self.status is BuildStatus.OK


def emit_ptx(job: FrontendJob, attempts: int = ATTEMPTS) -> PtxResult:
    """Run the nvcc front end: source bundle -> PTX bytes (see `_produce` for `attempts`)."""
    if refused := unsafe_nvcc_args((*job.bundle.base_args, *job.args)):
        return PtxResult(BuildStatus.COMPILE_ERROR, b"", 0.0, refused)
    try:
        with scratch_dir("ptx") as workdir:
            main = job.bundle.write_to(Path(workdir))
            out = Path(workdir) / "kernel.ptx"
            argv = [job.nvcc, f"-arch={job.arch}", "-ptx", *job.bundle.base_args, *job.args, *job.bundle.include_args,
                    f"-I{harness_include_dir()}", str(main), "-o", str(out)]
            made = _produce(_Call("nvcc", argv, out, "PTX", job.timeout_s, workdir), _ptx_problem, attempts)
    except OSError as error:
        return PtxResult(BuildStatus.CRASHED, b"", 0.0, _unprepared("nvcc", error))
    # names of internal linkage carry a hash of the scratch folder's path: the same on every build
    return PtxResult(made.status, stable_ptx(made.data), made.seconds, made.message, job.bundle.relocatable,
                     job.bundle.ptxas_base_args)


def assemble(job: AssembleJob, ptx: PtxResult, attempts: int = ATTEMPTS) -> Build:
    """Run ptxas -v on PTX: one variant's machine code and its resource report."""
    if ptx.status is not BuildStatus.OK:
        return Build(ptx.status, ptx.message, (), None, b"", 0.0)
    try:
        with scratch_dir("sass") as workdir:
            source, out = Path(workdir) / "kernel.ptx", Path(workdir) / "kernel.cubin"
            source.write_bytes(ptx.ptx)
            compile_only = ("--compile-only",) if ptx.relocatable else ()
            argv = [job.ptxas, f"-arch={job.arch}", "-v", *compile_only, *job.args, *ptx.ptxas_base, str(source), "-o", str(out)]
            made = _produce(_Call("ptxas", argv, out, "cubin", job.timeout_s, workdir), _cubin_problem, attempts)
    except OSError as error:
        return Build(BuildStatus.CRASHED, _unprepared("ptxas", error), (), None, b"", 0.0)
    if not made.ok:
        return Build(made.status, made.message, (), None, b"", made.seconds)
    sections = text_sections(made.data)
    entries = parse_resources(made.report, {name: len(code) // 16 for name, code in sections.items()})
    bounds = thread_bounds(ptx.ptx)
    entries = tuple(replace(e, max_threads=bounds[e.name]) if e.name in bounds else e for e in entries)
    return Build(BuildStatus.OK, "", entries, code_hash(sections), made.data, made.seconds)


@dataclass(frozen=True)
class _Call:
    """One compiler call whose argv writes `out` (`what` names that file in messages)."""

    tool: str
    argv: list[str]
    out: Path
    what: str
    timeout_s: float
    cwd: str


@dataclass(frozen=True)
class _Product:
    status: BuildStatus
    data: bytes  # the file the compiler wrote (when OK)
    report: str  # what the compiler printed
    message: str  # why there is no usable file
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status is BuildStatus.OK


def _produce(call: _Call, problem: Callable[[bytes], str | None], attempts: int) -> _Product:
    """Run the compiler; one that timed out or crashed is tried again, `attempts` times in all,
    before it counts (Ray tasks make one attempt: the driver decides every re-run, see workers)."""
    seconds = 0.0
    for attempt in range(1, attempts + 1):
        call.out.unlink(missing_ok=True)
        made = _attempt(call, problem)
        seconds += made.seconds
        if made.status.deterministic:
            break
    made = replace(made, seconds=seconds)
    return tried(made, attempt) if attempt > 1 else made


Tried = TypeVar("Tried", "PtxResult", "Build", "ExecutableBuild", "_Product")


def tried(result: Tried, times: int) -> Tried:
    """A failed result whose message says how many times the compiler ran; a success as it is."""
    if result.status is BuildStatus.OK:
        return result
    return replace(result, message=f"{result.message} (tried {times} times)")


def _attempt(call: _Call, problem: Callable[[bytes], str | None]) -> _Product:
    """One compiler run. A run that ends with the scratch filesystem full is a crash that names
    it, even one that exited 0: its output file or its printed report (`-v`, in a scratch file
    too) may be cut short, and as a compile error or a build without kernels the cache would keep
    it, never to be tried again."""
    made = _outcome(call, problem)
    if not (full := scratch_full(call.cwd)):
        return made
    return replace(made, status=BuildStatus.CRASHED, message=f"{call.tool} failed: {full}")


def _outcome(call: _Call, problem: Callable[[bytes], str | None]) -> _Product:
    run = run_tool(call.argv, call.timeout_s, cwd=call.cwd, memory_bytes=COMPILER_MEMORY)
    # the sources lie in a scratch folder gone by the time anyone reads this: name them from the bundle's top
    run = replace(run, output=run.output.replace(f"{call.cwd}{os.sep}", ""))

    def failed(status: BuildStatus, message: str) -> _Product:
        return _Product(status, b"", run.output, message, run.seconds)

    if run.timed_out:
        return failed(BuildStatus.TIMEOUT, f"{call.tool} did not finish within {call.timeout_s:g} s and was killed")
    if crash := _crash(call.tool, run):
        return failed(BuildStatus.CRASHED, crash)
    if run.returncode != 0:
        return failed(BuildStatus.COMPILE_ERROR, _trim(run.output))
    try:
        data = call.out.read_bytes()
    except FileNotFoundError:
        return failed(BuildStatus.CRASHED, f"{call.tool} exited 0 but wrote no {call.what}")
    except OSError as error:
        return failed(BuildStatus.CRASHED, f"cannot read the {call.what} {call.tool} wrote: {error.strerror}")
    if not data:
        return failed(BuildStatus.CRASHED, f"{call.tool} exited 0 but wrote an empty {call.what}")
    if why := problem(data):
        return failed(BuildStatus.CRASHED, f"{call.tool} wrote an unreadable {call.what}: {why}")
    return _Product(BuildStatus.OK, data, run.output, "", run.seconds)


def _crash(tool: str, run: ToolRun) -> str | None:
    name = killed_by(run.returncode)
    if name is None:
        return None
    said = f"\n{_trim(run.output)}" if run.output.strip() else ""
    if run.returncode < 0:
        return f"{tool} was killed by {name}{said}"
    return f"{tool} exited with status {run.returncode}: a process it ran was killed by {name}{said}"


def _ptx_problem(data: bytes) -> str | None:
    return None if b".version" in data else "no .version directive"


def _cubin_problem(data: bytes) -> str | None:
    try:
        text_sections(data)
    except CubinError as error:
        return str(error)
    return None


def _executable_problem(data: bytes) -> str | None:
    return None if data[:4] == b"\x7fELF" else "not an ELF file"


def _unprepared(tool: str, error: OSError) -> str:
    return f"cannot prepare the {tool} run: {error.strerror or error}"


def code_hash(sections: dict[str, bytes]) -> str:
    """sha256 over each kernel's machine code: equal hash, equal code (debug info excluded)."""
    digest = hashlib.sha256()
    for name in sorted(sections):
        digest.update(name.encode() + b"\0" + sections[name])
    return digest.hexdigest()


def _trim(output: str, limit: int = 4000) -> str:
    text = output.strip()
    return text if len(text) <= limit else text[:limit] + " …"


@dataclass(frozen=True)
class ExecutableJob:
    """One measuring executable: the kernel's main with the harness, built by a full nvcc run."""

    nvcc: str
    bundle: SourceBundle
    arch: str
    frontend_args: tuple[str, ...]  # nvcc-level flags and -D defines
    ptxas_args: tuple[str, ...]  # passed through as -Xptxas=ARG
    timeout_s: float
    harness_include: str | None = None  # default: this installation's include directory
    ptx_arch: str | None = None  # compute_80 for sm_86 machine code made from it (`arch_code.ptx_arch`)


@dataclass(frozen=True)
class ExecutableBuild:
    status: BuildStatus
    executable: bytes
    seconds: float
    message: str

    @property
    def ok(self) -> bool:
        return self.status is BuildStatus.OK


# The measuring program's host code (input generation, output hashing, the CPU reference) is
# built optimised: nvcc leaves it at the host compiler's -O0, which on the first GPU lent made each
# measuring process seconds slower (2^27 random floats: 3.9 s at -O0, 0.9 s at -O2; hashing a
# 256 MiB output: 3.3 s against 0.95 s). The device pass is preprocessed by the host compiler with
# the same options, so -O2 alone defined __OPTIMIZE__ (and not __NO_INLINE__) there too (nvcc 13.0),
# and a kernel that reads them was timed as other code than the cubin the static builds (no host -O)
# record. compileiq/host_optimisation.h, pre-included before anything else, gives the device pass
# back the default level's macros: the timed device code is the recorded one.
HOST_HEADER = "compileiq/host_optimisation.h"


def host_optimisation(include: str) -> str:
    """The -Xcompiler option that builds the host code at -O2 and pre-includes the bundled header
    by its absolute path: GCC looks for an -include's relative name in the working directory first
    (the kernel's bundle is written there), then along -I, so a compileiq/host_optimisation.h of the
    kernel's own would be used instead. nvcc splits the value at commas and hands it to /bin/sh:
    the path is quoted for the shell (a folder with a space), and one holding a comma is refused."""
    header = f"{include}/{HOST_HEADER}"
    if "," in header:
        raise ValueError(f"the measuring build pre-includes {header} through -Xcompiler, which nvcc splits at "
                         "commas: install compileiq in a folder whose path holds no comma")
    return f"-Xcompiler=-O2,-include,{shlex.quote(header)}"


def unsafe_nvcc_args(nvcc_args: tuple[str, ...], ptxas_args: tuple[str, ...] = ()) -> str | None:
    """Why nvcc must not be run with these arguments (None: it may), checked before anything runs,
    whatever checked them before (a search-space file, an ACF): nvcc hands -Xptxas values, and
    options it forwards, to /bin/sh unquoted, so each is one plain word (a -D passes the macro
    allow-list: nvcc quotes it); a ptxas argument holds no comma either (-Xptxas= splits there)."""
    for arg in nvcc_args:
        if problem := nvcc_arg_problem(arg):
            return f"compileiq refused to run nvcc with the argument {printable(arg)[:80]!r}: {problem}"
    for arg in ptxas_args:
        if problem := word_problem(arg):
            return f"compileiq refused to run nvcc with the ptxas argument {printable(arg)[:80]!r}: {problem}"
    return None


def executable_argv(job: ExecutableJob, main: Path, out: Path) -> list[str]:
    include = job.harness_include or str(harness_include_dir())
    ptxas = [f"-Xptxas={arg}" for arg in job.ptxas_args]
    base = job.bundle.base_args
    std = () if any(arg.startswith("-std=") for arg in base) else ("-std=c++17",)
    # sm_86 machine code from compute_80 PTX, as the trials' PTX (`FrontendJob.arch`)
    arch = (f"-arch={job.ptx_arch}", f"-code={job.arch}") if job.ptx_arch not in (None, job.arch) else (f"-arch={job.arch}",)
    # a host -O among the base flags is the shipped build's, applied because its device code reads the
    # macros it defines (`host_check`): the device pass keeps them, and the host code is optimised already
    host = () if any(host_level(arg) for arg in base) else (host_optimisation(include),)
    return [job.nvcc, *arch, *host, *base, *job.frontend_args, *ptxas, *std,
            f"-I{include}", *job.bundle.include_args, str(main), "-o", str(out), "-ldl"]


def build_executable(job: ExecutableJob, attempts: int = ATTEMPTS) -> ExecutableBuild:
    """Source bundle -> executable bytes (runs on any CPU worker: bytes in, bytes out)."""
    if refused := unsafe_nvcc_args((*job.bundle.base_args, *job.frontend_args), job.ptxas_args):
        return ExecutableBuild(BuildStatus.COMPILE_ERROR, b"", 0.0, refused)
    try:
        with scratch_dir("exe") as workdir:
            main = job.bundle.write_to(Path(workdir))
            out = Path(workdir) / "variant"
            call = _Call("nvcc", executable_argv(job, main, out), out, "executable", job.timeout_s, workdir)
            made = _produce(call, _executable_problem, attempts)
    except OSError as error:
        return ExecutableBuild(BuildStatus.CRASHED, b"", 0.0, _unprepared("nvcc", error))
    except ValueError as error:  # `host_optimisation`: compileiq's own folder cannot be named to nvcc
        return ExecutableBuild(BuildStatus.CRASHED, b"", 0.0, str(error))
    return ExecutableBuild(made.status, made.data, made.seconds, made.message)
