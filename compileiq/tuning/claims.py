"""Whose running trials a tuner may take over: those of tuners that are gone, never a live one's.

A trial's worker is ``host:pid``. A tuner on this host whose process no longer exists is gone
for certain (its claims are handed back at once); any other holder is judged by its heartbeat.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass

from compileiq.core import stop_signal
from compileiq.core.errors import CompileIQError, Terminated
from compileiq.store import Store
from compileiq.tuning.runner import HEARTBEAT_EVERY_S

RESUME_STALE_S = 3 * HEARTBEAT_EVERY_S  # --resume: a live tuner beats every HEARTBEAT_EVERY_S or sooner


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def is_gone(worker: str, host: str | None = None) -> bool:
    """True when ``worker`` names a process on this host that no longer runs."""
    name, _, pid = worker.rpartition(":")
    if name != (host or socket.gethostname()) or not pid.isdigit() or int(pid) <= 0:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):
        return False  # exists but is not ours (EPERM), or not a pid at all: leave it alone
    return False


@dataclass(frozen=True)
class Takeover:
    released: dict[str, int]  # gone worker -> trials handed back
    stale: int  # trials failed (retryable) for a stale heartbeat
    alive: tuple[str, ...]  # workers still holding trials, left to them (when asked for)


def take_over(store: Store, study_id: int, me: str, stale_after_s: float, report: bool = False) -> Takeover:
    """Hand back the claims of tuners that are gone, fail those whose heartbeat is older than
    ``stale_after_s``; with ``report``, name the tuners still holding trials."""
    released: dict[str, int] = {}
    holders = store.running_claims(study_id)
    for worker in holders:
        if worker != me and is_gone(worker):
            reason = f"abandoned: its tuner {worker} is no longer running"
            released[worker] = store.release_trials(study_id, worker, reason)
    # no trial running, none can be stale: no write (a tuner alone asks this before every batch)
    stale = store.fail_stale_trials(study_id, stale_after_s) if holders else 0
    alive = tuple(sorted(w for w in store.running_claims(study_id) if w != me)) if report else ()
    return Takeover(released, stale, alive)


def take_over_noted(store: Store, study_id: int, me: str, stale_after_s: float, note: Callable[[str], None],
                    announce: bool = False) -> bool:
    """`take_over`; with `announce`, each tuner gone (its trials retried) and each live one (its
    trials left to it) is noted. True if any trial was handed back."""
    done = take_over(store, study_id, me, stale_after_s, report=announce)
    if announce:
        for worker, count in done.released.items():
            note(f"retrying {count} trial(s) of tuner {worker}, which is no longer running")
        for worker in done.alive:
            note(f"another tuner ({worker}) is working on this study; its trials are left to it")
    return bool(done.released or done.stale)


STUDY_KEPT = "finished trials are saved; rerun with --resume to continue"  # a stopped run's study, in its notes


def release_on_stop(store: Store, study_id: int, me: str, error: BaseException, note: Callable[[str], None]) -> None:
    """A run that stops early (`error`) hands its unfinished claims back (retryable), so that
    nobody waits for them."""
    closed = "its output was closed"  # rich turns a broken pipe into SystemExit
    why = {KeyboardInterrupt: "interrupted", Terminated: "terminated (SIGTERM)", BrokenPipeError: closed,
           SystemExit: closed}.get(type(error), f"failed: {type(error).__name__}")  # SIGTERM: a KeyboardInterrupt too
    if isinstance(error, KeyboardInterrupt) and stop_signal.terminated():  # through Ray: a plain KeyboardInterrupt
        why = "terminated (SIGTERM)"
    try:
        released = store.release_trials(study_id, me, f"released: the tuner stopped early ({why})")
    except CompileIQError:  # the database itself went away or is full: nothing can be written
        note("this run's unfinished trials stay claimed (the database refused the write): the "
             "next `compileiq tune` of this study hands them back, at once on this host")
        released = 0
    if isinstance(error, KeyboardInterrupt):  # said in the CLI's one line; its compilers are killed
        if released:
            error.add_note(f"{released} unfinished trial(s) handed back to retry")
        error.add_note(STUDY_KEPT)  # a study is open: what it finished stays, --resume goes on
