"""Where compiles run: the workers' interface (the jobs, their results, what the driver is asked
between a front end and its variants) and local threads. Ray's compile tasks are in `ray_tasks`,
its start and connection in `ray_setup`, the choice between the backends in `backends`.

Jobs and results are plain frozen dataclasses of bytes, so nothing assumes a shared filesystem.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol, TypeVar

from compileiq.build.compile import (
    AssembleJob,
    Build,
    BuildStatus,
    ExecutableBuild,
    ExecutableJob,
    FrontendJob,
    PtxResult,
    assemble,
    build_executable,
    emit_ptx,
)
from compileiq.core.errors import CompileIQError
from compileiq.core.processes import Runs

T = TypeVar("T")
POLL_S = 0.5  # a variant told to wait for a build made elsewhere is asked about again this often


class WorkersError(CompileIQError):
    """The compute backend could not be started or reached."""


@dataclass(frozen=True)
class VariantJob:
    """One variant: its front-end job (shared by every variant with the same front-end args) and its ptxas job."""

    tag: int
    frontend: FrontendJob
    assemble: AssembleJob


@dataclass(frozen=True)
class VariantResult:
    tag: int
    ptx: PtxResult
    build: Build
    ptx_compiled: bool  # True on exactly one result per front end compiled by this run() call
    node: str = ""  # where ptxas ran: "IP/node-id" on Ray, "" on local threads


@dataclass
class Transfers:
    """What the driver handed to Ray, in serialised bytes: data put into the object store once
    (each node pulls it once) and the arguments carried by each task."""

    bundle_puts: int = 0
    ptx_puts: int = 0
    put_bytes: int = 0
    tasks: int = 0
    task_bytes: int = 0
    resubmitted: int = 0  # tasks run again: lost with their worker or node, or the compiler crashed or timed out


More = Callable[[], Sequence[VariantJob]]  # asked after each result: jobs to start now (streaming)


class Wait(Enum):
    WAIT = "wait"


WAIT = Wait.WAIT
# Asked on the driver when variants' PTX is ready, before their ptxas tasks start (the variants of
# one front end, and its PTX): per variant, a Build already made from the same PTX and flags (ptxas
# does not run), None (run ptxas), or WAIT (someone builds it now: asked again after the next result,
# or within POLL_S).
BeforeAssemble = Callable[[Sequence[VariantJob], PtxResult], Sequence[Build | None | Wait]]


class Workers(Protocol):
    def run(self, jobs: Sequence[VariantJob], more: More | None = None,
            before: BeforeAssemble | None = None) -> Iterator[VariantResult]: ...

    def build_executables(self, jobs: Sequence[ExecutableJob]) -> list[ExecutableBuild]: ...

    def close(self) -> None: ...

    @property
    def description(self) -> str: ...

    @property
    def transfers(self) -> Transfers: ...


class LocalWorkers:
    """Threads on this machine: no cluster start-up cost."""

    def __init__(self, threads: int | None = None) -> None:
        self._threads = threads or max(1, os.cpu_count() or 1)
        self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="compileiq")
        self._runs = Runs()  # the compilers these threads run: killed on close
        self._ptx: dict[FrontendJob, Future[PtxResult]] = {}
        self.transfers = Transfers()  # nothing leaves this process

    @property
    def description(self) -> str:
        return f"local threads ({self._threads})"

    def run(self, jobs: Sequence[VariantJob], more: More | None = None,
            before: BeforeAssemble | None = None) -> Iterator[VariantResult]:
        """Results as they complete; after each, the jobs `more` returns start too. A front end's
        variants start ptxas when its PTX is ready (and `before` says so)."""
        fresh: set[FrontendJob] = set()
        groups: dict[FrontendJob, list[VariantJob]] = {}
        waiting: dict[Future[PtxResult], FrontendJob] = {}
        pending: dict[Future[Build], VariantJob] = {}
        gate = Gate(before, fresh, lambda frontend: self._ptx[frontend].result(),
                     lambda job: pending.update({self._submit(assemble, job.assemble, gate.ptx(job)): job}))

        def add(batch: Sequence[VariantJob]) -> None:
            for job in batch:
                if job.frontend not in self._ptx:
                    self._ptx[job.frontend] = self._submit(emit_ptx, job.frontend)
                    fresh.add(job.frontend)
                groups.setdefault(job.frontend, []).append(job)
                waiting[self._ptx[job.frontend]] = job.frontend

        add(jobs)
        while waiting or pending or gate.holding:
            futures: list[Future[Any]] = [*waiting, *pending]
            done: Iterable[Future[Any]] = wait(futures, gate.timeout, FIRST_COMPLETED)[0] if futures else gate.pause()
            for future in done:
                if future in waiting:
                    frontend = waiting.pop(future)
                    yield from gate.start(groups.pop(frontend), _outcome(future))
                    continue
                job = pending.pop(future)
                yield VariantResult(job.tag, gate.ptx(job), _outcome(future), first_of(job.frontend, fresh))
                if more is not None:
                    add(more())
            yield from gate.again()

    def emitted(self) -> dict[FrontendJob, PtxResult]:
        """The front ends these threads compiled, each with its PTX (those that failed left out)."""
        done = {frontend: future for frontend, future in self._ptx.items() if future.done() and not future.exception()}
        return {frontend: ptx for frontend, future in done.items() if (ptx := future.result()).status is BuildStatus.OK}

    def build_executables(self, jobs: Sequence[ExecutableJob]) -> list[ExecutableBuild]:
        """Measuring executables, in the order of `jobs`."""
        return [_outcome(future) for future in [self._submit(build_executable, job) for job in jobs]]

    def _submit(self, function: Callable[..., T], *args: Any) -> Future[T]:
        return self._pool.submit(self._runs.within, function, *args)

    def close(self) -> None:
        """End the threads. Nothing is waiting for a result any more (a finished run has none in
        flight; an interrupted or failed one wants none): the compilers still running are killed,
        the jobs not started are dropped. Ctrl-C ends a run at once, not after its compiles."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._runs.stop()
        self._pool.shutdown(wait=True)


