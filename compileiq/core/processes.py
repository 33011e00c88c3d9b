"""Child processes that cannot outlive their timeout or this process, and scratch folders that
cannot outlive their owner.

Each child runs in its own process group and writes to an unlinked temporary file, not a pipe:
a descendant that escapes the group (setsid) and keeps the output open cannot hold the timeout
up, and on Linux it is ended with the run all the same (see descendants: this process adopts it
as a child subreaper and knows it by a marker in its environment). A guard process, started once
per process that runs children, kills every live child group and every marked descendant, and
removes this process's scratch folders, when this process dies, even by SIGKILL. Scratch folders
carry their owner's pid; `reap_stale_scratch` removes those of owners that are gone.
"""

from __future__ import annotations

import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from compileiq.core import descendants, tool_environment

T = TypeVar("T")
OUTPUT_LIMIT = 16 * 1024 * 1024  # bytes of a child's output kept


MEMORY_SETTING = "COMPILEIQ_COMPILER_MEMORY_GIB"


def compiler_memory_problem() -> str | None:
    """Why the COMPILEIQ_COMPILER_MEMORY_GIB setting cannot be used (None if it is unset or can)."""
    given = os.environ.get(MEMORY_SETTING, "")
    try:
        if not given or 0.25 <= float(given) <= 1 << 16:
            return None
    except ValueError:
        pass
    return f"{MEMORY_SETTING}={given[:40]!r}: give the GiB a compiler process may hold, from 0.25 to 65536"


