"""`tuning.verify` on a real SQLite store: a rebuild that the same inputs would not repeat (a compile
timeout or crash here: load, a lost worker) is no evidence about the row it was to check, and a row an
earlier compile lost that way is no forgery. The compiler is stood in for by the builds it returns."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from compileiq.build.compile import Build, BuildStatus
from compileiq.core.errors import CompileIQError
from compileiq.core.records import StudyKey, Trial, TrialState
from compileiq.evaluate.metrics import Evaluation
from compileiq.store import Store
from compileiq.tuning.verify import Quarantined, Verifier

METRICS = {"spill_bytes": 0, "registers": 40, "occupancy": 1.0, "instructions": 120}
GOOD = (Build(BuildStatus.OK, "", (), "c" * 64, b"", 0.1), Evaluation(40.0, None, METRICS))
TIMED_OUT = (Build(BuildStatus.TIMEOUT, "nvcc did not finish within 1 s and was killed", (), None, b"", 1.0),
             Evaluation(None, "timeout: nvcc did not finish within 1 s", {}))


def _row(store: Store, config: dict[str, int], state: TrialState, value: float | None, metrics: dict[str, object],
         code_hash: str | None) -> Trial:
    study = store.get_or_create_study(StudyKey("k", "0" * 64, "s", "0" * 64, "t", "sm_90", "static", "registers"), "v")
    trial = store.claim_trials(study.id, [(json.dumps(config, sort_keys=True, separators=(",", ":")), config)],
                               "alice@box:1")[0]
    return store.finish_trial(trial.id, state=state, value=value, reason=None if value else "timeout: killed",
                              metrics=metrics, code_hash=code_hash, compile_seconds=1.0)


def _verifier(store: Store, answer: tuple[Build, Evaluation], notes: list[str]) -> tuple[Verifier, list[int]]:
    batches: list[int] = []

    def rebuild(trials: Sequence[Trial]) -> list[tuple[Build, Evaluation]]:
        batches.append(len(trials))
        return [answer for _ in trials]

    return Verifier(store, rebuild, {}, "baseline-key", notes.append), batches


def test_an_honest_row_whose_rebuild_times_out_is_neither_read_nor_touched(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/t.db")
    try:
        rows = [_row(store, {"a": n}, TrialState.COMPLETE, 40.0, METRICS, "c" * 64) for n in range(3)]
        notes: list[str] = []
        verifier, batches = _verifier(store, TIMED_OUT, notes)
        assert verifier.check_results(rows) == []  # a decision reads none of them
        assert batches == [3]  # one batch for the step
        assert store.trials(rows[0].study_id) == rows  # as recorded: nobody accused
        assert all("could not be checked" in note and "quarantined" not in note for note in notes) and len(notes) == 3
        with pytest.raises(CompileIQError, match=r"could not rebuild trial #0 to check it.*timeout") as stopped:
            verifier.check(rows[:1])  # a row the ACF would cite: no ACF
        assert not isinstance(stopped.value, Quarantined)
        assert store.trials(rows[0].study_id) == rows
    finally:
        store.close()


def test_a_row_an_earlier_compile_lost_to_a_timeout_is_replaced_by_its_rebuild_unaccused(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/t.db")
    try:
        lost = _row(store, {"a": 1}, TrialState.FAILED, None, {"build_status": "timeout"}, None)
        notes: list[str] = []
        verifier, _ = _verifier(store, GOOD, notes)
        with pytest.raises(Quarantined):  # the decision is made again from the row as it now is
            verifier.check_results([lost])
        (row,) = store.trials(lost.study_id)
        assert row.state is TrialState.COMPLETE and row.value == 40.0 and row.code_hash == "c" * 64
        assert "quarantined" not in (row.reason or "") and not any("quarantined" in note for note in notes)
        assert verifier.quarantined == 0
        assert verifier.check_results([row]) == [row]  # this run's build now: not rebuilt again
    finally:
        store.close()


UNSCORED = {"spill_bytes": 72, "occupancy": 0.5, "spilling": ["vic"], "kernels": 2,
            "registers": {"vic": 32, "aa": 24}, "kernel_spill_bytes": {"vic": 72, "aa": 0},
            "kernel_occupancy": {"vic": 0.5, "aa": 1.0}}
WITH_UNSCORED = (GOOD[0], Evaluation(40.0, None, {**METRICS, "unscored": UNSCORED}))


@pytest.mark.parametrize("forged", [
    {"kernel_spill_bytes": {"vic": 0, "aa": 0}}, {"kernel_occupancy": {"vic": 1.0, "aa": 1.0}},
    {"occupancy": 1.0}, {"registers": {"vic": 31, "aa": 24}}, {"spilling": []},
])
def test_a_row_forged_only_in_its_unscored_table_is_quarantined(tmp_path: Path, forged: dict[str, object]) -> None:
    """Red team 6: the no-harm rules read a row's `unscored` table, which a rebuild did not have to
    reproduce: a shared row claiming an unscored kernel spills no more than the baseline was verified."""
    store = Store.open(f"sqlite:///{tmp_path}/t.db")
    try:
        row = _row(store, {"a": 1}, TrialState.COMPLETE, 40.0, {**METRICS, "unscored": UNSCORED | forged}, "c" * 64)
        notes: list[str] = []
        verifier, _ = _verifier(store, WITH_UNSCORED, notes)
        with pytest.raises(Quarantined, match="trial #0: its row says"):
            verifier.check([row])
        (after,) = store.trials(row.study_id)
        assert after.state is TrialState.FAILED and (after.reason or "").startswith("quarantined")
        assert "unscored" in (after.reason or "") or "'s " in (after.reason or ""), after.reason
    finally:
        store.close()


@pytest.mark.parametrize("forged", [
    {"spill_bytes": 0}, {"kernels": 1}, {"kernel_spill_bytes": {"vic": 72}},  # a kernel left out
])
def test_a_row_whose_unscored_table_contradicts_itself_is_never_read(tmp_path: Path, forged: dict[str, object]) -> None:
    """A forged table whose own facts disagree (per-kernel spills over the total, more kernels named
    than counted, tables naming other kernels) is a damaged row (`metric_ranges`): set aside on
    every read, so no run verifies or chooses it."""
    store = Store.open(f"sqlite:///{tmp_path}/t.db")
    try:
        row = _row(store, {"a": 1}, TrialState.COMPLETE, 40.0, {**METRICS, "unscored": UNSCORED | forged}, "c" * 64)
        assert row.id not in {t.id for t in store.trials(row.study_id)}
    finally:
        store.close()


def test_an_unscored_table_is_agreed_within_the_rules_occupancy_tolerance(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/t.db")
    try:
        close = UNSCORED | {"occupancy": 0.5 + 1e-12, "kernel_occupancy": {"vic": 0.5 - 1e-12, "aa": 1.0}}
        row = _row(store, {"a": 1}, TrialState.COMPLETE, 40.0, {**METRICS, "unscored": close}, "c" * 64)
        notes: list[str] = []
        verifier, _ = _verifier(store, WITH_UNSCORED, notes)
        verifier.check([row])  # verified: nothing raised, nothing rewritten
        assert store.trials(row.study_id) == [row] and not notes
    finally:
        store.close()


@pytest.mark.parametrize("older", [
    METRICS,  # recorded before the `unscored` table was
    {**METRICS, "unscored": {k: v for k, v in UNSCORED.items() if k not in ("kernel_spill_bytes", "kernel_occupancy",
                                                                               "registers")}},  # before each kernel's
])
def test_a_row_recorded_before_its_unscored_table_is_brought_up_to_date_unaccused(
        tmp_path: Path, older: dict[str, object]) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/t.db")
    try:
        row = _row(store, {"a": 1}, TrialState.COMPLETE, 40.0, older, "c" * 64)
        notes: list[str] = []
        verifier, _ = _verifier(store, WITH_UNSCORED, notes)
        with pytest.raises(Quarantined):  # Rerecorded: the choice is made again from the row as it now is
            verifier.check([row])
        (after,) = store.trials(row.study_id)
        assert after.state is TrialState.COMPLETE and after.metrics["unscored"] == UNSCORED
        assert "quarantined" not in (after.reason or "") and verifier.quarantined == 0 and not notes
        verifier.check([after])  # verified now: not rebuilt again
    finally:
        store.close()


def test_an_older_row_that_records_a_false_group_is_quarantined(tmp_path: Path) -> None:
    """What a row recorded before each kernel's table records (the group) must still be the rebuild's."""
    store = Store.open(f"sqlite:///{tmp_path}/t.db")
    try:
        older = {k: v for k, v in UNSCORED.items() if k not in ("kernel_spill_bytes", "kernel_occupancy")}
        row = _row(store, {"a": 1}, TrialState.COMPLETE, 40.0, {**METRICS, "unscored": older | {"spill_bytes": 0}},
                   "c" * 64)
        verifier, _ = _verifier(store, WITH_UNSCORED, [])
        with pytest.raises(Quarantined, match="spill bytes: its row says 0, a rebuild here gives 72"):
            verifier.check([row])
        assert verifier.quarantined == 1
    finally:
        store.close()
