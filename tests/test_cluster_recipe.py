"""docs/cluster.md's one-machine recipe, run as written (issue 25, item 4): the head starts, a tune
runs on it, every socket its processes listen on is on 127.0.0.1, and the stop ends this cluster
only (a process named like a raylet, which `ray stop` would kill, keeps running).

Changed for the test only: a free port for 6379, and a small, narrowed tune with its own
database and ACF (appended options: the last one wins).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import clean_env
from ray_cluster import free_port

REPO = Path(__file__).resolve().parent.parent
LOOPBACK = re.compile(r"^(127\.\d+\.\d+\.\d+|\[::ffff:127\.\d+\.\d+\.\d+\]|\[::1\]):\d+$")

pytestmark = [pytest.mark.cluster, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")]


def _recipe() -> list[str]:
    """The bash block of docs/cluster.md that starts a head with --temp-dir, as lines."""
    text = (REPO / "docs" / "cluster.md").read_text()
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    [block] = [b for b in blocks if "--temp-dir" in b]
    return re.sub(r"\\\n\s*", " ", block).splitlines()


def _descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in found]
        found.update(children)
        frontier += children
    return found


def _listening(pids: set[int]) -> list[str]:
    """`ss -ltnp`: the local address of every TCP socket these processes listen on."""
    lines = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    return [line.split()[3] for line in lines
            if any(int(pid) in pids for pid in re.findall(r"pid=(\d+),", line))]


def _alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if Path(f"/proc/{pid}").exists()
            and "zombie" not in Path(f"/proc/{pid}/status").read_text(errors="replace").lower()}


def test_the_one_machine_recipe_stays_on_loopback_and_stops_only_itself(tmp_path):
    lines = _recipe()
    tune = next(i for i, line in enumerate(lines) if line.startswith("compileiq tune"))
    port = str(free_port())
    start = "\n".join(lines[:tune]).replace("6379", port)
    run_tune = lines[tune].split(" #")[0].replace("6379", port) + (
        f" --budget 3 --only ptxas.opt_level,ptxas.maxrregcount --db sqlite:///{tmp_path}/t.db"
        f" --out {tmp_path}/k.acf.toml")
    stop = "\n".join(lines[tune + 1:])
    env = clean_env({"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"})
    env.pop("CIQ_RAY", None)

    fake = tmp_path / "raylet"  # what `ray stop` finds by name
    shutil.copy(shutil.which("sleep") or "/bin/sleep", fake)
    bystander = subprocess.Popen([str(fake), "600"], start_new_session=True)
    script = tmp_path / "recipe.sh"
    script.write_text(f"set -e\n{start}\necho \"CIQ_RAY=$CIQ_RAY\"\n{run_tune}\n")
    head, folder = None, None
    try:
        done = subprocess.run(["bash", str(script)], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=600, check=False)
        found = re.search(r"^CIQ_RAY=(\S+)$", done.stdout, re.MULTILINE)
        assert found, done.stdout + done.stderr
        folder = Path(found.group(1))
        head = int((folder / "head.pid").read_text())
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert (tmp_path / "k.acf.toml").is_file()
        cluster = _descendants(head)
        sockets = _listening(cluster)
        assert sockets, f"no listening socket found for the cluster's processes {sorted(cluster)}"
        outside = [address for address in sockets if not LOOPBACK.match(address)]
        assert not outside, f"Ray listens beyond loopback: {outside} (all: {sockets})"

        subprocess.run(["bash", "-c", stop], cwd=REPO, env={**env, "CIQ_RAY": str(folder)}, check=True,
                       timeout=60)
        deadline = time.monotonic() + 60
        while _alive(cluster) and time.monotonic() < deadline:
            time.sleep(1)
        assert not _alive(cluster), f"still running after the stop: {sorted(_alive(cluster))}"
        assert bystander.poll() is None, "the stop ended a process that is not this cluster's"
    finally:
        bystander.kill()
        bystander.wait()
        if head is not None:
            for pid in _alive(_descendants(head)):
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
