"""Every view shows the choice the ACF holds, after the rows changed (red46, faults A and B).

A: a dominated trial of a `registers,instructions` study (and a trial of a single-objective static
study) is edited in the database after the run: the ACF and `runs.decision` say one trial, the
study list said it too, while `show STUDY` and the report replayed the edited rows and called the
forged row chosen. Every view now shows the run's choice and says in one line that the rows now
give another trial. B: an export whose pick rule was edited and its checksum recomputed is
imported: its views said nothing of where that rule came from; they now say it came from an
imported export, not from a run of this database.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from pathlib import Path

import pytest
from helpers import choice_notes, run_cli

from compileiq.results import acf

ROOT = Path(__file__).resolve().parents[1]
SPILL_HEAVY = ROOT / "kernels" / "spill_heavy" / "spill_heavy.cu"
TUNE_TOML = f'arch = "sm_90"\ninclude_dirs = ["{ROOT}/compileiq/include"]\nentries = ["spill_heavy"]\n[defines]\nTAPS = 64\n'


def _cli(folder: Path, db: Path, *args: str) -> str:
    result = run_cli([*args, "--db", f"sqlite:///{db}"], cwd=folder)
    assert result.returncode == 0, result.describe()
    return result.stdout


def _tune(folder: Path, objective: str) -> int:
    """A small real tune of spill_heavy; the trial its ACF cites."""
    (folder / "tune.toml").write_text(TUNE_TOML)
    (folder / "spill_heavy.cu").write_text(SPILL_HEAVY.read_text())
    _cli(folder, folder / "m.db", "tune", "spill_heavy.cu", "--objective", objective, "--only",
         "ptxas.maxrregcount,ptxas.opt_level,ptxas.override_directive_values", "--budget", "16", "--workers", "local",
         "--study", "st", "--out", "m.acf.toml")
    evidence = acf.read(folder / "m.acf.toml").evidence
    return int(evidence["pick"]["trial"] if "," in objective else evidence["best"]["trial"])


def _forge(db: Path, chosen: int, objective: str) -> int:
    """A trial other than the chosen one edited in SQLite to beat everything: no spills, few
    instructions (and, for one objective, a value to match)."""
    connection = sqlite3.connect(db)
    try:
        rows = [(n, json.loads(c), json.loads(m), h) for n, c, m, h in connection.execute(
            "select number, config, metrics, code_hash from trials where state = 'complete' order by number")]
        level = rows[0][1].get("ptxas.opt_level")  # the baseline's: a trial that lowers it is refused
        hashes = [r[3] for r in rows]  # machine code of its own (a shared one stands for its simplest trial)
        number, _, metrics, _ = next(r for r in rows if r[0] not in (0, chosen) and hashes.count(r[3]) == 1
                                     and r[1].get("ptxas.opt_level") == level)
        metrics.update(spill_bytes=0, instructions=100, registers=24)
        for entry in metrics.get("entries", []):
            entry.update(spill_store_bytes=0, spill_load_bytes=0, instructions=100, registers=24)
        value = 100 if objective == "instructions" else 24
        connection.execute("update trials set metrics = ?, value = ? where number = ?",
                           (json.dumps(metrics), value, number))
        connection.commit()
    finally:
        connection.close()
    return number


@pytest.fixture(scope="module")
def front_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, int]:
    folder = tmp_path_factory.mktemp("front")
    chosen = _tune(folder, "registers,instructions")
    return folder, chosen, _forge(folder / "m.db", chosen, "registers,instructions")


def _views_agree(folder: Path, db: Path, chosen: int, note: str) -> None:
    """The list, show, show --json, --why, --pareto and the report name `chosen`, and each says `note`."""
    listed = json.loads(_cli(folder, db, "show", "--json"))
    assert [s["chosen"] for s in listed] == [chosen], listed
    shown = json.loads(_cli(folder, db, "show", "st", "--json"))
    assert shown["study"]["chosen"] == chosen and shown["trials"][0]["number"] == chosen, shown["trials"][:2]
    assert shown["trials"][0]["status"] == "chosen" and note in shown["notes"], shown["notes"]
    why = json.loads(_cli(folder, db, "show", "st", "--why", "--json"))
    assert why["chosen"] == chosen and why["decided_by"].startswith("run 1 (") and note in why["notes"], why
    table = " ".join(_cli(folder, db, "show", "st").split())
    assert note in table
    assert note in " ".join(_cli(folder, db, "show", "st", "--why").split())
    _cli(folder, db, "report", "st", "--format", "md", "-o", "r.md")
    report = (folder / "r.md").read_text()
    assert f"chosen (trial #{chosen})" in report and note in report, report[:1500]
    _cli(folder, db, "report", "st", "-o", "r.html")
    assert f"chosen (trial #{chosen})" in (folder / "r.html").read_text()


def test_a_fronts_views_show_the_acfs_point_after_a_row_is_edited(front_study) -> None:
    folder, chosen, forged = front_study
    note = f"the rows now give #{forged}: changed since run 1 chose #{chosen}, its ACF's choice"
    _views_agree(folder, folder / "m.db", chosen, note)
    shown = json.loads(_cli(folder, folder / "m.db", "show", "st", "--json"))
    assert shown["pick"] == chosen and forged in [p["trial"] for p in shown["front"]], shown["front"]
    assert re.search(rf"chosen \(knee\): trial #{chosen};", " ".join(_cli(folder, folder / "m.db", "show", "st").split()))
    # --pick is the user's rule: replayed, and it says how it differs from the ACF's choice
    picked = json.loads(_cli(folder, folder / "m.db", "show", "st", "--json", "--pick", "knee"))
    assert picked["study"]["chosen"] == forged
    assert f"--pick knee gives #{forged}: run 1 chose #{chosen}, its ACF's choice" in picked["notes"]


def test_a_single_objective_studys_views_show_the_acfs_choice_after_a_row_is_edited(tmp_path: Path) -> None:
    chosen = _tune(tmp_path, "instructions")
    forged = _forge(tmp_path / "m.db", chosen, "instructions")
    note = f"the rows now give #{forged}: changed since run 1 chose #{chosen}, its ACF's choice"
    _views_agree(tmp_path, tmp_path / "m.db", chosen, note)
    # the chosen row itself edited (its value no longer the recorded one): no view follows the run row,
    # and none shows that row (it is skipped, said so: test_forged_decisions)
    connection = sqlite3.connect(tmp_path / "m.db")
    connection.execute("update trials set value = value + 1, metrics = json_set(metrics, '$.instructions', "
                       "json_extract(metrics, '$.instructions') + 1) where number = ?", (chosen,))  # as its metrics give
    connection.commit()
    connection.close()
    (listed,) = json.loads(_cli(tmp_path, tmp_path / "m.db", "show", "--json"))
    assert listed["chosen"] == forged and "recorded choice's row changed since that run" in listed["best_is"], listed
    why = json.loads(_cli(tmp_path, tmp_path / "m.db", "show", "st", "--why", "--json"))
    assert why["chosen"] == forged and why["decided_by"] == "the study's rules, replayed over its trials", why
    (note,) = choice_notes(why["notes"])
    assert note.startswith(f"skipped trial #{chosen}, run 1's recorded choice: its row holds "), why
    assert note.endswith("re-tune to rebuild it"), why
    assert f"(#{forged}, replayed: its latest run's" in " ".join(_cli(tmp_path, tmp_path / "m.db", "show").split())


def _edited_export(source: Path, target: Path, pick: str) -> None:
    """The export with another pick rule and its checksum recomputed (as anyone can)."""
    document = json.loads(source.read_text())
    document["payload"]["study"]["pick"] = pick
    canonical = json.dumps(document["payload"], sort_keys=True, separators=(",", ":"))
    document["sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
    target.write_text(json.dumps(document))


def test_an_imported_pick_rule_is_shown_as_the_exports_not_a_decision_here(front_study, tmp_path: Path) -> None:
    folder, _, _ = front_study
    _cli(folder, folder / "m.db", "db", "export", "st", "-o", str(tmp_path / "st.json"))
    _edited_export(tmp_path / "st.json", tmp_path / "edited.json", "weights=registers:0,instructions:1")
    other = tmp_path / "other.db"
    _cli(tmp_path, other, "db", "import", str(tmp_path / "edited.json"))
    said = "pick rule weights=registers:0,instructions:1 from an imported export, not decided by a run of this database"
    shown = json.loads(_cli(tmp_path, other, "show", "st", "--json"))
    assert shown["decided_by"].startswith(said) and choice_notes(shown["notes"]) == [shown["decided_by"]], shown["notes"]
    why = json.loads(_cli(tmp_path, other, "show", "st", "--why", "--json"))
    assert why["chosen"] == shown["study"]["chosen"] and why["decided_by"] == shown["decided_by"]
    assert said in " ".join(_cli(tmp_path, other, "show", "st").split())
    _cli(tmp_path, other, "report", "st", "--format", "md", "-o", "r.md")
    assert said in " ".join((tmp_path / "r.md").read_text().split())
    (listed,) = json.loads(_cli(tmp_path, other, "show", "--json"))
    assert listed["chosen"] == shown["study"]["chosen"] and "pick rule from an imported export" in listed["best_is"], listed
    assert f"#{shown['study']['chosen']} on the front (show 1, replayed: pick rule" in " ".join(_cli(tmp_path, other, "show").split())
