"""Several `compileiq tune` processes on one study, coordinating only through the database.

Each test starts real tuner processes (the console script, a clean environment, local compile
threads) on SQLite and on PostgreSQL and checks what the design promises: every configuration
is claimed once, no variant is compiled twice (the compiler calls of all processes add up to
the builds in the cache), nothing finished is lost, every process finishes, and the trials of a
tuner killed mid-compile are retried by another one once their heartbeat is stale.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import sqlalchemy as sa
from helpers import SPILLING_KERNEL, TINY_KERNEL, clean_env, compileiq_command, slow_toolchain

from compileiq.core.records import Trial, TrialState
from compileiq.store import Store

pytestmark = pytest.mark.slow

SMALL_SPACE = "ptxas.opt_level,ptxas.maxrregcount,ptxas.register_usage_level"
SPILLER = SPILLING_KERNEL  # the winner has non-default settings: every tuner simplifies at the end
SPILLER_SPACE = "ptxas.maxrregcount,ptxas.override_directive_values,ptxas.opt_level"


def _tune(kernel: Path, url: str, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    args = [compileiq_command(), "tune", str(kernel), "--db", url, "--workers", "local", "--json",
            "--out", str(kernel.parent / f"{time.monotonic_ns()}.acf.toml"), *extra]  # fmt: skip
    return subprocess.Popen(args, cwd=kernel.parent, env=clean_env(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def _finish(processes: Sequence[subprocess.Popen[str]], timeout: float = 150) -> list[dict]:
    """Wait for every process; each must exit 0 with one JSON document on stdout."""
    outputs = [p.communicate(timeout=timeout) for p in processes]
    for process, (stdout, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, f"exit {process.returncode}\n{stderr}\n{stdout}"
    return [json.loads(stdout) for stdout, _ in outputs]


def _study_trials(url: str, name: str) -> tuple[list[Trial], int]:
    store = Store.open(url)
    try:
        return store.trials(store.find_study(name).id), store.builds_count()
    finally:
        store.close()


def _assert_nothing_done_twice(url: str, name: str, reports: list[dict], budget: int) -> list[Trial]:
    trials, builds = _study_trials(url, name)
    keys = [t.config_key for t in trials]
    assert len(keys) == len(set(keys))
    assert [t for t in trials if t.state is TrialState.RUNNING] == []
    assert sum(t.state is TrialState.COMPLETE or not t.retryable for t in trials) >= budget
    verified = sum(r["counters"]["verify_ptxas_calls"] for r in reports)  # each tuner checks what its ACF cites
    compiled = sum(r["counters"]["ptxas_calls"] for r in reports) - verified
    assert compiled == builds, f"{compiled} ptxas runs (and {verified} to verify) for {builds} distinct builds"
    assert sum(r["counters"]["new_trials"] for r in reports) == len(trials)
    return trials


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    (tmp_path / "scale.cu").write_text(TINY_KERNEL)
    return tmp_path / "scale.cu"


def test_four_tuners_share_one_study(store_url: str, tiny: Path) -> None:
    args = ("--study", "S", "--budget", "24", "--batch-size", "4", "--only", SMALL_SPACE)
    # ptxas takes 0.5 s, as on a real kernel: the first tuner cannot finish the study before the
    # others have started, however busy the machine
    env = slow_toolchain(tiny.parent / "slow", 0.5)
    reports = _finish([_tune(tiny, store_url, *args, "--seed", str(seed), env=env) for seed in range(4)])
    trials = _assert_nothing_done_twice(store_url, "S", reports, 24)
    assert len({t.worker for t in trials}) >= 2  # the work was shared, not done by one process
    assert {r["study"]["name"] for r in reports} == {"S"}


def test_two_tuners_never_run_ptxas_twice_on_the_same_ptx_and_flags(store_url: str, tiny: Path) -> None:
    # --jump-table-density leaves the PTX of this kernel unchanged (tests/test_shared_builds.py
    # checks that with nvcc): its 6 settings x 4 ptxas levels are 24 trials of 4 distinct
    # (PTX, ptxas flags) pairs. Trials are claimed per configuration, so two tuners take different
    # configurations of the same pair; the build claim makes one of them wait for the other's build.
    args = ("--study", "P", "--budget", "24", "--batch-size", "4", "--no-simplify",
            "--only", "nvcc.jump_table_density,ptxas.opt_level")  # fmt: skip
    env = slow_toolchain(tiny.parent / "slow", 0.5)
    reports = _finish([_tune(tiny, store_url, *args, "--seed", str(seed), env=env) for seed in range(2)])
    trials, _ = _study_trials(store_url, "P")
    assert len(trials) == 24 and len({t.worker for t in trials}) == 2
    verified = sum(r["counters"]["verify_ptxas_calls"] for r in reports)
    assert sum(r["counters"]["ptxas_calls"] for r in reports) - verified == 4
    assert sum(r["counters"]["shared_builds"] for r in reports) == 20


@pytest.mark.postgres
def test_two_tuners_started_at_once_on_postgres_both_finish(postgres_url: str, tmp_path: Path) -> None:
    (tmp_path / "fir.cu").write_text(SPILLER)
    args = ("--study", "pair", "--objective", "spills", "--budget", "16", "--batch-size", "4",
            "--only", SPILLER_SPACE)  # fmt: skip
    reports = _finish([_tune(tmp_path / "fir.cu", postgres_url, *args) for _ in range(2)])
    trials = _assert_nothing_done_twice(postgres_url, "pair", reports, 16)
    assert min(t.value for t in trials if t.value is not None) < trials[0].value  # a real winner
    for report in reports:  # both simplified the winner; neither reported someone else's RUNNING row
        assert report["best"]["state"] == "complete"
        assert report["best"]["value"] <= report["baseline"]["value"]




def _running_keys(url: str, deadline: float) -> set[str]:
    engine = sa.create_engine(url)
    try:
        while time.monotonic() < deadline:
            try:
                with engine.connect() as conn:
                    rows = conn.exec_driver_sql("SELECT config_key FROM trials WHERE state = 'running'").all()
            except sa.exc.DBAPIError:
                rows = []  # the schema is not there yet
            if rows:
                return {row[0] for row in rows}
            time.sleep(0.1)
        return set()
    finally:
        engine.dispose()


def _trials_now(url: str) -> list[Trial]:
    store = Store.open(url)
    try:
        return store.trials(store.find_study("K").id)
    finally:
        store.close()


def test_a_killed_tuners_trials_are_retried_after_the_stale_timeout(store_url: str, tiny: Path) -> None:
    # The whole space (4 configs) is the victim's first batch, and its ptxas sleeps 30 s: it is
    # mid-compile throughout. A second tuner (exhaustive: it cannot finish without those 4)
    # starts while the victim is alive and must leave its trials alone (heartbeats), then take
    # them over once the victim is SIGKILLed and their heartbeat is 6 s old. The victim beats
    # every second (a third of its --stale-after 3): 5 s of margin for a victim stalled on a
    # loaded machine (with 3 s, a 2 s stall let the rescuer take a live tuner's trials).
    space = ("--study", "K", "--only", "ptxas.opt_level", "--batch-size", "4")
    victim = _tune(tiny, store_url, *space, "--stale-after", "3", "--budget", "4",
                   env=slow_toolchain(tiny.parent / "slow", 30))  # fmt: skip
    held = _running_keys(store_url, time.monotonic() + 60)
    rescuer = _tune(tiny, store_url, *space, "--stale-after", "6", "--budget", "10", "--strategy", "exhaustive")
    time.sleep(10)  # the rescuer starts (~4 s) and waits for the victim's trials, stale by now without beats
    alive = {t.config_key: t.worker for t in _trials_now(store_url) if t.state is TrialState.RUNNING}
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=30)
    assert victim.returncode == -signal.SIGKILL and held, "the victim finished before it was killed"
    victim_name = f"{socket.gethostname()}:{victim.pid}"
    assert set(alive) >= held and set(alive.values()) == {victim_name}, "trials taken from a live tuner"

    (report,) = _finish([rescuer], timeout=90)
    trials = _assert_nothing_done_twice(store_url, "K", [report], 4)
    assert report["exhausted"] and len(trials) == 4
    for trial in trials:
        assert trial.state is TrialState.COMPLETE
        assert trial.worker == f"{socket.gethostname()}:{rescuer.pid}"


def _complete_trials(url: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.exec_driver_sql("SELECT count(*) FROM trials WHERE state = 'complete'").scalar() or 0)
    except sa.exc.DBAPIError:
        return 0
    finally:
        engine.dispose()


def test_the_progress_line_says_the_baseline_is_pending_while_another_tuner_builds_it(tmp_path: Path,
                                                                                      tiny: Path) -> None:
    # review 49 F6: a tuner whose study's baseline another tuner holds showed "best 0 (#1)" to the
    # end of its search, then chose #0: its best was neither held to the baseline's rules nor ranked
    # beside it. The holder's ptxas sleeps until it is killed, once the other has its results.
    url = f"sqlite:///{tmp_path / 'p.db'}"
    space = ("--study", "P", "--only", SMALL_SPACE)
    holder = _tune(tiny, url, *space, "--batch-size", "1", "--budget", "1", env=slow_toolchain(tiny.parent / "slow", 300))
    other = None
    try:
        assert _running_keys(url, time.monotonic() + 120), "the first tuner never claimed the baseline"
        other = _tune(tiny, url, *space, "--batch-size", "2", "--budget", "3")
        deadline = time.monotonic() + 180
        while _complete_trials(url) < 3 and other.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _complete_trials(url) >= 3, "the second tuner did not finish its search trials"
    finally:
        holder.kill()
        holder.communicate()
    assert other is not None
    stdout, stderr = other.communicate(timeout=150)  # it builds the baseline itself once the holder is gone
    assert other.returncode == 0, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("[")]
    baseline_at = next(i for i, line in enumerate(lines) if " #0 " in line)
    before, baseline = lines[:baseline_at], lines[baseline_at]
    assert len(before) >= 3, stderr  # its three search trials, all finished before the baseline
    assert all("  best so far " in line and "; baseline pending)  [" in line for line in before), stderr
    assert "pending" not in baseline and "  best " in baseline, stderr
    assert json.loads(stdout)["study"]["name"] == "P"
