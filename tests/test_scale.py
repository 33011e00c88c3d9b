"""One driver feeding many compile slots, and the team database at scale (issue 11, items 4-5).

The tuner, searcher and store run for real; where compiles are simulated, it is at the seam the
tuner already has (`open_workers`), with builds copied from the kernel's real baseline build.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from helpers import TINY_KERNEL, clean_env, slow_toolchain, tiny_kernel_file

from compileiq.app import TuneOptions, tuning_space
from compileiq.build.compile import (
    AssembleJob,
    Build,
    ExecutableBuild,
    ExecutableJob,
    FrontendJob,
    assemble,
    emit_ptx,
)
from compileiq.build.workers import Transfers, VariantJob, VariantResult
from compileiq.core.records import StudyKey, Trial, TrialState
from compileiq.core.toolchain import find_toolchain
from compileiq.search.searcher import SearchSettings
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.store import Store
from compileiq.tuning.jobs import Target
from compileiq.tuning.progress import SilentProgress
from compileiq.tuning.request import TuneRequest
from compileiq.tuning.runner import TrialRunner
from compileiq.tuning.tuner import Tuner

SMALL_SPACE = ("ptxas.opt_level", "ptxas.maxrregcount", "ptxas.register_usage_level")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_kernel_file(tmp_path_factory.mktemp("tiny"), "scale.cu")


def _key(space_id: str = "s", space_sha: str = "0" * 64, kernel: str = "k") -> StudyKey:
    return StudyKey(kernel, "a" * 64, space_id, space_sha, "nvcc 13.0", "sm_90", "static", "static")


# -- the driver --------------------------------------------------------------------------------


def _trial(number: int, value: float) -> Trial:
    from datetime import UTC, datetime

    return Trial(number, 1, number, f"k{number}", {}, TrialState.COMPLETE, value, None, False, {}, f"{number:064x}",
                 0.1, datetime.now(UTC), datetime.now(UTC), "host:1")  # fmt: skip


def _runner(tiny: Path, tmp_path: Path) -> TrialRunner:
    spec, tools = load_spec(tiny), find_toolchain()
    space = tuning_space(spec, tools, TuneOptions(kernel=tiny, only=SMALL_SPACE))
    target = Target(spec, space, bundle_sources(spec, tools.nvcc), tools)
    store = Store.open(f"sqlite:///{tmp_path / 'r.db'}")
    return TrialRunner(target, store, lambda build, config: None, lambda: None, SilentProgress())  # type: ignore[arg-type,return-value]


def test_the_best_trial_so_far_costs_one_rule_check_per_new_trial(tiny: Path, tmp_path: Path) -> None:
    # The runner names the best trial after every result (progress); checking every earlier
    # trial each time made a run of N trials cost N^2/2 eligibility checks.
    runner, checks = _runner(tiny, tmp_path), []

    def refusal(trial: Trial) -> str | None:
        checks.append(trial.number)
        return None if trial.number % 3 != 0 else "refused"

    runner.refusal = refusal
    for number in range(1, 301):
        runner.remember([_trial(number, float(1000 - number % 97))])
        runner.best()
    assert len(checks) <= 2 * 300
    best = runner.best()
    allowed = [(float(1000 - n % 97), n) for n in range(1, 301) if n % 3 != 0]
    assert best is not None and (best.value, best.number) == min(allowed)
    runner.refusal = lambda trial: None if trial.number > 250 else "refused"  # a new rule: recomputed once, then kept
    best = runner.best()
    assert best is not None and best.number > 250
    assert best.value == min(float(1000 - n % 97) for n in range(251, 301))


def _statements(engine_kind: type[sa.engine.Engine] = sa.engine.Engine) -> tuple[list[str], Callable[[], None]]:
    seen: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        seen.append(statement.strip())

    sa.event.listen(engine_kind, "before_cursor_execute", count)
    return seen, lambda: sa.event.remove(engine_kind, "before_cursor_execute", count)


def test_a_batch_is_claimed_in_a_few_statements_whatever_its_size(store_url: str) -> None:
    # A driver feeding a hundred workers claims hundreds of trials per batch: three statements
    # per trial made the claim alone cost more than the compiles it fed.
    store = Store.open(store_url)
    try:
        study = store.get_or_create_study(_key())
        first = store.claim_trials(study.id, [(f"c{i}", {"i": i}) for i in range(3)], "me:1")
        store.finish_trial(first[1].id, state=TrialState.FAILED, value=None, reason="x", metrics={},
                           code_hash=None, compile_seconds=None, retryable=True)  # fmt: skip
        configs = [(f"c{i}", {"i": i}) for i in range(1, 1200)] + [("c5", {"i": 5})]  # a repeat
        seen, stop = _statements()
        try:
            claimed = store.claim_trials(study.id, configs, "me:2")
        finally:
            stop()
        writes = [s for s in seen if s.split()[0].upper() in ("INSERT", "UPDATE", "SELECT")]
        assert len(writes) <= 12, seen  # 3 reads, 1 numbering, 3 inserts of 500, 1 retake
        keys = [t.config_key for t in claimed]
        assert keys == [f"c{i}" for i in range(1, 1200) if i != 2]  # c1 taken again (retryable), c2 running
        assert {t.worker for t in claimed} == {"me:2"}
        numbers = sorted(t.number for t in store.trials(study.id))
        assert numbers == list(range(1200))  # c1 kept its number; the new ones follow, no gaps
        assert next(t for t in claimed if t.config_key == "c7").config == {"i": 7}
    finally:
        store.close()


def test_a_claim_binds_few_parameters_per_statement_whatever_its_size(postgres_url: str) -> None:
    # psycopg parses again any statement of more than 50 parameters (~5 ms for a claim of 48, on
    # the driver's thread, per refill): a claim's reads bind their keys as one array and its
    # insert runs one short statement per row (executemany), with no many-row RETURNING.
    store = Store.open(postgres_url)
    try:
        study = store.get_or_create_study(_key())
        executed: list[tuple[str, Any, bool]] = []

        def capture(conn, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
            executed.append((statement, parameters, executemany))

        sa.event.listen(sa.engine.Engine, "before_cursor_execute", capture)
        try:
            claimed = store.claim_trials(study.id, [(f"k{i}", {"i": i}) for i in range(300)], "me:1")
            store.heartbeat([t.id for t in claimed])
            store.get_builds([f"b{i}" for i in range(300)])
        finally:
            sa.event.remove(sa.engine.Engine, "before_cursor_execute", capture)
        assert len(claimed) == 300 and len(executed) >= 5
        for statement, parameters, executemany in executed:
            rows = parameters if executemany else [parameters]
            assert all(len(row) <= 50 for row in rows), statement[:200]
    finally:
        store.close()


class _SimulatedWorkers:
    """Compiles answered at once with copies of a real build; records how each run was fed."""

    def __init__(self, template: Build) -> None:
        self._template = template
        self.transfers = Transfers()  # nothing leaves this process
        self.started_while_busy = 0
        self.most_pending = 0

    @property
    def description(self) -> str:
        return "simulated"

    def run(self, jobs: Sequence[VariantJob], more: Callable[[], Sequence[VariantJob]] | None = None,
            before: object = None) -> Iterator[VariantResult]:
        pending = list(jobs)
        from compileiq.build.compile import BuildStatus, PtxResult

        ptx = PtxResult(BuildStatus.OK, b"", 0.0, "")
        while pending:
            self.most_pending = max(self.most_pending, len(pending))
            job = pending.pop(0)
            digest = hashlib.sha256(repr(job.assemble.args).encode()).hexdigest()
            yield VariantResult(job.tag, ptx, replace(self._template, code_hash=digest), False)
            added = more() if more is not None else ()
            self.started_while_busy += len(added) if pending else 0
            pending += added

    def build_executables(self, jobs: Sequence[ExecutableJob]) -> list[ExecutableBuild]:
        raise AssertionError("static objective: nothing to run")

    def close(self) -> None:
        pass


def _tuner(tiny: Path, url: str, stream: bool, budget: int) -> tuple[Tuner, _SimulatedWorkers]:
    spec, tools = load_spec(tiny), find_toolchain()
    space = tuning_space(spec, tools, TuneOptions(kernel=tiny, only=SMALL_SPACE))
    bundle = bundle_sources(spec, tools.nvcc)
    default = space.default_config()
    frontend = FrontendJob(tools.nvcc, bundle, spec.arch, space.frontend_args(default), 120)
    template = assemble(AssembleJob(tools.ptxas, spec.arch, space.ptxas_args(default), 120), emit_ptx(frontend))
    workers = _SimulatedWorkers(template)
    request = TuneRequest(spec, space, "static", budget, SearchSettings(seed=2), batch_size=4, simplify=False,
                          ablate=False, stream=stream)  # fmt: skip
    return Tuner(request, Store.open(url), tools, lambda: workers, SilentProgress(), bundle=bundle), workers


@pytest.mark.parametrize("stream", [True, False])
def test_a_streaming_tuner_starts_variants_as_others_finish(tiny: Path, tmp_path: Path, stream: bool) -> None:
    # Waiting for a whole batch leaves the slots of its fast variants idle until its slowest
    # ends; streaming claims a new variant as each result arrives, within the budget.
    tuner, workers = _tuner(tiny, f"sqlite:///{tmp_path / 's.db'}", stream, budget=21)
    result = tuner.run()
    keys = [t.config_key for t in result.trials]
    assert len(keys) == len(set(keys)) == 21
    assert all(t.state is TrialState.COMPLETE for t in result.trials)
    assert workers.most_pending <= 4  # never more than --batch-size in flight
    assert (workers.started_while_busy > 0) is stream


# -- the team database -------------------------------------------------------------------------

# A tuner process that believes it runs on another machine: its trials carry that host name, so
# that the others judge it by its heartbeat only (they cannot see its process).
ON_MACHINE_B = ("import socket, sys; socket.gethostname = lambda: 'machine-b'; "
                "from compileiq.cli import main; sys.argv[0] = 'compileiq'; main()")


@pytest.mark.slow
@pytest.mark.postgres
def test_eight_tuners_on_two_machines_share_one_study_on_postgres(postgres_url: str, tiny: Path,
                                                                   tmp_path: Path) -> None:
    import json

    env = clean_env(slow_toolchain(tmp_path / "slow", 0.3))
    args = ["tune", str(tiny), "--db", postgres_url, "--workers", "local", "--json", "--study", "team",
            "--budget", "40", "--batch-size", "2", "--only", ",".join(SMALL_SPACE), "--no-simplify"]  # fmt: skip
    processes = []
    for index in range(8):
        launcher = ["-c", ON_MACHINE_B] if index % 2 else ["-m", "compileiq"]
        out = ["--out", str(tmp_path / f"{index}.acf.toml"), "--seed", str(index)]
        processes.append(subprocess.Popen([sys.executable, *launcher, *args, *out], cwd=tmp_path, env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))  # fmt: skip
    outputs = [p.communicate(timeout=300) for p in processes]
    for process, (stdout, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, f"exit {process.returncode}\n{stderr}\n{stdout}"
    reports = [json.loads(stdout) for stdout, _ in outputs]
    store = Store.open(postgres_url)
    try:
        trials, builds = store.trials(store.find_study("team").id), store.builds_count()
    finally:
        store.close()
    keys = [t.config_key for t in trials]
    assert len(keys) == len(set(keys))  # every configuration claimed once
    assert [t for t in trials if t.state is TrialState.RUNNING] == []
    assert sum(t.state is TrialState.COMPLETE or not t.retryable for t in trials) >= 40  # none lost
    assert sum(r["counters"]["new_trials"] for r in reports) == len(trials)  # each finished by one tuner
    compiled = sum(r["counters"]["ptxas_calls"] - r["counters"]["verify_ptxas_calls"] for r in reports)
    assert compiled == builds  # no variant compiled twice (besides each tuner's check of what its ACF cites)
    hosts = {t.worker.rpartition(":")[0] for t in trials}
    assert "machine-b" in hosts and len(hosts) == 2


def _filled(url: str, studies: int, trials: int) -> str:
    """A team database filled by benchmarks/db_scale.py's generator; the name of its real study."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    try:
        import db_scale
    finally:
        sys.path.pop(0)
    return str(db_scale.fill(url, studies_count=studies, trials=trials).target)


