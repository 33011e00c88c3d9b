"""Ray Jobs, the recommended way to run on a cluster: `ray job submit --working-dir . -- compileiq
tune ...` against a real loopback cluster (a head with the dashboard on 127.0.0.1, a worker node),
from a "CI machine" that has no GPU and needs no compiler of its own."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import TINY_KERNEL
from ray_cluster import LoopbackCluster, ray_env

from compileiq.results import acf
from compileiq.store import Store

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ARCH = "sm_90"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LoopbackCluster]:
    if importlib.util.find_spec("aiohttp") is None:  # what ray[default] adds for the dashboard and jobs
        message = "needs ray[default]: pip install 'compileiq-tuner[cluster]' (scripts/test.sh does)"
        pytest.fail(message) if os.environ.get("CI", "").lower() == "true" else pytest.skip(message)
    root = Path(tempfile.mkdtemp(prefix="ciqj", dir="/tmp"))  # short: Unix socket paths
    venv_bin = str(Path(sys.executable).parent)
    cluster = LoopbackCluster(root, node_env={"PATH": f"{venv_bin}:{ray_env()['PATH']}"})
    try:
        cluster.start_head(num_cpus=1, dashboard=True)
        cluster.add_node("cpu", num_cpus=1)
        cluster.wait_for_nodes(2)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """What CI checks out: the kernel (the working dir that Ray uploads holds it)."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "scale.cu").write_text(TINY_KERNEL)
    return folder


def _submit(cluster: LoopbackCluster, project: Path, *tune_args: str) -> subprocess.CompletedProcess[str]:
    ray = str(Path(sys.executable).with_name("ray"))
    return subprocess.run(
        [ray, "job", "submit", "--address", cluster.dashboard, "--working-dir", ".", "--",
         "compileiq", "tune", "scale.cu", "--arch", ARCH, *tune_args],
        cwd=project, env=ray_env({"PATH": "/usr/bin:/bin"}), capture_output=True, text=True, timeout=600, check=False,
    )  # PATH: the submitting machine needs only Ray's client (no nvcc, no GPU)


def test_a_job_tunes_on_the_cluster_and_records_in_the_team_database(
    cluster: LoopbackCluster, project: Path, tmp_path: Path
) -> None:
    database = f"sqlite:///{tmp_path / 'team.db'}"  # the team's PostgreSQL URL in real use
    out = tmp_path / "results" / "scale.acf.toml"
    done = _submit(cluster, project, "--objective", "instructions", "--only", "ptxas.opt_level",
                   "--budget", "4", "--db", database, "--out", str(out))
    logs = f"rc={done.returncode}\nstdout:\n{done.stdout[-6000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 0, logs + cluster.logs()
    assert f"compiling on cluster at {cluster.address}" in done.stdout + done.stderr, logs  # joined, not embedded
    assert "[4/4]" in done.stdout + done.stderr, logs  # progress streamed back to the submitter
    assert f"wrote {out}" in done.stdout, logs
    assert acf.read(out).kernel == "scale"
    store = Store.open(database)
    try:
        [study] = store.list_studies()
        assert len(store.trials(study.id)) == 4
    finally:
        store.close()


def test_a_failed_tune_fails_the_job_with_compileiqs_message_and_exit_code(
    cluster: LoopbackCluster, project: Path
) -> None:
    done = _submit(cluster, project, "--budget", "0")
    logs = done.stdout + done.stderr
    assert done.returncode == 1, logs  # `ray job submit` exits 1 for any failed job ...
    assert "entrypoint command failed with exit code 2" in logs  # ... and names compileiq's own code (usage)
    assert "--budget must be at least 1, got 0" in logs and "Traceback" not in logs
