"""Where compiles run: Ray tasks on an embedded local Ray or a joined cluster, or local threads.

Jobs and results are plain frozen dataclasses of bytes, so nothing assumes a shared filesystem.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol

from compileiq.compile import AssembleJob, Build, FrontendJob, PtxResult, assemble, emit_ptx
from compileiq.errors import CompileIQError, UsageError

TASK_RETRIES = 3

# What keeps an embedded Ray on loopback and offline (see the README's architecture notes).
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


class Workers(Protocol):
    def run(self, jobs: Sequence[VariantJob]) -> Iterator[VariantResult]: ...

    def close(self) -> None: ...

    @property
    def description(self) -> str: ...


class LocalWorkers:
    """Threads on this machine: no cluster start-up cost."""

    def __init__(self, threads: int | None = None) -> None:
        self._threads = threads or max(1, os.cpu_count() or 1)
        self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="compileiq")
        self._ptx: dict[FrontendJob, Future[PtxResult]] = {}

    @property
    def description(self) -> str:
        return f"local threads ({self._threads})"

    def run(self, jobs: Sequence[VariantJob]) -> Iterator[VariantResult]:
        fresh = {job.frontend for job in jobs if job.frontend not in self._ptx}
        for frontend in fresh:
            self._ptx[frontend] = self._pool.submit(emit_ptx, frontend)
        pending = {self._pool.submit(self._variant, job): job for job in jobs}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                job = pending.pop(future)
                ptx, build = future.result()
                yield VariantResult(job.tag, ptx, build, _first_of(job.frontend, fresh))

    def _variant(self, job: VariantJob) -> tuple[PtxResult, Build]:
        ptx = self._ptx[job.frontend].result()
        return ptx, assemble(job.assemble, ptx)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class RayWorkers:
    """Compile tasks on Ray: an embedded local instance, or a cluster joined by address."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        env = ray_environment(address)
        os.environ.update(env)  # read by Ray at import time (node IP, usage stats)
        import ray

        self._ray = ray
        self._address = address
        if address:
            _check_reachable(address)
        _init_ray(ray, address, num_cpus, env)
        self._emit = ray.remote(max_retries=TASK_RETRIES)(emit_ptx)
        self._assemble = ray.remote(max_retries=TASK_RETRIES)(assemble)
        self._ptx: dict[FrontendJob, Any] = {}

    @property
    def description(self) -> str:
        cpus = int(self._ray.cluster_resources().get("CPU", 0))
        where = f"cluster at {self._address}" if self._address else "embedded local Ray"
        return f"{where} ({cpus} CPUs)"

    def run(self, jobs: Sequence[VariantJob]) -> Iterator[VariantResult]:
        fresh = {job.frontend for job in jobs if job.frontend not in self._ptx}
        for frontend in fresh:
            self._ptx[frontend] = self._emit.remote(frontend)
        pending = {self._assemble.remote(job.assemble, self._ptx[job.frontend]): job for job in jobs}
        while pending:
            ready, _ = self._ray.wait(list(pending), num_returns=1)
            for ref in ready:
                job = pending.pop(ref)
                build = self._get(ref)
                ptx = self._get(self._ptx[job.frontend])
                yield VariantResult(job.tag, ptx, build, _first_of(job.frontend, fresh))

    def _get(self, ref: Any) -> Any:
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayError as error:
            raise WorkersError(f"a compile task failed on Ray after {TASK_RETRIES} retries: {error}") from error

    def close(self) -> None:
        self._ray.shutdown()


def check_options(backend: str, address: str | None = None) -> None:
    """UsageError for a bad backend or address, WorkersError for an unreachable one (cheap: no Ray)."""
    if backend not in ("ray", "local"):
        raise UsageError(f"unknown workers backend {backend!r}; choose ray or local")
    if address and backend == "local":
        raise UsageError("--ray-address needs --workers ray")
    if address:
        _check_reachable(address)


def open_workers(backend: str, address: str | None = None, num_cpus: int | None = None) -> Workers:
    """`ray` (embedded, or joined when `address` is given) or `local` threads."""
    check_options(backend, None if backend == "ray" else address)
    return LocalWorkers(num_cpus) if backend == "local" else RayWorkers(address, num_cpus)


def remote_function(function: Any) -> Any:
    """Wrap any function as a retried Ray task (used by tests and benchmarks of the Ray layer)."""
    import ray

    return ray.remote(max_retries=TASK_RETRIES)(function)


def ray_environment(address: str | None) -> dict[str, str]:
    """The embedded instance or a cluster on this machine: loopback only and offline. A cluster
    elsewhere: only usage stats off (forcing 127.0.0.1 would give it an unreachable driver)."""
    host = (address or "127.0.0.1").removeprefix("ray://").rpartition(":")[0] or "127.0.0.1"
    if host in ("127.0.0.1", "localhost", "::1"):
        return dict(LOOPBACK_ENV)
    return {"RAY_USAGE_STATS_ENABLED": "0"}


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
        raise WorkersError(f"cannot start Ray{' at ' + address if address else ''}: {_first_line(error)}") from error


def _check_reachable(address: str) -> None:
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--ray-address must be HOST:PORT, got {address!r}")
    try:
        with socket.create_connection((host, int(port)), timeout=3):
            pass
    except OSError as error:
        raise WorkersError(f"cannot reach Ray at {address}: {error.strerror or error}") from error


def _first_of(frontend: FrontendJob, fresh: set[FrontendJob]) -> bool:
    """True for the first result of a front end compiled in this run (so counts add up), then False."""
    if frontend in fresh:
        fresh.discard(frontend)
        return True
    return False


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
