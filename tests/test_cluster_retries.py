"""A compile task lost with its Ray worker runs once more, and only once: the driver resubmits it
itself, pinned to a node that answers (Ray's own task retries are off: a retry could land on a
dying node before Ray declares it dead, and compile a variant a third time).

The compilers are real; a wrapper in front of ptxas (or nvcc) logs each run and, for the first
`crashes` runs, kills its parent: the Ray worker executing the task, as an OOM kill or a lost
machine would. The node-kill case on a real multi-node cluster is in test_cluster.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import TINY_KERNEL, embedded_ray_workers

from compileiq.build.compile import AssembleJob, BuildStatus, FrontendJob
from compileiq.build.workers import VariantJob, WorkersError
from compileiq.build.workers.ray_tasks import RayWorkers
from compileiq.core.toolchain import find_toolchain
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.source.spec import SourceBundle

pytestmark = pytest.mark.slow
ARCH = "sm_90"


@pytest.fixture(scope="module")
def ray_workers() -> Iterator[RayWorkers]:
    with embedded_ray_workers() as workers:
        yield workers


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> SourceBundle:
    path = tmp_path_factory.mktemp("kernel") / "scale.cu"
    path.write_text(TINY_KERNEL)
    return bundle_sources(load_spec(path, arch=ARCH))


KILL_WORKER = "kill -KILL $PPID; sleep 30"  # the Ray worker running the task dies
CRASH = "kill -SEGV $$"  # the compiler itself crashes; its worker lives on


def _killer(folder: Path, tool: str, crashes: int, fault: str = KILL_WORKER) -> tuple[Path, Path]:
    """A wrapper around the real `tool` whose first `crashes` runs do `fault` (by default: kill
    the Ray worker that runs them); and the log of its runs (one line each)."""
    folder.mkdir(parents=True, exist_ok=True)
    real, log, wrapper = getattr(find_toolchain(), tool), folder / "runs.log", folder / tool
    wrapper.write_text(f"""#!/bin/sh
echo run >> "{log}"
if [ "$(wc -l < "{log}")" -le {crashes} ]; then {fault}; fi
exec "{real}" "$@"
""")
    wrapper.chmod(0o755)
    return wrapper, log


def _runs(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def _job(bundle: SourceBundle, nvcc: str, ptxas: str, tag: int = 1) -> VariantJob:
    return VariantJob(tag, FrontendJob(nvcc, bundle, ARCH, (), 60.0), AssembleJob(ptxas, ARCH, (f"-O{tag % 4}",), 60.0))


def test_a_ptxas_task_whose_worker_dies_runs_once_more(
    ray_workers: RayWorkers, bundle: SourceBundle, tmp_path: Path
) -> None:
    ptxas, log = _killer(tmp_path, "ptxas", crashes=1)
    before = ray_workers.transfers.resubmitted
    [result] = list(ray_workers.run([_job(bundle, find_toolchain().nvcc, str(ptxas))]))
    assert result.build.status is BuildStatus.OK and result.build.code_hash
    assert _runs(log) == 2  # the lost run and its one resubmission
    assert ray_workers.transfers.resubmitted == before + 1  # counted for the run's summary line
    assert result.node  # the resubmitted task's node, named as any other


def test_a_ptxas_task_lost_twice_fails_the_run_after_two_compiles(
    ray_workers: RayWorkers, bundle: SourceBundle, tmp_path: Path
) -> None:
    """Before: Ray retried it three times (four compiles of one variant)."""
    ptxas, log = _killer(tmp_path, "ptxas", crashes=100)
    with pytest.raises(WorkersError, match=r"^a compile task was lost 2x with its worker or node: ") as raised:
        list(ray_workers.run([_job(bundle, find_toolchain().nvcc, str(ptxas), tag=2)]))
    assert "\n" not in str(raised.value)
    assert _runs(log) == 2


def test_a_front_end_task_whose_worker_dies_runs_once_more(
    ray_workers: RayWorkers, bundle: SourceBundle, tmp_path: Path
) -> None:
    nvcc, log = _killer(tmp_path, "nvcc", crashes=1)
    jobs = [_job(bundle, str(nvcc), find_toolchain().ptxas, tag) for tag in (3, 4)]  # one front end, two variants
    results = list(ray_workers.run(jobs))
    assert sorted(r.tag for r in results) == [3, 4]
    assert all(r.build.status is BuildStatus.OK for r in results)
    assert [r.ptx_compiled for r in results].count(True) == 1
    assert _runs(log) == 2


def test_a_ptxas_that_crashes_once_on_ray_is_run_again_by_the_driver(
    ray_workers: RayWorkers, bundle: SourceBundle, tmp_path: Path
) -> None:
    """A Ray task runs its compiler once; the driver re-runs a crash (before, the worker ran it
    again itself, and when that worker was dying with its node the driver ran it a third time)."""
    ptxas, log = _killer(tmp_path, "ptxas", crashes=1, fault=CRASH)
    before = ray_workers.transfers.resubmitted
    [result] = list(ray_workers.run([_job(bundle, find_toolchain().nvcc, str(ptxas), tag=5)]))
    assert result.build.status is BuildStatus.OK and result.build.code_hash
    assert _runs(log) == 2
    assert ray_workers.transfers.resubmitted == before + 1


def test_a_ptxas_that_always_crashes_on_ray_runs_twice_and_says_so(
    ray_workers: RayWorkers, bundle: SourceBundle, tmp_path: Path
) -> None:
    ptxas, log = _killer(tmp_path, "ptxas", crashes=100, fault=CRASH)
    [result] = list(ray_workers.run([_job(bundle, find_toolchain().nvcc, str(ptxas), tag=6)]))
    assert result.build.status is BuildStatus.CRASHED
    assert result.build.message.startswith("ptxas was killed by SIGSEGV"), result.build.message
    assert result.build.message.endswith("(tried 2 times)"), result.build.message
    assert _runs(log) == 2  # a failed build, recorded with its reason: the run goes on
