"""The two-stage compile: PTX once per front-end configuration, ptxas once per variant.

Everything here takes and returns bytes, so it runs unchanged on a Ray worker that shares no
filesystem with the driver.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from compileiq.cubin import text_sections

if TYPE_CHECKING:
    from compileiq.kernel import SourceBundle


RESOURCE_REPORT_VERSION = 2  # 2: device functions' spills are counted; part of every build-cache key


class BuildStatus(str, Enum):
    OK = "ok"
    COMPILE_ERROR = "compile_error"
    TIMEOUT = "timeout"


@dataclass(frozen=True)
class ToolRun:
    returncode: int
    output: str
    seconds: float
    timed_out: bool


@dataclass(frozen=True)
class EntryResources:
    name: str
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int
    shared_bytes: int
    barriers: int
    instructions: int
    entry: bool = True  # False: a device function ptxas compiled on its own (not inlined) for calls

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes


@dataclass(frozen=True)
class FrontendJob:
    nvcc: str
    bundle: SourceBundle
    arch: str
    args: tuple[str, ...]
    timeout_s: float


@dataclass(frozen=True)
class PtxResult:
    status: BuildStatus
    ptx: bytes
    seconds: float
    message: str


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


def run_tool(
    argv: list[str], timeout_s: float, cwd: str | None = None, *,
    env: Mapping[str, str] | None = None, with_stderr: bool = True,
) -> ToolRun:
    """Run a compiler or a measuring program in its own process group; on timeout kill the whole
    group (nvcc spawns cicc and ptxas). `with_stderr=False` keeps stdout alone (a program's JSON)."""
    start = time.perf_counter()
    environment = {**os.environ, **env} if env else None
    stderr = subprocess.STDOUT if with_stderr else subprocess.DEVNULL
    try:
        process = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=stderr,
                                   start_new_session=True, env=environment)
    except OSError as error:
        return ToolRun(127, f"cannot run {argv[0]}: {error}", time.perf_counter() - start, False)
    try:
        output, _ = process.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        timed_out = True
    text = output.decode("utf-8", errors="replace")
    return ToolRun(process.returncode, text, time.perf_counter() - start, timed_out)


def harness_include_dir() -> Path:
    """The folder to pass as -I for `#include <compileiq/harness.cuh>` (shipped in the package)."""
    return Path(__file__).with_name("include")


def emit_ptx(job: FrontendJob) -> PtxResult:
    """Run the nvcc front end once: source bundle -> PTX bytes."""
    with tempfile.TemporaryDirectory(prefix="compileiq-ptx-") as workdir:
        main = job.bundle.write_to(Path(workdir))
        out = Path(workdir) / "kernel.ptx"
        argv = [job.nvcc, f"-arch={job.arch}", "-ptx", *job.args, *job.bundle.include_args,
                f"-I{harness_include_dir()}"]
        run = run_tool([*argv, str(main), "-o", str(out)], job.timeout_s, cwd=workdir)
        if run.timed_out:
            return PtxResult(BuildStatus.TIMEOUT, b"", run.seconds, _timeout_message("nvcc", job))
        if run.returncode != 0:
            return PtxResult(BuildStatus.COMPILE_ERROR, b"", run.seconds, _trim(run.output))
        return PtxResult(BuildStatus.OK, out.read_bytes(), run.seconds, "")


