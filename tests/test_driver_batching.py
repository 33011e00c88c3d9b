"""The driver's per-trial work at scale (issue 11, item 4): results written in groups, the study
read incrementally, the surrogate refitted on a schedule.

The tuner, searcher and stores run for real on SQLite and PostgreSQL; compiles are simulated at
the seam the tuner has (`open_workers`), with builds copied from the kernel's real baseline.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa
from helpers import tiny_kernel_file

from compileiq.app import TuneOptions, tuning_space
from compileiq.build.compile import (
    AssembleJob,
    Build,
    BuildStatus,
    ExecutableBuild,
    ExecutableJob,
    FrontendJob,
    PtxResult,
    assemble,
    emit_ptx,
)
from compileiq.build.workers import Transfers, VariantJob, VariantResult
from compileiq.core.records import BuildRecord, StudyKey, TrialOutcome, TrialState
from compileiq.core.space import SearchSpace
from compileiq.core.space_files import load_space
from compileiq.core.toolchain import find_toolchain
from compileiq.search.refit_schedule import BackgroundRefresh, RefitSchedule
from compileiq.search.search_process import RemoteSearcher, SearchProcessError
from compileiq.search.searcher import Searcher, SearchSettings
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.store import Store
from compileiq.store.group_commit import GroupCommit
from compileiq.tuning.progress import SilentProgress
from compileiq.tuning.request import TuneRequest
from compileiq.tuning.tuner import Tuner

SMALL_SPACE = ("ptxas.opt_level", "ptxas.maxrregcount", "ptxas.register_usage_level")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_kernel_file(tmp_path_factory.mktemp("tiny"), "batching.cu")


class _Workers:
    """Compiles answered at once with copies of a real build; `stop_after` results, then Ctrl-C."""

    def __init__(self, template: Build, stop_after: int | None = None) -> None:
        self._template, self._stop_after = template, stop_after
        self.transfers = Transfers()
        self.results = 0

    @property
    def description(self) -> str:
        return "simulated"

    def run(self, jobs: Sequence[VariantJob], more: Callable[[], Sequence[VariantJob]] | None = None,
            before: object = None) -> Iterator[VariantResult]:
        pending = list(jobs)
        ptx = PtxResult(BuildStatus.OK, b"", 0.0, "")
        while pending:
            if self.results == self._stop_after:
                raise KeyboardInterrupt
            job = pending.pop(0)
            digest = hashlib.sha256(repr(job.assemble.args).encode()).hexdigest()
            self.results += 1
            yield VariantResult(job.tag, ptx, replace(self._template, code_hash=digest), False)
            pending += more() if more is not None else ()

    def build_executables(self, jobs: Sequence[ExecutableJob]) -> list[ExecutableBuild]:
        raise AssertionError("static objective: nothing to run")

    def close(self) -> None:
        pass


def _tuner(tiny: Path, store: Store, budget: int, stop_after: int | None = None,
           search_process: bool | None = None) -> tuple[Tuner, _Workers]:
    spec, tools = load_spec(tiny), find_toolchain()
    space = tuning_space(spec, tools, TuneOptions(kernel=tiny, only=SMALL_SPACE))
    bundle = bundle_sources(spec, tools.nvcc)
    default = space.default_config()
    frontend = FrontendJob(tools.nvcc, bundle, spec.arch, space.frontend_args(default), 120)
    template = assemble(AssembleJob(tools.ptxas, spec.arch, space.ptxas_args(default), 120), emit_ptx(frontend))
    workers = _Workers(template, stop_after)
    request = TuneRequest(spec, space, "static", budget, SearchSettings(seed=3), batch_size=8, simplify=False,
                          ablate=False, stream=True, search_process=search_process)  # fmt: skip
    return Tuner(request, store, tools, lambda: workers, SilentProgress(), bundle=bundle), workers


def _finish_statements(engine: sa.Engine) -> tuple[list[int], Callable[[], None]]:
    """Rows per UPDATE of trials' results, as the database driver receives them."""
    seen: list[int] = []

    def count(conn: object, cursor: object, statement: str, parameters: object, context: object,
              executemany: bool) -> None:
        if statement.lstrip().upper().startswith("UPDATE TRIALS SET") and "code_hash" in statement:
            seen.append(len(parameters) if executemany and isinstance(parameters, list) else 1)

    sa.event.listen(engine, "before_cursor_execute", count)
    return seen, lambda: sa.event.remove(engine, "before_cursor_execute", count)