def _compiler_memory() -> int:
    """Bytes of data a compiler process may hold: COMPILEIQ_COMPILER_MEMORY_GIB, else a quarter of
    the machine, from 4 to 16 GiB. Without a cap, a header that includes /dev/zero through a macro
    has the preprocessor fill the machine's memory."""
    if os.environ.get(MEMORY_SETTING) and compiler_memory_problem() is None:
        return int(float(os.environ[MEMORY_SETTING]) * (1 << 30))
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 16 << 30
    return min(16 << 30, max(4 << 30, physical // 4))


COMPILER_MEMORY = _compiler_memory()
SCRATCH_PREFIX = "compileiq-"
_SCRATCH = re.compile(rf"{SCRATCH_PREFIX}(\d+)-")

# Runs as `python -I -S -c GUARD OWNER_PID TEMP_DIR MARKED`: reads "+PGID" / "-PGID" lines until
# the owner's end of the pipe closes, then kills the groups still listed and every process whose
# environment holds MARKED (the owner's descendants that left their group, see descendants), and
# removes the owner's scratch.
_GUARD = r"""
import os, re, shutil, signal, sys, time
groups = set()
for line in sys.stdin:
    (groups.add if line[0] == "+" else groups.discard)(int(line[1:]))
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
owner, where, marked = sys.argv[1], sys.argv[2], b"\0" + sys.argv[3].encode()
def _marked(pid):
    try:
        with open("/proc/%s/environ" % pid, "rb") as environ:
            return marked in b"\0" + environ.read()
    except OSError:
        return False
for _ in range(100):
    try:
        found = [int(p) for p in os.listdir("/proc") if p.isdigit() and _marked(p)]
    except OSError:
        break
    if not found:
        break
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.01)
for name in os.listdir(where):
    if name.startswith("compileiq-" + owner + "-"):
        shutil.rmtree(os.path.join(where, name), ignore_errors=True)
"""


@dataclass(frozen=True)
class ToolRun:
    returncode: int
    output: str
    seconds: float
    timed_out: bool


class _Guard:
    """This process's guard: told about each child group while it runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner = 0
        self._process: subprocess.Popen[bytes] | None = None

    def tell(self, line: str) -> None:
        with self._lock:
            if self._owner != os.getpid() or self._process is None or self._process.poll() is not None:
                self._start()
            stdin = self._process.stdin if self._process else None
            if stdin is None:
                return
            try:
                stdin.write(f"{line}\n".encode())
                stdin.flush()
            except OSError:
                self._process = None  # gone: the next child starts a new guard

    def _start(self) -> None:
        self._owner = os.getpid()
        marked = f"{descendants.MARK}={descendants.process_token()}-"
        argv = [sys.executable, "-I", "-S", "-c", _GUARD, str(self._owner), tempfile.gettempdir(), marked]
        try:
            self._process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            self._process = None  # best effort: timeouts still work without a guard


_guard = _Guard()


class Runs:
    """The children run on behalf of one owner (a pool of compile threads, see `within`): `stop`
    kills their groups, and any child started for the owner later is killed as soon as it starts.
    An owner that stops (Ctrl-C, SIGTERM, a failed run) waits for no compile whose result nobody
    will read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: set[int] = set()
        self._stopped = False

    def within(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)`, its children run for this owner (on the calling thread)."""
        outer = getattr(_owners, "runs", None)
        _owners.runs = self
        try:
            return function(*args)
        finally:
            _owners.runs = outer

    def stop(self) -> int:
        """Kill every child group running for this owner, and those started later; how many."""
        with self._lock:
            self._stopped = True
            groups = list(self._groups)
        for group in groups:
            _kill_group(group)
        return len(groups)

    def _add(self, group: int) -> bool:
        with self._lock:
            if not self._stopped:
                self._groups.add(group)
            return not self._stopped

    def _discard(self, group: int) -> None:
        with self._lock:
            self._groups.discard(group)


_owners = threading.local()  # .runs: the Runs the calling thread's children belong to, if any


def run_tool(
    argv: list[str], timeout_s: float, cwd: str | None = None, *,
    env: Mapping[str, str] | None = None, with_stderr: bool = True, memory_bytes: int | None = None,
) -> ToolRun:
    """Run a compiler or a measuring program in its own process group; kill the whole group on
    timeout (nvcc spawns cicc and ptxas) and once it exits (nothing it started lingers: on Linux
    not even a descendant that left the group, see descendants).
    `with_stderr=False` keeps stdout alone (a program's JSON); `memory_bytes` caps the data each
    process of it may hold (a compiler past it fails with "out of memory")."""
    start = time.perf_counter()
    marker = descendants.run_marker()
    # never NVCC_APPEND_FLAGS and the like: a flag no ACF records would enter every build
    environment = {**tool_environment.for_tools({**os.environ, **(env or {})}), descendants.MARK: marker}
    with tempfile.TemporaryFile(prefix=SCRATCH_PREFIX) as sink, descendants.adopting_orphans():
        stderr = subprocess.STDOUT if with_stderr else subprocess.DEVNULL
        try:
            process = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=sink, stderr=stderr,
                                       start_new_session=True, env=environment)
        except OSError as error:
            return ToolRun(127, f"cannot run {argv[0]}: {error}", time.perf_counter() - start, False)
        _guard.tell(f"+{process.pid}")
        owner: Runs | None = getattr(_owners, "runs", None)
        if owner is not None and not owner._add(process.pid):
            _kill_group(process.pid)  # its owner stopped before it started
        if memory_bytes is not None:
            _limit_memory(process.pid, memory_bytes)
        timed_out = _wait(process, timeout_s)
        if owner is not None:
            owner._discard(process.pid)
        _kill_group(process.pid)
        descendants.end_adopted(marker, process.pid)
        _guard.tell(f"-{process.pid}")
        sink.seek(0)
        output = sink.read(OUTPUT_LIMIT)
    text = output.decode("utf-8", errors="replace")
    return ToolRun(process.returncode, text, time.perf_counter() - start, timed_out)


def _limit_memory(pid: int, memory_bytes: int) -> None:
    """Set on the child once it has started (a Popen preexec_fn is unsafe beside threads): nvcc
    starts its own children (the preprocessor, cicc, ptxas) later, and they inherit it."""
    try:
        import resource

        resource.prlimit(pid, resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
    except (ImportError, AttributeError, OSError, ValueError):
        pass  # no such limit here, or the child is already gone


def _wait(process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """True if the child had to be killed at its timeout."""
    if not _exits_within(process, timeout_s):
        _kill_group(process.pid)
        process.wait()
        return True
    process.wait()
    return False


def _exits_within(process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait for the child's exit, woken the moment it exits (a pidfd where Linux has one;
    Popen.wait's polling would add up to 50 ms to every short compile)."""
    try:
        descriptor = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        try:
            process.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        poller = select.poll()
        poller.register(descriptor, select.POLLIN)
        longest = 2**31 - 1  # poll's limit in ms (24 days)
        limit = max(0, math.ceil(timeout_s * 1000)) if timeout_s * 1000 < longest else longest
        return bool(poller.poll(limit))
    finally:
        os.close(descriptor)


def _kill_group(group: int) -> None:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass  # the group is empty: nothing left to stop


def killed_by(returncode: int) -> str | None:
    """The signal that ended a child (negative status), or that ended a process the child ran
    through a shell (status 128 + N, as nvcc reports a crashed cicc or ptxas); else None."""
    number = -returncode if returncode < 0 else returncode - 128 if 128 < returncode <= 128 + 64 else 0
    try:
        return signal.Signals(number).name if number else None
    except ValueError:
        return None


def scratch_dir(kind: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary folder named after this process (`compileiq-<pid>-<kind>-...`), so that a later
    run can tell when its owner is gone."""
    _reap_once()
    return tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-{kind}-")


SCRATCH_ROOM = 1 << 20  # bytes free below which a failed compile is blamed on the scratch filesystem


def scratch_full(*also: str) -> str | None:
    """Why a filesystem compilers write to has no room, or None if they all have (or cannot say):
    TMPDIR's (nvcc's temporary files), this process's temporary folder (scratch folders and
    output files; Python passes over a TMPDIR it cannot write to) and `also`, each with under
    SCRATCH_ROOM bytes or no inode free. A compiler that cannot write fails in its own words
    ("wrote an empty cubin", "Failed to preprocess"); this names the cause."""
    folders = [os.environ.get("TMPDIR", ""), tempfile.gettempdir(), *also]
    for folder in dict.fromkeys(f for f in folders if f):
        try:
            space = os.statvfs(folder)
        except (OSError, AttributeError):
            continue
        if space.f_bavail * space.f_frsize < SCRATCH_ROOM or (space.f_files and not space.f_favail):
            return f"no space left on the filesystem of {folder} (set TMPDIR to a folder with room)"
    return None


def reap_stale_scratch(where: Path | None = None) -> list[Path]:
    """Remove the scratch folders whose owning process is dead; the folders removed."""
    where = where or Path(tempfile.gettempdir())
    removed = []
    try:
        names = os.listdir(where)
    except OSError:
        return []
    for name in names:
        match = _SCRATCH.match(name)
        path = where / name
        if match and _ours(path) and not _alive(int(match[1])):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


_reaped_by = 0


def _reap_once() -> None:
    global _reaped_by
    if _reaped_by != os.getpid():
        _reaped_by = os.getpid()
        reap_stale_scratch()


def _ours(path: Path) -> bool:
    try:
        info = path.lstat()
    except OSError:
        return False
    return path.is_dir() and not path.is_symlink() and info.st_uid == os.getuid()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process
    return True


def first_error_line(output: str) -> str:
    """The compiler's first line that names an error or a fatal one (ptxas: "ptxas fatal : ...";
    nvcc: "k.cu(6): error: ..."; not "In file included from ..." nor a warning printed before it,
    nor a line of source a warning quotes, such as `fatal("bad input");`), else its first line."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    said = [line for line in lines if _SAYS_ERROR.search(line)]
    named = [line for line in lines if re.search(r"\b(error|fatal)\b", line, re.IGNORECASE)]
    return (said or named or lines or [""])[0]


_SAYS_ERROR = re.compile(r"\b(error|fatal)\s*:|\bcatastrophic error\b", re.IGNORECASE)
