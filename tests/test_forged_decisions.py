"""Forged rows never become a view's choice, never crash a view, and never slow or empty an import
(red47).

1. A forged `runs.decision` naming a trial the study's rules refuse (it lowers occupancy) made every
   view call it "chosen (verified by run 2)": a recorded choice is followed only if the tuner could
   have made it (its rules allow it, and it is the baseline or better); else every view replays and
   says why, the list names no choice, and that run vouches for no row.
2. A decision naming trial 10**23 or a value of 10**400 crashed the list, show and report.
3. `db import` of trials of distinct parameter sets took 30 s for 300 (each searched for its space's
   order) and accepted them all into one study: a study's parameters are its first trial's.
4. One unfinished trial beside rejected ones made `db import` create an empty study and add builds.
5. A trial whose config is not of the study's parameters crashed `show STUDY` (a KeyError).
6. The row of the trial the last run chose and verified, edited to no spills and a value of 0: every
   view said the run's choice "names no complete trial with its recorded value", replayed, and showed
   the edited row as chosen with its forged numbers. That row is now skipped by every view, which
   says why (the run, both values, re-tune), and nothing in the database changes.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import time
from pathlib import Path

import pytest
from helpers import forge_run, resealed, run_cli

from compileiq.core.space_files import load_space
from compileiq.results.explain import explain
from compileiq.store import Store

ROOT = Path(__file__).resolve().parents[1]
SPILL_HEAVY = ROOT / "kernels" / "spill_heavy" / "spill_heavy.cu"
TUNE_TOML = f'arch = "sm_90"\ninclude_dirs = ["{ROOT}/compileiq/include"]\nentries = ["spill_heavy"]\n[defines]\nTAPS = 64\n'
ONLY = "ptxas.maxrregcount,ptxas.opt_level,ptxas.override_directive_values,ptxas.register_usage_level"


def _cli(folder: Path, db: Path, *args: str, ok: bool = True) -> str:
    result = run_cli([*args, "--db", f"sqlite:///{db}"], cwd=folder)
    assert "Traceback" not in result.output, result.describe()
    assert (result.returncode == 0) == ok, result.describe()
    return result.stdout if ok else result.stderr


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, int]:
    """A small static tune of spill_heavy: (folder, the ACF's trial, a complete trial the rules refuse)."""
    folder = tmp_path_factory.mktemp("tuned")
    (folder / "tune.toml").write_text(TUNE_TOML)
    (folder / "spill_heavy.cu").write_text(SPILL_HEAVY.read_text())
    _cli(folder, folder / "m.db", "tune", "spill_heavy.cu", "--objective", "static", "--only", ONLY,
         "--budget", "16", "--workers", "local", "--study", "st", "--out", "m.acf.toml")
    store = Store.open(f"sqlite:///{folder / 'm.db'}")
    try:
        study = store.find_study("st")
        explanation = explain(study, store.trials(study.id), runs=store.runs(study.id))
    finally:
        store.close()
    assert explanation.chosen is not None
    refused = [t for t in explanation.ranked() if explanation.refusal(t) is not None]
    assert refused, "the tune made no trial its rules refuse"
    return folder, explanation.chosen.number, refused[0].number


def _copy(folder: Path, name: str) -> Path:
    db = folder / name
    db.write_bytes((folder / "m.db").read_bytes())
    return db


def _value(db: Path, number: int) -> float:
    connection = sqlite3.connect(db)
    try:
        return float(connection.execute("select value from trials where number = ?", (number,)).fetchone()[0])
    finally:
        connection.close()


def test_a_forged_run_naming_a_refused_trial_is_not_followed_by_any_view(tuned: tuple[Path, int, int]) -> None:
    folder, chosen, refused = tuned
    db = _copy(folder, "f1.db")
    forge_run(db, {"chosen": refused, "value": _value(db, refused), "by": "rules", "verified": [0, refused]})
    (listed,) = json.loads(_cli(folder, db, "show", "--json"))
    assert listed["chosen"] == chosen and "replayed from its trials (no valid recorded choice" in listed["best_is"], listed
    assert f"(#{refused}" not in _cli(folder, db, "show") and f"(#{chosen}, replayed" in _cli(folder, db, "show")
    shown = json.loads(_cli(folder, db, "show", "st", "--json"))
    assert shown["study"]["chosen"] == chosen and shown["trials"][0]["number"] == chosen, shown["trials"][:2]
    assert shown["decided_by"] == "the study's rules, replayed over its trials", shown["decided_by"]
    note = f"run 2's recorded choice was not followed: the study's rules refuse #{refused} ("
    assert any(n.startswith(note) for n in shown["notes"]), shown["notes"]
    row = next(t for t in shown["trials"] if t["number"] == refused) if any(
        t["number"] == refused for t in shown["trials"]) else None
    if row is not None:
        assert row["status"].startswith("refused") and "verified" not in row["provenance"], row
    _cli(folder, db, "report", "st", "--format", "md", "-o", "r.md")
    report = (folder / "r.md").read_text()
    assert f"chosen (trial #{chosen})" in report and note in report, report[:1500]


def test_a_forged_run_row_vouches_for_no_row(tuned: tuple[Path, int, int]) -> None:
    """Its choice the real one, its `verified` list naming every trial: only the rows its ACF would
    cite (the baseline, its choice) may be verified by it, never a refused one."""
    folder, chosen, _ = tuned
    db = _copy(folder, "f1v.db")
    forge_run(db, {"chosen": chosen, "value": _value(db, chosen), "by": "rules", "verified": list(range(64))})
    shown = json.loads(_cli(folder, db, "show", "st", "--json", "--top", "100"))
    for trial in shown["trials"]:
        if trial["number"] not in (0, chosen):
            assert "verified" not in trial["provenance"], trial


@pytest.mark.parametrize("decision", ['{"chosen": 100000000000000000000000, "value": 1.0, "by": "rules"}',
                                      '{"chosen": 1, "value": 1' + "0" * 400 + ', "by": "rules"}'])
def test_a_decision_past_any_number_is_no_decision_not_a_crash(tuned: tuple[Path, int, int], decision: str) -> None:
    folder, chosen, _ = tuned
    db = _copy(folder, "f2.db")
    forge_run(db, decision)
    (listed,) = json.loads(_cli(folder, db, "show", "--json"))
    assert listed["chosen"] == chosen and "replayed from its trials" in listed["best_is"], listed  # as show st
    _cli(folder, db, "show")
    shown = json.loads(_cli(folder, db, "show", "st", "--json"))
    assert shown["study"]["chosen"] == chosen and "run 2's recorded choice names no complete trial" in shown["notes"][0]
    _cli(folder, db, "report", "st", "--format", "md", "-o", "r2.md")


def test_an_edited_chosen_row_is_never_shown_as_the_choices_evidence(tuned: tuple[Path, int, int]) -> None:
    folder, chosen, _ = tuned
    db = _copy(folder, "c1.db")
    recorded = _value(db, chosen)
    connection = sqlite3.connect(db)
    (occupancy,) = connection.execute("select json_extract(metrics, '$.occupancy') from trials where number = ?",
                                      (chosen,)).fetchone()
    forged = float(round((1 - occupancy) * 1000))  # no spills: what its forged metrics give (else set aside on read)
    connection.execute("update trials set value = ?, metrics = json_set(metrics, '$.spill_bytes', 0, "
                       "'$.entries[0].spill_store_bytes', 0, '$.entries[0].spill_load_bytes', 0) where number = ?",
                       (forged, chosen))
    connection.commit()
    connection.close()
    note = (f"skipped trial #{chosen}, run 1's recorded choice: its row holds {forged:g}, not the {recorded:g} run 1 recorded "
            "of its choice and verified by a rebuild (the row changed since that run); replayed from its trials "
            "without it; re-tune to rebuild it")
    (listed,) = json.loads(_cli(folder, db, "show", "--json"))
    assert listed["chosen"] != chosen and "recorded choice's row changed since that run" in listed["best_is"], listed
    shown = json.loads(_cli(folder, db, "show", "st", "--json", "--top", "100"))
    assert shown["study"]["chosen"] != chosen and note in shown["notes"], shown["notes"]
    assert chosen not in [t["number"] for t in shown["trials"]], shown["trials"][:2]
    assert shown["decided_by"] == "the study's rules, replayed over its trials", shown["decided_by"]
    why = json.loads(_cli(folder, db, "show", "st", "--why", "--json"))
    assert why["chosen"] == shown["study"]["chosen"] and note in why["notes"], why
    assert note in " ".join(_cli(folder, db, "show", "st").split())
    for form, name in (("md", "c1.md"), ("html", "c1.html")):
        _cli(folder, db, "report", "st", "--format", form, "-o", name)
        report = (folder / name).read_text()
        assert f"chosen (trial #{chosen})" not in report and f"chosen (trial #{shown['study']['chosen']})" in report
        assert "re-tune to rebuild it" in report
    assert _value(db, chosen) == forged  # a view changes nothing


def test_a_row_of_other_parameters_is_skipped_never_the_choice(tuned: tuple[Path, int, int]) -> None:
    folder, chosen, _ = tuned
    db = _copy(folder, "d1.db")
    connection = sqlite3.connect(db)
    connection.execute("update trials set config = ? where number = ?", ('{"ptxas.bogus": 7}', chosen))
    connection.commit()
    connection.close()
    (listed,) = json.loads(_cli(folder, db, "show", "--json"))
    assert listed["chosen"] != chosen, listed
    shown = json.loads(_cli(folder, db, "show", "st", "--json"))
    assert shown["study"]["chosen"] != chosen and shown["study"]["chosen"] == listed["chosen"], shown["study"]
    assert any(n.startswith("skipped 1 damaged or forged row") and f"#{chosen}" in n for n in shown["notes"]), shown
    assert "skipped 1 damaged or forged row" in " ".join(_cli(folder, db, "show", "st").split())
    _cli(folder, db, "report", "st", "--format", "md", "-o", "d1.md")
    assert "skipped 1 damaged or forged row" in (folder / "d1.md").read_text()


def _export(folder: Path) -> dict:
    _cli(folder, folder / "m.db", "db", "export", "st", "-o", "st.json")
    return json.loads((folder / "st.json").read_text())


def _counts(db: Path) -> dict[str, int]:
    if not db.exists():
        return {}
    connection = sqlite3.connect(db)
    try:
        return {t: connection.execute(f"select count(*) from {t}").fetchone()[0] for t in ("studies", "trials", "builds")}
    finally:
        connection.close()


def test_import_takes_a_studys_parameters_from_its_first_trial_in_linear_time(tuned: tuple[Path, int, int]) -> None:
    folder, _, _ = tuned
    document = _export(folder)
    payload = document["payload"]
    space = load_space(payload["study"]["key"]["space_id"].removeprefix("nvcc-").partition("+")[0])
    safe = [p for p in space.parameters if p.risk == "safe"]
    risky = [p for p in space.parameters if p.risk != "safe"]
    subsets = ((r, s) for r in itertools.combinations(risky, 6) for k in range(len(safe), 0, -1)
               for s in itertools.combinations(safe, k))
    first = payload["trials"][0]
    trials = []
    for number, (r6, s) in zip(range(200), subsets, strict=False):
        config = {p.name: p.default for p in (*s, *r6)} | {"define.DUMMY": number}
        trials.append(dict(first, config=config, number=number,
                           config_key=json.dumps(config, sort_keys=True, separators=(",", ":"))))
    payload.update(trials=trials, builds=[])
    payload["study"]["name"] = "distinct"
    (folder / "dos.json").write_text(resealed(document))
    started = time.monotonic()
    output = _cli(folder, folder / "dos.db", "db", "import", "dos.json")
    assert time.monotonic() - started < 15  # 25 s and more before: each trial's space searched again
    assert "1 trials added" in output and "199 rows of the file rejected" in output, output
    assert "its config's parameters are not the study's (those of its first valid trial)" in output, output


def test_a_damaged_first_row_does_not_decide_the_studys_parameters(tuned: tuple[Path, int, int]) -> None:
    """The study's parameters were taken from the file's first row before it was checked: a first
    row with an unknown parameter was rejected and then every valid row with it (a reviewer's)."""
    folder, _, _ = tuned
    document = _export(folder)
    payload = document["payload"]
    valid = len(payload["trials"])
    bad = dict(payload["trials"][0], config={"ptxas.bogus": 7}, config_key='{"ptxas.bogus":7}', number=10**6)
    payload["trials"] = [bad, *payload["trials"]]
    payload["study"]["name"] = "damaged-first"
    (folder / "damaged.json").write_text(resealed(document))
    output = _cli(folder, folder / "damaged.db", "db", "import", "damaged.json")
    assert f"{valid} trials added" in output and "1 rows of the file rejected" in output, output


def test_rejected_trials_beside_an_unfinished_one_import_nothing(tuned: tuple[Path, int, int]) -> None:
    folder, _, _ = tuned
    document = _export(folder)
    payload = document["payload"]
    for index, trial in enumerate(payload["trials"]):
        if index == 0:
            trial.update(state="running", finished_at=None, value=None)
        else:
            trial["config_key"] = "bogus"
    payload["study"]["name"] = "partial"
    (folder / "partial.json").write_text(resealed(document))
    db = folder / "partial.db"
    _cli(folder, db, "db", "upgrade")  # an empty database (show no longer creates one)
    before = _counts(db)
    error = _cli(folder, db, "db", "import", "partial.json", ok=False).strip()
    assert error.startswith("error: all ") and "were rejected" in error and "nothing was imported" in error, error
    assert len(error.splitlines()) == 1 and _counts(db) == before, (error, _counts(db))


def test_a_decision_that_says_its_run_stopped_before_it_chose_names_no_choice() -> None:
    """Reviewer: a row with both `unchosen` and `chosen` was a choice to the study list (it reads
    `recorded_choice`), while show STUDY, the report and the ACF replay the study's choice."""
    from compileiq.core.records import UNCHOSEN
    from compileiq.results.recorded_decision import recorded_choice

    assert recorded_choice({"chosen": 5, "value": 1.0}) == (5, 1.0)
    assert recorded_choice({UNCHOSEN: "its baseline failed", "chosen": 5, "value": 1.0}) is None
