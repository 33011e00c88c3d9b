"""A compile command that sets one ptxas setting twice (user 54 F4): ptxas builds with the last
value (checked here on real cubins), so compileiq takes the last too and records the earlier one as
overridden, where it refused the command before. A setting whose winner is not checked is still
refused (tests/test_shipped_baseline.py)."""

from __future__ import annotations

import hashlib
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.helpers import LOOP_KERNEL, run_cli, tune_in


def _cubin(folder: Path, *ptxas: str) -> str:
    args = [a for option in ptxas for a in ("-Xptxas", option)]
    subprocess.run(["nvcc", "-arch=sm_90", "-cubin", *args, "k.cu", "-o", "k.cubin"], cwd=folder, check=True,
                   capture_output=True)
    return hashlib.sha256((folder / "k.cubin").read_bytes()).hexdigest()


@pytest.mark.parametrize(("options", "earlier", "last"), [
    (("-O1", "-O3"), "-Xptxas -O1", 3),
    (("-O3", "--opt-level=1"), "-Xptxas -O3", 1),
])  # fmt: skip
def test_a_ptxas_level_set_twice_is_the_last_one_as_ptxas_builds_it(tmp_path: Path, options: tuple[str, ...],
                                                                   earlier: str, last: int) -> None:
    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    assert _cubin(tmp_path, *options) == _cubin(tmp_path, f"-O{last}") != _cubin(tmp_path, options[0])
    command = " ".join(["nvcc", "-arch=sm_90", *(f"-Xptxas {o}" for o in options), "-c", "k.cu", "-o", "k.o"])
    (tmp_path / "compile_commands.json").write_text(
        f'[{{"directory": "{tmp_path}", "command": "{command}", "file": "k.cu"}}]')
    done = tune_in(tmp_path, "--compile-commands", "compile_commands.json")
    assert done.returncode == 0, done.describe()
    assert f"{earlier} (overridden by the later -Xptxas {options[1]}: ptxas takes the last" in done.output, done.output
    baseline = tomllib.loads((tmp_path / "k.acf.toml").read_text())["baseline"]
    assert [s["value"] for s in baseline["searched"] if s["setting"] == "ptxas.opt_level"] == [last], baseline
    assert {f["flag"]: f["applied"] for f in baseline["fixed"]}.get(earlier) is False, baseline
    gated = run_cli(["gate", "k.acf.toml", "--static", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert gated.returncode == 0, gated.describe()
