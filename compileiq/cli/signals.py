"""Ctrl-C and SIGTERM in the CLI: the first stops the run in order, a second ends the process now.

The first SIGINT (Ctrl-C) or SIGTERM (a CI job cancelled, `kill`) raises KeyboardInterrupt in the
main thread: the run kills its compilers, hands its unfinished trials back (retryable), keeps
every finished one, and the CLI says one line and exits 130 (SIGINT) or 143 (SIGTERM). Another
signal while that stop is under way ends the process at once: the guard of `core.processes` kills
its compilers as it dies, and trials still claimed are handed back by the next run on this host.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_received: list[int] = []  # the signals that stopped this command, first first
_details: list[str] = []  # what the stopped run said it did ("3 unfinished trial(s) handed back")
_runs: list[bool] = []  # a tune run was stopped (noted): its finished trials are saved, --resume goes on


@contextmanager
def loading() -> Iterator[None]:
    """The CLI's own imports (typer, rich, the stages), before `installed` takes the signals over: a
    Ctrl-C in them (a command's first few tenths of a second) says the one line and exits 130, no
    KeyboardInterrupt traceback. Nothing has started yet (no run, no database, no child): the
    process ends at once (a SystemExit raised here still ended it by SIGINT now and then: rc -2,
    3 times in 30 Ctrl-Cs measured)."""
    try:
        yield
    except KeyboardInterrupt:
        os.write(2, f"{_name(signal.SIGINT)}\n".encode())
        os._exit(128 + signal.SIGINT)


@contextmanager
def installed() -> Iterator[None]:
    """SIGINT and SIGTERM taken over while inside (the main thread alone may), then given back
    unless one came."""
    _received.clear()
    _details.clear()
    _runs.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {number: signal.signal(number, _stop) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        if not _received:  # once stopped, a second signal still ends the process at once, to its last atexit
            for number, handler in before.items():
                signal.signal(number, handler)


def _stop(number: int, frame: FrameType | None) -> None:
    _received.append(number)
    if len(_received) == 1:
        raise KeyboardInterrupt
    os.write(2, f"{_name(number)} again: stopped at once; trials still claimed are handed back by the next run\n"
             .encode())
    os._exit(exit_code())


def noted(error: BaseException) -> None:
    """Keep what a stopped tune run attached to its KeyboardInterrupt (`add_note`), for `line`."""
    _runs.append(True)
    _details.extend(getattr(error, "__notes__", ()))


def exit_code() -> int:
    return 128 + (_received[0] if _received else signal.SIGINT)


def line() -> str:
    """The one line a stopped command says (a stopped tune run: what it kept and how to go on;
    another command, gate or show, has no trials and no --resume to speak of)."""
    first = _received[0] if _received else signal.SIGINT
    if not _runs:
        return _name(first)
    said = "; ".join([*_details[:1], "finished trials are saved; rerun with --resume to continue"])
    return f"{_name(first)}: {said}"


def _name(number: int) -> str:
    return "interrupted" if number == signal.SIGINT else "terminated (SIGTERM)"
