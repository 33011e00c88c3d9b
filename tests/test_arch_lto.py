"""Arch flags that name lto_XY (`-code=lto_90`, `-arch=lto_90`, `-gencode ...,code=lto_90`) make
link-time-optimisation IR, as -dlto does (nvcc 13.0 --dryrun: fatbinary image kind=nvvm alone):
refused in one line by space, tune and the gate, never tuned as plain sm_90."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import LOOP_KERNEL, compile_commands_file, run_cli, tune_in, tuned_from_command

_WHY = "names lto_XY, which makes link-time-optimisation IR as -dlto does"


@pytest.mark.parametrize("arch_flags", [
    "-arch=compute_90 -code=lto_90",
    "-arch=lto_90",
    "-gencode arch=compute_90,code=lto_90",
    "--generate-code=arch=compute_90,code=[sm_90,lto_90]",
])
def test_an_lto_arch_is_refused_by_space_and_tune(tmp_path: Path, arch_flags: str) -> None:
    """red5 #1: `-rdc=true -arch=compute_90 -code=lto_90` was tuned as plain sm_90, its arch flags
    vanished from the ACF and `flags` printed -arch=sm_90, which nvcc refuses beside -code."""
    command = f"nvcc -rdc=true {arch_flags} -O3 -c k.cu -o k.o"
    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    compile_commands_file(tmp_path, command)
    dry = subprocess.run(["nvcc", "--dryrun", *command.split()[1:]], check=True, cwd=tmp_path,
                         capture_output=True, text=True)
    assert "kind=nvvm" in dry.stderr, dry.stderr  # what nvcc itself builds: LTO IR
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    tuned = tune_in(tmp_path, "--compile-commands", "compile_commands.json")
    for result in (listed, tuned):
        assert result.returncode == 2, result.describe()
        [line] = result.stderr.strip().splitlines()
        assert _WHY in line and "Traceback" not in line, line
    assert not (tmp_path / "k.acf.toml").exists()


def test_the_gate_reads_a_command_that_now_names_lto_as_one_with_dlto(tmp_path: Path) -> None:
    """The gate rereads the ACF's compile command: one that now builds lto_90 is no build it can
    check, as with -dlto (stale-settings: unreadable), never read as the sm_90 build it was tuned from."""
    tuned_from_command(tmp_path, "nvcc -rdc=true -arch=sm_90 -O3 -c k.cu -o k.o", source=LOOP_KERNEL)
    verdicts = []
    for arch_flags in ("-arch=compute_90 -code=lto_90", "-dlto -arch=sm_90"):
        compile_commands_file(tmp_path, f"nvcc -rdc=true {arch_flags} -O3 -c k.cu -o k.o")
        gated = run_cli(["gate", "k.acf.toml"], cwd=tmp_path)
        assert "the compile command the ACF was tuned from cannot be read now" in gated.output, gated.describe()
        verdicts.append(gated.returncode)
    assert verdicts[0] == verdicts[1], verdicts
