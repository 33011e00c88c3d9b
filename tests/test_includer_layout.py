"""Rodinia's layout: the build compiles backprop_cuda.cu, which is only `#include "backprop_cuda_kernel.cu"`;
no compile command names the kernel's own file. Tuning it from the database says which entry includes
it and how to go on, and the gate's missing command is a finding in its reports, not a stderr note."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import LOOP_KERNEL, run_cli, tune_in

KERNEL = "backprop_cuda_kernel.cu"
COMMAND = "nvcc -O3 -use_fast_math -Xptxas -O1 -arch=sm_90 -c backprop_cuda.cu"


def _rodinia(folder: Path) -> None:
    (folder / KERNEL).write_text(LOOP_KERNEL)
    (folder / "backprop_cuda.cu").write_text(f'#include <stdio.h>\n#include "{KERNEL}"\nint main() {{ return 0; }}\n')
    (folder / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(folder), "command": COMMAND, "file": "backprop_cuda.cu"}]))


def test_tuning_a_kernel_only_its_includer_compiles_names_the_includer(tmp_path: Path) -> None:
    """userfix 2: `tune backprop_cuda_kernel.cu --compile-commands ...` failed "no compile command for
    backprop_cuda_kernel.cu" with no hint that backprop_cuda.cu includes it."""
    _rodinia(tmp_path)
    done = tune_in(tmp_path, "--compile-commands", "compile_commands.json", kernel=KERNEL)
    assert done.returncode == 2 and "Traceback" not in done.output, done.describe()
    [line] = done.stderr_lines
    assert f"no compile command for {KERNEL}; backprop_cuda.cu (entry 1) #includes it" in line, line
    assert "tune backprop_cuda.cu with --compile-commands" in line and '"file" is backprop_cuda_kernel.cu' in line, line


def test_the_gate_reports_a_database_with_no_command_for_the_kernel_as_a_finding(tmp_path: Path) -> None:
    """userfix 2: an ACF tuned from the compiler defaults, gated --static with --compile-commands whose
    only command (with -Xptxas -O1 and fast math) builds the kernel through its includer, passed with a
    stderr note alone: the table, --json, markdown and JUnit said nothing of the unchecked build."""
    _rodinia(tmp_path)
    (tmp_path / "compile_commands.json").rename(tmp_path / "ships.json")
    tuned = tune_in(tmp_path, kernel=KERNEL)
    assert tuned.returncode == 0, tuned.describe()
    gated = run_cli(["gate", "k.acf.toml", "--static", "--compile-commands", "ships.json", "--json",
                     "--markdown", "gate.md", "--junit", "gate.xml"], cwd=tmp_path)
    assert gated.returncode == 0, gated.describe()  # a warning: the ACF itself still checks out
    [row] = json.loads(gated.stdout)["acfs"]
    [finding] = [f for f in row["findings"] if f"no compile command for {KERNEL}" in f["message"]]
    assert (finding["rule"], finding["severity"], row["verdict"]) == ("stale-settings", "warn", "PASS"), row
    assert "backprop_cuda.cu (entry 1) #includes it" in finding["message"], finding
    assert f"no compile command for {KERNEL}" in (tmp_path / "gate.md").read_text()
    assert f"no compile command for {KERNEL}" in (tmp_path / "gate.xml").read_text()
    table = run_cli(["gate", "k.acf.toml", "--static", "--compile-commands", "ships.json"], cwd=tmp_path)
    assert "stale-settings" in table.stdout, table.describe()


HOTSPOT_FRAGMENT = """\
double now() { struct timeval tv; gettimeofday(&tv, NULL); return tv.tv_sec; }
__global__ void hot(float* y) { y[threadIdx.x] += 1.f; }
"""


def _hotspot(folder: Path) -> None:
    """Rodinia hotspot3D's layout: opt1.cu uses gettimeofday, which 3D.cu's <sys/time.h> declares
    before it is `#include "opt1.cu"`: the fragment does not build alone."""
    (folder / "opt1.cu").write_text(HOTSPOT_FRAGMENT)
    (folder / "3D.cu").write_text('#include <sys/time.h>\n#include "opt1.cu"\nint main() { return 0; }\n')


def test_a_fragment_that_builds_only_in_its_includer_names_the_includer(tmp_path: Path) -> None:
    """userfix: `tune opt1.cu` failed "does not build with default settings: ... gettimeofday is
    undefined" with no hint that 3D.cu includes it; from a hand-written entry for opt1.cu (docs/ci.md's
    recipe) it also said "default settings" where the baseline was that command."""
    _hotspot(tmp_path)
    done = tune_in(tmp_path, kernel="opt1.cu")
    assert done.returncode != 0 and "Traceback" not in done.output, done.describe()
    [line] = [x for x in done.stderr_lines if x.startswith("error:")]
    assert "opt1.cu does not build with default settings" in line and "gettimeofday" in line, line
    assert "; 3D.cu #includes opt1.cu" in line and "tune 3D.cu" in line and "docs/ci.md" in line, line
    (tmp_path / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(tmp_path), "command": "nvcc opt1.cu -o 3D", "file": "opt1.cu"}]))
    (tmp_path / "t.db").unlink()
    by_hand = tune_in(tmp_path, "--compile-commands", "compile_commands.json", kernel="opt1.cu")
    [line] = [x for x in by_hand.stderr_lines if x.startswith("error:")]
    assert "opt1.cu does not build with your build (compile_commands.json)" in line, line
    assert "; 3D.cu #includes opt1.cu" in line, line
    tuned = tune_in(tmp_path, kernel="3D.cu")  # the hint's way works
    assert tuned.returncode == 0, tuned.describe()
