"""tests/ray_cluster.py's port choice for a test Ray node, without Ray: the kernel's free ports are
scripted (a fake socket: the one thing faked), the choice is the helper's own."""

from __future__ import annotations

from typing import ClassVar, Self

import ray_cluster


class _ScriptedSocket:
    """`socket.socket()` whose bind to port 0 gets the next port of the script, as a kernel that
    hands a just-released port out again would."""

    script: ClassVar[list[int]] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def bind(self, address: tuple[str, int]) -> None:
        self.port = _ScriptedSocket.script.pop(0)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


def test_a_nodes_component_ports_never_reuse_the_heads_own(monkeypatch) -> None:
    """The CI failure of 2026-12-04: `ray start` refused metrics_export on 48315, the head's GCS
    port, handed out again by the kernel."""
    monkeypatch.setattr(ray_cluster.socket, "socket", _ScriptedSocket)
    _ScriptedSocket.script = [20000, 48315, 41000, 20005, 41000, 52000, 53000]
    args = ["--port=48315", "--head", "--ray-client-server-port=40000", "--dashboard-port=45000"]
    workers, port = ray_cluster.component_ports(args)
    assert workers == range(20000, 20041)
    # 48315 (the head's GCS), 20005 (a worker port) and the repeated 41000 are skipped
    assert [port(), port(), port()] == [41000, 52000, 53000]
