"""A study row that holds the name compileiq derives for a build (`<kernel>-<objective>-<8 hex>`)
under another identity (red52, finding 6): forged by anyone who can write to a team database, or
made by another build. Without --study, `tune` moves to a longer hash of the same identity, which
every rerun of the build derives again, with one note; it used to stop every tune of the kernel
until --study was given. With --study naming it: one error line, as before. Real nvcc/ptxas,
through the CLI, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import sqlalchemy as sa
from helpers import TINY_KERNEL, CliResult, run_cli

TUNE = ["tune", "scale.cu", "--workers", "local", "--budget", "2", "--batch-size", "2", "--no-simplify",
        "--only", "ptxas.opt_level,ptxas.register_usage_level", "--out", "scale.acf.toml", "--force", "--json"]  # fmt: skip
HELD = "held by a study of another kernel source or settings"


def _derived_name(folder: Path) -> str:
    """The name compileiq derives for the build: as a tune into a database of its own records it."""
    done = run_cli([*TUNE, "--db", f"sqlite:///{folder}/scratch.db", "--out", "scratch.acf.toml"], cwd=folder)
    assert done.returncode == 0, done.describe()
    name = json.loads(done.stdout)["study"]["name"]
    assert re.fullmatch(r"scale-static-[0-9a-f]{8}", name), name
    return str(name)


def _squat(folder: Path, url: str, name: str) -> None:
    """A studies row named `name` with another identity, written straight into the database."""
    upgraded = run_cli(["db", "upgrade", "--db", url], cwd=folder)
    assert upgraded.returncode == 0, upgraded.describe()
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO studies (name, kernel, source_sha256, space_id, space_sha256, toolchain, arch, evaluator,"
                " objective, next_number) VALUES (:name, 'scale', '00', 'nvcc-13.0+ptxas-13.0', '00', 'x', 'sm_80',"
                " 'static', 'static', 0)"), {"name": name})  # fmt: skip
    finally:
        engine.dispose()


def _another_build(url: str, name: str) -> None:
    """The study named `name` made another build's: its identity changed in place."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE studies SET arch = 'sm_80' WHERE name = :name"), {"name": name})
    finally:
        engine.dispose()


def _tune(folder: Path, url: str, *options: str) -> CliResult:
    done = run_cli([*TUNE, "--db", url, *options], cwd=folder)
    assert done.returncode == 0, done.describe()
    assert "Traceback" not in done.output
    return done


def _studies(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [row[0] for row in conn.execute(sa.text("SELECT name FROM studies ORDER BY id"))]
    finally:
        engine.dispose()


def test_a_squatted_default_name_moves_the_study_to_a_longer_hash(store_url: str, tmp_path: Path) -> None:
    (tmp_path / "scale.cu").write_text(TINY_KERNEL)
    default = _derived_name(tmp_path)
    _squat(tmp_path, store_url, default)
    first = _tune(tmp_path, store_url)
    name = json.loads(first.stdout)["study"]["name"]
    assert re.fullmatch(rf"{default}[0-9a-f]{{8}}", name), first.describe()  # the same hash, 16 digits of it
    notes = [line for line in first.output.splitlines() if HELD in line]
    said = f"note: study {name}: this build's default study name {default} is {HELD} (a shared database's rows are untrusted)"
    assert notes == [said], first.describe()
    assert f'study = "{name}"' in (tmp_path / "scale.acf.toml").read_text()
    again = _tune(tmp_path, store_url, "--budget", "3", "--resume")  # the same build: the same study
    assert f"study {name} (#2): 2/3 trials already recorded" in again.output, again.describe()
    assert _studies(store_url) == [default, name]
    shown = run_cli(["show", name, "--db", store_url], cwd=tmp_path)
    assert shown.returncode == 0 and name in shown.output, shown.describe()


def test_a_study_named_with_study_that_another_build_holds_is_still_one_error_line(store_url: str,
                                                                                   tmp_path: Path) -> None:
    (tmp_path / "scale.cu").write_text(TINY_KERNEL)
    default = _derived_name(tmp_path)
    _squat(tmp_path, store_url, default)
    done = run_cli([*TUNE, "--db", store_url, "--study", default], cwd=tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.output, done.describe()
    assert len(done.stderr_lines) == 1, done.describe()
    assert done.stderr_lines[0].startswith(f"error: study '{default}' was made for another kernel source or tune.toml")
    assert done.stderr_lines[0].endswith("choose another study name"), done.describe()
    assert _studies(store_url) == [default]


def test_every_derived_name_held_is_one_error_line_naming_study(tmp_path: Path) -> None:
    (tmp_path / "scale.cu").write_text(TINY_KERNEL)
    default = _derived_name(tmp_path)
    url = f"sqlite:///{tmp_path}/t.db"
    _squat(tmp_path, url, default)
    longer = json.loads(_tune(tmp_path, url).stdout)["study"]["name"]
    _another_build(url, longer)
    full = json.loads(_tune(tmp_path, url).stdout)["study"]["name"]  # the third: all 64 digits
    assert re.fullmatch(rf"{longer}[0-9a-f]{{48}}", full)
    _another_build(url, full)
    done = run_cli([*TUNE, "--db", url], cwd=tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.output, done.describe()
    said = (f"error: studies of another kernel source or settings hold every name derived for this build "
            f"({default}, {longer}, {full}); choose a study name with --study")
    assert done.stderr_lines == [said], done.describe()


def test_the_gates_retune_line_of_a_moved_study_derives_its_name_again(tmp_path: Path) -> None:
    """The gate's re-tune line names no --study for a derived name, the longer one included: the
    re-tune derives its study as any tune does (it used to append a hash to the 16 digits)."""
    (tmp_path / "scale.cu").write_text(TINY_KERNEL)
    url = f"sqlite:///{tmp_path}/t.db"
    _squat(tmp_path, url, _derived_name(tmp_path))
    _tune(tmp_path, url)
    (tmp_path / "scale.cu").write_text(TINY_KERNEL.replace("+ 1.0f", "+ 2.0f"))  # stale: a re-tune is due
    gate = run_cli(["gate", "scale.acf.toml", "--static"], cwd=tmp_path)
    lines = [line.split("re-tune: ", 1)[1] for line in gate.stdout.splitlines() if "re-tune: " in line]
    assert lines, gate.describe()
    argv = shlex.split(lines[0])
    assert not any(word.startswith("--study") for word in argv), lines[0]
