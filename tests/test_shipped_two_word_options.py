"""A compile command's option with its value in the next argument (user 54 F1): nvcc 13.0 takes
`-rdc true` as `-rdc=true`, so compileiq reads it so, and an ACF tuned from it is written (before,
the whole search ran and the ACF was then refused: "'-rdc' is applied but not an allowed base flag")."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.helpers import TINY_KERNEL, compile_commands_file, run_cli, tuned_from_command


@pytest.mark.parametrize(("given", "recorded", "flags"), [
    ("-rdc true", "-rdc=true", "-rdc=true"),
    ("--relocatable-device-code true", "--relocatable-device-code=true", "-rdc=true"),
    ("--diag-suppress 177", "--diag-suppress=177", "--diag-suppress=177"),
    ("--default-stream per-thread -diag-suppress 177", "-diag-suppress=177", "--default-stream=per-thread"),
])  # fmt: skip
def test_a_two_word_option_of_the_command_tunes_and_the_gate_passes(tmp_path: Path, given: str, recorded: str,
                                                                   flags: str) -> None:
    command = f"nvcc -arch=sm_90 {given} -c k.cu -o k.o"
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    subprocess.run(command.split(), cwd=tmp_path, check=True, capture_output=True)  # nvcc builds it
    out = tuned_from_command(tmp_path, command, source=TINY_KERNEL)
    fixed = {f["flag"]: f["applied"] for f in tomllib.loads(out.read_text())["baseline"]["fixed"]}
    assert fixed.get(recorded) is True, fixed
    every = run_cli(["flags", str(out), "--all"], cwd=tmp_path)
    assert every.returncode == 0 and flags in every.stdout.split(), every.describe()
    gated = run_cli(["gate", str(out), "--static", "--compile-commands", "compile_commands.json", "--json"],
                    cwd=tmp_path)
    assert gated.returncode == 0, gated.describe()
    assert json.loads(gated.stdout)["acfs"][0]["findings"] == [], gated.stdout


def test_a_two_word_option_off_the_allow_list_is_refused_before_any_build(tmp_path: Path) -> None:
    """nvcc takes `-ftemplate-depth 100`; it is no allowed base flag: refused in one line by `tune`
    before it builds anything (no study in the database), naming the compile command."""
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    compile_commands_file(tmp_path, "nvcc -arch=sm_90 -ftemplate-depth 100 -c k.cu -o k.o")
    done = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--workers", "local",
                    "--budget", "2", "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", "k.acf.toml"], cwd=tmp_path)
    assert done.returncode == 2, done.describe()
    [line] = done.stderr_lines
    assert "compile_commands.json" in line and "-ftemplate-depth" in line, line
    assert not (tmp_path / "k.acf.toml").exists()
