"""Where compiles run: Ray tasks on an embedded local Ray or a joined cluster, or local threads.

Jobs and results are plain frozen dataclasses of bytes, so nothing assumes a shared filesystem.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import pickle
import re
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Protocol

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
    tried,
)
from compileiq.core.errors import CompileIQError, UsageError
from compileiq.source.spec import SourceBundle

RESUBMITS = 1  # a compile task lost with its worker or node, or whose compiler crashed or timed
# out, runs once more, on a node that answers: no variant is compiled more than twice
PROBE_WAIT_S = 60.0  # for some node to answer before a lost task is resubmitted
POLL_S = 0.5  # a variant told to wait for a build made elsewhere is asked about again this often

# What keeps an embedded Ray on loopback and offline (see docs/architecture.md, "Embedded Ray stays on loopback").
LOOPBACK_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_DISABLE_DOCKER_CPU_WARNING": "1",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "no_proxy": "127.0.0.1,localhost",
    "NO_PROXY": "127.0.0.1,localhost",
}


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
        gate = _Gate(before, fresh, lambda frontend: self._ptx[frontend].result(),
                     lambda job: pending.update({self._pool.submit(assemble, job.assemble, gate.ptx(job)): job}))

        def add(batch: Sequence[VariantJob]) -> None:
            for job in batch:
                if job.frontend not in self._ptx:
                    self._ptx[job.frontend] = self._pool.submit(emit_ptx, job.frontend)
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
                yield VariantResult(job.tag, gate.ptx(job), _outcome(future), _first_of(job.frontend, fresh))
                if more is not None:
                    add(more())
            yield from gate.again()

    def emitted(self) -> dict[FrontendJob, PtxResult]:
        """The front ends these threads compiled, each with its PTX (those that failed left out)."""
        done = {frontend: future for frontend, future in self._ptx.items() if future.done() and not future.exception()}
        return {frontend: ptx for frontend, future in done.items() if (ptx := future.result()).status is BuildStatus.OK}

    def build_executables(self, jobs: Sequence[ExecutableJob]) -> list[ExecutableBuild]:
        """Measuring executables, in the order of `jobs`."""
        return [_outcome(future) for future in [self._pool.submit(build_executable, job) for job in jobs]]

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class RayWorkers:
    """Compile tasks on Ray: an embedded local instance, or a cluster joined by address.

    The source bundle and each front end's PTX are put into Ray's object store once and passed to
    tasks by reference, so each node pulls them once, not once per task."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        ray = connect(address, num_cpus)
        self._ray = ray
        self._address = address
        # Ray's own retries are off (a retry can land on a dying node before Ray declares it
        # dead), and a task runs its compiler once: a worker whose raylet died kills the compile
        # on its way out, and a retry there was a third compile of one variant. The driver
        # decides every re-run, one per task, for a lost task or a crashed or timed-out compiler.
        self._emit = ray.remote(max_retries=0)(_emit_on_node)
        self._assemble = ray.remote(max_retries=0)(_assemble_on_node)
        self._executable = ray.remote(max_retries=0)(_executable_on_node)
        self._probe = ray.remote(num_cpus=0, max_retries=0)(current_node_id)
        self._lost = (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                      ray.exceptions.LocalRayletDiedError, ray.exceptions.ObjectLostError,
                      ray.exceptions.RaySystemError)
        self._calls: dict[Any, _Call] = {}  # running task's ref -> how to run it again
        self._bundles: dict[str, Any] = {}  # bundle sha256 -> its object ref
        self._emitted: dict[FrontendJob, Any] = {}  # front end -> its emit task's ref
        self._ptx: dict[FrontendJob, tuple[PtxResult, Any]] = {}  # front end -> PTX and its object ref
        self._node_names: dict[str, str] = {}
        self.transfers = Transfers()

    @property
    def description(self) -> str:
        cpus = int(self._ray.cluster_resources().get("CPU", 0))
        nodes = sum(1 for node in self._ray.nodes() if node.get("Alive"))
        where = f"cluster at {shown_address(self._address)}" if self._address else "embedded local Ray"
        return f"{where} ({cpus} CPUs" + (f" on {nodes} nodes)" if nodes > 1 else ")")

    def run(self, jobs: Sequence[VariantJob], more: More | None = None,
            before: BeforeAssemble | None = None) -> Iterator[VariantResult]:
        """Results as they complete; after each, the jobs `more` returns start too. Each front
        end's PTX goes into the object store once; its variants start when it arrives (and
        `before` says so)."""
        fresh: set[FrontendJob] = set()
        groups: dict[FrontendJob, list[VariantJob]] = {}
        waiting: dict[Any, FrontendJob] = {}
        pending: dict[Any, VariantJob] = {}
        gate = _Gate(before, fresh, lambda frontend: self._ptx[frontend][0],
                     lambda job: pending.update({self._task(self._assemble, job.assemble,
                                                            self._ptx[job.frontend][1]): job}))

        def add(batch: Sequence[VariantJob]) -> Iterator[VariantResult]:
            ready: dict[FrontendJob, list[VariantJob]] = {}
            for job in batch:
                frontend = job.frontend
                if frontend not in self._emitted:
                    bundle = self._bundle_ref(frontend.bundle)
                    self._emitted[frontend] = self._task(self._emit, bundle, _light(frontend))
                    fresh.add(frontend)
                if frontend in self._ptx:
                    ready.setdefault(frontend, []).append(job)
                else:
                    groups.setdefault(frontend, []).append(job)
                    waiting[self._emitted[frontend]] = frontend
            for group in ready.values():
                yield from gate.start(group, self._ptx[group[0].frontend][0])

        yield from add(jobs)
        while waiting or pending or gate.holding:
            refs = [*waiting, *pending]
            for ref in self._ray.wait(refs, num_returns=1, timeout=gate.timeout)[0] if refs else gate.pause():
                if ref in waiting:
                    frontend = waiting.pop(ref)
                    emitted = self._result(ref)
                    if isinstance(emitted, Resubmitted):
                        self._emitted[frontend] = emitted.ref
                        waiting[emitted.ref] = frontend
                        continue
                    ptx, _node = emitted
                    self._ptx[frontend] = (ptx, self._put(ptx) if ptx.status is BuildStatus.OK else None)
                    self.transfers.ptx_puts += int(ptx.status is BuildStatus.OK)
                    yield from gate.start(groups.pop(frontend), ptx)
                    continue
                job = pending.pop(ref)
                assembled = self._result(ref)
                if isinstance(assembled, Resubmitted):
                    pending[assembled.ref] = job
                    continue
                build, node = assembled
                ptx = self._ptx[job.frontend][0]
                yield VariantResult(job.tag, ptx, build, _first_of(job.frontend, fresh), self._node_name(node))
                if more is not None:
                    yield from add(more())
            yield from gate.again()

    def adopt(self, emitted: dict[FrontendJob, PtxResult]) -> None:
        """Take front ends compiled elsewhere (local threads while Ray started): their variants'
        ptxas tasks start from this PTX, put into the object store once, and none is compiled again."""
        for frontend, ptx in emitted.items():
            if frontend in self._emitted or ptx.status is not BuildStatus.OK:
                continue
            self._emitted[frontend] = None
            self._ptx[frontend] = (ptx, self._put(ptx))
            self.transfers.ptx_puts += 1

    def build_executables(self, jobs: Sequence[ExecutableJob]) -> list[ExecutableBuild]:
        """Measuring executables built on Ray CPU workers, in the order of `jobs`."""
        refs = [self._task(self._executable, self._bundle_ref(job.bundle), _light(job)) for job in jobs]
        return [self._value(ref) for ref in refs]

    def _node_name(self, node_id: str) -> str:
        if node_id not in self._node_names:
            self._node_names.update(node_names(self._ray))
        return self._node_names.get(node_id, node_id[:8])

    def _bundle_ref(self, bundle: SourceBundle) -> Any:
        if bundle.sha256 not in self._bundles:
            self._bundles[bundle.sha256] = self._put(bundle)
            self.transfers.bundle_puts += 1
        return self._bundles[bundle.sha256]

    def _put(self, value: Any) -> Any:
        self.transfers.put_bytes += _serialised_size(value)
        return self._ray.put(value)

    def _task(self, remote: Any, *args: Any, resubmits: int = RESUBMITS) -> Any:
        self.transfers.tasks += 1
        self.transfers.task_bytes += sum(_serialised_size(a) for a in args if not isinstance(a, self._ray.ObjectRef))
        ref = remote.remote(*args)
        self._calls[ref] = _Call(remote, args, resubmits)
        return ref

    def _result(self, ref: Any) -> Any:
        """A finished task's value, or `Resubmitted` when the task runs again: it was lost with its
        worker or node (Ray system errors), or its compiler crashed or timed out (the one run
        left decides). Lost again, or failed otherwise: WorkersError."""
        call = self._calls.pop(ref, None)
        try:
            value = self._ray.get(ref)
        except self._lost as error:
            if call is None or call.resubmits <= 0:
                raise WorkersError(f"a compile task was lost {1 + RESUBMITS}x with its worker or node: "
                                   f"{_first_line(error)}") from error
            return Resubmitted(self._resubmit(call))
        except self._ray.exceptions.RayError as error:
            raise WorkersError(f"a compile task failed on Ray: {_first_line(error)}") from error
        compiled = value[0] if isinstance(value, tuple) else value
        if compiled.status.deterministic or call is None:
            return value
        if call.resubmits > 0:
            return Resubmitted(self._resubmit(call))
        again = tried(compiled, 1 + RESUBMITS)
        return (again, *value[1:]) if isinstance(value, tuple) else again

    def _value(self, ref: Any) -> Any:
        """A task's value, waited for through its resubmission."""
        while isinstance(result := self._result(ref), Resubmitted):
            ref = result.ref
        return result

    def _resubmit(self, call: _Call) -> Any:
        """Run a lost task again, pinned to a node that answers now (not the one that died)."""
        self.transfers.resubmitted += 1
        return self._task(_pinned(call.remote, self._answering_node()), *call.args, resubmits=call.resubmits - 1)

    def _answering_node(self) -> str:
        """The first node with CPUs to answer a tiny task pinned to it. A node that has died, or is
        dying but not yet declared dead by Ray, does not answer."""
        nodes = [n["NodeID"] for n in self._ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        probes = [_pinned(self._probe, node).remote() for node in nodes]
        deadline = time.monotonic() + PROBE_WAIT_S
        try:
            while probes and (left := deadline - time.monotonic()) > 0:
                ready, probes = self._ray.wait(probes, num_returns=1, timeout=left)
                for ref in ready:
                    try:
                        return str(self._ray.get(ref))
                    except self._ray.exceptions.RayError:
                        continue  # that node is gone
        finally:
            for ref in probes:
                self._ray.cancel(ref, force=True)
        raise WorkersError(f"a compile task was lost with its node and no other node answered within {PROBE_WAIT_S:g} s")

    def close(self) -> None:
        self._ray.shutdown()


def _pinned(remote: Any, node_id: str) -> Any:
    """`remote` scheduled only on that node (hard affinity: never elsewhere)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))


@dataclass(frozen=True)
class _Call:
    remote: Any
    args: tuple[Any, ...]
    resubmits: int  # left


class _Gate:
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
                yield VariantResult(job.tag, ptx, assemble(job.assemble, ptx), _first_of(job.frontend, self._fresh))
            return
        answers = self._before(group, ptx) if self._before is not None else [None] * len(group)
        for job, answer in zip(group, answers, strict=True):
            if answer is None:
                self._assemble(job)
            elif answer is WAIT:
                self._held.setdefault(job.frontend, []).append(job)
            else:
                yield VariantResult(job.tag, ptx, answer, _first_of(job.frontend, self._fresh))

    def again(self) -> Iterator[VariantResult]:
        """Ask about the held variants again."""
        held, self._held = self._held, {}
        for frontend, group in held.items():
            yield from self.start(group, self._ptx_of(frontend))


@dataclass(frozen=True)
class Resubmitted:
    """A lost task runs again as `ref`."""

    ref: Any


def _light(job: Any) -> Any:
    """A job without its bundle's file contents: the files travel once, as an object ref."""
    return replace(job, bundle=replace(job.bundle, files=()))


def _serialised_size(value: Any) -> int:
    return len(pickle.dumps(value, protocol=5))


def current_node_id() -> str:
    """This Ray worker's node id (the driver names it: asking a worker for its IP probes the network)."""
    return str(import_ray().get_runtime_context().get_node_id())


def _emit_on_node(bundle: SourceBundle, job: FrontendJob) -> tuple[PtxResult, str]:
    return emit_ptx(replace(job, bundle=bundle), attempts=1), current_node_id()


def _assemble_on_node(job: AssembleJob, ptx: PtxResult) -> tuple[Build, str]:
    return assemble(job, ptx, attempts=1), current_node_id()


def _executable_on_node(bundle: SourceBundle, job: ExecutableJob) -> ExecutableBuild:
    return build_executable(replace(job, bundle=bundle), attempts=1)


RAY_MISSING = "Ray is not installed: install it (pip install ray) or use --workers local"


def import_ray() -> Any:
    """The ray module, or a one-line UsageError that says how to get it."""
    try:
        import ray
    except ImportError:
        raise UsageError(RAY_MISSING) from None
    return ray


def check_options(backend: str, address: str | None = None) -> None:
    """UsageError for a bad backend or address, WorkersError for an unreachable one (cheap: no Ray)."""
    if backend not in ("ray", "local"):
        raise UsageError(f"unknown workers backend {backend!r}; choose ray or local")
    if address and backend == "local":
        raise UsageError("--ray-address needs --workers ray")
    if backend == "ray" and importlib.util.find_spec("ray") is None:
        raise UsageError(RAY_MISSING)
    if address is not None and not address.strip():
        raise UsageError("--ray-address is empty: give HOST:PORT or auto (without it, an embedded local Ray)")
    if address:
        _check_reachable(address)


def open_workers(backend: str, address: str | None = None, num_cpus: int | None = None) -> Workers:
    """`ray` (embedded, or joined when `address` is given) or `local` threads."""
    check_options(backend, None if backend == "ray" else address)
    return LocalWorkers(num_cpus) if backend == "local" else RayWorkers(address, num_cpus)


def connect(address: str | None, num_cpus: int | None = None) -> Any:
    """The ray module, initialised once per process: embedded (loopback, offline) or joined."""
    env = ray_environment(address)
    os.environ.update(env)  # read by Ray at import time (node IP, usage stats)
    ray = import_ray()
    if address is not None and not address.strip():
        raise UsageError("--ray-address is empty: give HOST:PORT or auto (without it, an embedded local Ray)")
    if address:
        _check_reachable(address)
    _init_ray(ray, address, num_cpus, env)
    return ray


def node_names(ray: Any) -> dict[str, str]:
    """Node id -> "IP/first 8 hex digits of the node id" (nodes may share an IP)."""
    return {n["NodeID"]: f"{n['NodeManagerAddress']}/{n['NodeID'][:8]}" for n in ray.nodes()}


def accelerator_ids() -> list[str]:
    """The GPUs Ray gave the calling task or actor."""
    return [str(gpu) for gpu in import_ray().get_gpu_ids()]


def ray_environment(address: str | None) -> dict[str, str]:
    """The embedded instance or a cluster on this machine: loopback only and offline. A cluster
    elsewhere: only usage stats off (forcing 127.0.0.1 would give it an unreachable driver)."""
    host = (address or "127.0.0.1").removeprefix("ray://").rpartition(":")[0] or "127.0.0.1"
    if _loopback(host.strip("[]")):
        return dict(LOOPBACK_ENV)
    return {"RAY_USAGE_STATS_ENABLED": "0"}


def _loopback(host: str) -> bool:
    """localhost, 127.0.0.0/8 (a test cluster's nodes on 127.0.0.2, .3 ...) or ::1."""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _init_ray(ray: Any, address: str | None, num_cpus: int | None, env: dict[str, str]) -> None:
    if ray.is_initialized():
        return
    options: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "configure_logging": True,
        "logging_level": "ERROR",
        "runtime_env": {"env_vars": env},
    }
    if address:
        options["address"] = address
    else:
        options.update(num_cpus=num_cpus, _node_ip_address="127.0.0.1")
    try:
        ray.init(**options)
    except Exception as error:  # Ray raises many unrelated types for one cause: not started
        raise WorkersError(f"cannot start Ray{' at ' + shown_address(address) if address else ''}: {_first_line(error)}") from error


