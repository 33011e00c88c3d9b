"""The budget counts search trials (the baseline included); simplification and ablation builds
are recorded apart (trials.purpose), cost nothing on a rerun's budget, and the summary says so."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import SPILLING_KERNEL, database_at, run_cli

from compileiq.core.records import PURPOSES, StudyKey, TrialState
from compileiq.store import Store, StoreError, exchange

SUBSPACE = "ptxas.maxrregcount,ptxas.override_directive_values,ptxas.opt_level"
SUMMARY = re.compile(r"trials: (\d+) search trials \(budget (\d+)\) \+ (\d+) for simplification/ablation")


def _tune(folder: Path, budget: int) -> tuple[int, int]:
    result = run_cli(["tune", "fir.cu", "--objective", "spills", "--budget", str(budget), "--batch-size", "4",
                      "--workers", "local", "--only", SUBSPACE, "--study", "fir", "--db", "sqlite:///t.db"],
                     cwd=folder)  # fmt: skip
    assert result.returncode == 0, result.describe()
    found = SUMMARY.search(result.stdout)
    assert found, result.describe()
    assert f"stopped: budget {budget}" in result.stdout, result.describe()
    searched, asked, extra = map(int, found.groups())
    assert asked == budget
    return searched, extra


def _purposes(url: str) -> list[str]:
    store = Store.open(url)
    try:
        trials = store.trials(store.find_study("fir").id)
        return [t.purpose for t in trials if t.state is not TrialState.RUNNING]
    finally:
        store.close()


def test_a_rerun_with_a_bigger_budget_adds_exactly_the_missing_search_trials(tmp_path: Path) -> None:
    (tmp_path / "fir.cu").write_text(SPILLING_KERNEL)
    searched, extra = _tune(tmp_path, 12)
    purposes = _purposes(f"sqlite:///{tmp_path / 't.db'}")
    assert searched == 12 and purposes.count("search") == 12
    assert extra > 0 and len(purposes) == 12 + extra  # the winner was simplified: those builds are extra
    assert set(purposes) <= {"search", "simplify", "ablation"}
    searched, extra_after = _tune(tmp_path, 20)
    purposes = _purposes(f"sqlite:///{tmp_path / 't.db'}")
    assert searched == 20 and purposes.count("search") == 20
    assert len(purposes) == 20 + extra_after


def test_json_reports_the_two_counts(tmp_path: Path) -> None:
    (tmp_path / "fir.cu").write_text(SPILLING_KERNEL)
    result = run_cli(["tune", "fir.cu", "--objective", "spills", "--budget", "6", "--batch-size", "4", "--json",
                      "--workers", "local", "--only", SUBSPACE, "--db", "sqlite:///t.db"], cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.describe()
    document = json.loads(result.stdout)
    assert document["budget"] == 6 and document["search_trials"] == 6 and document["stopped"] == "budget 6"
    assert document["search_trials"] + document["extra_trials"] == document["study"]["trials"]
    assert document["baseline"]["purpose"] == "search"


KEY = StudyKey("saxpy", "a" * 64, "nvcc-13.0+ptxas-13.0", "b" * 64, "13.0.88", "sm_90", "static", "spills")


def _at_0003(url: str) -> None:
    database_at(url, "0003", {"config_key": '{"a":1}', "config": '{"a": 1}', "state": "complete", "retryable": False, "metrics": "{}", "value": 3.0})


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_database_at_0003_upgrades_in_place_and_its_trials_are_search_trials(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/old.db" if backend == "sqlite" else str(request.getfixturevalue("postgres_url"))
    _at_0003(url)
    result = run_cli(["db", "upgrade", "--db", url], cwd=tmp_path)
    assert result.returncode == 0 and "schema at revision 0009" in result.stdout, result.describe()
    store = Store.open(url)
    try:
        old = store.find_study("old")
        assert [(t.number, t.purpose) for t in store.trials(old.id)] == [(0, "search")]
        claimed = store.claim_trials(old.id, [('{"a":2}', {"a": 2})], "me", purpose="simplify")
        assert [t.purpose for t in claimed] == ["simplify"]
        assert [t.purpose for t in store.trials(old.id)] == ["search", "simplify"]
        run = store.start_run(old.id, "me", {"budget": 4, "time_budget_s": 60.0, "patience": None})
        store.finish_run(run, "time budget 1m", 1, 1)
        (recorded,) = store.runs(old.id)
        assert recorded.limits["time_budget_s"] == 60.0 and recorded.stopped == "time budget 1m"
    finally:
        store.close()


def _study_with_purposes(url: str) -> Store:
    """A study of one parameter, ptxas.opt_level, with a trial of each purpose."""
    from dataclasses import replace

    from compileiq.core.space_files import load_space

    space = load_space("13.0").select(allow_numerics=True, allow_semantics=True, only=["ptxas.maxrregcount"])
    store = Store.open(url)
    study = store.get_or_create_study(replace(KEY, space_id=space.id, space_sha256=space.sha256), "p")
    for number, purpose in enumerate(PURPOSES):
        config = {"ptxas.maxrregcount": (24, 32, 40, 48, 64, 80, 96)[number]}  # one per purpose
        (trial,) = store.claim_trials(study.id, [(json.dumps(config, sort_keys=True, separators=(",", ":")), config)],
                                      "w", purpose=purpose)  # fmt: skip
        metrics = {"spill_bytes": number, "registers": 32, "occupancy": 1.0, "instructions": 100}  # its value, as spills
        store.finish_trial(trial.id, state=TrialState.COMPLETE, value=float(number), reason=None, metrics=metrics,
                           code_hash=None, compile_seconds=1.0)  # fmt: skip
    return store


def test_export_and_import_carry_the_purpose(tmp_path: Path) -> None:
    source = _study_with_purposes(f"sqlite:///{tmp_path / 'a.db'}")
    source.close()
    exchange.export_to_file(f"sqlite:///{tmp_path / 'a.db'}", "p", tmp_path / "p.json")
    done = exchange.import_from_file(f"sqlite:///{tmp_path / 'b.db'}", tmp_path / "p.json")
    assert done.trials_added == len(PURPOSES), done
    target = Store.open(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        assert [t.purpose for t in target.trials(done.study.id)] == list(PURPOSES)
    finally:
        target.close()


def _rewrite(path: Path, change: object) -> None:
    document = json.loads(path.read_text())
    document["payload"]["trials"][0]["purpose"] = change
    document["sha256"] = exchange._checksum(None, document["payload"])
    path.write_text(json.dumps(document))


@pytest.mark.parametrize("purpose", ["bogus", 7, None, ["search"]])
def test_an_imported_trial_with_an_unknown_purpose_is_rejected(tmp_path: Path, purpose: object) -> None:
    _study_with_purposes(f"sqlite:///{tmp_path / 'a.db'}").close()
    exchange.export_to_file(f"sqlite:///{tmp_path / 'a.db'}", "p", tmp_path / "p.json")
    _rewrite(tmp_path / "p.json", purpose)
    done = exchange.import_from_file(f"sqlite:///{tmp_path / 'b.db'}", tmp_path / "p.json")
    assert done.trials_added == len(PURPOSES) - 1
    assert len(done.rejected) == 1 and "purpose" in done.rejected[0], done.rejected


def test_a_version_1_export_reads_as_search_trials(tmp_path: Path) -> None:
    _study_with_purposes(f"sqlite:///{tmp_path / 'a.db'}").close()
    path = tmp_path / "p.json"
    exchange.export_to_file(f"sqlite:///{tmp_path / 'a.db'}", "p", path)
    document = json.loads(path.read_text())
    for trial in document["payload"]["trials"]:
        del trial["purpose"]
    document.update(version=1, sha256=exchange._checksum(None, document["payload"]))
    path.write_text(json.dumps(document))
    done = exchange.import_from_file(f"sqlite:///{tmp_path / 'b.db'}", path)
    target = Store.open(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        assert {t.purpose for t in target.trials(done.study.id)} == {"search"}
    finally:
        target.close()


def test_a_store_refuses_an_unknown_purpose(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'a.db'}")
    try:
        study = store.get_or_create_study(KEY, "p")
        with pytest.raises(StoreError, match="unknown trial purpose"):
            store.claim_trials(study.id, [("k", {"a": 1})], "w", purpose="bogus")
    finally:
        store.close()
