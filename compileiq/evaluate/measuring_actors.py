"""Where measurements run: one Ray actor per GPU of the embedded or joined Ray, each holding its
GPU (Ray pins it with CUDA_VISIBLE_DEVICES), or one serialised local measurer per GPU of this
machine. Each run says where it ran ("IP/node-id GPU n")."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from compileiq.build.workers.ray_setup import accelerator_ids, connect, current_node_id, node_names
from compileiq.evaluate.measure import HarnessResult, LocalMeasurer, Measurer, RunResult, gpu_count

GRACE_S = 30.0  # beyond a call's own timeout before its measuring actor is presumed hung
RESTART_WAIT_S = 120.0


class _GpuMeasurerBody:
    """The measuring actor's state: one Measurer; Ray runs an actor's calls one at a time."""

    def __init__(self, factory: Callable[[], Measurer] | None = None) -> None:
        self._measurer = factory() if factory is not None else LocalMeasurer()

    def device(self) -> str:
        return self._measurer.device

    def measure(self, executable: bytes, args: list[str], timeout_s: float,
                dump: bool = True) -> tuple[RunResult, str, list[str]]:
        """The run, this actor's node id and its GPUs (an actor may restart elsewhere)."""
        return self._measurer.measure(executable, args, timeout_s, dump=dump), current_node_id(), accelerator_ids()


class GpuMeasurerActor:
    """A Measurer backed by a Ray actor holding one GPU (timing serialised per GPU). A call that
    crashes the actor or hangs past its timeout + grace is reported as a failed run; the actor is
    restarted (max_restarts=-1) and the next call goes to the fresh one."""

    def __init__(self, ray: Any, *, num_gpus: float = 1, factory: Callable[[], Measurer] | None = None,
                 grace_s: float = GRACE_S) -> None:
        self._ray = ray
        # one CPU held beside the GPU: no compile task shares the measuring process's CPU
        actor_class = ray.remote(num_cpus=1, num_gpus=num_gpus, max_restarts=-1, max_task_retries=0)(_GpuMeasurerBody)
        self._actor = actor_class.remote(factory)
        self._grace_s = grace_s
        self._device: str | None = None
        self._nodes: dict[str, str] = {}
        self.restarts = 0

    @property
    def device(self) -> str:
        if self._device is None:
            self._device = str(self._ray.get(self._actor.device.remote(), timeout=300))
        return self._device

    def measure(self, executable: bytes, args: Sequence[str], timeout_s: float, *, dump: bool = True) -> RunResult:
        start, limit = time.perf_counter(), timeout_s + self._grace_s
        ref = self._actor.measure.remote(executable, list(args), timeout_s, dump)
        try:
            result, node, gpus = self._ray.get(ref, timeout=limit)
        except self._ray.exceptions.GetTimeoutError:
            self._ray.kill(self._actor, no_restart=False)
            self._await_restart()
            return _lost(f"timeout: the measuring actor hung past {limit:g} s and was restarted", True, start)
        except self._ray.exceptions.RayActorError as error:
            self._await_restart()
            return _lost(f"crashed: the measuring actor died and was restarted ({_first_line(error)})", False, start)
        if result.harness.device:
            self._device = result.harness.device
        return replace(result, where=self._where(node, gpus))

    def _where(self, node: str, gpus: list[str]) -> str:
        if node not in self._nodes:
            self._nodes.update(node_names(self._ray))
        name = self._nodes.get(node, node[:8])
        return f"{name} GPU {','.join(gpus)}" if gpus else name

    def _await_restart(self) -> None:
        """Block until the restarted actor answers, so the next call is not refused."""
        self.restarts += 1
        deadline = time.monotonic() + RESTART_WAIT_S
        while time.monotonic() < deadline:
            try:
                self._ray.get(self._actor.device.remote(), timeout=RESTART_WAIT_S)
                return
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.GetTimeoutError):
                time.sleep(0.5)

    def close(self) -> None:
        self._ray.kill(self._actor, no_restart=True)


class SerialMeasurer:
    """The local-thread fallback: a Measurer whose calls run one at a time (one per GPU)."""

    def __init__(self, measurer: Measurer) -> None:
        self._measurer = measurer
        self._lock = threading.Lock()

    @property
    def device(self) -> str:
        return self._measurer.device

    def measure(self, executable: bytes, args: Sequence[str], timeout_s: float, *, dump: bool = True) -> RunResult:
        with self._lock:
            return self._measurer.measure(executable, args, timeout_s, dump=dump)

    def close(self) -> None:
        pass


def open_gpu_measurers(
    address: str | None, *, count: int | None = None, num_gpus: float = 1,
    factory: Callable[[], Measurer] | None = None, grace_s: float = GRACE_S,
) -> list[GpuMeasurerActor]:
    """One measuring actor per GPU of the embedded or joined Ray, as far as each node has a CPU
    for it (`count` overrides; tests use num_gpus=0 with a fake `factory` on CPU-only Ray)."""
    ray = connect(address)
    n = count if count is not None else placeable_actors(ray.nodes())
    return [GpuMeasurerActor(ray, num_gpus=num_gpus, factory=factory, grace_s=grace_s) for _ in range(n)]


def placeable_actors(nodes: Sequence[dict[str, Any]]) -> int:
    """Actors of one GPU and one CPU each that the alive nodes can hold (a node with more GPUs
    than CPUs would leave the rest pending for ever)."""
    resources = [node.get("Resources", {}) for node in nodes if node.get("Alive")]
    return sum(int(min(r.get("GPU", 0), r.get("CPU", 0))) for r in resources)


def open_local_measurers() -> list[SerialMeasurer]:
    """One serialised LocalMeasurer per GPU of this machine (no Ray)."""
    return [SerialMeasurer(LocalMeasurer(gpu=index)) for index in range(gpu_count())]


def _lost(message: str, timed_out: bool, start: float) -> RunResult:
    return RunResult(HarnessResult("error", message), b"", None, timed_out, time.perf_counter() - start)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
