"""The searcher in a process of its own, for a driver that feeds a hundred compile slots.

A streaming run refits and asks its surrogate beside the driver (`refit_schedule`), but a thread
shares the driver's interpreter lock: the fit's and the ask's Python and small numpy calls take
turns with the bookkeeping of every result. `RemoteSearcher` has the `Searcher`'s interface and
runs the same `Searcher` (same settings, same seed: the same proposals for the same calls) in a
child process, one call at a time over a private socket pair: the driver's lock is held only to
send what it tells and to read back what it asks for.

The child is `python -m compileiq.search.search_process FD`, so nothing of the caller's main module is
imported again; it ignores Ctrl-C (the driver decides how a run ends) and exits when the driver's
end of the socket closes, the driver's death included.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from compileiq.core.errors import CompileIQError
from compileiq.core.space import Config, SearchSpace
from compileiq.search.settings import Observation, SearchSettings

START_TIMEOUT_S = 120.0  # the child imports numpy, scikit-learn and scikit-optimize first


class SearchProcessError(CompileIQError):
    """The searcher's process failed or ended: the run stops; what it recorded stays."""


class RemoteSearcher:
    """A `Searcher` in a child process: each method is one round trip."""

    def __init__(self, space: SearchSpace, settings: SearchSettings) -> None:
        ours, theirs = socket.socketpair()
        with ours, theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "compileiq.search.search_process", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
            self._conn: Connection | None = Connection(os.dup(ours.fileno()))
        self._conn.send(("start", (space, settings)))  # answered at the first call: the child
        self._starting = True  # imports while the driver builds its baseline

    @property
    def observations(self) -> int:
        count: int = self._call("observations")
        return count

    def tell(self, observations: Sequence[Observation], fit: bool = True) -> None:
        self._call("tell", list(observations), fit)

    def fit(self) -> None:
        self._call("fit")

    def refit(self, values: Sequence[float | None]) -> None:
        self._call("refit", list(values))

    def ask(self, count: int, exclude: Sequence[str] = ()) -> list[Config]:
        configs: list[Config] = self._call("ask", count, list(exclude))
        return configs

    def set_frontend_cost(self, ratio: float) -> None:
        self._call("set_frontend_cost", ratio)

    def discourage(self, settings: Iterable[tuple[str, Any]]) -> None:
        self._call("discourage", list(settings))

    def avoid(self, settings: Iterable[tuple[str, Any]]) -> None:
        self._call("avoid", list(settings))

    def close(self) -> None:
        """End the child (it exits when its socket closes); idempotent."""
        if self._conn is None:
            return
        self._conn.close()
        self._conn = None
        if self._starting:  # never asked anything (the run failed first): its imports are not waited for
            self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def _call(self, method: str, *args: Any) -> Any:
        if self._conn is None:
            raise SearchProcessError("the searcher's process was closed")
        if self._starting:
            self._starting = False
            self._answer("start", self._conn, START_TIMEOUT_S)
        try:
            self._conn.send((method, args))
        except OSError as error:
            raise self._ended(method, error) from None
        return self._answer(method, self._conn)

    def _answer(self, method: str, conn: Connection, timeout_s: float | None = None) -> Any:
        try:
            if timeout_s is not None and not conn.poll(timeout_s):
                raise SearchProcessError(f"the searcher's process did not start in {timeout_s:g} s")
            status, answer = conn.recv()
        except (EOFError, OSError) as error:
            raise self._ended(method, error) from None
        if status != "ok":
            raise SearchProcessError(f"the searcher's process failed in {method}: {answer}")
        return answer

    def _ended(self, method: str, error: BaseException) -> SearchProcessError:
        try:
            code = self._process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return SearchProcessError(f"the searcher's process stopped answering during {method} ({error})")
        return SearchProcessError(f"the searcher's process ended (exit code {code}) during {method}")


_CALLS = frozenset({"tell", "fit", "refit", "set_frontend_cost", "discourage", "avoid"})  # ask: its own branch above


def _serve(conn: Connection) -> None:
    from compileiq.search.searcher import Searcher  # the driver never imports it for this child

    searcher: Searcher | None = None
    while True:
        try:
            method, args = conn.recv()
        except (EOFError, OSError):
            return
        answer: Any = None
        try:
            if method == "start":
                searcher = Searcher(*args)
            elif searcher is None:
                raise RuntimeError(f"{method} before start")
            elif method == "observations":
                answer = searcher.observations
            elif method == "ask":
                answer = searcher.ask(*args)
                for config in answer:
                    _ = config.key  # its canonical JSON travels with it: computed here, not by the driver
            elif method in _CALLS:
                answer = getattr(searcher, method)(*args)
            else:
                raise RuntimeError(f"no call {method!r}")
            reply: tuple[str, Any] = ("ok", answer)
        except Exception as error:  # noqa: BLE001 - any failure goes back to the driver, which stops the run with it
            reply = ("error", f"{type(error).__name__}: {error}")
        try:
            conn.send(reply)
        except OSError:  # the driver closed its end meanwhile: the run is over
            return


def main(argv: Sequence[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _serve(Connection(int(argv[0])))


if __name__ == "__main__":
    main(sys.argv[1:])
