"""Ray's start and connection: an embedded instance kept on loopback and offline, or a cluster
joined by address (see docs/architecture.md, "Embedded Ray stays on loopback"). The one module
that imports ray."""

from __future__ import annotations

import atexit
import importlib.util
import ipaddress
import os
import re
import signal
import socket
import sys
from typing import Any

from compileiq.build.workers import WorkersError, first_line
from compileiq.core.errors import UsageError

# What keeps an embedded Ray on loopback and offline (see docs/architecture.md, "Embedded Ray stays on loopback").
LOOPBACK_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_DISABLE_DOCKER_CPU_WARNING": "1",
    # A worker's raylet kills its children by pid as it ends (a run stopped by Ctrl-C ends its Ray):
    # the compiler's group leader and the guard of core.processes, not cicc or ptxas below them,
    # which went on compiling for nobody. Left alive, the guard kills the whole groups.
    "RAY_kill_child_processes_on_worker_exit": "0",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "no_proxy": "127.0.0.1,localhost",
    "NO_PROXY": "127.0.0.1,localhost",
}

# The driver (this process), whichever Ray it joins. Without Ray's C++ failure-signal handler,
# which took SIGTERM from cli.signals, printed a stack dump and aborted the process 3 s later
# (rc -6, mid-shutdown: no one line, no exit 143). Its shutdown not waiting 5 s to flush task
# events (for a dashboard it has not) to a GCS that a SIGTERM to the group has killed already.
DRIVER_ENV = {
    "RAY_DISABLE_FAILURE_SIGNAL_HANDLER": "1",
    "RAY_task_events_shutdown_flush_timeout_ms": "200",
}

RAY_MISSING = "Ray is not installed: install it (pip install ray) or use --workers local"


def import_ray() -> Any:
    """The ray module, or a one-line UsageError that says how to get it."""
    try:
        import ray
    except ImportError:
        raise UsageError(RAY_MISSING) from None
    return ray


def connect(address: str | None, num_cpus: int | None = None) -> Any:
    """The ray module, initialised once per process: embedded (loopback, offline) or joined."""
    env = ray_environment(address)
    os.environ.update({**env, **DRIVER_ENV})  # read by Ray at import time (node IP, usage stats, signals)
    ray = import_ray()
    if address is not None and not address.strip():
        raise UsageError("--ray-address is empty: give HOST:PORT or auto (without it, an embedded local Ray)")
    if address:
        check_reachable(address)
    _init_ray(ray, address, num_cpus, env)
    return ray


def current_node_id() -> str:
    """This Ray worker's node id (the driver names it: asking a worker for its IP probes the network)."""
    return str(import_ray().get_runtime_context().get_node_id())


def pinned(remote: Any, node_id: str) -> Any:
    """`remote` scheduled only on that node (hard affinity: never elsewhere)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))


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
        raise WorkersError(f"cannot start Ray{' at ' + shown_address(address) if address else ''}: {first_line(error)}") from error


def check_reachable(address: str) -> None:
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


def kill_started() -> int:
    """Kill the Ray processes this process started (its descendants running Ray's programs, or
    titled `ray::` as its agents and workers are: GCS, raylet, agents, workers): an embedded start
    stopped half-way (Ctrl-C), which Ray cannot abort and would otherwise finish (10-30 s) before
    anything could shut it down; Ray's own shutdown at exit dropped with them. How many."""
    spec = importlib.util.find_spec("ray")
    if spec is None or spec.origin is None or not os.path.isdir("/proc"):
        return 0
    home = os.path.dirname(spec.origin).encode() + b"/"
    killed = 0
    for pid in _descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as command:
                line = command.read()
            if home not in line and not line.startswith(b"ray::"):  # agents and workers retitle themselves
                continue
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except OSError:
            continue  # gone already
    worker = sys.modules.get("ray._private.worker")
    shutdown = getattr(worker, "shutdown", None)  # None while a Ctrl-C stops `import ray` half-way
    if shutdown is not None:  # Ray's shutdown at exit would wait 60 s for the GCS killed here, then abort
        atexit.unregister(shutdown)
    return killed


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                parent = int(stat.read().rpartition(b")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(name))
    found, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found
