"""An ACF's `[args] frontend` and `[args] ptxas` (documented as the nvcc -ptx and direct ptxas
arguments) were never checked (red54 F3): filled with `-O0`, `$(touch x)` or `--run`, `flags`
printed the controls' flags silently and `gate` passed the file a reviewer read otherwise. They are
held to the controls like `args.argv`: one line naming the key, from every command that reads the ACF."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import tomli_w
from helpers import run_cli, tuned_quickly, workspace_copy

EDITS = {
    "frontend": lambda args: args["frontend"].extend(["-Xcompiler=-include,/etc/passwd", "--run"]),
    "ptxas": lambda args: args.update(ptxas=["-O0", "$(touch x)", "--dont-merge-basicblocks"]),
    "frontend-emptied": lambda args: args.update(frontend=[]),
    "frontend-not-strings": lambda args: args.update(frontend=[1, 2]),
}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    return tuned_quickly(tmp_path_factory.mktemp("stageargs"), "#ifndef BLOCK\n#define BLOCK 1\n#endif\n"
                         "__global__ void k(float* p) { p[threadIdx.x] = BLOCK; }\n", "define.BLOCK", 2,
                         "[tune.defines]\nBLOCK = [1, 2]\n")


def test_an_acf_as_tune_wrote_it_still_reads(tuned) -> None:
    args = tomllib.loads((tuned / "k.acf.toml").read_text())["args"]
    assert args["frontend"] == args["argv"] == [f"-DBLOCK={args['argv'][0][-1]}"], args  # emptied is an edit too
    for command in (["flags", "k.acf.toml", "--all"], ["gate", "k.acf.toml", "--static"]):
        assert run_cli(command, cwd=tuned).returncode == 0, command


@pytest.mark.parametrize("name", list(EDITS))
def test_hand_edited_stage_args_are_refused_naming_the_key(tuned, tmp_path, name: str) -> None:
    workspace = workspace_copy(tuned, tmp_path)
    document = tomllib.loads((workspace / "k.acf.toml").read_text())
    EDITS[name](document["args"])
    (workspace / "k.acf.toml").write_text(tomli_w.dumps(document))
    key = f"args.{name.split('-')[0]}"
    for command in (["flags", "k.acf.toml", "--all"], ["flags", "k.acf.toml", "--stage", "ptxas"],
                    ["gate", "k.acf.toml", "--static"]):
        done = run_cli(command, cwd=workspace)
        assert done.returncode == 2, done.describe()
        assert "gate ERROR" in done.stdout if command[0] == "gate" else done.stdout == "", done.describe()
        assert len(done.stderr_lines) == 1 and "Traceback" not in done.output, done.describe()
        assert key in done.stderr_lines[0], done.describe()
    assert not (workspace / "x").exists()