def assemble(job: AssembleJob, ptx: PtxResult) -> Build:
    """Run ptxas -v on PTX: one variant's machine code and its resource report."""
    if ptx.status is not BuildStatus.OK:
        return Build(ptx.status, ptx.message, (), None, b"", 0.0)
    with tempfile.TemporaryDirectory(prefix="compileiq-sass-") as workdir:
        source, out = Path(workdir) / "kernel.ptx", Path(workdir) / "kernel.cubin"
        source.write_bytes(ptx.ptx)
        argv = [job.ptxas, f"-arch={job.arch}", "-v", *job.args, str(source), "-o", str(out)]
        run = run_tool(argv, job.timeout_s, cwd=workdir)
        if run.timed_out:
            return Build(BuildStatus.TIMEOUT, _timeout_message("ptxas", job), (), None, b"", run.seconds)
        if run.returncode != 0:
            return Build(BuildStatus.COMPILE_ERROR, _trim(run.output), (), None, b"", run.seconds)
        cubin = out.read_bytes()
    sections = text_sections(cubin)
    entries = parse_resources(run.output, {name: len(code) // 16 for name, code in sections.items()})
    return Build(BuildStatus.OK, "", entries, code_hash(sections), cubin, run.seconds)


def code_hash(sections: dict[str, bytes]) -> str:
    """sha256 over each kernel's machine code: equal hash, equal code (debug info excluded)."""
    digest = hashlib.sha256()
    for name in sorted(sections):
        digest.update(name.encode() + b"\0" + sections[name])
    return digest.hexdigest()


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")


def parse_resources(report: str, instructions: dict[str, int]) -> tuple[EntryResources, ...]:
    """Parse `ptxas -v` output: one record per entry function, then one per device function that
    ptxas compiled on its own (a `__noinline__` callee: a "Function properties" block with its own
    stack frame and spills, and no register line), so that no function's spills go uncounted."""
    entries: list[EntryResources] = []
    frames: dict[str, dict[str, int]] = {}
    current: str | None = None  # the entry being compiled
    described: str | None = None  # the function whose properties come next
    for line in report.splitlines():
        if match := _ENTRY.search(line):
            current = described = match.group(1)
        elif match := _PROPERTIES.search(line):
            described = match.group(1)
        elif (match := _FRAME.search(line)) and described is not None:
            frames[described] = {"stack": int(match[1]), "stores": int(match[2]), "loads": int(match[3])}
        elif (match := _USED.search(line)) and current is not None:
            entries.append(_entry(current, frames.get(current, {}), match, instructions))
            current = None
    names = {entry.name for entry in entries}
    functions = [_function(name, frame, instructions) for name, frame in frames.items() if name not in names]
    return (*entries, *functions)


def _entry(name: str, frame: dict[str, int], used: re.Match[str], counts: dict[str, int]) -> EntryResources:
    return EntryResources(
        name=name,
        registers=int(used[1]),
        spill_store_bytes=frame.get("stores", 0),
        spill_load_bytes=frame.get("loads", 0),
        stack_bytes=frame.get("stack", 0),
        shared_bytes=int(used[3] or 0),
        barriers=int(used[2] or 0),
        instructions=counts.get(name, 0),
    )


def _function(name: str, frame: dict[str, int], counts: dict[str, int]) -> EntryResources:
    return EntryResources(name, 0, frame["stores"], frame["loads"], frame["stack"], 0, 0, counts.get(name, 0),
                          entry=False)


def _trim(output: str, limit: int = 4000) -> str:
    text = output.strip()
    return text if len(text) <= limit else text[:limit] + " …"


def _timeout_message(tool: str, job: FrontendJob | AssembleJob) -> str:
    return f"{tool} did not finish within {job.timeout_s:g} s and was killed"


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


@dataclass(frozen=True)
class ExecutableBuild:
    status: BuildStatus
    executable: bytes
    seconds: float
    message: str

    @property
    def ok(self) -> bool:
        return self.status is BuildStatus.OK


def executable_argv(job: ExecutableJob, main: Path, out: Path) -> list[str]:
    include = job.harness_include or str(harness_include_dir())
    ptxas = [f"-Xptxas={arg}" for arg in job.ptxas_args]
    return [job.nvcc, f"-arch={job.arch}", *job.frontend_args, *ptxas, "-std=c++17", f"-I{include}",
            *job.bundle.include_args, str(main), "-o", str(out), "-ldl"]


def build_executable(job: ExecutableJob) -> ExecutableBuild:
    """Source bundle -> executable bytes (runs on any CPU worker: bytes in, bytes out)."""
    with tempfile.TemporaryDirectory(prefix="compileiq-exe-") as workdir:
        main = job.bundle.write_to(Path(workdir))
        out = Path(workdir) / "variant"
        run = run_tool(executable_argv(job, main, out), job.timeout_s, cwd=workdir)
        if run.timed_out:
            message = f"nvcc did not finish within {job.timeout_s:g} s and was killed"
            return ExecutableBuild(BuildStatus.TIMEOUT, b"", run.seconds, message)
        if run.returncode != 0:
            return ExecutableBuild(BuildStatus.COMPILE_ERROR, b"", run.seconds, _trim(run.output))
        return ExecutableBuild(BuildStatus.OK, out.read_bytes(), run.seconds, "")
