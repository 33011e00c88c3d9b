"""The store suite, run against SQLite and PostgreSQL alike."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from compileiq.core.errors import CompileIQError
from compileiq.core.records import SCREEN, BuildRecord, StudyKey, TrialState
from compileiq.store import Store, StoreError
from compileiq.store.schema import trials_table

KEY = StudyKey(
    kernel="saxpy",
    source_sha256="a" * 64,
    space_id="nvcc-13.0+ptxas-13.0",
    space_sha256="b" * 64,
    toolchain="13.0.48",
    arch="sm_90",
    evaluator="static",
    objective="spills",
)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    opened = Store.open(store_url)
    yield opened
    opened.close()


def _finish(store: Store, trial_id: int, value: float = 1.0) -> None:
    store.finish_trial(
        trial_id,
        state=TrialState.COMPLETE,
        value=value,
        reason=None,
        metrics={"regs": 32},
        code_hash="c" * 64,
        compile_seconds=0.25,
    )


def test_open_creates_schema_and_is_idempotent(store: Store, store_url: str) -> None:
    assert store.upgrade() == "0009"
    again = Store.open(store_url)
    assert again.upgrade() == "0009"
    again.close()


def test_study_get_or_create_is_idempotent(store: Store) -> None:
    first = store.get_or_create_study(KEY)
    assert first.name.startswith("saxpy-spills-")
    assert store.get_or_create_study(KEY) == first
    assert first.created_at.tzinfo == UTC
    named = store.get_or_create_study(KEY, name="mine")
    assert named.id != first.id
    assert store.find_study("mine") == named
    assert store.find_study(str(first.id)) == first
    assert [s.name for s in store.list_studies()] == [first.name, "mine"]


def test_study_name_clash_names_the_difference(store: Store) -> None:
    store.get_or_create_study(KEY, name="x")
    with pytest.raises(StoreError, match="study 'x' was made for another kernel source or tune.toml settings"):
        store.get_or_create_study(replace(KEY, source_sha256="d" * 64), name="x")
    with pytest.raises(StoreError, match="another architecture"):
        store.get_or_create_study(replace(KEY, arch="sm_80"), name="x")


def test_find_missing_study(store: Store) -> None:
    with pytest.raises(StoreError, match="no study named 'nope'"):
        store.find_study("nope")


def test_claim_is_unique_and_finish_records(store: Store) -> None:
    study = store.get_or_create_study(KEY)
    first = store.claim_trial(study.id, "k1", {"-O": 3}, "w1")
    assert first is not None and first.state is TrialState.RUNNING and first.number == 0
    assert store.claim_trial(study.id, "k1", {"-O": 3}, "w2") is None
    second = store.claim_trial(study.id, "k2", {"-O": 2}, "w2")
    assert second is not None and second.number == 1
    _finish(store, first.id, value=2.5)
    assert store.claim_trial(study.id, "k1", {"-O": 3}, "w3") is None
    done = store.trials(study.id, [TrialState.COMPLETE])
    assert len(done) == 1
    trial = done[0]
    assert (trial.value, trial.metrics, trial.compile_seconds) == (2.5, {"regs": 32}, 0.25)
    assert trial.config == {"-O": 3} and trial.finished_at is not None
    assert trial.finished_at.tzinfo == UTC
    assert [t.number for t in store.trials(study.id)] == [0, 1]


def test_a_claimed_batch_is_the_trials_a_read_of_the_study_returns(store: Store) -> None:
    # A claim builds its trials from what it wrote and what the database chose (id, start time)
    # instead of reading the rows back: they must be the same records, field for field.
    study = store.get_or_create_study(KEY)
    pairs = [(f'{{"-O":{i},"f":true}}', {"-O": i, "f": True}) for i in range(5)]
    claimed = store.claim_trials(study.id, pairs, "w1", purpose=SCREEN)
    read = store.trials(study.id)
    assert claimed == read and [t.number for t in claimed] == [0, 1, 2, 3, 4]
    assert all(t.started_at.tzinfo == UTC and t.purpose == SCREEN and t.worker == "w1" for t in claimed)
    pairs[0][1]["-O"] = 99  # the caller's dict is not the trial's
    assert claimed[0].config == {"-O": 0, "f": True}


def test_finish_unknown_trial(store: Store) -> None:
    with pytest.raises(StoreError, match="no trial with id 999"):
        _finish(store, 999)


def test_claim_in_unknown_study(store: Store) -> None:
    with pytest.raises(StoreError, match="no study with id 999"):
        store.claim_trial(999, "k", {}, "w")


def test_a_heartbeat_from_the_future_is_clamped_and_goes_stale(store: Store, store_url: str) -> None:
    """A forged "running" row with a heartbeat in 2999 would hold its config forever."""
    study = store.get_or_create_study(KEY)
    held = store.claim_trial(study.id, "held", {}, "mallory")
    assert held is not None
    engine = sa.create_engine(store_url)
    with engine.begin() as conn:
        conn.execute(trials_table.update().where(trials_table.c.id == held.id)
                     .values(heartbeat_at=datetime(2999, 1, 1, tzinfo=UTC)))
    engine.dispose()
    assert store.fail_stale_trials(study.id, 1.0) == 0  # clamped to now: it goes stale from here
    time.sleep(1.3)
    assert store.fail_stale_trials(study.id, 1.0) == 1
    assert store.claim_trial(study.id, "held", {}, "w2") is not None


def test_stale_trials_fail_by_db_clock_then_reclaim(store: Store) -> None:
    study = store.get_or_create_study(KEY)
    quiet = store.claim_trial(study.id, "quiet", {}, "w1")
    alive = store.claim_trial(study.id, "alive", {}, "w1")
    assert quiet is not None and alive is not None
    assert store.fail_stale_trials(study.id, 60) == 0
    time.sleep(3.3)
    store.heartbeat([alive.id])  # a loaded machine may stall here: up to 3 s keeps it fresh
    assert store.fail_stale_trials(study.id, 3.0) == 1
    (failed,) = store.trials(study.id, [TrialState.FAILED])
    assert failed.id == quiet.id and failed.retryable
    assert failed.reason == "abandoned: no heartbeat for 3s"
    again = store.claim_trial(study.id, "quiet", {"v": 2}, "w2")
    assert again is not None and again.id == quiet.id and again.number == quiet.number
    assert (again.state, again.worker, again.config, again.reason) == (
        TrialState.RUNNING,
        "w2",
        {"v": 2},
        None,
    )
    assert store.claim_trial(study.id, "quiet", {}, "w3") is None
    assert store.fail_stale_trials(study.id, 0) == 2  # --resume: every RUNNING one
    assert store.trials(study.id, [TrialState.RUNNING]) == []


def test_failed_not_retryable_is_not_reclaimed(store: Store) -> None:
    study = store.get_or_create_study(KEY)
    trial = store.claim_trial(study.id, "bad", {}, "w")
    assert trial is not None
    store.finish_trial(
        trial.id,
        state=TrialState.FAILED,
        value=None,
        reason="compile error: x",
        metrics={},
        code_hash=None,
        compile_seconds=0.1,
    )
    assert store.claim_trial(study.id, "bad", {}, "w") is None


def _claim_all(url: str, worker: int, keys: list[str], batch: int) -> list[tuple[str, int]]:
    store = Store.open(url)
    study = store.get_or_create_study(KEY, name="race")  # racing creations get one study
    order = keys if worker % 2 == 0 else list(reversed(keys))
    claimed = []
    for start in range(0, len(order), batch):
        pairs = [(key, {"key": key}) for key in order[start : start + batch]]
        claimed += [
            (t.config_key, t.number) for t in store.claim_trials(study.id, pairs, f"w{worker}")
        ]
    store.close()
    return claimed


@pytest.mark.parametrize("batch", [1, 8])
def test_concurrent_claims_are_exclusive(store: Store, store_url: str, batch: int) -> None:
    keys = [f"key-{i}" for i in range(50)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        results = pool.starmap(_claim_all, [(store_url, w, keys, batch) for w in range(4)])
    claimed = [item for result in results for item in result]
    assert sorted(key for key, _ in claimed) == sorted(keys)
    assert sorted(number for _, number in claimed) == list(range(50))
    assert len(store.trials(store.find_study("race").id)) == 50


def test_a_batch_claim_skips_taken_configs_and_retakes_retryable_ones(store: Store) -> None:
    study = store.get_or_create_study(KEY)
    done, abandoned = (
        store.claim_trial(study.id, "done", {}, "w1"),
        store.claim_trial(study.id, "gone", {}, "w1"),
    )
    assert done is not None and abandoned is not None
    _finish(store, done.id)
    assert store.fail_stale_trials(study.id, 0) == 1
    pairs = [("done", {}), ("gone", {"v": 2}), ("new", {"v": 3})]
    claimed = store.claim_trials(study.id, pairs, "w2")
    assert [(t.config_key, t.state, t.worker) for t in claimed] == [
        ("gone", TrialState.RUNNING, "w2"),
        ("new", TrialState.RUNNING, "w2"),
    ]
    assert claimed[0].id == abandoned.id and claimed[1].number == 2
    assert store.claim_trials(study.id, pairs, "w3") == []


def test_finishing_a_trial_caches_its_build_once(store: Store) -> None:
    study = store.get_or_create_study(KEY)
    first, second = (store.claim_trial(study.id, key, {}, "w") for key in ("a", "b"))
    assert first is not None and second is not None
    record = BuildRecord(
        key="e" * 64, ok=True, message="", metrics={"spills": 0}, code_hash="f" * 64, seconds=0.5
    )
    for trial, build in ((first, record), (second, replace(record, message="later"))):
        finished = store.finish_trial(
            trial.id, state=TrialState.COMPLETE, value=1.0, reason=None, metrics={}, code_hash=record.code_hash,
            compile_seconds=0.5, build=build,
        )  # fmt: skip
        assert finished.state is TrialState.COMPLETE
    assert store.get_builds([record.key, "missing"]) == {record.key: record}
    assert store.builds_count() == 1


def test_build_cache_keeps_first(store: Store) -> None:
    record = BuildRecord(
        key="e" * 64,
        ok=True,
        message="",
        metrics={"spills": 0},
        code_hash="f" * 64,
        seconds=0.5,
    )
    assert store.get_build(record.key) is None
    store.put_build(record)
    store.put_build(replace(record, ok=False, message="different"))
    assert store.get_build(record.key) == record
    assert store.builds_count() == 1


def test_newer_schema_is_refused_and_left_alone(store: Store, store_url: str) -> None:
    store.get_or_create_study(KEY)
    store.close()
    engine = sa.create_engine(store_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999_future'")
    with pytest.raises(StoreError, match="database schema 9999_future is newer"):
        Store.open(store_url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar() == (
            "9999_future"
        )
        assert conn.exec_driver_sql("SELECT count(*) FROM studies").scalar() == 1
    engine.dispose()


@pytest.mark.parametrize(
    "url",
    ["postgresql+psycopg://u:secret@127.0.0.1:1/x", "postgresql+psycopg://u:secret@:bad"],
    ids=["refused", "bad-port"],
)
def test_unreachable_server_hides_password(url: str) -> None:
    with pytest.raises(StoreError) as caught:
        Store.open(url)
    assert "secret" not in str(caught.value) and "\n" not in str(caught.value)
    assert isinstance(caught.value, CompileIQError)


@pytest.mark.postgres
def test_wrong_password_hides_password(postgres_admin_url: str) -> None:
    url = sa.make_url(postgres_admin_url).set(password="wrong-pw-7731")
    with pytest.raises(StoreError, match="password authentication failed") as caught:
        Store.open(url.render_as_string(hide_password=False))
    assert "wrong-pw-7731" not in str(caught.value)
    assert "\n" not in str(caught.value)


def test_measurement_cache_keeps_first(store: Store) -> None:
    from compileiq.core.records import Measurement

    timed = Measurement(
        code_hash="c" * 64,
        device="NVIDIA H200",
        driver="580.65",
        harness_args_hash="d" * 64,
        samples=(1.25e-5, 1.5e-5, 1.3e-5),
        median=1.3e-5,
        iqr=1.25e-6,
        min=1.25e-5,
        clocks=(1980.0, 1965.0, 1980.0),
        status="ok",
    )
    key = (timed.code_hash, timed.device, timed.driver, timed.harness_args_hash)
    assert store.get_measurement(*key) is None
    store.put_measurement(timed)
    store.put_measurement(replace(timed, median=9.0, status="timeout"))  # idempotent: first kept
    assert store.get_measurement(*key) == timed
    assert store.get_measurement(timed.code_hash, "NVIDIA A100", timed.driver, key[3]) is None


def test_related_trials_are_other_studies_of_the_same_kernel(store: Store) -> None:
    spills = store.get_or_create_study(KEY, name="spills")
    registers = store.get_or_create_study(replace(KEY, objective="registers"), name="registers")
    other_arch = store.get_or_create_study(replace(KEY, arch="sm_80"), name="sm80")
    other_space = store.get_or_create_study(replace(KEY, space_id="nvcc-13.0"), name="nvcc-only")
    for study in (spills, other_arch, other_space):
        done = store.claim_trial(study.id, "k1", {"v": 1}, "w")
        assert done is not None
        _finish(store, done.id)
        store.claim_trial(study.id, "k2", {"v": 2}, "w")  # still running: not evidence
    related = store.related_trials(registers.key, exclude_study_id=registers.id)
    assert [(t.study_id, t.config_key) for t in related] == [(spills.id, "k1")]
    assert store.related_trials(spills.key, exclude_study_id=spills.id) == []
