"""Which workers compile: `local` threads, or `ray` (an embedded local instance, or a cluster
joined by address)."""

from __future__ import annotations

import importlib.util

from compileiq.build.workers import LocalWorkers, Workers
from compileiq.build.workers.ray_setup import RAY_MISSING, check_reachable
from compileiq.build.workers.ray_tasks import RayWorkers
from compileiq.core.errors import UsageError


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
        check_reachable(address)


def open_workers(backend: str, address: str | None = None, num_cpus: int | None = None) -> Workers:
    """`ray` (embedded, or joined when `address` is given) or `local` threads."""
    check_options(backend, None if backend == "ray" else address)
    return LocalWorkers(num_cpus) if backend == "local" else RayWorkers(address, num_cpus)
