"""The searcher in a process of its own (issue 11, item 4) and the streaming feed that paces its
jobs: the same proposals as a searcher in this process, failures as one line, a child that ends
with its driver, and a driver that does not wait for its searcher once it knows the pace."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from helpers import TINY_KERNEL

from compileiq.core.records import TrialState
from compileiq.core.space import Config, SearchSpace
from compileiq.core.space_files import load_space
from compileiq.search.loading import SearchLoad
from compileiq.search.refit_schedule import RefitSchedule
from compileiq.search.search_process import RemoteSearcher, SearchProcessError
from compileiq.search.searcher import Observation, Searcher, SearchSettings
from compileiq.tuning.request import SEARCH_PROCESS_FROM_BATCH, TuneRequest
from compileiq.tuning.streaming import StreamingFeed

SMALL_SPACE = ("ptxas.opt_level", "ptxas.maxrregcount", "ptxas.register_usage_level", "ptxas.allow_expensive_optimizations")
ROOT = Path(__file__).resolve().parent.parent
FIT_S = 0.0005  # per result: a second at 2,000 results


def _space() -> SearchSpace:
    return load_space("13.0").select(only=list(SMALL_SPACE))


def _value(config: Config) -> float:
    return float(sum(len(str(v)) for _, v in config.items) % 5) + 0.1 * (config.key.count("1") % 3)


@pytest.fixture
def remote() -> Any:
    searcher = RemoteSearcher(_space(), SearchSettings(seed=7, initial_points=6))
    yield searcher
    searcher.close()


def test_a_searcher_in_its_own_process_proposes_what_one_here_would(remote: RemoteSearcher) -> None:
    local = Searcher(_space(), SearchSettings(seed=7, initial_points=6))
    for round_ in range(4):
        asked, expected = remote.ask(8, exclude=()), local.ask(8, exclude=())
        assert [c.key for c in asked] == [c.key for c in expected], round_
        observations = [Observation(c, _value(c)) for c in asked[:-1]] + [Observation(asked[-1], None)]
        remote.tell(observations, fit=round_ % 2 == 0)
        local.tell(observations, fit=round_ % 2 == 0)
        remote.set_frontend_cost(3.0)
        local.set_frontend_cost(3.0)
    remote.fit()
    local.fit()
    exclude = [c.key for c in local.ask(3)]
    assert [c.key for c in remote.ask(5, exclude)] == [c.key for c in local.ask(5, exclude)]
    assert remote.observations == local.observations == 32


def test_a_failure_inside_the_searchers_process_is_one_line_and_it_goes_on(remote: RemoteSearcher) -> None:
    with pytest.raises(SearchProcessError, match=r"^the searcher's process failed in refit: ValueError: 2 values "
                                                 r"for 0 observations$"):
        remote.refit([1.0, 2.0])
    assert len(remote.ask(4)) == 4


def test_a_searchers_process_that_dies_stops_the_run_with_one_line(remote: RemoteSearcher) -> None:
    remote.ask(2)
    remote._process.kill()
    remote._process.wait()
    with pytest.raises(SearchProcessError, match=r"^the searcher's process ended \(exit code -9\) during ask$"):
        remote.ask(2)
    remote.close()
    with pytest.raises(SearchProcessError, match="was closed"):
        remote.fit()


def test_the_searchers_process_ignores_ctrl_c_and_ends_with_its_driver(tmp_path: Path) -> None:
    # Ctrl-C reaches the whole process group: the driver decides how the run ends (it hands its
    # claims back), so the searcher must not die first; and a driver killed outright leaves no child.
    driver = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time\n"
            "from compileiq.search.search_process import RemoteSearcher\n"
            "from compileiq.search.searcher import SearchSettings\n"
            "from compileiq.core.space_files import load_space\n"
            f"remote = RemoteSearcher(load_space('13.0').select(only={list(SMALL_SPACE)!r}), SearchSettings())\n"
            "remote.ask(1)\n"
            "print(remote._process.pid, flush=True)\n"
            "sys.stdin.readline()\n"
            "print(len(remote.ask(3)), flush=True)\n"
            "time.sleep(600)\n")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert driver.stdout is not None and driver.stdin is not None
        child = int(driver.stdout.readline())
        os.kill(child, signal.SIGINT)
        time.sleep(0.3)
        driver.stdin.write("\n")
        driver.stdin.flush()
        assert driver.stdout.readline().strip() == "3"  # it still answers
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 20
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child)
    finally:
        driver.kill()
        driver.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _new_children(before: set[int]) -> list[str]:
    """This process's children that were not there `before`, each as "PID STATE CMDLINE", that are
    a searcher's process or a zombie (a child nobody waited for); a guard (core/processes) is neither."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in before:
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                state, ppid = stat.read().rpartition(")")[2].split()[:2]
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(ppid) == os.getpid() and (state == "Z" or "compileiq.search.search_process" in command):
            found.append(f"{name} {state} {command}")
    return found


