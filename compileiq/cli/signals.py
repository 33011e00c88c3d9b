"""Ctrl-C and SIGTERM in the CLI: the first stops the run in order, a second ends the process now.

The first SIGINT (Ctrl-C) or SIGTERM (a CI job cancelled, `kill`) raises KeyboardInterrupt in the
main thread: the run kills its compilers, hands its unfinished trials back (retryable), keeps
every finished one, and the CLI says one line and exits 130 (SIGINT) or 143 (SIGTERM). Another
signal while that stop is under way ends the process at once: the guard of `core.processes` kills
its compilers as it dies, and trials still claimed are handed back by the next run on this host.
Python runs a signal's handler only between two bytecodes of the main thread, so while that stop
waits inside C code (a database write a busy SQLite holds up to its 30 s timeout) no handler runs:
a watcher thread reads every signal from the wakeup pipe as it comes and ends the process on the
second.
"""

from __future__ import annotations

import _thread
import atexit
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, NoReturn

from compileiq.core import early_stop, stop_signal
from compileiq.core.errors import Terminated

_details: list[str] = []  # what the stopped run said it did and kept ("3 unfinished trial(s) handed back")
_loading: list[bool] = []  # the CLI loads (or its handlers go in): a signal ends the process at once
_raised: list[KeyboardInterrupt] = []  # the first signal's KeyboardInterrupt, as raised last
_owed: list[bool] = []  # it came during an import, or was swallowed: raised again a moment later
_hooks: list[Callable[[Any], object]] = []  # sys.unraisablehook before `installed`
_pipe: list[int] = []  # the wakeup pipe the watcher reads (read end, write end), while it watches
_delivered: list[int] = []  # every SIGINT/SIGTERM the process got, as the watcher read them
_echoes: list[int] = [0]  # our own redeliveries (`_later`) still to come through the pipe
_counting = threading.Lock()  # the watcher's counts against `_interrupt_main`'s
_first_at: list[float] = []  # when the first signal came (time.monotonic)
_closing: list[bool] = []  # the command has returned: a signal no longer stops anything
_originals: dict[int, Any] = {}  # the handlers before the first `installed` (a stopped command keeps ours)
# One stop, sent twice: GNU `timeout` signals the command, then its whole process group (the command
# in it), and a CI runner may signal the process and its group alike; a person's second Ctrl-C
# comes later than this.
SAME_STOP_S = 0.5
_ending = threading.Lock()  # one "again" line, from the watcher or the handler


@contextmanager
def installed() -> Iterator[None]:
    """SIGINT and SIGTERM taken over while inside (the main thread alone may), then given back
    unless one came. Inside `loading` (and as the handlers go in) a signal ends the process at
    once; after, the first raises KeyboardInterrupt in the main thread, and one that Python
    swallowed (raised inside a weakref callback or a `__del__`: "Exception ignored in", the run
    went on as if no Ctrl-C had come, seen in importlib's module-lock callback) is raised again,
    as is one that came during an import, once out of it."""
    stop_signal.clear()  # the signal that stopped this command, first first
    _details.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if not _originals:  # once per process, before Ray's and the database's: run after them
        atexit.register(_at_exit)
    _unwatched()  # a command stopped earlier in this process (tests run several)
    _delivered.clear()
    _first_at.clear()
    _closing.clear()
    _loading.append(True)  # until the handlers are all in: nothing has started
    for number in (signal.SIGINT, signal.SIGTERM):  # an earlier command of this process, stopped, kept ours
        if (handler := signal.getsignal(number)) is not _stop:  # the package's first one: what it replaced
            _originals[number] = early_stop.originals.get(number, handler) if handler is early_stop.stop_at_once else handler
    before = {number: _originals[number] for number in (signal.SIGINT, signal.SIGTERM)
              if _originals[number] is not signal.SIG_IGN}  # ignored as inherited (`cmd &` in a script): kept so
    for number in before:
        signal.signal(number, _stop)
    _watched()
    _hooks[:] = [sys.unraisablehook]
    sys.unraisablehook = _swallowed
    _loading.clear()
    try:
        yield
    finally:
        _closing.append(True)  # a signal from here on finds the command's work done: never raised here
        sys.unraisablehook = _hooks.pop()
        _raised.clear()
        _owed.clear()
        if (stop_signal.first() is None and not _delivered) or not _the_process():  # the command stopped, ending its process: a
            _unwatched()  # second signal still ends it at once, to its last atexit; a program that ran it goes on
            for number, handler in before.items():
                signal.signal(number, handler)
        # CPython (3.11-3.13) remembers a KeyboardInterrupt that left an eval() of a string (typer
        # evaluates annotations) even once caught, and under `python -m` ends the process by SIGINT
        # at exit (rc -2, no line of ours counts): an eval of its own forgets it.
        eval("None")


