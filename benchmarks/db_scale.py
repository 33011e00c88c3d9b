"""Benchmark (issue 11, item 5): a team database with 100,000 trials across 200 studies.

`fill` writes the rows straight into the store's own tables (bulk inserts, the schema made by
the store's migrations): 10 kernels x 4 objectives x 5 source versions = 200 studies, 500 trials
each (90% complete, 10% failed with a reason), a cached build per compiled trial, configs drawn
from the installed compiler's real search space. One of the studies is the real study of
--kernel (its key as the tuner computes it), so that a real tune resumes it.

Measured on SQLite and PostgreSQL: `compileiq show` (the process, as a user runs it) and
`compileiq show STUDY`, a tune's start-up (Tuner.run until it would start its first compile:
claims, trials, warm start from the related studies, searcher), and the bytes per trial.

    PYTHONPATH=. .venv/bin/python benchmarks/db_scale.py [--db sqlite] [--db postgresql+psycopg://...]
        [--studies 200] [--trials 100000]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from common import ROOT, machine, scratch

from compileiq.app import TuneOptions, tuning_space
from compileiq.core.space import Config, SearchSpace, SpaceError
from compileiq.core.static_score import StaticMetrics, score
from compileiq.core.toolchain import find_toolchain
from compileiq.results.explain import explain
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.source.spec import KernelSpec
from compileiq.store import Store
from compileiq.store.schema import builds, runs, studies, trials_table
from compileiq.tuning.progress import SilentProgress
from compileiq.tuning.request import TuneRequest, study_key
from compileiq.tuning.tuner import Tuner

KERNEL = ROOT / "kernels" / "reduction" / "reduction.cu"
OBJECTIVES = ("static", "spills", "registers", "instructions")
KERNEL_NAMES = ("sgemm", "reduction", "stencil", "softmax", "conv2d", "attention", "transpose", "spmv_sell",
                "bsr_spmm", "spill_heavy")


@dataclass(frozen=True)
class Filled:
    studies: int
    trials: int
    target: str  # the name of the study that belongs to --kernel (objective static)
    seconds: float


def _hex(rng: random.Random) -> str:
    return f"{rng.getrandbits(256):064x}"


def _config(space: SearchSpace, rng: random.Random) -> Config:
    """A random configuration that the space accepts."""
    while True:
        config = Config.of({p.name: rng.choice(p.values) for p in space.parameters})
        try:
            space.validate(config)
            return config
        except SpaceError:
            continue


def _metrics(rng: random.Random, block_size: int) -> dict[str, Any]:
    registers, spills = rng.randint(24, 255), rng.choice((0, 0, 0, 8, 64, 512))
    entry = {"name": "_Z6kernelPfPKfi", "registers": registers, "spill_store_bytes": spills // 2,
             "spill_load_bytes": spills - spills // 2, "stack_bytes": spills, "shared_bytes": 4096, "barriers": 1,
             "instructions": rng.randint(200, 4000), "entry": True}  # fmt: skip
    return {"spill_bytes": spills, "registers": registers, "occupancy": rng.choice((0.25, 0.5, 0.75, 1.0)),
            "instructions": entry["instructions"], "stack_bytes": spills, "block_size": block_size,
            "entries": [entry]}  # fmt: skip


def _value(objective: str, metrics: dict[str, Any]) -> float:
    scored = StaticMetrics.of(metrics)
    value = score(objective, scored) if scored is not None else None
    assert value is not None, (objective, metrics)
    return value


def _trial_rows(study_id: int, count: int, space: SearchSpace, spec: KernelSpec, rng: random.Random,
                now: datetime, objective: str) -> Iterator[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(trial row, build row or None); the first trial is the compiler defaults, complete; each
    complete one's value what its metrics give for `objective` (else every read sets it aside)."""
    configs: dict[str, Config] = {space.default_config().key: space.default_config()}
    while len(configs) < count:
        config = _config(space, rng)
        configs.setdefault(config.key, config)
    for number, config in enumerate(configs.values()):
        failed = number > 0 and rng.random() < 0.1
        metrics = _metrics(rng, spec.block_size_for(config.as_dict()))
        code_hash = None if failed else _hex(rng)
        started = now - timedelta(seconds=rng.randint(60, 10**6))
        row = {"study_id": study_id, "number": number, "config_key": config.key, "config": config.as_dict(),
                   "state": "failed" if failed else "complete", "value": None if failed else _value(objective, metrics),
                   "reason": "compile_error: ptxas fatal   : Unresolved extern function 'helper'" if failed else None,
                   "retryable": False, "metrics": {} if failed else metrics, "code_hash": code_hash,
                   "compile_seconds": rng.uniform(0.05, 2.0), "worker": f"host-{rng.randint(1, 8)}:{rng.randint(100, 99999)}",
                   "started_at": started, "heartbeat_at": started, "finished_at": started + timedelta(seconds=2)}  # fmt: skip
        build = None if failed else {"key": _hex(rng), "ok": True, "message": "", "code_hash": code_hash,
                                         "seconds": row["compile_seconds"],
                                         "metrics": {"status": "ok", "entries": metrics["entries"]}}  # fmt: skip
        yield row, build


