"""The real Ray layer (compileiq/build/workers/: ray_tasks.py, ray_setup.py, backends.py): embedded Ray, a joined cluster, loopback.

One embedded Ray per module (start-up ~5 s); the cluster test runs its driver in a subprocess,
because a process can initialise Ray only once.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import TINY_KERNEL, clean_env, embedded_ray_workers, run_cli
from ray_cluster import free_port, wait_for_port

from compileiq.build.compile import AssembleJob, BuildStatus, FrontendJob
from compileiq.build.workers import LocalWorkers, VariantJob, VariantResult
from compileiq.build.workers.ray_setup import LOOPBACK_ENV
from compileiq.build.workers.ray_tasks import RayWorkers
from compileiq.core.toolchain import Toolchain, find_toolchain
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.source.spec import SourceBundle

REPO = Path(__file__).resolve().parent.parent
ARCH = "sm_90"
FRONTENDS = [(), ("--extra-device-vectorization",)]
PTXAS = [(), ("-O1",), ("-O0",)]
LOOPBACK_ONLY = Path("/work/shared/bin/loopback-only")

pytestmark = pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
    reason="needs the CUDA toolkit (nvcc, ptxas)",
)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kernel") / "scale.cu"
    path.write_text(TINY_KERNEL)
    return path


@pytest.fixture(scope="module")
def bundle(kernel: Path) -> SourceBundle:
    return bundle_sources(load_spec(kernel, arch=ARCH))


def _jobs(bundle: SourceBundle, tools: Toolchain) -> list[VariantJob]:
    """Every front-end config with every ptxas config: several variants share each FrontendJob."""
    jobs = []
    for f, frontend_args in enumerate(FRONTENDS):
        frontend = FrontendJob(tools.nvcc, bundle, ARCH, frontend_args, 60.0)
        for p, ptxas_args in enumerate(PTXAS):
            jobs.append(
                VariantJob(10 * f + p, frontend, AssembleJob(tools.ptxas, ARCH, ptxas_args, 60.0))
            )
    return jobs


@pytest.fixture(scope="module")
def ray_workers() -> Iterator[RayWorkers]:
    with embedded_ray_workers() as workers:
        yield workers


@pytest.fixture(scope="module")
def local_results(bundle: SourceBundle) -> dict[int, VariantResult]:
    workers = LocalWorkers(threads=2)
    try:
        return {r.tag: r for r in workers.run(_jobs(bundle, find_toolchain()))}
    finally:
        workers.close()


def test_ray_compiles_like_local_threads(
    ray_workers: RayWorkers, bundle: SourceBundle, local_results: dict[int, VariantResult]
) -> None:
    jobs = _jobs(bundle, find_toolchain())
    results = {r.tag: r for r in ray_workers.run(jobs)}
    assert sorted(results) == sorted(j.tag for j in jobs)
    assert all(r.build.status is BuildStatus.OK and r.build.code_hash for r in results.values())
    assert {t: r.build.code_hash for t, r in results.items()} == {
        t: r.build.code_hash for t, r in local_results.items()
    }
    assert "embedded local Ray (2 CPUs)" == ray_workers.description
    for frontend in {j.frontend for j in jobs}:
        shared = [results[j.tag] for j in jobs if j.frontend == frontend]
        # one nvcc front-end run per FrontendJob: every variant got the very same PTX result ...
        assert len({(r.ptx.ptx, r.ptx.seconds) for r in shared}) == 1
        # ... and exactly one result says it compiled it (so the run's counters add up)
        assert [r.ptx_compiled for r in shared].count(True) == 1


def test_local_threads_count_each_front_end_once(local_results: dict[int, VariantResult]) -> None:
    assert sum(r.ptx_compiled for r in local_results.values()) == len(FRONTENDS)


def test_a_second_run_reuses_the_ptx(
    ray_workers: RayWorkers, bundle: SourceBundle, local_results: dict[int, VariantResult]
) -> None:
    jobs = _jobs(bundle, find_toolchain())[:2]
    list(ray_workers.run(jobs))  # the first run (or an earlier test's, on the same workers) compiles the PTX
    results = list(ray_workers.run(jobs))
    assert [r.ptx_compiled for r in results] == [False, False]
    assert {r.tag: r.build.code_hash for r in results} == {
        j.tag: local_results[j.tag].build.code_hash for j in jobs
    }


def test_a_compile_error_is_a_result_not_an_exception(
    ray_workers: RayWorkers, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.cu"
    broken.write_text("__global__ void k(float* o) { o[0] = ; }\n")
    tools = find_toolchain()
    job = VariantJob(
        1,
        FrontendJob(tools.nvcc, bundle_sources(load_spec(broken, arch=ARCH)), ARCH, (), 60.0),
        AssembleJob(tools.ptxas, ARCH, (), 60.0),
    )
    [result] = list(ray_workers.run([job]))
    assert result.ptx.status is BuildStatus.COMPILE_ERROR
    assert not result.build.ok and "expected an expression" in result.ptx.message


# -- a real cluster, joined by address --------------------------------------------------------

DRIVER = """
import sys
from pathlib import Path
from compileiq.build.compile import AssembleJob, FrontendJob
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.core.toolchain import find_toolchain
from compileiq.build.workers.ray_tasks import RayWorkers
from compileiq.build.workers import VariantJob

