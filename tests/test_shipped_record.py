"""What the views say of a build as shipped (user 49): a baseline that is the project's own build is
never called "compiler defaults", and the ACF accounts for every token of the shipped command."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from tests.helpers import LOOP_KERNEL, run_cli

CMAKE_COMMAND = ("nvcc -forward-unknown-to-host-compiler -O3 -DNDEBUG -arch=sm_90 -maxrregcount=64 -lineinfo "
                 "-x cu -c k.cu -o k.o")


def _project(tmp_path: Path, command: str) -> None:
    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    (tmp_path / "compile_commands.json").write_text(
        json.dumps([{"directory": str(tmp_path), "command": command, "file": "k.cu"}]))


def _tune(tmp_path: Path, out: str, *args: str) -> str:
    done = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--workers", "local",
                    "--budget", "3", "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", str(tmp_path / out), *args],
                   cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    return done.stdout + done.stderr


def test_a_choice_that_keeps_the_shipped_build_is_not_called_the_compiler_defaults(tmp_path: Path) -> None:
    """user49 F4: tune printed "best flags: (compiler defaults)" and `report --compare` "Defaults." for
    studies whose baseline is the shipped build (-maxrregcount, -lineinfo, -DNDEBUG): both now say
    what the ACF's vs_defaults.against says."""
    _project(tmp_path, CMAKE_COMMAND)
    first = _tune(tmp_path, "a.acf.toml")
    against = tomllib.loads((tmp_path / "a.acf.toml").read_text())["evidence"]["vs_defaults"]["against"]
    assert against == "your build as shipped (compile_commands.json)"
    assert f"best flags: ({against})" in first and "(compiler defaults)" not in first, first
    _project(tmp_path, CMAKE_COMMAND.replace("-maxrregcount=64", "-maxrregcount=128"))  # another shipped build
    _tune(tmp_path, "b.acf.toml")
    db = f"sqlite:///{tmp_path / 't.db'}"
    names = [tomllib.loads((tmp_path / f"{x}.acf.toml").read_text())["provenance"]["study"] for x in "ab"]
    assert names[0] != names[1]
    for fmt in ("md", "html"):
        page = run_cli(["report", "--compare", *names, "--db", db, "--format", fmt, "-o", f"c.{fmt}"], cwd=tmp_path)
        text = (tmp_path / f"c.{fmt}").read_text()
        assert page.returncode == 0, page.describe()
        assert f"Both choices keep their baseline: {against}." in text, text
        assert "Defaults." not in text and "both chose the compiler defaults" not in text