def test_a_streaming_run_writes_its_results_in_groups_each_once(tiny: Path, store_url: str) -> None:
    # One transaction per result cost a driver feeding a hundred slots more than all else it did.
    store = Store.open(store_url)
    try:
        tuner, workers = _tuner(tiny, store, budget=40)
        seen, stop = _finish_statements(store._engine)
        try:
            result = tuner.run()
        finally:
            stop()
        trials = store.trials(result.study.id)
    finally:
        store.close()
    keys = [t.config_key for t in trials]
    assert len(keys) == len(set(keys)) == 40 == workers.results
    assert all(t.state is TrialState.COMPLETE and t.value is not None and t.finished_at for t in trials)
    assert sum(seen) == 40  # every result written once
    assert len(seen) < 40 / 2  # ... in groups


def test_an_interrupted_run_loses_no_finished_result(tiny: Path, store_url: str) -> None:
    # Ctrl-C while results wait for their group: they are written, then the claims handed back.
    store = Store.open(store_url)
    try:
        tuner, workers = _tuner(tiny, store, budget=40, stop_after=13)
        with pytest.raises(KeyboardInterrupt):
            tuner.run()
        study = store.list_studies()[0]
        trials = store.trials(study.id)
    finally:
        store.close()
    done = [t for t in trials if t.state is TrialState.COMPLETE]
    assert len(done) == workers.results == 13
    assert all(t.value is not None and t.code_hash for t in done)
    rest = [t for t in trials if t.state is not TrialState.COMPLETE]
    assert rest and all(t.state is TrialState.FAILED and t.retryable and "interrupted" in (t.reason or "")
                        for t in rest)  # fmt: skip


def _space() -> SearchSpace:
    return load_space("13.0").select(only=list(SMALL_SPACE))


def _key(space: SearchSpace) -> StudyKey:
    return StudyKey("k", "a" * 64, space.id, space.sha256, "nvcc 13.0", "sm_90", "static", "static")


def _configs(space: SearchSpace, count: int) -> list[tuple[str, dict[str, object]]]:
    levels = space.parameter("ptxas.maxrregcount").values
    configs = [space.default_config().with_values({"ptxas.maxrregcount": v}) for v in levels[:count]]
    return [(c.key, c.as_dict()) for c in configs]


def _outcome(trial_id: int, value: float, build: BuildRecord | None = None) -> TrialOutcome:
    return TrialOutcome(trial_id, TrialState.COMPLETE, value, None, {"registers": 32}, "ab" * 32, 0.1, build=build)


def test_a_group_waits_for_a_flush_or_its_interval_never_longer(store_url: str) -> None:
    store, other = Store.open(store_url), Store.open(store_url)
    try:
        study = store.get_or_create_study(_key(_space()))
        trials = store.claim_trials(study.id, _configs(_space(), 4), "me:1")
        build = BuildRecord("cd" * 32, True, "", {"status": "ok", "entries": []}, "ab" * 32, 0.1)
        with GroupCommit(store, every_s=60.0) as commit:
            commit.add(_outcome(trials[0].id, 1.0, build))
            commit.add(_outcome(trials[1].id, 2.0))
            assert commit.pending == 2
            assert {t.state for t in other.trials(study.id)} == {TrialState.RUNNING}
            commit.flush()  # the tuner's flush before it claims
            assert commit.pending == 0
            assert [t.value for t in other.trials(study.id, {TrialState.COMPLETE})] == [1.0, 2.0]
            assert other.get_build(build.key) == build  # cached in the same write
        with GroupCommit(store, every_s=0.05) as commit:
            commit.add(_outcome(trials[2].id, 3.0))
            deadline = time.monotonic() + 10  # written by the background writer, no flush called
            while len(other.trials(study.id, {TrialState.COMPLETE})) < 3 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert [t.value for t in other.trials(study.id, {TrialState.COMPLETE})] == [1.0, 2.0, 3.0]
        with GroupCommit(store, every_s=60.0) as commit:
            commit.add(_outcome(trials[3].id, 4.0))
        assert [t.value for t in other.trials(study.id, {TrialState.COMPLETE})] == [1.0, 2.0, 3.0, 4.0]  # on close
    finally:
        store.close()
        other.close()


