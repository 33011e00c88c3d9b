"""Benchmark (issue 11, item 4): how many compile slots one tuning driver keeps busy.

The real tuner, searcher (bayes, ET) and store run unchanged; only the workers are simulated at
the seam the tuner already has (`open_workers`): every variant "compiles" by sleeping a fixed,
ptxas-like time (uniform in --task-ms, fixed per variant) and returns a copy of the kernel's real
baseline build with a code hash and register count of its own. Slots are simulated by a process
of their own (`--backend process`: a scheduler with a heap of deadlines; the driver pays one pipe
message per task each way, as it would for remote workers), by threads of the driver's process
(`--backend threads`: 128 of them wake under the driver's own interpreter lock, which real remote
workers never take), or by Ray actor slots (`--backend ray`: actors with max_concurrency on an
embedded Ray given fake CPUs; sleeping tasks need no real cores).

Reported per slot count: the driver's sustained trials/s, slot utilisation (sleep time over
slots x wall, after the baseline), the searcher's ms per ask, its refits and ms per refit, its
ms per trial (asks, tells and refits together), how long the driver waited for it (its queue
of proposals ran dry while a refit or ask ran beside it), the database's ms per trial in the loop (claims,
group-commit writes, reads; wall time, waits for the database's lock included) and its write
rate alone (claims of 64, groups of 64), trials per CPU-second of the driver process (its
ceiling on a core of its own, whatever the machine's load), and the profile's top entries with
--profile (cProfile sees the main thread only: the group-commit writer is not in it).

Streaming runs should keep more variants in flight than there are slots (--in-flight 1.5, the
tuner's --batch-size 1.5 x slots): the tuner refills a quarter of the batch at a time, and with
exactly as many in flight as slots a quarter of them would wait for each refill.

    PYTHONPATH=. .venv/bin/python benchmarks/driver_scaling.py [--slots 8 32 128] [--db sqlite]
        [--db postgresql+psycopg://...] [--trials-per-slot 12] [--in-flight 1.5] [--backend process]
        [--search-process auto|on|off]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import pstats
import queue
import random
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Self

import sqlalchemy as sa
from common import ROOT, machine, scratch

from compileiq.app import TuneOptions, tuning_space
from compileiq.build.compile import (
    AssembleJob,
    Build,
    ExecutableBuild,
    ExecutableJob,
    FrontendJob,
    PtxResult,
    assemble,
    emit_ptx,
)
from compileiq.build.workers import Transfers, VariantJob, VariantResult
from compileiq.core.records import TrialOutcome, TrialState
from compileiq.core.toolchain import find_toolchain
from compileiq.search.refit_schedule import BackgroundRefresh
from compileiq.search.search_process import RemoteSearcher
from compileiq.search.searcher import Searcher, SearchSettings
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.store import Store
from compileiq.tuning.progress import SilentProgress
from compileiq.tuning.request import TuneRequest
from compileiq.tuning.tuner import Tuner

KERNEL = ROOT / "kernels" / "sgemm" / "sgemm.cu"


@dataclass(frozen=True)
class Template:
    """The kernel's real baseline: what every simulated variant returns, varied a little."""

    ptx: PtxResult
    build: Build


def real_template(kernel: Path) -> tuple[Template, Any, Any, Any]:
    spec, tools = load_spec(kernel), find_toolchain()
    space = tuning_space(spec, tools, TuneOptions(kernel=kernel))
    bundle = bundle_sources(spec, tools.nvcc)
    default = space.default_config()
    frontend = FrontendJob(tools.nvcc, bundle, spec.arch, (*space.frontend_args(default), *spec.fixed_define_args()),
                           spec.compile_timeout_s)
    ptx = emit_ptx(frontend)
    build = assemble(AssembleJob(tools.ptxas, spec.arch, space.ptxas_args(default), spec.compile_timeout_s), ptx)
    if not build.ok:
        raise SystemExit(f"the baseline of {kernel.name} does not build: {build.message}")
    return Template(ptx, build), spec, space, (tools, bundle)


def fake_build(template: Template, job: VariantJob, seconds: float) -> Build:
    digest = hashlib.sha256(repr((job.frontend.args, job.assemble.args)).encode()).digest()
    shift = digest[0] % 17 - 8
    entries = tuple(replace(e, registers=max(16, e.registers + shift), instructions=e.instructions + digest[1] % 64)
                    for e in template.build.entries)
    return replace(template.build, entries=entries, code_hash=digest.hex(), cubin=b"", seconds=seconds)


