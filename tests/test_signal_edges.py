"""One stop request that arrives twice, and a signal once the run has finished (red53, user53).

Real `compileiq` processes in a session of their own, real SQLite, real nvcc; ptxas sleeps first
where the run must still be compiling when the signal comes.
"""

from __future__ import annotations

import fcntl
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import (
    clean_env,
    compileiq_command,
    recorded_trials,
    sleeping_compiles,
    slow_toolchain,
    write_locked,
)

from compileiq.core.records import TrialState

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process groups and pipes as Linux has them")


def _tune(tiny: Path, *extra: str) -> list[str]:
    return [compileiq_command(), "tune", str(tiny), "--db", f"sqlite:///{tiny.parent / 't.db'}", "--workers", "local",
            "--study", "S", "--only", "ptxas.opt_level", *extra]


@pytest.mark.slow
def test_a_sigterm_sent_to_the_process_then_its_group_is_one_orderly_stop(tiny: Path, processes: list) -> None:
    """red53 #1: GNU `timeout` sends SIGTERM to the command, then to its whole process group: the
    command gets it twice, a few milliseconds apart. The watcher counted both and ended the run at
    once ("terminated (SIGTERM) again"), its trials left claimed, in 8 of 45 runs under `timeout`.
    One stop sent twice is one orderly stop; what it hands back says it was terminated."""
    slow = tiny.parent / "slow"
    victim = subprocess.Popen(_tune(tiny, "--budget", "4"), cwd=tiny.parent, env=clean_env(slow_toolchain(slow, 60)),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    processes.append(victim)
    deadline = time.monotonic() + 60
    while not sleeping_compiles(slow) and time.monotonic() < deadline and victim.poll() is None:
        time.sleep(0.1)
    assert sleeping_compiles(slow), "the baseline never compiled"
    with write_locked(tiny.parent / "t.db"):  # the first stop's hand-back waits: under way when the second comes
        os.kill(victim.pid, signal.SIGTERM)  # timeout.c: send_sig(monitored_pid, sig), then send_sig(0, sig)
        time.sleep(0.05)  # the first delivered before the second is sent (else the kernel merges them)
        os.killpg(victim.pid, signal.SIGTERM)
        time.sleep(1)
    _, stderr = victim.communicate(timeout=60)
    assert victim.returncode == 143 and "Traceback" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("terminated (SIGTERM): 1 unfinished trial(s) handed back to retry"), stderr
    (baseline,) = recorded_trials(f"sqlite:///{tiny.parent / 't.db'}")
    assert baseline.state is TrialState.FAILED and baseline.retryable, baseline
    assert baseline.reason == "released: the tuner stopped early (terminated (SIGTERM))", baseline.reason


@pytest.mark.slow
@pytest.mark.parametrize(("sent", "code", "said"), [(signal.SIGINT, 130, "interrupted"),
                                                   (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_a_signal_while_the_finished_run_prints_its_summary_says_what_was_kept(
        tiny: Path, processes: list, sent: int, code: int, said: str) -> None:
    """user53 #1: a Ctrl-C (or a CI job's SIGTERM) while the summary printed said only
    "interrupted", the line kept for a run stopped before anything was recorded, though its
    choice was recorded and its ACF written. Its stdout here is a full pipe: the run blocks on the
    summary's first line, past its end, whatever the machine's speed."""
    out = tiny.parent / "s.acf.toml"
    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETFL, os.O_NONBLOCK)
    try:
        while True:
            os.write(write, b"x" * 4096)
    except BlockingIOError:
        pass  # full: the run's first write to stdout waits
    fcntl.fcntl(write, fcntl.F_SETFL, 0)
    victim = subprocess.Popen(_tune(tiny, "--budget", "2", "--out", str(out)), cwd=tiny.parent, env=clean_env(),
                              stdin=subprocess.DEVNULL, stdout=write, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    processes.append(victim)
    os.close(write)
    drained = threading.Thread(target=lambda: [None for _ in iter(lambda: os.read(read, 65536), b"")], daemon=True)
    try:
        deadline = time.monotonic() + 120
        while not _finished(tiny.parent / "t.db") and time.monotonic() < deadline and victim.poll() is None:
            time.sleep(0.2)
        assert _finished(tiny.parent / "t.db"), "the run never recorded its end"
        time.sleep(0.5)  # on to its summary: blocked there until the pipe is read
        assert victim.poll() is None
        os.killpg(victim.pid, sent)
        time.sleep(0.5)
        drained.start()
        _, stderr = victim.communicate(timeout=60)
    finally:
        drained.join(timeout=10)
        os.close(read)
    assert victim.returncode == code and "Traceback" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    assert last == (f"{said}: the run had finished, its choice recorded in its study and written to {out} "
                    "(its summary cut short)"), stderr
    assert out.is_file() and "[controls]" in out.read_text()


def _finished(db: Path) -> bool:
    if not db.exists():
        return False
    with sqlite3.connect(db) as connection:
        try:
            return bool(connection.execute("select count(*) from runs where finished_at is not null").fetchone()[0])
        except sqlite3.OperationalError:  # the schema not there yet
            return False


def test_what_sqlalchemy_logs_and_goes_on_from_is_not_printed() -> None:
    """red53 #3: a SIGTERM while SQLAlchemy's pool reset a connection printed "Exception during
    reset or similar" and a KeyboardInterrupt traceback above the one line: the pool logs what it
    catches, and with no logging configured Python's last-resort handler wrote it to stderr."""
    code = ("import logging, compileiq.store.connect\n"
            "try:\n    raise KeyboardInterrupt\nexcept KeyboardInterrupt:\n"
            "    logging.getLogger('sqlalchemy.pool.impl.QueuePool').error('Exception during reset or similar', "
            "exc_info=True)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stderr == "", done.stderr


_IN_PROCESS = """\
import os, signal, sys, threading, time
from compileiq.cli import main

read, write = os.pipe()
os.set_blocking(write, False)
signal.set_wakeup_fd(write)  # the host's own (an asyncio loop's add_signal_handler sets one)
def _sleeping(pid):  # a ptxas wrapper's sleep from the slow toolchain (argv[3])
    try:
        with open(f"/proc/{pid}/comm") as comm, open(f"/proc/{pid}/environ", "rb") as environ:
            return comm.read().strip() == "sleep" and sys.argv[3].encode() in environ.read()
    except OSError:
        return False
def _once_compiling():  # the first command compiling (its ptxas asleep): then its Ctrl-C
    while not any(_sleeping(pid) for pid in os.listdir("/proc") if pid.isdigit()):
        time.sleep(0.1)
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=_once_compiling, daemon=True).start()
try:
    main(["tune", sys.argv[1], "--db", sys.argv[2], "--workers", "local", "--budget", "4", "--only", "ptxas.opt_level"])
except SystemExit as error:
    print("first", error.code, flush=True)
try:
    os.kill(os.getpid(), signal.SIGINT)  # the program's own Ctrl-C, once the stopped command is over
    time.sleep(5)
    print("host after the stop: Ctrl-C ignored", flush=True)
except KeyboardInterrupt:
    print("host after the stop: KeyboardInterrupt", flush=True)
main(["show", "--db", sys.argv[2]])  # a command that is not stopped
print("wakeup fd kept", signal.set_wakeup_fd(-1) == write, flush=True)
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
    print("host: Ctrl-C ignored", flush=True)
except KeyboardInterrupt:
    print("host: KeyboardInterrupt", flush=True)
"""


@pytest.mark.slow
def test_a_program_that_runs_commands_in_process_gets_its_handlers_and_wakeup_fd_back(tiny: Path) -> None:
    """rev53 #2, #3: `compileiq.cli.main` called in a program of its own (a notebook, a test): once a
    command was stopped by Ctrl-C, our handler stayed (as it does where the command is the process,
    for a second Ctrl-C while it exits) and the program's Ctrl-C did nothing from then on, even after
    another command; and the signal watcher replaced a wakeup fd the program had set."""
    done = subprocess.run([sys.executable, "-c", _IN_PROCESS, str(tiny), f"sqlite:///{tiny.parent / 't.db'}",
                           str(tiny.parent / "slow")],
                          cwd=tiny.parent, env=clean_env(slow_toolchain(tiny.parent / "slow", 60)),
                          capture_output=True, text=True, timeout=180, check=False)
    said = [line for line in done.stdout.splitlines() if line.startswith(("first", "second", "wakeup", "host"))]
    assert said == ["first 130", "host after the stop: KeyboardInterrupt", "wakeup fd kept True",
                    "host: KeyboardInterrupt"], done.stdout + done.stderr