def test_a_study_read_again_sees_other_tuners_changes_and_still_refuses_hostile_rows(store_url: str) -> None:
    space = _space()
    warnings: list[str] = []
    mine, theirs = Store.open(store_url, warn=warnings.append), Store.open(store_url)
    try:
        mine.check_trials_against(space)
        study = mine.get_or_create_study(_key(space))
        configs = _configs(space, 5)
        claimed = theirs.claim_trials(study.id, configs[:3], "other:1")
        assert [t.state for t in mine.trials(study.id)] == [TrialState.RUNNING] * 3
        theirs.finish_trials([_outcome(claimed[1].id, 7.0)])  # another tuner's result
        theirs.claim_trials(study.id, configs[3:4], "other:1")
        seen = mine.trials(study.id)
        assert [(t.state, t.value) for t in seen] == [(TrialState.RUNNING, None), (TrialState.COMPLETE, 7.0),
                                                      (TrialState.RUNNING, None), (TrialState.RUNNING, None)]
        with theirs._engine.begin() as conn:  # a hostile process writes the shared database directly
            conn.execute(sa.text("UPDATE trials SET state = 'complete', value = NULL WHERE id = :id"),
                         {"id": claimed[0].id})
            hostile = configs[4][0].replace('"ptxas.opt_level":3', '"ptxas.opt_level":9')  # not in the space
            assert hostile != configs[4][0]
            json = "CAST(:config AS json)" if conn.dialect.name == "postgresql" else ":config"
            conn.execute(sa.text(
                "INSERT INTO trials (study_id, number, config_key, config, state, value, retryable, metrics, worker, "
                f"purpose, started_at) VALUES (:study, 99, :key, {json}, 'complete', 1.0, false, '{{}}', 'x:1', "
                "'search', CURRENT_TIMESTAMP)"), {"study": study.id, "key": hostile, "config": hostile})
        after = mine.trials(study.id)
        assert [t.id for t in after] == [claimed[1].id, claimed[2].id, seen[3].id]
        assert len(warnings) == 2 and all(w.startswith("skipped trial #") for w in warnings), warnings
        assert mine.trials(study.id) == after and len(warnings) == 2  # reported once
    finally:
        mine.close()
        theirs.close()


def test_a_streaming_run_refits_per_batch_while_the_driver_has_time() -> None:
    now = [0.0]
    schedule = RefitSchedule(batch_size=8, share=0.25, clock=lambda: now[0])
    schedule.told(7)
    assert not schedule.due()  # less than a batch of new results
    schedule.told(1)
    assert schedule.due()

    def refit() -> str:
        now[0] += 1.0  # a refit and its proposals took a second
        return "proposals"

    assert schedule.refresh(refit) == "proposals"
    schedule.told(8)
    now[0] += 2.0
    assert not schedule.due()  # two seconds since: the fits would take a third of the driver's time
    now[0] += 1.0
    assert schedule.due()