class Gate:
    """Between a front end's PTX and its variants' ptxas tasks: asks the driver's `before` about
    each variant (a build made from the same PTX and flags is used, ptxas does not run), holds
    those told to wait and asks about them again after each result or every POLL_S."""

    def __init__(self, before: BeforeAssemble | None, fresh: set[FrontendJob],
                 ptx_of: Callable[[FrontendJob], PtxResult], assemble_later: Callable[[VariantJob], None]) -> None:
        self._before, self._fresh, self._ptx_of, self._assemble = before, fresh, ptx_of, assemble_later
        self._held: dict[FrontendJob, list[VariantJob]] = {}

    @property
    def holding(self) -> bool:
        return bool(self._held)

    @property
    def timeout(self) -> float | None:
        """How long the workers' loop may wait for a task: until the held variants are asked again."""
        return POLL_S if self._held else None

    def pause(self) -> tuple[()]:
        """Nothing runs here; the held variants wait for builds made elsewhere."""
        time.sleep(POLL_S)
        return ()

    def ptx(self, job: VariantJob) -> PtxResult:
        return self._ptx_of(job.frontend)

    def start(self, group: Sequence[VariantJob], ptx: PtxResult) -> Iterator[VariantResult]:
        """Start ptxas for each variant of one front end whose PTX is ready, unless `before`
        answers with a build or says wait; a front end that failed fails them here."""
        if ptx.status is not BuildStatus.OK:
            for job in group:
                yield VariantResult(job.tag, ptx, assemble(job.assemble, ptx), first_of(job.frontend, self._fresh))
            return
        answers = self._before(group, ptx) if self._before is not None else [None] * len(group)
        for job, answer in zip(group, answers, strict=True):
            if answer is None:
                self._assemble(job)
            elif answer is WAIT:
                self._held.setdefault(job.frontend, []).append(job)
            else:
                yield VariantResult(job.tag, ptx, answer, first_of(job.frontend, self._fresh))

    def again(self) -> Iterator[VariantResult]:
        """Ask about the held variants again."""
        held, self._held = self._held, {}
        for frontend, group in held.items():
            yield from self.start(group, self._ptx_of(frontend))


def _outcome(future: Future[Any]) -> Any:
    """A compile task's result; a task that raised is a worker failure (one line), as on Ray."""
    try:
        return future.result()
    except CompileIQError:
        raise
    except Exception as error:
        raise WorkersError(f"a compile task failed: {type(error).__name__}: {first_line(error)}") from error


def first_of(frontend: FrontendJob, fresh: set[FrontendJob]) -> bool:
    """True for the first result of a front end compiled in this run (so counts add up), then False."""
    if frontend in fresh:
        fresh.discard(frontend)
        return True
    return False


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