def task_seconds(job: VariantJob, low_ms: float, high_ms: float) -> float:
    digest = hashlib.sha256(repr(job.assemble.args).encode() + repr(job.frontend.args).encode()).digest()
    return (low_ms + (high_ms - low_ms) * digest[2] / 255) / 1000


class Slots:
    """Where sleeping tasks run: `submit(seconds) -> handle`, `ready(handles) -> done handles`;
    after `close`, `idle` is a timeline of (time, slots idle from then on) where one is kept."""

    idle: Sequence[tuple[float, int]] = ()

    def submit(self, seconds: float) -> Any: ...

    def ready(self, handles: Sequence[Any]) -> list[Any]: ...

    def close(self) -> None: ...


class ThreadSlots(Slots):
    """Sleeps on a thread pool; finished ones are queued as they end (O(1) per result, where
    `concurrent.futures.wait` over every pending future cost the driver's thread more than a
    real scheduler's notification)."""

    def __init__(self, slots: int) -> None:
        self._pool = ThreadPoolExecutor(slots, thread_name_prefix="slot")
        self._done: queue.SimpleQueue[Future[None]] = queue.SimpleQueue()

    def submit(self, seconds: float) -> Future[None]:
        future = self._pool.submit(time.sleep, seconds)
        future.add_done_callback(self._done.put)
        return future

    def ready(self, handles: Sequence[Any]) -> list[Any]:
        done = [self._done.get()]
        while not self._done.empty():
            done.append(self._done.get())
        return done

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class ProcessSlots(Slots):
    """Slots simulated by a process of their own (a scheduler with a heap of deadlines, like a
    cluster's: a queued task starts when that process sees a slot free), so that the slots cost the
    driver's interpreter nothing but a pipe message per task each way, as real remote workers do.
    Thread slots wake 128 threads under the driver's own interpreter lock."""

    def __init__(self, slots: int) -> None:
        import multiprocessing

        context = multiprocessing.get_context("fork")  # before the tuner starts any thread
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_simulate_slots, args=(child, slots), daemon=True)
        self._process.start()
        child.close()
        self._next = 0

    def submit(self, seconds: float) -> int:
        self._next += 1
        self._conn.send((self._next, seconds))
        return self._next

    def ready(self, handles: Sequence[Any]) -> list[Any]:
        done = list(self._conn.recv())
        while self._conn.poll(0):
            done.extend(self._conn.recv())
        return done

    def close(self) -> None:
        self._conn.send(None)
        while self._conn.poll(5):
            message = self._conn.recv()
            if message and message[0] == "idle":
                self.idle = message[1]
                break
        self._process.join(timeout=5)


def idle_slot_seconds(idle: Sequence[tuple[float, int]], start: float, end: float) -> float:
    """Slot-seconds idle within [start, end] from a timeline of (time, slots idle from then on)."""
    total = 0.0
    for (at, count), (until, _) in zip(idle, [*idle[1:], (end, 0)]):
        low, high = max(at, start), min(until, end)
        total += count * max(0.0, high - low)
    return total


def _simulate_slots(conn: Any, slots: int) -> None:
    import heapq
    from collections import deque

    free, waiting, deadlines = slots, deque[tuple[int, float]](), list[tuple[float, int]]()
    idle = [(time.perf_counter(), slots)]  # (time, slots idle from then on): for where the idle time went
    while True:
        wait = max(0.0, deadlines[0][0] - time.perf_counter()) if deadlines else None
        while conn.poll(wait):
            message = conn.recv()
            if message is None:
                conn.send(("idle", idle))
                return
            waiting.append(message)
            wait = 0
        now = time.perf_counter()
        done = []
        while deadlines and deadlines[0][0] <= now:
            done.append(heapq.heappop(deadlines)[1])
            free += 1
        while free and waiting:
            handle, seconds = waiting.popleft()
            heapq.heappush(deadlines, (now + seconds, handle))
            free -= 1
        if free != idle[-1][1]:
            idle.append((now, free))
        if done:
            conn.send(done)


