"""`tune --resume` of a seeded study stopped mid-batch goes on with the proposals the uninterrupted
run made with the same `--seed`: the same trials in the same order, the same choice. Real
nvcc/ptxas, tuner, searcher, local compile threads and SQLite on the bundled sgemm's ptxas settings, its macros held
(one front end: a new front end's weight is the nvcc/ptxas time ratio each run measures, which
differs between two runs on a busy machine, resumed or not; see `--seed`); the stop is a Ctrl-C
(KeyboardInterrupt) raised while the third batch's results come in."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from compileiq import app
from compileiq.core.records import SEARCH, TrialState
from compileiq.store import Store
from compileiq.tuning.progress import SilentProgress

SGEMM = Path(__file__).resolve().parent.parent / "kernels" / "sgemm" / "sgemm.cu"
PTXAS = tuple(f"ptxas.{name}" for name in (
    "allow_expensive_optimizations", "def_load_cache", "def_store_cache", "disable_optimizer_constants", "maxrregcount",
    "minnctapersm", "opt_level", "override_directive_values", "register_usage_level"))
STOP_AT = 11  # the baseline, two batches of 4, then two results of the third: the stop falls in it


class Notes(SilentProgress):
    def __init__(self, stop_at: int | None = None) -> None:
        self.notes: list[str] = []
        self._left = stop_at

    def note(self, message: str) -> None:
        self.notes.append(message)

    def trial(self, outcome, best) -> None:
        if self._left is not None:
            self._left -= 1
            if self._left == 0:
                raise KeyboardInterrupt  # what Ctrl-C raises in the tuner's thread


def _options(folder: Path, **overrides) -> app.TuneOptions:
    base = {"kernel": SGEMM, "objective": "static", "budget": 20, "batch_size": 4, "seed": 7, "workers": "local",
            "warm_start": False, "simplify": False, "only": PTXAS, "exclude": ("define.TM", "define.TN"), "db": f"sqlite:///{folder}/t.db", "out": folder / "sgemm.acf.toml"}
    return app.TuneOptions(**{**base, **overrides})


def _search(folder: Path) -> list[str]:
    """The study's search trials' configurations, in the order claimed (trial numbers)."""
    store = Store.open(f"sqlite:///{folder}/t.db")
    try:
        (study,) = store.list_studies()
        trials = store.trials(study.id)
        assert all(t.state is not TrialState.RUNNING and not t.to_retry for t in trials)
        return [t.config_key for t in trials if t.purpose == SEARCH]
    finally:
        store.close()


def _stopped(folder: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        app.tune(_options(folder), Notes(stop_at=STOP_AT))
    store = Store.open(f"sqlite:///{folder}/t.db")
    try:
        (study,) = store.list_studies()
        assert any(t.to_retry for t in store.trials(study.id)), "the stop handed no trial back"
    finally:
        store.close()


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], str]:
    folder = tmp_path_factory.mktemp("whole")
    report = app.tune(_options(folder), SilentProgress())
    return _search(folder), report.result.chosen.config_key


def test_a_resumed_study_makes_the_uninterrupted_runs_proposals_and_choice(
        tmp_path: Path, whole: tuple[list[str], str]) -> None:
    """Before, the resumed searcher was rebuilt from the trials: its initial design and random draws
    started over and the retried batch was filled with new proposals; the trials after the stop,
    and here the choice, were another run's."""
    _stopped(tmp_path)
    notes = Notes()
    resumed = app.tune(_options(tmp_path, resume=True), notes)
    assert any("the search replayed from its record" in note for note in notes.notes), notes.notes
    trials, chosen = whole
    assert len(trials) == 20
    assert _search(tmp_path) == trials
    assert resumed.result.chosen.config_key == chosen


def test_a_record_that_does_not_replay_resumes_as_before_with_one_note(
        tmp_path: Path, whole: tuple[list[str], str]) -> None:
    """An edited record (here: one proposal recorded as another) does not replay: the searcher is
    rebuilt from the trials as before, the run says so in one note and finishes the budget."""
    _stopped(tmp_path)
    _edit_journal(tmp_path, '"ask"', '"ask", 4', '"ask", 3')
    notes = Notes()
    app.tune(_options(tmp_path, resume=True), notes)
    said = [note for note in notes.notes if note.startswith("--resume:")]
    assert len(said) == 1 and "did not replay" in said[0] and "\n" not in said[0], notes.notes
    assert len(_search(tmp_path)) == 20


