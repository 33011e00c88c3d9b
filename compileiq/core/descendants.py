"""Descendants that leave their child's process group (setsid) still end with it.

`processes.run_tool` kills a child's whole process group; a descendant that calls setsid has left
it. Two things find such a descendant on Linux:

- every child runs with ``COMPILEIQ_TOOL_RUN=<this process's token>-<serial>`` in its
  environment, which its descendants inherit (one that also clears its environment is not found);
- the process that runs children makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``), so a
  descendant whose parent exits becomes its child instead of init's. Once a run's child is reaped
  and its group killed, `end_adopted` kills and reaps every child of ours that carries that run's
  marker (or none, as a zombie, and belongs to its group), again until none is left (a killed
  one's children are adopted in turn). Children of other code carry no marker and another
  group: they are left alone, so their owners' waits still see them.

The guard (see processes) kills, when its owner dies, every process on the machine carrying the
owner's token (`process_token`), adopted or not. Where neither works (not Linux, no /proc, no
prctl), an escaped descendant outlives the run as before.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import os
import secrets
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MARK = "COMPILEIQ_TOOL_RUN"
_PR_SET_CHILD_SUBREAPER = 36
_PASSES = 1000  # a bound on re-scans; each pass ends at least one process

_lock = threading.Lock()
_owner = 0  # the pid the state below belongs to (a forked child starts afresh)
_token = ""
_serial = itertools.count(1)
_runs = 0  # runs in progress in this process: it is a subreaper while there are any
_adopting = False


def process_token() -> str:
    """This process's marker prefix: its pid and a random part (a reused pid is another token)."""
    with _lock:
        _start()
        return _token


def run_marker() -> str:
    """A fresh marker value for one child run of this process."""
    with _lock:
        _start()
        return f"{_token}-{next(_serial)}"


@contextmanager
def adopting_orphans() -> Iterator[bool]:
    """While inside, orphaned descendants become this process's children (a child subreaper);
    True when the kernel agreed. Left again once no run is in progress, so that other code's
    orphans (a Ray driver's) go on going to init."""
    global _runs, _adopting
    with _lock:
        _start()
        _runs += 1
        if _runs == 1:
            _adopting = _set_subreaper(1)
        adopting = _adopting
    try:
        yield adopting
    finally:
        with _lock:
            _runs -= 1
            if _runs == 0:
                _set_subreaper(0)


def _start() -> None:
    global _owner, _token, _runs
    if _owner != os.getpid():
        _owner, _token, _runs = os.getpid(), f"{os.getpid()}.{secrets.token_hex(6)}", 0


def _prctl(*args: int) -> int:
    prctl = _prctl_function()
    return -1 if prctl is None else int(prctl(*args, 0, 0, 0))


@functools.cache
def _prctl_function() -> Any:
    """libc's prctl, looked up once (it is called twice for nearly every compiler run); None
    where there is none (not Linux)."""
    if not os.path.isdir("/proc/self"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _set_subreaper(on: int) -> bool:
    return _prctl(_PR_SET_CHILD_SUBREAPER, on) == 0


def end_adopted(marker: str, group: int) -> int:
    """Kill and reap this process's children that carry `marker`, or none and are in process group
    `group` (the run's descendants, adopted once their parents died); the number ended. Call it inside
    `adopting_orphans`, after the run's child is reaped and its group killed."""
    ended = 0
    for _ in range(_PASSES):
        found = [pid for pid in _children() if _started_under(pid, marker, group)]
        if not found:
            break
        for pid in found:
            _kill(pid)
            try:
                os.waitpid(pid, 0)  # once it is gone, its own children are ours: the next pass
            except ChildProcessError:
                pass
            ended += 1
    return ended


def _children() -> list[int]:
    """This process's children: /proc/self/task/*/children where the kernel has it, else a scan."""
    me = os.getpid()
    try:
        tasks = os.listdir("/proc/self/task")
        return [int(pid) for task in tasks for pid in _read(f"/proc/self/task/{task}/children").split()]
    except (OSError, ValueError):
        pass
    found = []
    for name in _pids():
        fields = _stat(name)
        if fields and int(fields[1]) == me:
            found.append(int(name))
    return found


def _read(path: str) -> bytes:
    """A small /proc file's bytes (a pathlib read costs several times as much, once per thread
    per compiler run)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        parts = [os.read(descriptor, 1 << 16)]
        while parts[-1]:
            parts.append(os.read(descriptor, 1 << 16))
        return b"".join(parts)
    finally:
        os.close(descriptor)


def _started_under(pid: int, marker: str, group: int) -> bool:
    """A process by its marker (another run's marker: a pid reused as its group's is not this
    run's); one without (a zombie's environment is gone, or it was cleared) by its group."""
    environment = _environment(str(pid))
    if f"\0{MARK}=".encode() in environment:
        return f"\0{MARK}={marker}\0".encode() in environment
    fields = _stat(str(pid))
    return fields is not None and int(fields[2]) == group


def _environment(pid: str) -> bytes:
    """The process's environment, NUL-led and NUL-separated (none if gone or unreadable)."""
    try:
        return b"\0" + Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b"\0"


def _pids() -> list[str]:
    try:
        return [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _stat(pid: str) -> list[str] | None:
    """Fields of /proc/PID/stat after the name: state, ppid, pgrp, ..."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (OSError, IndexError):
        return None


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
