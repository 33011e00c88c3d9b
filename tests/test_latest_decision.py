"""One rule for "the latest decision" of a study (`records.latest_decision`), which the study list,
`show STUDY`, `--json` and `db export` all follow.

The list's SQL, `explain`'s `latest_decision` and `db export`'s `_latest_pick` each chose the study's
run: a run row set aside as damaged (a timestamp that is no time) was still the list's and the
export's latest decision, so `show` listed the study under the forged row's kernel path while
`show STUDY` named the path its real run recorded, and the export carried the forged row's.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from helpers import TINY_KERNEL, run_cli

REAL = "a-cuda/scale.cu"


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A static tune of a tiny kernel in a-cuda/ (its run records the path a-cuda/scale.cu)."""
    folder = tmp_path_factory.mktemp("latest")
    (folder / "a-cuda").mkdir()
    (folder / "a-cuda" / "scale.cu").write_text(TINY_KERNEL)
    result = run_cli(["tune", "a-cuda/scale.cu", "--objective", "static", "--budget", "3", "--workers", "local",
                      "--only", "ptxas.opt_level", "--study", "st", "--db", f"sqlite:///{folder}/t.db",
                      "--out", "k.acf.toml"], cwd=folder)
    assert result.returncode == 0, result.describe()
    return folder


def _forge(db: Path, decision: object, started_at: str | None = "2026-01-01 00:00:00") -> None:
    connection = sqlite3.connect(db)
    try:
        connection.execute("insert into runs (study_id, worker, limits, stopped, started_at, decision) "
                           "values (1, 'evil:1', '{}', 'budget', coalesce(?, '2026-01-01'), ?)",
                           (started_at, json.dumps(decision)))
        connection.commit()
    finally:
        connection.close()


def _views(folder: Path, db: Path) -> tuple[object, object, object]:
    """The kernel path the study list's --json, `show st --json` and `db export` carry."""
    url = f"sqlite:///{db}"
    listed = run_cli(["show", "--json", "--db", url], cwd=folder)
    shown = run_cli(["show", "st", "--json", "--db", url], cwd=folder)
    exported = run_cli(["db", "export", "st", "-o", "-", "--db", url], cwd=folder)
    for result in (listed, shown, exported):
        assert result.returncode == 0 and "Traceback" not in result.output, result.describe()
    carried = json.loads(exported.stdout)["payload"]["study"].get("decision", {})
    return (json.loads(listed.stdout)[0]["kernel_path"], json.loads(shown.stdout)["study"]["kernel_path"],
            carried.get("kernel_path"))


CASES = {
    # a row whose timestamp is no time: every view sets it aside (said once), the list and export too
    "damaged": ([({"chosen": 0, "value": 0.0, "kernel_path": "b-cuda/scale.cu"}, "garbage")], REAL),
    # a later run that stopped before it chose never hides a choice
    "stopped": ([({"unchosen": "its baseline failed", "kernel_path": "b-cuda/scale.cu"}, None)], REAL),
    # a row that says both that it chose and that it stopped: a stop
    "both": ([({"chosen": 0, "value": 0.0, "unchosen": "x", "kernel_path": "b-cuda/scale.cu"}, None)], REAL),
    # a later run that names no choice but is no stop (what `db import` records) is the latest
    "unchosen row": ([({"kernel_path": "c-cuda/scale.cu"}, None)], "c-cuda/scale.cu"),
    # two runs that started in the same instant: the one numbered later
    "same time": ([({"chosen": 0, "value": 0.0, "kernel_path": "b-cuda/scale.cu"}, "2026-01-01 00:00:00"),
                   ({"chosen": 0, "value": 0.0, "kernel_path": "c-cuda/scale.cu"}, "2026-01-01 00:00:00")],
                  "c-cuda/scale.cu"),
    # a decision that is no JSON object is no decision
    "not an object": ([(["b-cuda/scale.cu"], None)], REAL),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_list_show_json_and_export_follow_one_latest_decision(tuned: Path, tmp_path: Path, case: str) -> None:
    forged, expected = CASES[case]
    db = tmp_path / "t.db"
    shutil.copy(tuned / "t.db", db)
    for decision, started_at in forged:
        _forge(db, decision, started_at)
    assert _views(tuned, db) == (expected, expected, expected)
