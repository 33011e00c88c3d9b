"""One truth after a refused ACF (docs audit finding 1): a run whose ACF write is refused after the
run still records its decision, and `show`, `show --json` and `report` then said the study's choice
was "run N (...), whose ACF holds it" while the ACF on disk cites another run's choice. The run's
row now says its ACF was not written, and every view says so; nothing recorded is lost.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from helpers import TINY_KERNEL, run_cli


def _tune(workspace: Path, db: str, budget: int):
    return run_cli(["tune", "k.cu", "--objective", "registers", "--budget", str(budget), "--workers", "local",
                    "--study", "s", "--db", f"sqlite:///{db}", "--out", "k.acf.toml"], cwd=workspace)


def test_a_refused_acf_is_never_called_the_choices_acf(tmp_path):
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    first = _tune(tmp_path, "a.db", 4)
    assert first.returncode == 0, first.describe()
    before = (tmp_path / "k.acf.toml").read_bytes()
    # the same study in a fresh database with fewer search trials: refused when the ACF is written
    done = _tune(tmp_path, "b.db", 2)
    assert done.returncode == 2 and "more search trials" in done.stderr_lines[-1], done.describe()
    assert "Traceback" not in done.output
    assert (tmp_path / "k.acf.toml").read_bytes() == before

    shown = run_cli(["show", "s", "--db", "sqlite:///b.db", "--json"], cwd=tmp_path)
    assert shown.returncode == 0, shown.describe()
    view = json.loads(shown.stdout)
    assert "whose ACF holds it" not in view["decided_by"], view["decided_by"]
    assert "; its ACF was not written (refused: not replacing" in view["decided_by"], view["decided_by"]
    with sqlite3.connect(tmp_path / "b.db") as conn:  # the decision stays recorded, with why no ACF holds it
        decision = json.loads(conn.execute("select decision from runs order by id desc").fetchone()[0])
    assert decision["acf_not_written"].startswith("refused: not replacing") and view["study"]["chosen"] == decision["chosen"]

    why = run_cli(["show", "s", "--why", "--json", "--db", "sqlite:///b.db"], cwd=tmp_path)
    assert why.returncode == 0, why.describe()
    assert "its ACF was not written" in json.loads(why.stdout)["decided_by"], why.stdout

    report = run_cli(["report", "s", "--db", "sqlite:///b.db", "--format", "md", "-o", "-"], cwd=tmp_path)
    assert report.returncode == 0, report.describe()
    assert "its ACF was not written" in report.stdout and "whose ACF holds it" not in report.stdout

    # the first database's run wrote its ACF: its views say so, as before
    other = json.loads(run_cli(["show", "s", "--db", "sqlite:///a.db", "--json"], cwd=tmp_path).stdout)
    assert other["decided_by"].endswith("whose ACF holds it"), other["decided_by"]


def test_an_acf_whose_evidence_cannot_be_made_is_never_called_the_choices_acf(tmp_path, monkeypatch):
    """review55 finding 4: the ACF's content was made outside the guard, so a run whose evidence
    could not be made (EvidenceError: no ACF written) left its row saying its ACF holds the choice.
    The failure is faked at that one call; the run, its store and the views are real."""
    import pytest

    from compileiq import app
    from compileiq.results import evidence
    from compileiq.store import Store
    from compileiq.tuning.progress import SilentProgress

    (tmp_path / "k.cu").write_text(TINY_KERNEL)

    def fail(*_args, **_kwargs):
        raise evidence.EvidenceError("trial #1 is failed without machine code; no ACF was written")

    monkeypatch.setattr(evidence, "acf_content", fail)
    options = app.TuneOptions(kernel=tmp_path / "k.cu", objective="registers", budget=2, workers="local",
                              db=f"sqlite:///{tmp_path / 't.db'}", out=tmp_path / "k.acf.toml")
    with pytest.raises(evidence.EvidenceError):
        app.tune(options, SilentProgress())
    assert not (tmp_path / "k.acf.toml").exists()
    store = Store.open(f"sqlite:///{tmp_path / 't.db'}")
    try:
        (run,) = store.runs(store.find_study("1").id)
    finally:
        store.close()
    assert run.decision["acf_not_written"].startswith("failed: trial #1 is failed"), run.decision
