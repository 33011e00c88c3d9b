"""A study row relabelled in a shared database (its evaluator and objective edited) never makes a
view show static scores as GPU runtimes, or timings as static scores: every view of the study
refuses in one line (its rows kept), the study list leaves it out with that line and lists the
others, and `tune` does not continue it. Real nvcc/ptxas, real SQLite (and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from helpers import run_cli, tiny_kernel_file

from compileiq.core.records import RUNTIME_KIND
from compileiq.store.schema import studies, trials_table


def _tuned(folder: Path, url: str) -> None:
    """Two static studies of one kernel: 1 (static), 2 (registers)."""
    tiny_kernel_file(folder, "k.cu")
    for objective in ("static", "registers"):
        result = run_cli(["tune", "k.cu", "--objective", objective, "--budget", "2", "--workers", "local",
                          "--db", url, "--out", f"{objective}.acf.toml"], cwd=folder)
        assert result.returncode == 0, result.describe()


def _rows(url: str) -> list[tuple[object, ...]]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        found = [tuple(row) for row in conn.execute(sa.select(trials_table).order_by(trials_table.c.id))]
    engine.dispose()
    return found


def _edit(url: str, statement: sa.Executable) -> None:
    """What another member of a team database could do."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(statement)
    engine.dispose()


def _refused_in_every_view(folder: Path, url: str) -> None:
    before = _rows(url)
    report = str(folder / "r.html")
    for view in (["show", "1"], ["show", "1", "--json"], ["report", "1", "--format", "md", "--out", "-"],
                 ["report", "1", "--format", "html", "--out", report]):
        result = run_cli([*view, "--db", url], cwd=folder)
        assert result.returncode != 0, result.describe()
        assert len(result.stderr_lines) == 1 and "is inconsistent: its row says evaluator" in result.stderr, \
            result.describe()
        assert "runtime" not in result.stdout.lower() and "Traceback" not in result.output
    assert not Path(report).exists()
    listed = run_cli(["show", "--db", url], cwd=folder)
    assert listed.returncode == 0, listed.describe()
    assert "k-registers" in listed.stdout and "k-static" not in listed.stdout  # the others still listed
    assert "skipped study 1" in listed.stderr and "inconsistent" in listed.stderr
    assert _rows(url) == before  # nothing recorded is lost or changed


def test_a_static_study_relabelled_time_is_shown_by_no_view_as_a_runtime(tmp_path: Path, store_url: str) -> None:
    _tuned(tmp_path, store_url)
    _edit(store_url, studies.update().where(studies.c.id == 1).values(evaluator="time", objective="time"))
    _refused_in_every_view(tmp_path, store_url)
    assert "made for another evaluator" in _continued(tmp_path, store_url)


def _continued(folder: Path, url: str) -> str:
    """`tune` continuing study 1 by its name: refused in one line, no ACF written; that line."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        name = conn.execute(sa.select(studies.c.name).where(studies.c.id == 1)).scalar_one()
    engine.dispose()
    again = run_cli(["tune", "k.cu", "--budget", "2", "--workers", "local", "--db", url,
                     "--study", name, "--out", "again.acf.toml"], cwd=folder)
    assert again.returncode != 0 and again.stderr_lines[-1].startswith("error:"), again.describe()
    assert "Traceback" not in again.output and not (folder / "again.acf.toml").exists()
    return again.stderr_lines[-1]


def test_a_timed_study_relabelled_static_is_shown_by_no_view_as_static_scores(tmp_path: Path,
                                                                              store_url: str) -> None:
    """Study 1's trials made timings (as a GPU run records them) under its static row: the reverse."""
    _tuned(tmp_path, store_url)
    engine = sa.create_engine(store_url)
    with engine.begin() as conn:
        for row in conn.execute(sa.select(trials_table).where(trials_table.c.study_id == 1)).mappings().all():
            timing = {**row["metrics"], "kind": RUNTIME_KIND, "median_ms": 0.5, "samples": 10}
            conn.execute(trials_table.update().where(trials_table.c.id == row["id"]).values(metrics=timing))
    engine.dispose()
    _refused_in_every_view(tmp_path, store_url)
    assert "is inconsistent" in _continued(tmp_path, store_url)