def _children_now() -> set[int]:
    return {int(p) for p in os.listdir("/proc") if p.isdigit()}


def _none_left(before: set[int], within_s: float = 20) -> list[str]:
    deadline = time.monotonic() + within_s
    while (left := _new_children(before)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_a_tune_that_fails_before_its_run_leaves_no_searchers_process(tmp_path: Path) -> None:
    # review 49 F4: stream with a batch of 64 starts the searcher's process at once, while the
    # sources bundle; an --out that is no ACF (no force) fails the call before the run, which used
    # to leave the child to the garbage collector and then as a zombie nobody waits for
    import compileiq
    from compileiq.core.errors import UsageError

    (tmp_path / "scale.cu").write_text(TINY_KERNEL)
    (tmp_path / "k.acf.toml").write_text("notes, not an ACF\n")
    before = _children_now()
    with pytest.raises(UsageError, match="it is not an ACF written by compileiq tune"):
        compileiq.tune(tmp_path / "scale.cu", stream=True, batch_size=SEARCH_PROCESS_FROM_BATCH, budget=4,
                       workers="local", db=f"sqlite:///{tmp_path / 't.db'}", out=tmp_path / "k.acf.toml")
    assert _none_left(before) == []


def test_a_search_load_closed_while_it_loads_closes_what_it_loads() -> None:
    # the run may fail within the child's start: the load closes it when it ends
    before = _children_now()
    closed = threading.Event()  # the load goes on once closed: a loaded machine cannot finish it first
    load = SearchLoad(lambda: (closed.wait(60), RemoteSearcher(_space(), SearchSettings()))[1])
    load.close()
    assert not load.loaded
    closed.set()
    searcher = load.get()
    assert _none_left(before) == []
    with pytest.raises(SearchProcessError, match="was closed"):
        searcher.ask(1)


@pytest.mark.parametrize(("changes", "expected"), [
    ({}, True),
    ({"batch_size": SEARCH_PROCESS_FROM_BATCH - 1}, False),
    ({"stream": False}, False),
    ({"objective": "registers,instructions"}, False),
    ({"search": SearchSettings(strategy="random")}, False),
    ({"batch_size": 8, "search_process": True}, True),
    ({"search_process": False}, False),
])
def test_the_searcher_gets_a_process_of_its_own_when_a_streaming_driver_feeds_many_slots(
    changes: dict[str, Any], expected: bool
) -> None:
    fields: dict[str, Any] = {"kernel": None, "space": _space(), "objective": "static", "budget": 100,
                              "stream": True, "batch_size": SEARCH_PROCESS_FROM_BATCH, **changes}
    assert TuneRequest(**fields).searches_in_a_process is expected


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Searcher:
    """Fresh proposals; an ask takes `ask_s` of the clock, a fit `fit_s` per proposal asked so far
    (a refit grows with the study: the first is quick, the last the slowest)."""

    def __init__(self, clock: _Clock, fit_s: float, ask_s: float) -> None:
        self._clock, self._fit_s, self._ask_s = clock, fit_s, ask_s
        self._next = 0
        self.fits = 0

    def ask(self, count: int, exclude: Sequence[str] = ()) -> list[Config]:
        self._clock.now += self._ask_s
        configs = [Config.of({"n": self._next + i}) for i in range(count)]
        self._next += count
        return configs

    def fit(self) -> None:
        self.fits += 1
        self._clock.now += self._fit_s * self._next


class _Refresh:
    """`BackgroundRefresh` on the fake clock: a job's result is ready when its time has passed;
    waiting for it moves the clock there and counts the time the driver was blocked."""

    def __init__(self, clock: _Clock) -> None:
        self._clock = clock
        self._job: tuple[float, list[Config]] | None = None
        self.blocked_s = 0.0

    @property
    def running(self) -> bool:
        return self._job is not None

    def start(self, job: Any) -> None:
        start = self._clock.now
        result = job()  # the fake searcher moves the clock by the job's duration...
        self._job, self._clock.now = (self._clock.now, result), start  # ... which passes beside the driver

    def done(self) -> list[Config] | None:
        return self.wait() if self._job is not None and self._job[0] <= self._clock.now else None

    def wait(self) -> list[Config]:
        assert self._job is not None
        (ready_at, result), self._job = self._job, None
        self.blocked_s += max(0.0, ready_at - self._clock.now)
        self._clock.now = max(self._clock.now, ready_at)
        return result


def _stream(fit_s: float, ask_s: float, results: int, batch_size: int = 8, pace_s: float = 0.01,
            ) -> tuple[_Searcher, _Refresh, list[int]]:
    """A streaming batch fed to the end: a result every `pace_s`; returns the configs handed out."""
    clock = _Clock()
    searcher, refresh = _Searcher(clock, fit_s, ask_s), _Refresh(clock)

    def trial(config: Config) -> Any:
        return SimpleNamespace(config_key=config.key, state=TrialState.COMPLETE, retryable=False, final=True)

    feed = StreamingFeed(batch_size, results, searcher, refresh, tell=lambda trials, fit: None,
                         claim=lambda configs: [trial(c) for c in configs], flush=lambda: None,
                         out_of_time=lambda: False, clock=clock)
    feed._schedule = RefitSchedule(batch_size, clock=clock)
    running = [trial(Config.of({"first": i})) for i in range(batch_size)]
    finished: list[Any] = []
    handed: list[int] = []
    while running:
        clock.now += pace_s
        finished.append(running.pop(0))
        claimed = feed(finished, running)
        handed += [int(t.config_key.split(":")[1].rstrip("}")) for t in claimed]
        running += claimed
    return searcher, refresh, handed


def test_a_streaming_driver_refits_only_when_its_queue_lasts_through_the_refit() -> None:
    # A refit of a second at 100 results a second uses up 100 proposals: started with fewer queued,
    # the driver would wait for it while every slot that freed meanwhile stayed idle.
    searcher, refresh, handed = _stream(fit_s=FIT_S, ask_s=0.05, results=3000)
    assert searcher.fits >= 3  # it did refit, on the schedule's terms (a quarter of the driver's time)
    assert refresh.blocked_s <= 0.05 + 1e-9  # only the very first ask, with nothing queued yet
    assert len(handed) == len(set(handed)) == 3000 - 8


def test_a_streaming_driver_blind_to_its_pace_waits_on_every_refit(monkeypatch: pytest.MonkeyPatch) -> None:
    # The yardstick for the test above: queues of two batches, as before the feed knew the pace.
    monkeypatch.setattr(StreamingFeed, "_cover", lambda self, seconds: 0)
    searcher, refresh, _ = _stream(fit_s=FIT_S, ask_s=0.05, results=3000)
    assert searcher.fits >= 3 and refresh.blocked_s > 1.0
