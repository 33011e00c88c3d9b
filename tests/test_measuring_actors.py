"""One measuring actor per GPU, and every one of them measures: a real Ray cluster on loopback
whose GPU node has two (fake) GPUs; `compileiq tune --objective time` screens on both actors,
each pinned to its own GPU, and each measured trial records which node and GPU measured it.

The GPU is faked at the process boundary (tests/ray_cluster.py: the measuring executable logs
its node, its actor process and CUDA_VISIBLE_DEVICES, and prints a harness result).
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from helpers import TINY_KERNEL, run_cli
from ray_cluster import LoopbackCluster, fake_cuda, ray_env

from compileiq.core.records import MEASURED_ON_KEY
from compileiq.evaluate.measure import RunResult, synthetic_result
from compileiq.evaluate.measurer_pool import MeasurerPool
from compileiq.evaluate.measuring_actors import placeable_actors
from compileiq.store import Store

ARCH = "sm_90"
LOAD_CACHES = 6  # ptxas.def_load_cache's values: distinct machine code each, so each is measured


@pytest.fixture(scope="module")
def cluster() -> Iterator[LoopbackCluster]:
    root = Path(tempfile.mkdtemp(prefix="ciqm", dir="/tmp"))  # short: Unix socket paths
    cluster = LoopbackCluster(root, node_env={"CIQ_MEASURE_LOG": str(root / "measure.log")})
    try:
        cluster.start_head(num_cpus=1)
        cluster.add_node("gpus", num_cpus=2, num_gpus=2)  # each actor holds a GPU and a CPU
        cluster.wait_for_nodes(2)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.cluster
@pytest.mark.slow
def test_each_gpu_has_its_own_actor_and_both_measure(cluster: LoopbackCluster, tmp_path: Path) -> None:
    kernel = tmp_path / "scale.cu"
    kernel.write_text(TINY_KERNEL)
    cuda = fake_cuda(tmp_path / "cuda", ptxas_sleep_s=0.0)
    db = f"sqlite:///{tmp_path / 'ciq.db'}"
    result = run_cli(["tune", str(kernel), "--ray-address", cluster.address, "--arch", ARCH, "--only",
                      "ptxas.def_load_cache", "--strategy", "exhaustive", "--budget", str(LOAD_CACHES),
                      "--batch-size", str(LOAD_CACHES), "--no-simplify", "--db", db, "--objective", "time"],
                     cwd=tmp_path, env=ray_env({"CUDA_HOME": str(cuda)}), timeout=400)
    assert result.returncode == 0, result.describe() + cluster.logs()

    runs = [line.split("\t") for line in Path(cluster.node_env["CIQ_MEASURE_LOG"]).read_text().splitlines()]
    actors = {actor: gpus for _, actor, gpus in runs}
    assert {node for node, _, _ in runs} == {"gpus"}
    assert len(actors) == 2 and sorted(actors.values()) == ["0", "1"]  # two actors measured, each on its GPU

    store = Store.open(db)
    try:
        [study] = store.list_studies()
        trials = store.trials(study.id)
    finally:
        store.close()
    gpu_ip = next(node.ip for node in cluster.nodes if node.name == "gpus")
    measured_on = Counter(str(t.metrics[MEASURED_ON_KEY]) for t in trials if MEASURED_ON_KEY in t.metrics)
    assert len(measured_on) == 2 and sum(measured_on.values()) >= 3, measured_on  # trials name both GPUs
    assert {where.split(" GPU ")[1] for where in measured_on} == {"0", "1"}, measured_on
    assert all(where.startswith(f"{gpu_ip}/") for where in measured_on), measured_on

    shown = run_cli(["show", study.name, "--db", db], cwd=tmp_path)
    spread = ", ".join(f"{gpu} {n}" for gpu, n in sorted(measured_on.items(), key=lambda i: (-i[1], i[0])))
    assert f"measured on 2 GPUs: {spread}" in shown.stdout, shown.describe()


class _Named:
    def __init__(self, name: str) -> None:
        self.device = "fake GPU"
        self.name = name
        self.calls = 0

    def measure(self, executable: bytes, args: Sequence[str], timeout_s: float, *, dump: bool = True) -> RunResult:
        self.calls += 1
        return RunResult(synthetic_result([1.0]), b"", 0, False, 0.0, where=self.name)


def test_a_pool_gives_turns_to_every_measurer() -> None:
    measurers = [_Named("a"), _Named("b"), _Named("c")]
    pool = MeasurerPool(measurers)
    where = [pool.measure(b"", [], 1.0).where for _ in range(7)]
    assert where == ["a", "b", "c", "a", "b", "c", "a"]
    assert pool.first is measurers[0] and pool.device == "fake GPU" and len(pool) == 3


def test_a_node_gets_no_more_actors_than_it_has_cpus_for() -> None:
    nodes = [{"Alive": True, "Resources": {"CPU": 8.0, "GPU": 2.0}}, {"Alive": True, "Resources": {"CPU": 1.0, "GPU": 4.0}},
             {"Alive": False, "Resources": {"CPU": 8.0, "GPU": 8.0}}, {"Alive": True, "Resources": {"CPU": 4.0}}]
    assert placeable_actors(nodes) == 3
