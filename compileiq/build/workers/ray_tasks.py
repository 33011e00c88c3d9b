"""Compile tasks on Ray: an embedded local instance or a cluster joined by address, the front
ends' PTX shipped once per node, lost tasks run again on a node that answers."""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

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
from compileiq.build.workers import (
    BeforeAssemble,
    Gate,
    More,
    Transfers,
    VariantJob,
    VariantResult,
    WorkersError,
    first_line,
    first_of,
)
from compileiq.build.workers.ray_setup import (
    connect,
    current_node_id,
    node_names,
    pinned,
    shown_address,
)
from compileiq.source.spec import SourceBundle

RESUBMITS = 1  # a compile task lost with its worker or node, or whose compiler crashed or timed
# out, runs once more, on a node that answers: no variant is compiled more than twice
PROBE_WAIT_S = 60.0  # for some node to answer before a lost task is resubmitted


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
        gate = Gate(before, fresh, lambda frontend: self._ptx[frontend][0],
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
                yield VariantResult(job.tag, ptx, build, first_of(job.frontend, fresh), self._node_name(node))
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
                                   f"{first_line(error)}") from error
            return Resubmitted(self._resubmit(call))
        except self._ray.exceptions.RayError as error:
            raise WorkersError(f"a compile task failed on Ray: {first_line(error)}") from error
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
        return self._task(pinned(call.remote, self._answering_node()), *call.args, resubmits=call.resubmits - 1)

    def _answering_node(self) -> str:
        """The first node with CPUs to answer a tiny task pinned to it. A node that has died, or is
        dying but not yet declared dead by Ray, does not answer."""
        nodes = [n["NodeID"] for n in self._ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        probes = [pinned(self._probe, node).remote() for node in nodes]
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


@dataclass(frozen=True)
class _Call:
    remote: Any
    args: tuple[Any, ...]
    resubmits: int  # left


@dataclass(frozen=True)
class Resubmitted:
    """A lost task runs again as `ref`."""

    ref: Any


def _light(job: Any) -> Any:
    """A job without its bundle's file contents: the files travel once, as an object ref."""
    return replace(job, bundle=replace(job.bundle, files=()))


def _serialised_size(value: Any) -> int:
    return len(pickle.dumps(value, protocol=5))


def _emit_on_node(bundle: SourceBundle, job: FrontendJob) -> tuple[PtxResult, str]:
    return emit_ptx(replace(job, bundle=bundle), attempts=1), current_node_id()


def _assemble_on_node(job: AssembleJob, ptx: PtxResult) -> tuple[Build, str]:
    return assemble(job, ptx, attempts=1), current_node_id()


def _executable_on_node(bundle: SourceBundle, job: ExecutableJob) -> ExecutableBuild:
    return build_executable(replace(job, bundle=bundle), attempts=1)