def _trials_of(folder: Path) -> list:
    store = Store.open(f"sqlite:///{folder}/t.db")
    try:
        (study,) = store.list_studies()
        return store.trials(study.id)
    finally:
        store.close()


def _run_of(folder: Path, budget: int, resume: bool = False) -> Notes:
    notes = Notes()
    app.tune(_options(folder, budget=budget, resume=resume), notes)
    return notes


def test_a_forged_journal_row_does_not_steer_a_resumed_run(
        tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A journal row is a shared row: one added to a real database that tells the searcher the
    configurations an honest resume tries next were tried (and awful) does not replay: the run says
    so and goes on as a resume without a record does, trying what it would have. Before, it said it
    followed the uninterrupted run and never tried them."""
    _run_of(tmp_path, 4)
    honest, unrecorded = tmp_path_factory.mktemp("honest"), tmp_path_factory.mktemp("unrecorded")
    for folder in (honest, unrecorded):
        shutil.copy(tmp_path / "t.db", folder / "t.db")
    with sqlite3.connect(unrecorded / "t.db") as conn:
        conn.execute("DELETE FROM search_journal")
    conn.close()
    _run_of(honest, 8, resume=True)
    hidden = _search(honest)[4:]  # what an honest resume of the 4-trial study tries next
    assert len(hidden) == 4
    store = Store.open(f"sqlite:///{tmp_path}/t.db")
    try:
        (study,) = store.list_studies()
        configs = {t.config_key: t.config for t in _trials_of(honest)}
        counters = store.search_journal(study.id)[-1][1]["counters"]
        forged = [[configs[key], 1e9, [1e9], None] for key in hidden]
        store.journal_search(study.id, store.runs(study.id)[-1].id,
                             {"calls": [["tell", forged, True]], "claimed": [], "counters": counters})
    finally:
        store.close()
    notes = _run_of(tmp_path, 8, resume=True)
    said = [note for note in notes.notes if note.startswith("--resume:")]
    assert len(said) == 1 and "did not replay" in said[0] and "no finished trial" in said[0], notes.notes
    _run_of(unrecorded, 8, resume=True)
    assert _search(tmp_path) == _search(unrecorded), "the forged row steered the resumed search"


def test_a_forged_avoid_or_ask_does_not_replay(tmp_path: Path) -> None:
    """An avoid this run would not make, or an ask larger than its batch, is refused like a forged tell."""
    _run_of(tmp_path, 4)
    _edit_journal(tmp_path, '"avoid"', '["avoid", [', '["avoid", [["ptxas.opt_level", 3], ')
    notes = _run_of(tmp_path, 8, resume=True)
    said = [note for note in notes.notes if note.startswith("--resume:")]
    assert len(said) == 1 and "avoid call this run would not make" in said[0], notes.notes


def test_a_forged_front_end_cost_does_not_replay(tmp_path: Path) -> None:
    """The front-end/ptxas cost ratio a journal row tells the searcher weighs new front ends in every
    ask after it; it must be the ratio the row's own compile counters measured. Before, a forged one
    was replayed as given."""
    _run_of(tmp_path, 8)
    with sqlite3.connect(tmp_path / "t.db") as conn:
        rows = conn.execute("SELECT id, entry FROM search_journal ORDER BY id").fetchall()
        row_id, entry = next((i, json.loads(e)) for i, e in reversed(rows) if '"cost"' in e)
        for call in entry["calls"]:
            if call[0] == "cost":
                call[1] *= 1000
        conn.execute("UPDATE search_journal SET entry = ? WHERE id = ?", (json.dumps(entry), row_id))
    conn.close()
    notes = _run_of(tmp_path, 12, resume=True)
    said = [note for note in notes.notes if note.startswith("--resume:")]
    assert len(said) == 1 and "front-end cost other than its compile counters measured" in said[0], notes.notes


def test_a_journal_naming_trials_the_study_lacks_says_so(tmp_path: Path) -> None:
    """Red team (this round): claimed numbers the study never had were reported as trials "not recorded
    for a replay (an older compileiq's, or --stream's)", blaming the wrong cause."""
    _run_of(tmp_path, 4)
    _edit_journal(tmp_path, '"claimed": [', '"claimed": [', '"claimed": [100000000000000000000, -5, ')
    notes = _run_of(tmp_path, 8, resume=True)
    said = [note for note in notes.notes if note.startswith("--resume:")]
    assert len(said) == 1 and "names trials the study does not hold" in said[0], notes.notes


def test_a_stop_outside_the_search_leaves_no_batch_to_finish_first(tmp_path: Path) -> None:
    """Each journal row says its claim's purpose, and only a search claim is the batch a stop fell
    in. Here the last row of a run stopped mid-batch is marked as a simplification's claim: the
    resumed run asks a whole batch first (its retried trials and new proposals). Before, any last
    claim was taken for the stopped batch: its unfinished trials alone were the first batch."""
    _stopped(tmp_path)
    store = Store.open(f"sqlite:///{tmp_path}/t.db")
    try:
        (study,) = store.list_studies()
        assert {entry.get("purpose") for _, entry in store.search_journal(study.id)} == {SEARCH}
    finally:
        store.close()
    with sqlite3.connect(tmp_path / "t.db") as conn:
        conn.execute("UPDATE search_journal SET entry = json_set(entry, '$.purpose', 'simplify') "
                     "WHERE id = (SELECT max(id) FROM search_journal)")
    conn.close()
    notes = _run_of(tmp_path, 20, resume=True)
    assert any("the search replayed from its record" in note for note in notes.notes), notes.notes
    store = Store.open(f"sqlite:///{tmp_path}/t.db")
    try:
        (study,) = store.list_studies()
        last_run = store.runs(study.id)[-1].id
        rows = [entry for run_id, entry in store.search_journal(study.id) if run_id == last_run]
    finally:
        store.close()
    first = next(entry for entry in rows if entry["claimed"])
    assert first["purpose"] == SEARCH and len(first["claimed"]) == 4, rows


def test_an_ask_past_any_number_is_an_unreadable_record(tmp_path: Path) -> None:
    """A recorded ask of 1e999 configurations (infinity, as Python's json reads it) escaped the
    replay's check of unreadable calls as an OverflowError; it is one, said so."""
    _run_of(tmp_path, 4)
    _edit_journal(tmp_path, '"ask"', '["ask", ', '["ask", 1e999, ')
    notes = _run_of(tmp_path, 8, resume=True)
    said = [note for note in notes.notes if note.startswith("--resume:")]
    assert len(said) == 1 and "did not replay: an unreadable record (OverflowError" in said[0], notes.notes


def _edit_journal(tmp_path: Path, holding: str, old: str, new: str) -> None:
    """Edit the first journal row holding `holding`, as a forger with write access would."""
    with sqlite3.connect(tmp_path / "t.db") as conn:
        rows = conn.execute("SELECT id, entry FROM search_journal ORDER BY id").fetchall()
        edited = next((i, e) for i, e in rows if holding in e)
        conn.execute("UPDATE search_journal SET entry = ? WHERE id = ?", (edited[1].replace(old, new, 1), edited[0]))
    conn.close()


@pytest.mark.parametrize("field, forged", [("counters", "[1e999, 0.0, 0, 0.0]"), ("counters", "[1, 0.0, 1, 1" + "0" * 400 + "]"),
                                           ("claimed", "[1e999]"), ("claimed", "[NaN]"), ("counters", "[NaN, 0.0, 0, 0.0]")])
def test_a_journal_number_past_any_number_is_an_unreadable_record_not_a_crash(
        tmp_path: Path, field: str, forged: str) -> None:
    """Red team (this round): a journal row's counter or claimed number of 1e999 (infinity, as Python's
    json reads it) or an integer past a float's range made `tune --resume` end in an OverflowError
    traceback; it is an unreadable record, and the searcher is rebuilt from the trials as before."""
    _run_of(tmp_path, 4)
    with sqlite3.connect(tmp_path / "t.db") as conn:
        row_id, text = conn.execute("SELECT id, entry FROM search_journal ORDER BY id").fetchone()
        entry = json.loads(text)
        entry[field] = "FORGED"
        conn.execute("UPDATE search_journal SET entry = ? WHERE id = ?",
                     (json.dumps(entry).replace('"FORGED"', forged), row_id))
    conn.close()
    notes = _run_of(tmp_path, 8, resume=True)
    said = [note for note in notes.notes if note.startswith("--resume:")]
    assert len(said) == 1 and "its record of the search is unreadable" in said[0] and "\n" not in said[0], notes.notes
    assert len(_search(tmp_path)) == 8
