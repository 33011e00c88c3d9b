"""A new user's first hour: finding the parameters, the names --only takes, the version, usage."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parent.parent


def test_space_lists_every_parameter_with_values_default_risk_and_help(tmp_path: Path) -> None:
    result = run_cli(["space", "--json"], cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    for path in (ROOT / "search_spaces").glob("*-13.0.toml"):
        for parameter in tomllib.loads(path.read_text())["parameter"]:
            row = rows[parameter["name"]]
            assert row["default"] == parameter["default"] and row["risk"] == parameter["risk"]
            assert row["help"] == parameter["help"]
    assert rows["ptxas.maxrregcount"]["values"][:2] == ["default", 24]


def test_space_of_a_kernel_adds_its_macros(tmp_path: Path) -> None:
    result = run_cli(["space", str(ROOT / "kernels/reduction/reduction.cu")], cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    assert "define.BLOCK" in result.stdout and "ptxas.maxrregcount" in result.stdout


@pytest.mark.parametrize("given, suggested", [
    ("maxrregcount", "did you mean ptxas.maxrregcount?"),
    ("ptxas.maxregcount", "did you mean ptxas.maxrregcount"),
    ("opt_level", "did you mean ptxas.opt_level?"),
    ("zzz", "`compileiq space` lists the parameters"),
])
def test_an_unknown_only_name_suggests_the_right_one(tmp_path: Path, given: str, suggested: str) -> None:
    result = run_cli(["tune", str(ROOT / "kernels/reduction/reduction.cu"), "--only", given, "--workers",
                      "local", "--db", f"sqlite:///{tmp_path / 'db.sqlite'}"], cwd=tmp_path)
    assert result.returncode == 2, result.describe()
    assert result.stderr_lines == [result.stderr_lines[-1]] and suggested in result.stderr


def test_only_takes_a_macro_by_its_define_name(tmp_path: Path) -> None:
    out = tmp_path / "reduction.acf.toml"
    result = run_cli(["tune", str(ROOT / "kernels/reduction/reduction.cu"), "--only", "define.BLOCK",
                      "--strategy", "exhaustive", "--budget", "10", "--workers", "local", "--objective", "static",
                      "--db", f"sqlite:///{tmp_path / 'db.sqlite'}", "--out", str(out), "--json"], cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    study = json.loads(result.stdout)["study"]["name"]
    shown = run_cli(["show", study, "--top", "100", "--json", "--db", f"sqlite:///{tmp_path / 'db.sqlite'}"],
                    cwd=tmp_path)
    assert shown.returncode == 0, shown.describe()
    configs = [t["config"] for t in json.loads(shown.stdout)["trials"]]
    assert {tuple(sorted(c)) for c in configs} == {("define.BLOCK",)}
    assert len({c["define.BLOCK"] for c in configs}) > 1


def test_version_flag_and_command_agree(tmp_path: Path) -> None:
    flag, command = run_cli(["--version"], cwd=tmp_path), run_cli(["version"], cwd=tmp_path)
    assert flag.returncode == command.returncode == 0
    assert flag.stdout.strip() == command.stdout.strip() != ""


def test_tune_without_a_kernel_prints_usage_and_fails(tmp_path: Path) -> None:
    result = run_cli(["tune"], cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.output
    assert "Missing argument" in result.stderr or "Usage" in result.output