def test_show_lists_studies_without_reading_their_trials(store_url: str, tmp_path: Path) -> None:
    # `compileiq show` read every trial of every study to print a count and a best value: a
    # team database of 100,000 trials took seconds. The database counts now, in one query.
    from typer.testing import CliRunner

    from compileiq.cli import cli
    from compileiq.results.explain import explain

    _filled(store_url, studies=8, trials=400)  # each study with the run row a tune records
    store = Store.open(store_url)
    try:
        study = store.find_study("sgemm-static-v0")
        chosen = explain(study, store.trials(study.id), None, store.runs(study.id)).chosen
        assert chosen is not None
        expected = {"trials": len(store.trials(study.id)), "chosen": chosen.number, "best": chosen.value}
    finally:
        store.close()
    seen, stop = _statements()
    try:
        result = CliRunner().invoke(cli, ["show", "--db", store_url, "--json"])
    finally:
        stop()
    assert result.exit_code == 0, result.output
    import json

    listed = {row["name"]: row for row in json.loads(result.output)}
    assert len(listed) == 8
    assert {k: listed["sgemm-static-v0"][k] for k in expected} == expected
    reads = [s for s in seen if s.split()[0].upper() == "SELECT" and re.search(r"\b(FROM|JOIN) trials\b", s)]
    assert len(reads) == 4, reads  # the aggregate and the rows the decisions cite (three reads), not one per study