def fill(url: str, kernel: Path = KERNEL, studies_count: int = 200, trials: int = 100_000, seed: int = 0,
         ) -> Filled:
    """Fill an empty database (schema by the store's migrations) with synthetic studies."""
    start, rng, now = time.perf_counter(), random.Random(seed), datetime.now(UTC)
    spec, tools = load_spec(kernel), find_toolchain()
    space = tuning_space(spec, tools, TuneOptions(kernel=kernel))
    real_key = study_key(_request(spec, space, 1), bundle_sources(spec, tools.nvcc), tools)
    Store.open(url).close()
    engine = sa.create_engine(url)
    per_study = trials // studies_count
    target = f"{spec.name}-static-{real_key.source_sha256[:8]}"
    try:
        for index in range(studies_count):
            name, objective = KERNEL_NAMES[index % 10], OBJECTIVES[index // 10 % 4]
            version = index // 40
            source = hashlib.sha256(f"{name}-{version}".encode()).hexdigest()
            key = {"kernel": name, "source_sha256": source, "space_id": space.id, "space_sha256": space.sha256,
                       "toolchain": tools.nvcc_build, "arch": spec.arch, "evaluator": "static", "objective": objective}  # fmt: skip
            study_name = f"{name}-{objective}-v{version}"
            if index == studies_count - 1:
                key, study_name = {f: getattr(real_key, f) for f in real_key.__dataclass_fields__}, target
            with engine.begin() as conn:
                study_id = conn.execute(studies.insert().values(name=study_name, next_number=per_study,
                                                                created_at=now, **key).returning(studies.c.id)).scalar_one()
                rows = list(_trial_rows(study_id, per_study, space, spec, rng, now, str(key["objective"])))
                conn.execute(trials_table.insert(), [row for row, _ in rows])
                conn.execute(builds.insert(), [build for _, build in rows if build is not None])
        _record_decisions(url, engine, now)
        if engine.dialect.name == "postgresql":  # as autovacuum leaves a table within a minute of
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:  # the inserts
                conn.exec_driver_sql("VACUUM ANALYZE")
    finally:
        engine.dispose()
    return Filled(studies_count, per_study * studies_count, target, time.perf_counter() - start)


def _record_decisions(url: str, engine: sa.Engine, now: datetime) -> None:
    """A run row per study with the choice a tuner records (`runs.decision`), as every study a tune
    made has: the study list follows it and reads no study's trials (it replays a study without
    one, an imported one, from its trials)."""
    store = Store.open(url)
    try:
        rows = []
        for study in store.list_studies():
            trials = store.trials(study.id)
            chosen = explain(study, trials).chosen
            if chosen is None:
                continue
            rows.append({"study_id": study.id, "search_trials": len(trials), "extra_trials": 0, "worker": "db_scale",
                         "stopped": f"budget {len(trials)}", "limits": {"budget": len(trials)},
                         "decision": {"chosen": chosen.number, "value": chosen.value, "by": "rules", "verified": []},
                         "started_at": now, "finished_at": now})  # fmt: skip
    finally:
        store.close()
    if rows:
        with engine.begin() as conn:
            conn.execute(runs.insert(), rows)


def _request(spec: KernelSpec, space: SearchSpace, budget: int, study: str | None = None) -> TuneRequest:
    return TuneRequest(spec, space, "static", budget, batch_size=8, study_name=study, simplify=False, ablate=False)


class _StartedCompiling(Exception):
    """Raised where the tuner opens its workers: its start-up is over."""


def tune_start_up(url: str, kernel: Path, study: str) -> tuple[float, float]:
    """Seconds from opening the store to the moment a tune resuming --kernel's study would
    start its first compile (every read, the warm start and the searcher's first ask included)."""
    spec, tools = load_spec(kernel), find_toolchain()
    space = tuning_space(spec, tools, TuneOptions(kernel=kernel))
    bundle = bundle_sources(spec, tools.nvcc)
    start, cpu = time.perf_counter(), time.process_time()
    store = Store.open(url)

    def workers() -> Any:
        raise _StartedCompiling

    try:
        existing = len(store.trials(store.find_study(study).id))
        request = _request(spec, space, existing + 8, study)
        Tuner(request, store, tools, workers, SilentProgress(), bundle=bundle).run()
    except _StartedCompiling:
        return time.perf_counter() - start, time.process_time() - cpu
    finally:
        store.close()
    raise SystemExit("the tune finished without compiling: the study was not resumed")


BYTECODE = scratch("ciq-dbscale-pyc-")


def cli_seconds(url: str | None, *args: str) -> tuple[float, float]:
    """Wall and CPU seconds of one `compileiq ARGS [--db URL]` process. Its modules are
    byte-compiled once, into a folder of this run, as an installed package's are by pip (a
    PYTHONDONTWRITEBYTECODE environment would compile every module on every run)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(ROOT), NO_COLOR="1", PYTHONPYCACHEPREFIX=str(BYTECODE))
    argv = [sys.executable, "-m", "compileiq", *args, *(["--db", url] if url else [])]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return time.perf_counter() - start, cpu


def database(kind: str) -> tuple[str, Callable[[], int], Callable[[], None]]:
    """A fresh database: its URL, its size in bytes now, and how to drop it."""
    if kind == "sqlite":
        path = scratch("ciq-dbscale-") / "team.db"

        def size() -> int:
            engine = sa.create_engine(f"sqlite:///{path}")
            with engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            engine.dispose()
            return path.stat().st_size

        return f"sqlite:///{path}", size, lambda: None
    admin = sa.make_url(kind)
    name = f"ciq_dbscale_{uuid.uuid4().hex[:10]}"
    engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = admin.set(database=name)

    def pg_size() -> int:
        inner = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        with inner.connect() as conn:
            conn.exec_driver_sql("VACUUM ANALYZE")
            size = int(conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar_one())
        inner.dispose()
        return size

    def drop() -> None:
        with engine.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        engine.dispose()

    return url.render_as_string(hide_password=False), pg_size, drop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", action="append", help="sqlite, or a PostgreSQL URL allowed to CREATE DATABASE")
    parser.add_argument("--studies", type=int, default=200)
    parser.add_argument("--trials", type=int, default=100_000)
    parser.add_argument("--kernel", type=Path, default=KERNEL)
    parser.add_argument("--runs", type=int, default=3, help="each timing is the median of this many runs")
    args = parser.parse_args()
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}; {args.trials:,} trials in "
          f"{args.studies} studies; median of {args.runs} runs; seconds as wall/CPU")
    print(f"{'db':10} {'fill s':>6} {'compileiq --help':>16} {'show, empty':>11} {'show':>11} {'show STUDY':>11} "
          f"{'tune start-up':>13} {'bytes/trial':>11}")
    for kind in args.db or ["sqlite"]:
        url, size, drop = database(kind)
        try:
            empty = size()
            cli_seconds(None, "--help")  # writes the byte code (not timed)
            show_empty = _median(args.runs, cli_seconds, url, "show")
            filled = fill(url, args.kernel, args.studies, args.trials)
            bare = _median(args.runs, cli_seconds, None, "--help")
            show = _median(args.runs, cli_seconds, url, "show")
            show_one = _median(args.runs, cli_seconds, url, "show", filled.target)
            start_up = _median(args.runs, tune_start_up, url, args.kernel, filled.target)
            per_trial = (size() - empty) / filled.trials
        finally:
            drop()
        print(f"{kind.split('+')[0].split(':')[0]:10} {filled.seconds:6.1f} {_pair(bare):>16} {_pair(show_empty):>11} "
              f"{_pair(show):>11} "
              f"{_pair(show_one):>11} {_pair(start_up):>13} {per_trial:11.0f}", flush=True)


def _median(runs: int, measure: Callable[..., tuple[float, float]], *args: Any) -> tuple[float, float]:
    """The run with the median wall time."""
    return sorted((measure(*args) for _ in range(runs)), key=lambda pair: pair[0])[runs // 2]


def _pair(seconds: tuple[float, float]) -> str:
    return f"{seconds[0]:.2f}/{seconds[1]:.2f}"


if __name__ == "__main__":
    main()
