"""compileiq on a real multi-node Ray cluster on loopback: a head and two worker nodes (separate
raylets, one with a fake GPU), `compileiq tune --ray-address` spreading its compiles over them,
one measuring actor per GPU, a worker node killed mid-run, and nothing leaving 127.0.0.1.

The compilers are real; a wrapper ptxas logs which node ran it (each node's processes inherit
CIQ_TEST_NODE) and a wrapper nvcc builds a measuring "executable" that logs where it ran and
prints a harness result: the GPU faked at the process boundary, as in test_gpu_actor.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import TINY_KERNEL, CliResult, compileiq_command, run_cli
from ray_cluster import LoopbackCluster, fake_cuda, ptxas_runs, ray_env

from compileiq.build.workers.ray_setup import LOOPBACK_ENV, ray_environment
from compileiq.store import Store

LOOPBACK_ONLY = Path("/work/shared/bin/loopback-only")
ARCH = "sm_90"
REGISTER_CAPS = 11  # the values of ptxas.maxrregcount: one front end, eleven ptxas variants
LOAD_CACHES = 6  # ptxas.def_load_cache's values: distinct machine code each, so each is measured

@pytest.fixture(scope="module")
def cluster() -> Iterator[LoopbackCluster]:
    root = Path(tempfile.mkdtemp(prefix="ciqc", dir="/tmp"))  # short: Unix socket paths
    measure_log = root / "measure.log"
    cluster = LoopbackCluster(root, node_env={"CIQ_MEASURE_LOG": str(measure_log)})
    try:
        cluster.start_head(num_cpus=1)
        cluster.add_node("cpu", num_cpus=1)
        cluster.add_node("gpu", num_cpus=1, num_gpus=1)
        cluster.wait_for_nodes(3)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def kernel(tmp_path: Path) -> Path:
    path = tmp_path / "scale.cu"
    path.write_text(TINY_KERNEL)
    return path


def _tune_args(cluster: LoopbackCluster, kernel: Path, objective: str, only: str = "ptxas.maxrregcount",
               values: int = REGISTER_CAPS) -> list[str]:
    """Every value of one ptxas setting (default: every register cap) of one front end, in one
    batch, on the cluster."""
    return ["tune", str(kernel), "--ray-address", cluster.address, "--arch", ARCH, "--only", only,
            "--strategy", "exhaustive", "--budget", str(values), "--batch-size", str(values),
            "--no-simplify", "--db", f"sqlite:///{kernel.parent / 'ciq.db'}", "--objective", objective]


def _tune(cluster: LoopbackCluster, kernel: Path, cuda: Path, objective: str, prefix: tuple[str, ...] = (),
          **setting: Any) -> CliResult:
    return run_cli(_tune_args(cluster, kernel, objective, **setting), cwd=kernel.parent,
                   env=ray_env({"CUDA_HOME": str(cuda)}), timeout=400, prefix=prefix)


@pytest.mark.cluster
@pytest.mark.slow
def test_compiles_spread_over_the_nodes_and_each_trial_names_its_node(
    cluster: LoopbackCluster, kernel: Path, tmp_path: Path
) -> None:
    cuda = fake_cuda(tmp_path / "cuda", ptxas_sleep_s=0.5)
    result = _tune(cluster, kernel, cuda, "instructions")
    assert result.returncode == 0, result.describe() + cluster.logs()
    assert f"compiling on cluster at {cluster.address} (3 CPUs on 3 nodes)" in result.stderr, result.describe()

    runs = ptxas_runs(cuda)
    by_node = Counter(node for node, _ in runs)
    assert set(by_node) == {"head", "cpu", "gpu"}, by_node  # every node compiled
    assert len(runs) == REGISTER_CAPS and len({args for _, args in runs}) == REGISTER_CAPS  # each once

    store = Store.open(f"sqlite:///{kernel.parent / 'ciq.db'}")
    try:
        [study] = store.list_studies()
        trials = store.trials(study.id)
    finally:
        store.close()
    recorded = Counter(str(t.metrics["node"]) for t in trials)
    assert len(trials) == REGISTER_CAPS
    ips = {node.name: node.ip for node in cluster.nodes}
    # what each trial records is where its ptxas really ran
    assert Counter({ip.partition("/")[0]: n for ip, n in recorded.items()}) == Counter(
        {ips[name]: n for name, n in by_node.items()}), (recorded, by_node)
    assert "compiled on 3 Ray nodes: " in result.stdout, result.describe()
    # the sources and the one front end's PTX were put into the object store once, not sent per task
    assert "(source bundle 1x, PTX 1x)" in result.stdout, result.describe()

    shown = run_cli(["show", study.name, "--db", f"sqlite:///{kernel.parent / 'ciq.db'}"], cwd=kernel.parent)
    assert shown.returncode == 0, shown.describe()
    spread = ", ".join(f"{node} {count}" for node, count in sorted(recorded.items(), key=lambda i: (-i[1], i[0])))
    assert f"compiled on 3 Ray nodes: {spread}" in shown.stdout, shown.describe()


@pytest.mark.cluster
@pytest.mark.slow
def test_one_measuring_actor_on_the_one_gpu_node(cluster: LoopbackCluster, kernel: Path, tmp_path: Path) -> None:
    cuda = fake_cuda(tmp_path / "cuda", ptxas_sleep_s=0.0)
    measure_log = Path(cluster.node_env["CIQ_MEASURE_LOG"])
    measure_log.unlink(missing_ok=True)
    # the register caps all compile this kernel to the same code (one measurement, nothing to
    # confirm); the load-cache defaults give distinct codes, measured, then confirmed
    result = _tune(cluster, kernel, cuda, "time", only="ptxas.def_load_cache", values=LOAD_CACHES)
    assert result.returncode == 0, result.describe() + cluster.logs()

    runs = [line.split("\t") for line in measure_log.read_text().splitlines()]
    assert len(runs) >= LOAD_CACHES + 40  # every distinct code, then the A/A and at least one finalist's rounds
    assert {node for node, _, _ in runs} == {"gpu"}  # measured only where the GPU is
    assert len({actor for _, actor, _ in runs}) == 1  # by one actor process
    assert {gpus for _, _, gpus in runs} == {"0"}  # holding that node's one GPU
    built = (cuda / "executables.log").read_text().split()
    assert len(built) >= 2 and set(built) <= {"head", "cpu", "gpu"}  # executables are built on any CPU
    assert "(source bundle 1x, PTX 1x)" in result.stdout, result.describe()  # one bundle for PTX and executables


@pytest.mark.cluster
@pytest.mark.slow
def test_a_worker_node_killed_mid_run_loses_no_trial(
    cluster: LoopbackCluster, kernel: Path, tmp_path: Path
) -> None:
    victim = cluster.add_node("victim", num_cpus=2)
    cluster.wait_for_nodes(4)
    cuda = fake_cuda(tmp_path / "cuda", ptxas_sleep_s=6.0)  # long enough for the kill to land under load
    command = [compileiq_command(), *_tune_args(cluster, kernel, "instructions")]
    tune = subprocess.Popen(
        command, cwd=kernel.parent,
        env=ray_env({"CUDA_HOME": str(cuda)}), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not any(node == "victim" for node, _ in ptxas_runs(cuda)):
            assert tune.poll() is None and time.monotonic() < deadline, (command, tune.communicate())
            time.sleep(0.2)
        cluster.kill(victim)  # while ptxas runs there (each run sleeps 6 s first)
        stdout, stderr = tune.communicate(timeout=400)
    finally:
        if tune.poll() is None:
            tune.kill()
    assert tune.returncode == 0, f"{stdout}\n{stderr}\n{cluster.logs()}"

    runs = ptxas_runs(cuda)
    per_variant = Counter(args for _, args in runs)
    # a task lost with its node runs once more, on a node that answered: no variant compiles 3 times
    assert len(per_variant) == REGISTER_CAPS and max(per_variant.values()) <= 2, (
        per_variant, (cuda / "ptxas.log").read_text(), stderr)
    retried = {args for args, count in per_variant.items() if count >= 2}
    assert retried and all(("victim", args) in runs for args in retried)  # the victim's work, done again
    last = {args: node for node, args in runs}
    assert all(last[args] != "victim" for args in retried), runs  # ... elsewhere
    said = re.search(r"; (\d+) compile tasks? run again \(lost with a worker or node", stdout)
    assert said and int(said[1]) >= len(retried), stdout  # a lost task that had not started yet counts too

    store = Store.open(f"sqlite:///{kernel.parent / 'ciq.db'}")
    try:
        [study] = store.list_studies()
        trials = store.trials(study.id)
    finally:
        store.close()
    assert len(trials) == REGISTER_CAPS and all(t.state.value == "complete" for t in trials)
    assert not any(str(t.metrics["node"]) == "" for t in trials)


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.skipif(not LOOPBACK_ONLY.is_file() or shutil.which("strace") is None,
                    reason="needs /work/shared/bin/loopback-only and strace")
def test_a_cluster_run_stays_on_loopback(cluster: LoopbackCluster, kernel: Path, tmp_path: Path) -> None:
    cuda = fake_cuda(tmp_path / "cuda", ptxas_sleep_s=0.0)
    result = _tune(cluster, kernel, cuda, "instructions", prefix=(str(LOOPBACK_ONLY),))
    assert result.returncode == 0, result.describe()
    assert "no connection outside loopback" in result.stderr, result.describe()



@pytest.mark.parametrize("address", ["127.0.0.2:6379", "127.0.0.1:6379", "localhost:6379", "[::1]:6379", "auto"])
def test_a_cluster_on_this_machine_gets_the_loopback_settings(address: str) -> None:
    """Any loopback address (a test cluster's head is on 127.0.0.2) keeps the driver on loopback."""
    assert ray_environment(address) == LOOPBACK_ENV


def test_a_cluster_elsewhere_only_gets_usage_stats_off() -> None:
    assert ray_environment("10.1.2.3:6379") == {"RAY_USAGE_STATS_ENABLED": "0"}


OUTSIDE = re.compile(r'sa_family=AF_INET6?, .*?(?:inet_addr\("(?!127\.)[^"]+"\)|inet_pton\(AF_INET6, "(?!::1"|::ffff:127\.)[^"]+")')
ROUTE_PROBE = 'sin_port=htons(53), sin_addr=inet_addr("8.8.8.8")'


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_every_node_sends_nothing_outside_loopback(kernel: Path, tmp_path: Path) -> None:
    """Each node under strace while a tune runs on the cluster. The one call outside loopback Ray
    2.60 makes on a joining node is its route probe: a UDP connect() to 8.8.8.8:53 that sends no
    datagram (Python's way to ask the kernel which local address routes outward)."""
    root = Path(tempfile.mkdtemp(prefix="ciqs", dir="/tmp"))
    trace = ["strace", "-f", "-qq", "-e", "trace=connect,sendto,sendmsg", "-e", "signal=none",
             "-o", str(root / "{node}.strace")]
    cluster = LoopbackCluster(root, prefix=trace)
    cuda = fake_cuda(tmp_path / "cuda", ptxas_sleep_s=0.0)
    try:
        cluster.start_head(num_cpus=1)
        cluster.add_node("cpu", num_cpus=1)
        cluster.wait_for_nodes(2)
        result = _tune(cluster, kernel, cuda, "instructions")
        assert result.returncode == 0, result.describe() + cluster.logs()
    finally:
        cluster.stop()
        lines = [line for log in sorted(root.glob("*.strace")) for line in log.read_text().splitlines()]
        shutil.rmtree(root, ignore_errors=True)
    outside = [line for line in lines if OUTSIDE.search(line)]
    assert len(lines) > 20  # the trace saw the nodes' own loopback traffic
    assert all(line.split(None, 1)[1].startswith("connect(") and ROUTE_PROBE in line for line in outside), outside