def test_a_streaming_run_refits_beside_the_driver_and_never_shares_its_searcher(
    tiny: Path, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The driver hands out the previous model's proposals while the next one is fitted on a
    # thread of its own; the searcher is not thread-safe, so no two threads may be inside it.
    inside: list[str] = []
    overlaps: list[tuple[str, str]] = []
    threads: set[str] = set()
    lock = threading.Lock()

    def guarded(method: Callable[..., object]) -> Callable[..., object]:
        def call(self: Searcher, *args: object, **kwargs: object) -> object:
            name = threading.current_thread().name
            with lock:
                overlaps.extend((name, other) for other in inside if other != name)
                inside.append(name)
                threads.add(name)
            try:
                if name.startswith("compileiq-refit"):
                    time.sleep(0.01)  # a slow refit: the driver goes on meanwhile, and must not come in
                return method(self, *args, **kwargs)
            finally:
                with lock:
                    inside.remove(name)
        return call

    for name in ("tell", "fit", "ask", "refit", "set_frontend_cost"):
        monkeypatch.setattr(Searcher, name, guarded(getattr(Searcher, name)))
    store = Store.open(store_url)
    try:
        tuner, _ = _tuner(tiny, store, budget=120)
        result = tuner.run()
        trials = store.trials(result.study.id)
    finally:
        store.close()
    assert not overlaps, overlaps[:5]
    assert any(name.startswith("compileiq-refit") for name in threads), threads  # it did refit beside
    assert len([t for t in trials if t.state is not TrialState.RUNNING]) == len(trials) == 120
    assert len({t.config_key for t in trials}) == 120  # a new model's proposals skip what was handed out


def _remote_tuner(tiny: Path, store: Store, budget: int) -> tuple[Tuner, _Workers, RemoteSearcher]:
    tuner, workers = _tuner(tiny, store, budget, search_process=True)
    searcher = tuner._searcher
    assert isinstance(searcher, RemoteSearcher)
    return tuner, workers, searcher


def test_a_streaming_run_with_its_searcher_in_a_process_finds_each_variant_once_and_ends_it(
    tiny: Path, store_url: str
) -> None:
    store = Store.open(store_url)
    try:
        tuner, workers, searcher = _remote_tuner(tiny, store, budget=120)
        result = tuner.run()
        trials = store.trials(result.study.id)
    finally:
        store.close()
    assert searcher._process.poll() == 0  # the child ended with the run
    assert len([t for t in trials if t.state is TrialState.COMPLETE]) == len(trials) == 120 == workers.results
    assert len({t.config_key for t in trials}) == 120
    assert result.winner.value is not None and result.baseline.value is not None
    assert result.winner.value <= result.baseline.value


def test_a_searchers_process_killed_mid_run_stops_it_with_one_line_and_loses_no_result(
    tiny: Path, store_url: str
) -> None:
    # The kernel's OOM killer, say: the run stops (no searcher, no search), what finished is
    # kept and the claims in flight are handed back for the next run.
    store = Store.open(store_url)
    try:
        tuner, workers, searcher = _remote_tuner(tiny, store, budget=120)
        run = workers.run

        def killing(jobs: Sequence[VariantJob], more: Callable[[], Sequence[VariantJob]] | None = None,
                    before: object = None) -> Iterator[VariantResult]:
            for result in run(jobs, more, before):
                if workers.results == 30:
                    searcher._process.kill()
                yield result

        workers.run = killing  # type: ignore[method-assign]
        with pytest.raises(SearchProcessError, match=r"^the searcher's process ended \(exit code -9\) during \w+$"):
            tuner.run()
        trials = store.trials(store.list_studies()[0].id)
    finally:
        store.close()
    done = [t for t in trials if t.state is TrialState.COMPLETE]
    assert len(done) == workers.results >= 30
    assert all(t.value is not None and t.code_hash for t in done)
    assert not [t for t in trials if t.state is TrialState.RUNNING]
    released = [t for t in trials if t.state is TrialState.FAILED]
    assert released and all(t.retryable and (t.reason or "").startswith("not compiled: the searcher's process ended")
                            for t in released)  # fmt: skip


def test_a_failed_background_refit_surfaces_in_the_driver_and_stops_its_thread() -> None:
    refresh = BackgroundRefresh()
    refresh.start(lambda: [1, 2])
    assert refresh.wait() == [1, 2] and not refresh.running
    refresh.start(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        refresh.wait()
    release, finished = threading.Event(), threading.Event()

    def slow_refit() -> list[str]:
        release.wait(60)  # held until the driver has looked: a loaded machine cannot finish it first
        time.sleep(0.2)
        finished.set()
        return ["late"]

    refresh.start(slow_refit)
    assert refresh.done() is None and refresh.running  # not ready: the driver goes on
    release.set()
    refresh.close()  # waits for it: the searcher is the driver's again
    assert finished.is_set() and not refresh.running and refresh.done() is None
