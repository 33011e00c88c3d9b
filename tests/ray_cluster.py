"""A real multi-node Ray cluster on loopback for the tests: a head and worker nodes, each its own
`ray start --block` (own raylet, own CPUs, own session), explicit ports, temp dirs of the test,
usage stats and telemetry off. A node is killed by killing its process group."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from helpers import clean_env

from compileiq.build.workers.ray_setup import LOOPBACK_ENV
from compileiq.core.toolchain import find_toolchain

HEAD_IP = "127.0.0.2"
RAY_ENV = {**LOOPBACK_ENV, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_USAGE_STATS_PROMPT_ENABLED": "0", "RAY_DISABLE_IMPORT_WARNING": "1"}

WAIT_FOR_NODES = """
import sys, time, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
deadline = time.monotonic() + float(sys.argv[3])
while time.monotonic() < deadline:
    alive = [n for n in ray.nodes() if n["Alive"]]
    if len(alive) >= int(sys.argv[2]):
        break
    time.sleep(0.5)
print(len(alive), flush=True)
"""


def free_port(avoid: range | set[int] = range(0)) -> int:
    """A port free now, outside `avoid` (a node's worker ports: Ray refuses a component's port
    inside that range, and the kernel may hand one out that lies in it; or the ports already
    handed to a node's other components: a port just released may be handed out again)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in avoid:
            return port


def component_ports(args: list[str]) -> tuple[range, Callable[[], int]]:
    """A node's worker port range (41 ports) and a source of ports for its components (node
    manager, object manager, metrics export, agents): none of them one of the ports `args` already
    names (the head's own: --port, the client server, the dashboard), none in the worker range, no
    two the same: the kernel may hand a port out again, and `ray start` refuses a port used twice."""
    taken = {int(word.split("=")[1]) for word in args if word.split("=")[-1].isdigit()}
    while not taken.isdisjoint(workers := range(low := free_port(), low + 41)):
        pass
    return workers, distinct_ports(avoid=taken.union(workers))


def distinct_ports(avoid: range | set[int] = range(0)) -> Callable[[], int]:
    """Free ports, none of them in `avoid` and no two the same."""
    given: set[int] = set()

    def port() -> int:
        found = free_port(avoid=given.union(avoid))
        given.add(found)
        return found

    return port


def ray_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return clean_env({**RAY_ENV, **(extra or {})})


@dataclass
class Node:
    name: str
    ip: str
    process: subprocess.Popen[str]
    log: Path


@dataclass
class LoopbackCluster:
    """Start with `start_head`, then `add_node` per worker node; `stop` ends every node it started."""

    root: Path  # short: Ray's Unix socket paths are limited to ~107 characters
    node_env: dict[str, str] = field(default_factory=dict)  # every node's processes inherit these
    prefix: list[str] = field(default_factory=list)  # a wrapper for each `ray start` (e.g. strace)
    nodes: list[Node] = field(default_factory=list)
    address: str = ""
    dashboard: str = ""

    def start_head(self, num_cpus: int, dashboard: bool = False) -> str:
        head_port = distinct_ports()
        port = head_port()
        dash = head_port()  # even without the dashboard Ray binds a minimal one (default 8265)
        args = [f"--port={port}", "--head", f"--ray-client-server-port={head_port()}", "--dashboard-host=127.0.0.1",
                f"--dashboard-port={dash}", f"--include-dashboard={str(dashboard).lower()}"]
        self.dashboard = f"http://127.0.0.1:{dash}"
        head = self._start("head", args, num_cpus, HEAD_IP)
        self.address = f"{HEAD_IP}:{port}"
        wait_for_port(port, head.process, lambda: head.log.read_text()[-3000:])
        return self.address

    def add_node(self, name: str, num_cpus: int, num_gpus: int = 0) -> Node:
        """A worker node on its own loopback address: 127.0.0.3, 127.0.0.4, ..."""
        ip = f"127.0.0.{len(self.nodes) + 2}"
        return self._start(name, [f"--address={self.address}", f"--num-gpus={num_gpus}"], num_cpus, ip)

    def wait_for_nodes(self, count: int, timeout_s: float = 120) -> None:
        done = subprocess.run([sys.executable, "-c", WAIT_FOR_NODES, self.address, str(count), str(timeout_s)],
                              env=ray_env(), capture_output=True, text=True, timeout=timeout_s + 60, check=False)
        alive = done.stdout.strip().splitlines()[-1:] or ["0"]
        if int(alive[0]) < count:
            raise AssertionError(f"{alive[0]} of {count} Ray nodes alive: {done.stderr[-3000:]}\n{self.logs()}")

    def kill(self, node: Node) -> None:
        """The node's Ray processes (its `ray start`, raylet, agents) die at once. Its workers live
        in process groups of their own: they see their raylet die and exit, killing their
        children (a compile in flight "crashes") on the way out, as on a node whose raylet the
        kernel's OOM killer took."""
        _kill_group(node)
        node.process.wait(timeout=30)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            if node.process.poll() is None:  # `ray start --block` stops its node (a wrapper flushes its log)
                try:
                    os.killpg(node.process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for node in reversed(self.nodes):
            try:
                node.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            _kill_group(node)  # stragglers of this node's session only

    def logs(self) -> str:
        return "\n".join(f"--- {n.name}\n{n.log.read_text()[-2000:]}" for n in self.nodes if n.log.exists())

    def _start(self, name: str, args: list[str], num_cpus: int, ip: str) -> Node:
        """Start the node and wait until it says it runs; a node that gives up (a joining raylet
        whose first call to a busy head times out) is started once more."""
        temp = self.root / name
        temp.mkdir(parents=True, exist_ok=True)
        workers, port = component_ports(args)
        argv = [*(word.replace("{node}", name) for word in self.prefix), str(Path(sys.executable).with_name("ray")),
                "start", *args, "--block", f"--node-ip-address={ip}", f"--num-cpus={num_cpus}",
                "--disable-usage-stats", f"--temp-dir={temp}", f"--node-manager-port={port()}",
                f"--object-manager-port={port()}", f"--min-worker-port={workers[0]}", f"--max-worker-port={workers[-1]}",
                f"--metrics-export-port={port()}", f"--runtime-env-agent-port={port()}",
                f"--dashboard-agent-listen-port={port()}", f"--dashboard-agent-grpc-port={port()}"]
        env = ray_env({**self.node_env, "CIQ_TEST_NODE": name, **_cluster_flag(ip)})
        for attempt in (1, 2):
            node = self._launch(name, ip, argv, env, attempt)
            if _started(node):
                break
            _kill_group(node)
        self.nodes.append(node)
        return node

    def _launch(self, name: str, ip: str, argv: list[str], env: dict[str, str], attempt: int) -> Node:
        log = self.root / f"{name}.{attempt}.log"
        with log.open("w") as stream:
            process = subprocess.Popen(argv, env=env, stdout=stream, stderr=subprocess.STDOUT, text=True,
                                       start_new_session=True)
        return Node(name, ip, process, log)


def _kill_group(node: Node) -> None:
    try:
        os.killpg(node.process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _started(node: Node, timeout_s: float = 240) -> bool:
    """True once `ray start` says the node runs; False if it exited first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if "Ray runtime started" in node.log.read_text():
            return True
        if node.process.poll() is not None:
            return False
        time.sleep(0.5)
    raise AssertionError(f"Ray node {node.name} did not start within {timeout_s} s: {node.log.read_text()[-3000:]}")


def _cluster_flag(ip: str) -> dict[str, str]:
    """The head keeps Ray's local-only mode (=0: anything that asks for this machine's address gets
    127.0.0.1). A joining node needs =1, which makes Ray replace 127.0.0.1 (and localhost) in
    --node-ip-address and --address by the machine's outside address, found by a UDP connect to the
    internet; any other loopback address is kept: so the head is 127.0.0.2, worker nodes .3, .4..."""
    return {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0" if ip == HEAD_IP else "1"}


def wait_for_port(port: int, process: subprocess.Popen, output: Callable[[], str], timeout_s: float = 120) -> None:
    """Until something listens on 127.0.0.1:`port`; AssertionError, with `output()`, if `process`
    (the `ray start` that should open it) exits first, or once `timeout_s` is over."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"ray start exited with {process.returncode}: {output()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"the Ray head did not listen on 127.0.0.1:{port} within {timeout_s} s")


def read_json_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


STUB = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char** argv) {
  const char* log = getenv("CIQ_MEASURE_LOG");
  const char* node = getenv("CIQ_TEST_NODE");
  const char* gpus = getenv("CUDA_VISIBLE_DEVICES");
  if (log) {
    FILE* f = fopen(log, "a");
    fprintf(f, "%s\t%d\t%s\n", node ? node : "-", (int)getppid(), gpus ? gpus : "-");
    fclose(f);
  }
  for (int i = 1; i + 1 < argc; ++i)
    if (!strcmp(argv[i], "--dump")) fclose(fopen(argv[i + 1], "w"));
  printf("{\"compileiq_harness\": 1, \"status\": \"ok\", \"device\": \"fake GPU\", \"driver\": \"fake\", "
         "\"samples_ms\": [1.0, 1.001, 0.999], \"median_ms\": 1.0, \"iqr_ms\": 0.001, \"min_ms\": 0.999, "
         "\"outputs\": []}\n");
  return 0;
}
"""


def fake_cuda(root: Path, ptxas_sleep_s: float) -> Path:
    """CUDA_HOME whose ptxas logs `node<TAB>args` and sleeps, and whose nvcc builds the stub as a
    measuring executable (other nvcc runs are the real one)."""
    tools = find_toolchain()
    (root / "bin").mkdir(parents=True)
    stub = root / "stub"
    subprocess.run(["gcc", "-O1", "-x", "c", "-", "-o", str(stub)], input=STUB, text=True, check=True)
    ptxas = f"""#!/bin/sh
case "$*" in *--version*) exec "{tools.ptxas}" "$@" ;; esac
printf '%s\\t%s\\t%s pid %s parent %s\\n' "$CIQ_TEST_NODE" "$*" "$(date +%s.%N)" $$ $PPID >> "{root}/ptxas.log"
sleep {ptxas_sleep_s}
exec "{tools.ptxas}" "$@"
"""
    nvcc = f"""#!/bin/sh
case "$*" in *-ldl*) ;; *) exec "{tools.nvcc}" "$@" ;; esac
out=""; prev=""
for arg in "$@"; do [ "$prev" = "-o" ] && out="$arg"; prev="$arg"; done
printf '%s\\n' "$CIQ_TEST_NODE" >> "{root}/executables.log"
cp "{stub}" "$out"
"""
    for name, text in (("ptxas", ptxas), ("nvcc", nvcc)):
        path = root / "bin" / name
        path.write_text(text)
        path.chmod(0o755)
    return root


def ptxas_runs(cuda: Path) -> list[tuple[str, str]]:
    """(node, ptxas options without paths) per ptxas run the wrapper saw."""
    log = cuda / "ptxas.log"
    lines = log.read_text().splitlines() if log.exists() else []
    runs = []
    for line in lines:
        node, argv, *_when = line.split("\t")  # the time and process ids are for failure messages
        runs.append((node, " ".join(word for word in argv.split() if not word.startswith("/"))))
    return runs
