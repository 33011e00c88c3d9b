"""What an output option may replace (red team 51, findings 1 and 3).

`tune --out X --force` wrote the ACF over X whatever it was: the run's own --db database (every
study in it lost, this run's trials too), another database, the kernel's source, its tune.toml,
the --compile-commands file. --force replaces an ACF that holds more evidence, never data: each of
those is refused in one line, with or without --force, and the refusal no longer offers --force.
`report -o`, `gate --markdown` and `gate --junit` wrote in place: through a second hard link to
tune.toml they overwrote it. They now write as the ACF is written, a temporary file and a rename.

One real tune of a tiny kernel (budget 1) gives the database and the ACF; each test works on a copy.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from helpers import TINY_KERNEL, CliResult, run_cli, workspace_copy

import compileiq
from compileiq.core.errors import UsageError


def _tune(*extra: str, db: str = "t.db") -> list[str]:
    return ["tune", "k/scale.cu", "--budget", "1", "--workers", "local", "--no-simplify", "--objective", "instructions",
            "--only", "ptxas.opt_level", "--db", f"sqlite:///{db}", *extra]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    workspace = tmp_path_factory.mktemp("outputs")
    (workspace / "k").mkdir()
    (workspace / "k" / "scale.cu").write_text(TINY_KERNEL)
    (workspace / "k" / "tune.toml").write_text('arch = "sm_90"\n')
    done = run_cli(_tune("--out", "k.acf.toml"), cwd=workspace)
    assert done.returncode == 0, done.describe()
    return workspace


@pytest.fixture()
def workspace(tuned, tmp_path) -> Path:
    return workspace_copy(tuned, tmp_path)


def _trials(database: Path) -> int:
    with sqlite3.connect(database) as conn:
        return conn.execute("select count(*) from trials").fetchone()[0]


def _refused(done: CliResult, *says: str) -> None:
    assert done.returncode == 2, done.describe()
    assert len(done.stderr_lines) == 1 and "Traceback" not in done.output, done.describe()
    line = done.stderr_lines[0]
    assert line.startswith("error: not replacing ") and "--force" not in line and "elsewhere with --out" in line, line
    for text in says:
        assert text in line, line


@pytest.mark.parametrize(("out", "says"), [
    ("t.db", "it is this run's database (--db)"),
    ("other.db", "it is an SQLite database, not an ACF"),
    ("k/scale.cu", "it is this run's kernel source"),
    ("k/tune.toml", "it is this run's tune.toml"),
    ("notes.toml", "it is a .toml file, not an ACF"),
])
def test_force_never_replaces_a_database_or_an_input(workspace, out: str, says: str) -> None:
    shutil.copy(workspace / "t.db", workspace / "other.db")
    (workspace / "notes.toml").write_text("notes = 'mine'\n")
    before = {name: (workspace / name).read_bytes() for name in ("t.db", "other.db", "k/scale.cu", "k/tune.toml")}
    trials = _trials(workspace / "t.db")
    for force in ((), ("--force",)):
        _refused(run_cli(_tune("--out", out, *force), cwd=workspace), says)
    assert {name: (workspace / name).read_bytes() for name in before} == before
    assert _trials(workspace / "t.db") == trials
    assert (workspace / "notes.toml").read_text() == "notes = 'mine'\n"


def test_force_never_replaces_the_compile_commands_file_nor_a_database_not_yet_created(workspace) -> None:
    """The run's --db file before the run creates it: the same path, refused before anything is made."""
    commands = workspace / "compile_commands.json"
    commands.write_text(json.dumps([{"directory": str(workspace / "k"), "file": "scale.cu",
                                     "arguments": ["nvcc", "-arch=sm_90", "-c", "scale.cu", "-o", "scale.o"]}]))
    before = commands.read_bytes()
    _refused(run_cli(_tune("--compile-commands", str(commands), "--out", str(commands), "--force"), cwd=workspace),
             "it is this run's compilation database (--compile-commands)")
    assert commands.read_bytes() == before
    _refused(run_cli(_tune("--out", "new.db", "--force", db="new.db"), cwd=workspace), "it is this run's database (--db)")
    assert not (workspace / "new.db").exists()


def test_force_still_replaces_an_acf_or_a_file_of_no_input_kind(workspace) -> None:
    (workspace / "notes.txt").write_text("mine\n")
    done = run_cli(_tune("--out", "notes.txt"), cwd=workspace)
    assert done.returncode == 2 and "without --force (force=True in Python)" in done.stderr, done.describe()
    for out in ("notes.txt", "k.acf.toml"):
        done = run_cli(_tune("--out", out, "--force", "--study", "again"), cwd=workspace)
        assert done.returncode == 0, done.describe()
        assert (workspace / out).read_text().startswith("# compileiq advanced-control file")


def test_the_python_api_refuses_a_database_even_with_force(workspace) -> None:
    before = (workspace / "t.db").read_bytes()
    with pytest.raises(UsageError, match=r"^not replacing .*t\.db: it is this run's database \(db\); write this ACF "
                                         r"elsewhere with --out$"):
        compileiq.tune(workspace / "k" / "scale.cu", budget=1, workers="local", db=f"sqlite:///{workspace / 't.db'}",
                       out=workspace / "t.db", force=True)
    assert (workspace / "t.db").read_bytes() == before


@pytest.mark.parametrize("args", [
    ["report", "1", "-o", "notes.html"],
    ["report", "1", "-o", "notes.md", "--format", "md"],
    ["gate", "k.acf.toml", "--markdown", "summary.md"],
    ["gate", "k.acf.toml", "--junit", "junit.xml"],
])
def test_a_report_through_a_hard_link_leaves_the_other_link_alone(workspace, args: list[str]) -> None:
    """The report is written as a new file (temporary file and rename): the name's other link,
    an earlier report kept as notes.txt here, keeps its text; a report replaced keeps its mode. (A
    link to one of the gate's inputs, tune.toml, is refused: test_output_sniff.)"""
    command = [*args, "--db", "sqlite:///t.db"] if args[0] == "report" else args
    toml, output = workspace / "notes.txt", workspace / args[3]
    assert run_cli(command, cwd=workspace).returncode == 0
    output.rename(toml)  # an earlier report: only an output of its own kind is replaced
    before = toml.read_bytes()
    os.link(toml, output)
    output.chmod(0o640)
    done = run_cli(command, cwd=workspace)
    assert done.returncode == 0, done.describe()
    assert toml.read_bytes() == before and toml.stat().st_nlink == 1
    assert not os.path.samefile(output, toml) and output.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in workspace.iterdir() if p.name.startswith(".")] == []  # no temporary file left