@contextmanager
def loading() -> Iterator[None]:
    """The CLI's own imports (typer, rich, the stages), inside `installed`: a Ctrl-C or SIGTERM in
    them (a command's first few tenths of a second) says the one line and exits 130 (143), no
    KeyboardInterrupt traceback. Nothing has started yet (no run, no database, no child): the
    process ends at once, from the handler itself (a KeyboardInterrupt raised into an import can
    be swallowed by importlib's callbacks)."""
    _loading.append(True)
    try:
        yield
    except KeyboardInterrupt:  # outside `installed`, or raised by the import itself
        _end_now(signal.SIGINT)
    finally:
        _loading.clear()


def _stop(number: int, frame: FrameType | None) -> None:
    if _loading:
        _end_now(number)
    if _closing:  # the command returned (its result said, its exit code set): nothing left to stop
        return
    if _owed:  # the first again: it came during an import, or Python swallowed it
        _owed.clear()
    elif stop_signal.first() is not None:  # another while the first stop is under way
        if _pipe or time.monotonic() - _first_at[0] < SAME_STOP_S:  # the watcher counts (or one stop sent twice)
            return
        _again(number)
    else:
        stop_signal.received(number)
        _first_at[:] = _first_at or [time.monotonic()]
    if _not_here(frame):
        _later()
        return
    _raised[:] = [Terminated() if stop_signal.terminated() else KeyboardInterrupt()]
    raise _raised[0]


def _the_process() -> bool:
    """Whether the command is this process (the console script, `python -m compileiq`), not one a
    program runs in process (`compileiq.cli.main` from a notebook, a test), which goes on after it."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "compileiq.__main__" or early_stop.the_command()


def _at_exit() -> None:
    """The last of the process's atexit work, once its command has returned: a signal from here on
    is ignored. Python's finalisation gives a signal it handles back to the default action, which
    would end the process by that signal (rc -15 or -2, no line) after its one line and exit code
    (GNU `timeout`'s second SIGTERM, a late Ctrl-C)."""
    if _closing:
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_IGN)