class RaySlots(Slots):
    """`nodes` actors with slots/nodes concurrent calls each on an embedded Ray with fake CPUs."""

    def __init__(self, slots: int, nodes: int = 4) -> None:
        import ray

        from compileiq.build.workers.ray_setup import LOOPBACK_ENV

        ray.init(num_cpus=slots, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1",
                 runtime_env={"env_vars": dict(LOOPBACK_ENV)}, logging_level="ERROR")

        class Sleeper:
            def sleep(self, seconds: float) -> float:
                time.sleep(seconds)
                return seconds

        per = max(1, slots // nodes)
        actor = ray.remote(num_cpus=per, max_concurrency=per)(Sleeper)
        self._ray = ray
        self._actors = [actor.remote() for _ in range(nodes)]
        ray.get([a.sleep.remote(0) for a in self._actors])
        self._next = 0

    def submit(self, seconds: float) -> Any:
        self._next = (self._next + 1) % len(self._actors)
        return self._actors[self._next].sleep.remote(seconds)

    def ready(self, handles: Sequence[Any]) -> list[Any]:
        done, _ = self._ray.wait(list(handles), num_returns=1)
        more, _ = self._ray.wait(list(handles), num_returns=len(handles), timeout=0)
        return list({*done, *more})

    def close(self) -> None:
        self._ray.shutdown()


class SimulatedWorkers:
    """A `Workers` whose compiles sleep: the tuner's seam to the compiler, nothing else replaced."""

    def __init__(self, slots: Slots, count: int, template: Template, task_ms: tuple[float, float]) -> None:
        self._slots, self._count, self._template, self._task_ms = slots, count, template, task_ms
        self._frontends: set[FrontendJob] = set()
        self.transfers = Transfers()  # nothing leaves this process
        self.calls = 0
        self.busy_s = 0.0  # summed sleep of tasks after the first call (the baseline alone)
        self.first_submit: float | None = None
        self.last_done = 0.0
        self.last_submit = 0.0  # after it, slots idle only because the budget is spent (the tail)
        self.lock = threading.Lock()

    @property
    def description(self) -> str:
        return f"simulated ({self._count} slots)"

    def run(self, jobs: Sequence[VariantJob], more: Callable[[], Sequence[VariantJob]] | None = None,
            ) -> Iterator[VariantResult]:
        self.calls += 1
        steady = self.calls > 1
        if steady and self.first_submit is None:
            self.first_submit = time.perf_counter()
        pending: dict[Any, tuple[VariantJob, float]] = {}

        def submit(batch: Sequence[VariantJob]) -> None:
            for job in batch:
                seconds = task_seconds(job, *self._task_ms)
                pending[self._slots.submit(seconds)] = (job, seconds)
            if batch and steady:
                self.last_submit = time.perf_counter()

        submit(jobs)
        while pending:
            for handle in self._slots.ready(list(pending)):
                job, seconds = pending.pop(handle)
                if steady:
                    self.busy_s += seconds
                    self.last_done = time.perf_counter()
                fresh = job.frontend not in self._frontends
                self._frontends.add(job.frontend)
                yield VariantResult(job.tag, self._template.ptx, fake_build(self._template, job, seconds), fresh)
                if more is not None:
                    submit(more())

    def build_executables(self, jobs: Sequence[ExecutableJob]) -> list[ExecutableBuild]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Timers:
    """Wall time spent in chosen methods (patched for the run, restored after); a name may time
    several methods (the searcher's, and its remote proxy's when it runs in a process)."""

    def __init__(self, targets: dict[str, Sequence[tuple[Any, str]]]) -> None:
        self.seconds = dict.fromkeys(targets, 0.0)
        self.calls = dict.fromkeys(targets, 0)
        self._originals = [(name, owner, attr, getattr(owner, attr))
                           for name, pairs in targets.items() for owner, attr in pairs]

    def __enter__(self) -> Self:
        for name, owner, attr, original in self._originals:
            setattr(owner, attr, self._timed(name, original))
        return self

    def __exit__(self, *exc: object) -> None:
        for _, owner, attr, original in self._originals:
            setattr(owner, attr, original)

    def _timed(self, name: str, function: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start
                self.calls[name] += 1

        return timed

    def per_call_ms(self, name: str) -> float:
        return 1000 * self.seconds[name] / max(self.calls[name], 1)


def database(kind: str) -> tuple[str, Callable[[], None]]:
    """A fresh database: `sqlite` (a temporary file) or a PostgreSQL admin URL (a new database)."""
    if kind == "sqlite":
        return f"sqlite:///{scratch('ciq-scale-') / 'bench.db'}", lambda: None
    admin = sa.make_url(kind)
    name = f"ciq_bench_{uuid.uuid4().hex[:10]}"
    engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with engine.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        engine.dispose()

    return admin.set(database=name).render_as_string(hide_password=False), drop


def write_rate(url: str, space: Any, count: int = 512) -> float:
    """Trials claimed (batches of 64) and finished (groups of 64, as the driver's group commit
    writes them at this rate) per second, alone."""
    from compileiq.core.records import StudyKey

    store = Store.open(url)
    try:
        key = StudyKey("bench", "0" * 64, space.id, space.sha256, "nvcc", "sm_90", "static", "static")
        study = store.get_or_create_study(key, f"write-rate-{uuid.uuid4().hex[:8]}")
        configs = list(random_configs(space, count))
        start = time.perf_counter()
        for first in range(0, count, 64):
            claimed = store.claim_trials(study.id, configs[first:first + 64], "bench:1")
            store.finish_trials([TrialOutcome(trial.id, TrialState.COMPLETE, 1.0, None, {"registers": 32}, "ab" * 32, 0.1)
                                 for trial in claimed])
        return count / (time.perf_counter() - start)
    finally:
        store.close()


def random_configs(space: Any, count: int) -> Iterator[tuple[str, dict[str, Any]]]:
    searcher = Searcher(space, SearchSettings(strategy="random", seed=1))
    for config in searcher.ask(count):
        yield config.key, config.as_dict()


@dataclass(frozen=True)
class Row:
    db: str
    mode: str
    slots: int
    in_flight: int
    trials: int
    wall_s: float
    trials_per_s: float
    utilisation: float
    ask_ms: float
    fits: int  # the surrogate's refits (in a tell, or a streaming run's scheduled fit)
    fit_ms: float
    search_ms_per_trial: float  # ask + tell + fit
    wait_ms_per_trial: float  # the driver blocked on a refit or ask beside it (its queue ran dry)
    db_ms_per_trial: float
    db_writes_per_s: float
    trials_per_cpu_s: float  # the driver process's CPU (a PostgreSQL server's own is not counted)
    starved: float  # share of slot time idle with nothing queued before the last submission: the driver was late
    tail: float  # ... after it: the budget was spent, the last tasks drain


def run_one(args: argparse.Namespace, db: str, slots: int, stream: bool, template: Template, spec: Any,
            space: Any, tools_bundle: Any) -> tuple[Row, str]:
    tools, bundle = tools_bundle
    url, drop = database(db)
    store = Store.open(url)
    in_flight = max(1, round(slots * args.in_flight))
    budget = slots * args.trials_per_slot
    request = TuneRequest(kernel=spec, space=space, objective="static", budget=budget,
                          search=SearchSettings(seed=1, strategy=args.strategy), batch_size=in_flight, simplify=False, ablate=False,
                          stream=stream, search_process=args.search_process)
    pool: Slots = {"ray": RaySlots, "process": ProcessSlots, "threads": ThreadSlots}[args.backend](slots)
    workers = SimulatedWorkers(pool, slots, template, (args.task_ms[0], args.task_ms[1]))
    timers = Timers({"ask": [(Searcher, "ask"), (RemoteSearcher, "ask")],
                     "tell": [(Searcher, "tell"), (RemoteSearcher, "tell")],
                     "fit": [(Searcher, "fit"), (RemoteSearcher, "fit")],
                     "refit": [(Searcher, "_refit"), (RemoteSearcher, "fit")],  # remote: its scheduled fits
                     "claim": [(Store, "claim_trials")], "finish": [(Store, "finish_trials")], "read": [(Store, "trials")],
                     "waits": [(BackgroundRefresh, "wait")]})
    profile = cProfile.Profile() if args.profile else None
    try:
        with timers:
            start, cpu = time.perf_counter(), time.process_time()
            if profile:
                profile.enable()
            result = Tuner(request, store, tools, lambda: workers, SilentProgress(), bundle=bundle).run()
            if profile:
                profile.disable()
                profile.dump_stats(Path(tempfile.gettempdir()) / "driver_scaling.prof")
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        steady = (workers.last_done - workers.first_submit) if workers.first_submit else float("nan")
        trials = result.counters.new_trials
        db_s = sum(timers.seconds[k] for k in ("claim", "finish", "read"))
        rate = write_rate(url, space)
    finally:
        pool.close()
        store.close()
        drop()
    search_s = sum(timers.seconds[k] for k in ("ask", "tell", "fit"))  # refits happen inside tell or fit
    slot_s = slots * steady
    starved = idle_slot_seconds(pool.idle, workers.first_submit or 0.0, workers.last_submit) / slot_s
    tail = idle_slot_seconds(pool.idle, workers.last_submit, workers.last_done) / slot_s
    row = Row(db.split("+")[0].split(":")[0], "stream" if stream else "batch", slots, in_flight, trials, wall, (trials - 1) / steady,
              workers.busy_s / (slots * steady), timers.per_call_ms("ask"), timers.calls["refit"],
              timers.per_call_ms("refit"), 1000 * search_s / max(trials, 1),
              1000 * timers.seconds["waits"] / max(trials, 1), 1000 * db_s / max(trials, 1), rate,
              trials / cpu, starved if pool.idle else float("nan"), tail if pool.idle else float("nan"))
    text = ""
    if profile:
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats(args.profile_sort).print_stats(30)
        text = out.getvalue()
    return row, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", type=Path, default=KERNEL)
    parser.add_argument("--slots", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--db", action="append", help="sqlite, or a PostgreSQL URL allowed to CREATE DATABASE")
    parser.add_argument("--trials-per-slot", type=int, default=12)
    parser.add_argument("--in-flight", type=float, default=1.0, help="--batch-size as a multiple of the slots")
    parser.add_argument("--mode", choices=("batch", "stream"), nargs="+", default=["batch", "stream"])
    parser.add_argument("--task-ms", type=float, nargs=2, default=[50.0, 150.0])
    parser.add_argument("--backend", choices=("process", "threads", "ray"), default="process")
    parser.add_argument("--strategy", choices=("bayes", "random"), default="bayes",
                        help="random: the driver's ceiling without the surrogate (bookkeeping only)")
    parser.add_argument("--search-process", type=lambda text: {"on": True, "off": False, "auto": None}[text],
                        default=None, help="on, off or auto (the tuner's default): the searcher in a process of its own")
    parser.add_argument("--profile", action="store_true", help="cProfile the driver; print its top entries")
    parser.add_argument("--profile-sort", default="cumulative", help="pstats order: cumulative, tottime, ...")
    args = parser.parse_args()
    random.seed(0)
    template, spec, space, tools_bundle = real_template(args.kernel)
    print(f"machine: {machine()}; kernel {args.kernel.name}, space of {space.size():,} configs, tasks "
          f"{args.task_ms[0]:g}-{args.task_ms[1]:g} ms, {args.backend}, batch size = {args.in_flight:g} x slots")
    print(f"{'db':10} {'mode':6} {'slots':>5} {'batch':>5} {'trials':>6} {'wall s':>6} {'trials/s':>8} {'busy':>5} "
          f"{'ask ms':>7} {'fits':>4} {'fit ms':>7} {'search ms/trial':>15} {'wait ms/trial':>13} {'db ms/trial':>11} {'db writes/s':>11} "
          f"{'trials/CPU-s':>12} {'starved':>7} {'tail':>5}")
    profiles = []
    for db in args.db or ["sqlite"]:
        for mode, slots in [(mode, slots) for slots in args.slots for mode in args.mode]:
            row, text = run_one(args, db, slots, mode == "stream", template, spec, space, tools_bundle)
            print(f"{row.db:10} {row.mode:6} {row.slots:5d} {row.in_flight:5d} {row.trials:6d} {row.wall_s:6.1f} "
                  f"{row.trials_per_s:8.1f} {row.utilisation:5.0%} {row.ask_ms:7.1f} {row.fits:4d} {row.fit_ms:7.1f} "
                  f"{row.search_ms_per_trial:15.2f} {row.wait_ms_per_trial:13.3f} {row.db_ms_per_trial:11.2f} {row.db_writes_per_s:11.0f} "
                  f"{row.trials_per_cpu_s:12.0f} {row.starved:7.1%} {row.tail:5.1%}", flush=True)
            if text:
                profiles.append(f"--- {row.db}, {mode}, {slots} slots ---\n{text}")
    print("\n".join(profiles))


if __name__ == "__main__":
    main()
