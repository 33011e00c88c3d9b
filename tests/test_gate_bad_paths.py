"""Paths in an ACF or a compile command that the system refuses (a name past 255 bytes:
ENAMETOOLONG) are that ACF's bad input or finding, never a traceback that stops the gate over the
other ACFs. `Path.is_file`/`is_dir` raise OSError for such a name, which an ACF's kernel path or
a compile command's -I folder may hold: the gate stopped with a traceback and gave no verdict."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import TINY_KERNEL, run_cli

LONG = "a" * 300  # one path component past NAME_MAX (255)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    """k/fir.cu and its ACF, tuned from its compile command (the ACF records the database)."""
    workspace = tmp_path_factory.mktemp("bad-paths")
    (workspace / "k").mkdir()
    (workspace / "k" / "fir.cu").write_text(TINY_KERNEL.replace("scale", "fir"))
    _database(workspace / "k", "nvcc -O3 -arch=sm_90 -c fir.cu -o fir.o")
    tuned = run_cli(["tune", "k/fir.cu", "--objective", "spills", "--budget", "3", "--workers", "local",
                     "--db", f"sqlite:///{workspace}/t.db", "--out", "k/fir.acf.toml", "--compile-commands",
                     "k/compile_commands.json", "--only", "ptxas.maxrregcount"], cwd=workspace)
    assert tuned.returncode == 0, tuned.describe()
    return workspace


def _database(folder: Path, command: str) -> None:
    entry = {"directory": str(folder), "file": "fir.cu", "command": command}
    (folder / "compile_commands.json").write_text(json.dumps([entry]))


def _copy(tuned: Path, tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    return workspace


def test_an_acf_whose_kernel_path_is_too_long_is_its_error_row_beside_the_others(tuned, tmp_path):
    workspace = _copy(tuned, tmp_path)
    (workspace / "k2").mkdir()
    text = (workspace / "k" / "fir.acf.toml").read_text()
    assert 'path = "fir.cu"' in text and 'source = "fir.cu"' in text
    (workspace / "k2" / "fir.acf.toml").write_text(text.replace('path = "fir.cu"', f'path = "{LONG}/fir.cu"'))
    result = run_cli(["gate", "k2/fir.acf.toml", "k/fir.acf.toml", "--static", "--json"], cwd=workspace, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.output, result.describe()
    rows = {row["acf"]: row for row in json.loads(result.stdout)["acfs"]}
    assert (rows["k2/fir.acf.toml"]["verdict"], rows["k/fir.acf.toml"]["verdict"]) == ("ERROR", "PASS"), rows
    [finding] = rows["k2/fir.acf.toml"]["findings"]
    assert finding["rule"] == "bad-input" and "kernel source not found" in finding["message"], finding


def test_an_acf_whose_database_path_is_too_long_is_held_to_what_it_records(tuned, tmp_path):
    workspace = _copy(tuned, tmp_path)
    (workspace / "k3").mkdir()
    shutil.copy(workspace / "k" / "fir.cu", workspace / "k3" / "fir.cu")
    text = (workspace / "k" / "fir.acf.toml").read_text()
    assert 'path = "compile_commands.json"' in text
    (workspace / "k3" / "fir.acf.toml").write_text(
        text.replace('path = "compile_commands.json"', f'path = "{LONG}/compile_commands.json"'))
    result = run_cli(["gate", "k3/fir.acf.toml", "k/fir.acf.toml", "--static", "--json"], cwd=workspace, timeout=120)
    assert result.returncode == 0 and "Traceback" not in result.output, result.describe()
    rows = {row["acf"]: row for row in json.loads(result.stdout)["acfs"]}
    assert (rows["k3/fir.acf.toml"]["verdict"], rows["k/fir.acf.toml"]["verdict"]) == ("PASS", "PASS"), rows
    assert [f["rule"] for f in rows["k3/fir.acf.toml"]["findings"]] == ["stale-settings"], rows


def test_a_compile_command_with_a_too_long_include_folder_is_a_finding_not_a_traceback(tuned, tmp_path):
    workspace = _copy(tuned, tmp_path)
    _database(workspace / "k", f"nvcc -O3 -I{LONG} -arch=sm_90 -c fir.cu -o fir.o")
    result = run_cli(["gate", "k/fir.acf.toml", "--static", "--json"], cwd=workspace, timeout=120)
    assert "Traceback" not in result.output, result.describe()
    [row] = json.loads(result.stdout)["acfs"]
    [finding] = row["findings"]
    assert finding["rule"] == "stale-settings" and "cannot be read now" in finding["message"], finding
    assert "no command for fir.cu that compileiq reads" in finding["message"], finding  # none of its tokens quoted
    assert LONG not in result.output, finding


def test_a_too_long_compile_commands_path_is_one_line(tuned, tmp_path):
    workspace = _copy(tuned, tmp_path)
    result = run_cli(["gate", "k/fir.acf.toml", "--static", "--compile-commands", f"{LONG}/compile_commands.json"],
                     cwd=workspace, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.output, result.describe()
    assert result.stderr_lines == [f"error: --compile-commands {LONG}/compile_commands.json: file not found"], \
        result.describe()


@pytest.mark.parametrize("where", [".", "k"])
def test_an_acf_is_never_gated_against_a_kernel_found_from_the_folder_the_gate_runs_in(tuned, tmp_path, where):
    """user52 #3: an ACF whose `[kernel] path` ("k/fir.cu") is not beside it, gated from a folder
    where that path leads to a file (another checkout, an older copy), was checked against that
    file and passed, while its compilation database was read from the ACF's folder; from any other
    folder it was bad input. Now the kernel is found only from the ACF's folder (file-formats.md),
    wherever the gate runs: else the one line, and --kernel names it."""
    workspace = _copy(tuned, tmp_path)
    (workspace / "moved").mkdir()
    text = (workspace / "k" / "fir.acf.toml").read_text()
    assert 'path = "fir.cu"' in text
    (workspace / "moved" / "fir.acf.toml").write_text(text.replace('path = "fir.cu"', 'path = "k/fir.cu"'))
    acf = str(Path("..") / "moved" / "fir.acf.toml") if where == "k" else "moved/fir.acf.toml"
    result = run_cli(["gate", acf, "--static"], cwd=workspace / where, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.output, result.describe()
    last = result.stderr.strip().splitlines()[-1]
    assert "kernel source not found" in last and last.endswith("pass --kernel PATH"), result.describe()
    folder = Path(acf).parent
    assert f"(tried {folder / 'k' / 'fir.cu'}, {folder / 'fir.cu'});" in last, result.describe()  # from its folder only
    kernel = "fir.cu" if where == "k" else "k/fir.cu"
    named = run_cli(["gate", acf, "--static", "--kernel", kernel], cwd=workspace / where, timeout=120)
    assert named.returncode == 0, named.describe()