# The store's queries that must find a study's rows by index, not by reading the whole table.
def _store_queries(store: Store, study_name: str, space_sha: str) -> None:
    study = store.find_study(study_name)
    store.trials(study.id)
    store.trials(study.id, {TrialState.RUNNING})
    store.running_claims(study.id)
    store.related_trials(study.key, exclude_study_id=study.id)
    store.fail_stale_trials(study.id, 300)
    claimed = store.claim_trials(study.id, [("new-key", {"x": 1})], "me:1")
    store.heartbeat([t.id for t in claimed])
    store.release_trials(study.id, "me:1", "done")
    store.get_builds(["0" * 64])


def _plans(url: str, statements: list[tuple[str, Any]]) -> list[tuple[str, str]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            if conn.dialect.name == "postgresql":  # as autovacuum leaves a table: statistics, visibility map
                conn.exec_driver_sql("VACUUM ANALYZE")
                # A few thousand small rows are cheaper to read whole than by index, so the planner
                # reads them whole; without that choice, a query no index serves still reads them.
                conn.exec_driver_sql("SET enable_seqscan = off")
            plans = []
            for statement, parameters in statements:
                prefix = "EXPLAIN QUERY PLAN " if conn.dialect.name == "sqlite" else "EXPLAIN "
                rows = conn.exec_driver_sql(prefix + statement, parameters).all()
                plans.append((statement, "\n".join(str(row[-1]) for row in rows)))
            return plans
    finally:
        engine.dispose()


def _reads_of_trials(store_url: str, use: Callable[[Store], object]) -> list[tuple[str, Any]]:
    """The statements (and parameters) that touch the trials table, other than inserts, while
    `use` runs on a store of `store_url`."""
    captured: list[tuple[str, Any]] = []

    def capture(conn, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        if re.search(r"\btrials\b", statement) and not statement.lstrip().upper().startswith("INSERT"):
            captured.append((statement, parameters))

    store = Store.open(store_url)
    sa.event.listen(sa.engine.Engine, "before_cursor_execute", capture)
    try:
        use(store)
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", capture)
        store.close()
    return captured


def test_a_studys_queries_use_indexes_in_a_database_of_many_studies(store_url: str) -> None:
    target = _filled(store_url, studies=40, trials=12_000)
    captured = _reads_of_trials(store_url, lambda store: _store_queries(store, target, ""))
    assert len(captured) >= 8
    for statement, plan in _plans(store_url, captured):
        full_scan = re.search(r"\bSCAN trials\b(?! USING COVERING INDEX)|Seq Scan on trials\b", plan)
        assert not full_scan, f"{statement}\n{plan}"


def test_listing_studies_counts_trials_from_an_index_without_reading_their_rows(store_url: str) -> None:
    _filled(store_url, studies=40, trials=12_000)
    listed: list[int] = []
    captured = _reads_of_trials(store_url, lambda store: listed.append(len(store.study_summaries())))
    assert listed == [40]
    (statement, plan), *cited = _plans(store_url, captured)  # the aggregate, then the rows the decisions cite
    index_only = re.search(r"Index Only Scan using ix_trials_study_state_value on trials"
                           r"|SCAN trials USING COVERING INDEX ix_trials_study_state_value", plan)
    assert index_only, f"{statement}\n{plan}"
    assert len(cited) == 3, cited
    for statement, plan in cited:
        assert not re.search(r"\bSCAN trials\b(?! USING (COVERING )?INDEX)|Seq Scan on trials\b", plan), f"{statement}\n{plan}"


def test_tune_stream_runs_the_budget_with_real_compiles(tmp_path: Path) -> None:
    from helpers import run_cli

    (tmp_path / "scale.cu").write_text(TINY_KERNEL)
    result = run_cli(["tune", "scale.cu", "--workers", "local", "--json", "--budget", "9", "--batch-size", "4",
                      "--stream", "--only", ",".join(SMALL_SPACE), "--no-simplify",
                      "--db", f"sqlite:///{tmp_path / 't.db'}"], cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.describe()
    import json

    report = json.loads(result.stdout)
    assert report["counters"]["new_trials"] >= 9  # the budget, then the ablation path's variants
    assert (tmp_path / "store" / "scale.static.acf.toml").is_file()
    store = Store.open(f"sqlite:///{tmp_path / 't.db'}")
    try:
        trials = store.trials(store.find_study(report["study"]["name"]).id)
    finally:
        store.close()
    assert len({t.config_key for t in trials}) == len(trials) == report["counters"]["new_trials"]
    assert all(t.state is not TrialState.RUNNING for t in trials)


@pytest.mark.slow
@pytest.mark.postgres
def test_a_study_of_more_machine_codes_than_a_statement_takes_parameters_exports_and_imports(postgres_url: str) -> None:
    # PostgreSQL binds at most 65,535 parameters per statement: the export listed every code hash
    # of the study in one IN, and the import every build key ("number of parameters must be
    # between 0 and 65535"). 75,000 trials, ~67,000 distinct machine codes.
    target = _filled(postgres_url, studies=1, trials=75_000)
    store = Store.open(postgres_url)
    try:
        export = store.export_study(target)
        again = store.import_study(export)  # into the same database: everything is there already
    finally:
        store.close()
    assert len(export.trials) == 75_000 and len(export.builds) > 65_535
    assert again.trials_kept == 75_000 and not again.changed