address, kernel = sys.argv[1], Path(sys.argv[2])
tools = find_toolchain()
spec = load_spec(kernel, arch="sm_90")
workers = RayWorkers(address=address)
print("DESCRIPTION", workers.description, flush=True)
job = VariantJob(7, FrontendJob(tools.nvcc, bundle_sources(spec), spec.arch, (), 60.0),
                 AssembleJob(tools.ptxas, spec.arch, (), 60.0))
[result] = list(workers.run([job]))
workers.close()
print("RESULT", result.tag, result.build.status.value, result.build.code_hash, flush=True)
"""


def _stop(head: subprocess.Popen[str]) -> None:
    """Stop only the head we started: `ray start --block` stops its Ray processes on SIGTERM."""
    if head.poll() is None:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(head.pid, signal.SIGKILL)  # stragglers of our own session, nothing else
    except ProcessLookupError:
        pass


@pytest.fixture
def ray_head() -> Iterator[str]:
    ray_cli = Path(sys.executable).with_name("ray")
    port = free_port()
    temp_dir = tempfile.mkdtemp(
        prefix="ciqray", dir="/tmp"
    )  # short: Ray's Unix socket paths are limited
    env = clean_env({**LOOPBACK_ENV, "RAY_AUTH_MODE": "disabled"})
    head = subprocess.Popen(
        [
            str(ray_cli),
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=1",
            "--include-dashboard=false",
            "--node-ip-address=127.0.0.1",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
            "--block",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for_port(port, head, lambda: head.communicate()[0], 90)
        yield f"127.0.0.1:{port}"
    finally:
        _stop(head)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.slow
def test_join_a_running_cluster(
    ray_head: str, kernel: Path, local_results: dict[int, VariantResult]
) -> None:
    env = clean_env({**LOOPBACK_ENV, "RAY_AUTH_MODE": "disabled"})
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, ray_head, str(kernel)],
        env=env,
        cwd=kernel.parent,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    context = f"rc={done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    assert done.returncode == 0, context
    lines = dict(
        line.split(" ", 1)
        for line in done.stdout.splitlines()
        if line.startswith(("DESCRIPTION", "RESULT"))
    )
    assert lines["DESCRIPTION"] == f"cluster at {ray_head} (1 CPUs)", context
    assert lines["RESULT"] == f"7 ok {local_results[0].build.code_hash}", (
        context
    )  # same code as local threads


# -- the embedded Ray stays on loopback -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(
    not LOOPBACK_ONLY.is_file() or shutil.which("strace") is None,
    reason="needs /work/shared/bin/loopback-only and strace",
)
def test_embedded_ray_stays_on_loopback(tmp_path: Path, kernel: Path) -> None:
    result = run_cli(
        ["tune", str(kernel), "--budget", "4", "--objective", "instructions", "--arch", ARCH, "--stream"],
        cwd=tmp_path,
        prefix=[str(LOOPBACK_ONLY)],
        timeout=300,
    )
    assert result.returncode == 0, result.describe()
    # the baseline compiles on a local thread while Ray starts; the streaming run after it waits for Ray
    assert "workers ready (embedded local Ray" in result.stderr, result.describe()
    assert "no connection outside loopback" in result.stderr, result.describe()