def _not_here(frame: FrameType | None) -> bool:
    """The main thread is inside an import, or inside `_swallowed` itself (a loaded machine may
    run the redelivery before the hook has returned): a KeyboardInterrupt raised there can be
    swallowed (importlib's callbacks, the hook) or turn a missing name's ImportError into a
    TypeError ("expected a message argument", from `import ssl`, seen) that escapes every handler."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib") or frame.f_code is _swallowed.__code__:
            return True
        frame = frame.f_back
    return False


def _swallowed(unraisable: Any) -> None:
    """sys.unraisablehook while `installed`: the first signal's KeyboardInterrupt, raised where
    Python can only print it (a weakref callback, a `__del__`), is raised again in the main thread
    once it has left that code; anything else is printed as before."""
    if _raised and unraisable.exc_value is _raised[0]:
        _raised.clear()
        _later()
        return
    _hooks[0](unraisable)


def _later() -> None:
    """The first signal raised again a moment later, from another thread (raised now, in this
    hook or this import, it would meet the same fate)."""
    _owed.append(True)
    threading.Thread(target=_interrupt_main, args=(stop_signal.first(),), daemon=True).start()


def _interrupt_main(number: int) -> None:
    time.sleep(0.01)
    with _counting:
        if _pipe:  # it comes through the wakeup pipe too: not a signal the user sent
            _echoes[0] += 1
    _thread.interrupt_main(signal.Signals(number))


def _watched() -> None:
    """Every SIGINT/SIGTERM, as CPython's own C handler writes it to the wakeup pipe, read by a
    thread that ends the process on the second, whatever the main thread is doing. Not where
    another part of the process already set a wakeup fd (the handler alone counts then)."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    if (theirs := signal.set_wakeup_fd(write, warn_on_full_buffer=False)) != -1:  # not ours to take: given back
        signal.set_wakeup_fd(theirs)
        os.close(read)
        os.close(write)
        return
    _pipe[:] = [read, write]
    _echoes[0] = 0
    threading.Thread(target=_watch, args=(read,), name="compileiq-signals", daemon=True).start()


def _unwatched() -> None:
    if _pipe:
        signal.set_wakeup_fd(-1)
        os.close(_pipe.pop())  # the watcher reads the end of the pipe and closes its own end
        _pipe.clear()


def _watch(read: int) -> None:
    try:
        while data := os.read(read, 64):
            for number in data:
                if number not in (signal.SIGINT, signal.SIGTERM) or _loading:
                    continue  # while loading the handler itself ends the process
                with _counting:
                    if _echoes[0]:
                        _echoes[0] -= 1
                        continue
                    now = time.monotonic()
                    if _delivered and now - _first_at[0] < SAME_STOP_S:
                        continue  # one stop sent twice (the process, then its group)
                    _delivered.append(number)
                    _first_at[:] = _first_at or [now]
                if len(_delivered) > 1:
                    _again(number)
    finally:
        os.close(read)


def _again(number: int) -> NoReturn:
    """A second signal: the process ends now, with one line, from whichever of the handler and the
    watcher sees it first."""
    if _ending.acquire(blocking=False):
        claimed = "" if _closing else "; trials still claimed are handed back by the next run"  # once returned: none
        os.write(2, f"{_name(number)} again: stopped at once{claimed}\n".encode())
        os._exit(exit_code())
    time.sleep(5)  # the other is writing the line and ends the process
    os._exit(exit_code())


_end_now = early_stop.end_now


def finished(detail: str) -> None:
    """The command's work is done and recorded (`detail`: what it kept, "the run had finished …"):
    a signal while it still prints its summary says so, not that nothing was recorded."""
    _details[:] = [detail]


def late() -> NoReturn:
    """A KeyboardInterrupt that came as the command returned, past its own handling: the one line
    and the signal's exit code (never a traceback, nor the stale flag's death by SIGINT)."""
    eval("None")  # see `installed`
    os.write(2, f"{line()}\n".encode())
    raise SystemExit(exit_code())


def noted(error: BaseException) -> None:
    """Keep what a stopped tune run attached to its KeyboardInterrupt (`add_note`), for `line`:
    the trials it handed back and, once its study was open, that its finished trials are saved
    (`tuning.claims.release_on_stop`). A run stopped before (bundling its sources, opening the
    database) attached nothing: it kept nothing to go on with."""
    _details.extend(str(note) for note in getattr(error, "__notes__", ()))


def exit_code() -> int:
    first = stop_signal.first() or (_delivered[0] if _delivered else None)  # the watcher may read it first
    return 128 + (first or signal.SIGINT)


def line() -> str:
    """The one line a stopped command says (a stopped tune run: what it kept and how to go on, as
    its notes say; a run stopped before its study was open, or another command, gate or show, has
    no trials and no --resume to speak of)."""
    first = stop_signal.first() or signal.SIGINT
    if not _details:
        return _name(first)
    return f"{_name(first)}: {'; '.join(_details)}"


_name = early_stop.name
