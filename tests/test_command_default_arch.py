"""userfix: a compile command that names no arch (llm.c's `nvcc -O3 --use_fast_math softmax_forward.cu`)
was tuned for tune.toml's default arch (sm_90) as "your build", and `flags` then printed -arch=sm_90,
which turns the user's build into sm_90-only code. nvcc builds its own default arch there (13.0: sm_75
machine code and compute_75 PTX, as its `--dryrun` shows): that arch is tuned, said in one note, recorded
in [baseline], and `flags` gives -arch=sm_75, which builds the same. An explicit --arch still overrides."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

from helpers import LOOP_KERNEL, compile_commands_file, run_cli, tune_in

from compileiq.core.toolchain import find_toolchain


def _nvcc_default() -> str:
    """The arch the installed nvcc builds without an arch flag, read here independently of compileiq."""
    done = subprocess.run([find_toolchain().nvcc, "-dryrun", "-x", "cu", "-c", "/dev/null", "-o", "/dev/null"],
                          capture_output=True, text=True, check=False)
    [arch] = set(re.findall(r"ptxas\S*\s.*?-arch=(sm_\d+)", done.stderr + done.stdout))
    return arch


def _kernel(folder: Path) -> None:
    (folder / "k.cu").write_text(LOOP_KERNEL)
    compile_commands_file(folder, "nvcc -O3 --use_fast_math -std=c++17 k.cu -o k")


def test_a_command_with_no_arch_is_tuned_for_nvccs_default_arch(tmp_path: Path) -> None:
    default = _nvcc_default()
    _kernel(tmp_path)
    says = (f"note: tuning {default}: the compile command names no arch, so nvcc's default {default} is tuned, "
            "the arch it builds (--arch sm_XY tunes another)")
    space = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert space.returncode == 0 and says in space.stderr_lines, space.describe()
    tuned = tune_in(tmp_path, "--compile-commands", "compile_commands.json", budget=1)
    assert tuned.returncode == 0 and says in tuned.stderr_lines, tuned.describe()
    acf = tomllib.loads((tmp_path / "k.acf.toml").read_text())
    assert acf["kernel"]["arch"] == default, acf["kernel"]
    [fixed] = [f for f in acf["baseline"]["fixed"] if "-arch" in f["flag"]]
    assert fixed["flag"] == f"-arch={default}" and fixed["applied"] is True, fixed
    assert fixed["why"].endswith(f"the command names no arch: nvcc's default, {default}, as -arch={default} builds it")
    flags = run_cli(["flags", "k.acf.toml"], cwd=tmp_path)
    assert flags.returncode == 0, flags.describe()
    assert flags.stdout.split()[0] == f"-arch={default}" and "sm_90" not in flags.stdout, flags.describe()
    gated = run_cli(["gate", "k.acf.toml", "--static", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert gated.returncode == 0 and "stale-settings" not in gated.stdout, gated.describe()  # the build it ships


def test_an_explicit_arch_still_overrides_nvccs_default(tmp_path: Path) -> None:
    default = _nvcc_default()
    _kernel(tmp_path)
    tuned = tune_in(tmp_path, "--compile-commands", "compile_commands.json", "--arch", "sm_80", budget=1)
    assert tuned.returncode == 0, tuned.describe()
    assert f"note: --arch sm_80 overrides the arch {default} that the compile command gives" in tuned.stderr_lines
    assert not any("names no arch, so" in line for line in tuned.stderr_lines), tuned.describe()
    flags = run_cli(["flags", "k.acf.toml"], cwd=tmp_path)
    assert flags.returncode == 0 and flags.stdout.split()[0] == "-arch=sm_80", flags.describe()
    gated = run_cli(["gate", "k.acf.toml", "--static", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert gated.returncode == 0 and "stale-settings" not in gated.stdout, gated.describe()  # --arch's, as tuned