def _check_reachable(address: str) -> None:
    if address == "auto":
        return  # Ray finds the cluster started on this machine (`ray start --head`), or says there is none
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or "@" in host or not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise UsageError(f"--ray-address must be HOST:PORT (a port from 1 to 65535) or auto, got "
                         f"{shown_address(address)!r}")
    try:
        with socket.create_connection((host, int(port)), timeout=3):
            pass
    except OSError as error:
        raise WorkersError(f"cannot reach Ray at {shown_address(address)}: {error.strerror or error}") from error


def shown_address(address: str) -> str:
    """A Ray address as it may be printed: any user or password before an @ masked."""
    return re.sub(r"^((?:ray://)?)[^/]*@", r"\1***@", address)


def _outcome(future: Future[Any]) -> Any:
    """A compile task's result; a task that raised is a worker failure (one line), as on Ray."""
    try:
        return future.result()
    except CompileIQError:
        raise
    except Exception as error:
        raise WorkersError(f"a compile task failed: {type(error).__name__}: {_first_line(error)}") from error


def _first_of(frontend: FrontendJob, fresh: set[FrontendJob]) -> bool:
    """True for the first result of a front end compiled in this run (so counts add up), then False."""
    if frontend in fresh:
        fresh.discard(frontend)
        return True
    return False


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
