"""An -Xcompiler value with a space is several host compiler options (red team 51, finding 2),
with real nvcc/ptxas: nvcc hands the value to the host compiler through /bin/sh, unquoted, so the
shell splits it, and the host compiler preprocesses the device code with each word. compileiq read
such a value by its first word: `-Xcompiler "-Wall -DTM=16"` was "a warning option: device code is
unchanged", the baseline was built with TM's default and the gate passed a command that ships 16."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
from helpers import CliResult, run_cli, shipped_registers, tile_kernel

from compileiq.results import acf

KERNEL = tile_kernel("SCALE", "#ifndef SCALE\n#error the device pass must see the command's -DSCALE\n#endif")
TUNE_TOML = 'arch = "sm_90"\nentries = ["k"]\nblock_size = 256\n\n[tune.defines]\nTM = [2, 16]\n'
UNCHANGED = "device code is unchanged"


def _kernel(folder: Path, command: str) -> None:
    (folder / "k.cu").write_text(KERNEL)
    (folder / "cfg.h").write_text("#define TM 16\n")
    (folder / "tune.toml").write_text(TUNE_TOML)
    (folder / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(folder), "file": str(folder / "k.cu"), "command": command}]))


def _tune(folder: Path) -> CliResult:
    return run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--workers", "local",
                    "--budget", "2", "--db", f"sqlite:///{folder}/t.db", "--out", "k.acf.toml"], cwd=folder)


def test_each_word_of_an_xcompiler_value_is_the_option_the_device_pass_sees(tmp_path: Path) -> None:
    command = "nvcc -Xcompiler '-Wall -DTM=16 -DSCALE=2.0f' -arch=sm_90 -c k.cu"
    _kernel(tmp_path, command)
    result = _tune(tmp_path)
    assert result.returncode == 0, result.describe()
    assert "define.TM=16 (-Xcompiler -DTM=16)" in result.stdout + result.stderr, result.describe()
    found = acf.read(tmp_path / "k.acf.toml")
    shipped = shipped_registers(tmp_path, command)  # nvcc's own build: the shell split the value
    assert found.evidence["baseline"]["registers"] == shipped != shipped_registers(
        tmp_path, "nvcc -Xcompiler -DSCALE=2.0f -arch=sm_90 -c k.cu")
    fixed: list[dict[str, Any]] = tomllib.loads((tmp_path / "k.acf.toml").read_text())["baseline"]["fixed"]
    assert {(f["flag"], f["applied"]) for f in fixed} >= {("-DSCALE=2.0f", True), ("-Xcompiler -Wall", False)}, fixed
    flags = run_cli(["flags", "k.acf.toml", "--all"], cwd=tmp_path)
    assert "-DSCALE=2.0f" in flags.stdout.split(), flags.stdout
    gate = run_cli(["gate", "k.acf.toml", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert gate.returncode == 0, gate.describe()


def test_a_multi_word_value_is_never_said_to_leave_the_device_code_unchanged(tmp_path: Path) -> None:
    _kernel(tmp_path, "nvcc -Xcompiler '-Wall -Wextra' -Xcompiler -Wall -DSCALE=1.0f -arch=sm_90 -c k.cu")
    result = _tune(tmp_path)
    assert result.returncode == 0, result.describe()
    fixed = {f["flag"]: f["why"] for f in tomllib.loads((tmp_path / "k.acf.toml").read_text())["baseline"]["fixed"]}
    assert UNCHANGED not in fixed["-Xcompiler -Wall -Wextra"] and UNCHANGED in fixed["-Xcompiler -Wall"], fixed


def test_the_gate_sees_a_macro_behind_a_space_in_the_command_that_ships(tmp_path: Path) -> None:
    """The red team's gate passed with 0 findings: the command shipped TM=16, the ACF's baseline TM=2."""
    _kernel(tmp_path, "nvcc -DSCALE=1.0f -arch=sm_90 -c k.cu")
    assert _tune(tmp_path).returncode == 0
    _kernel(tmp_path, "nvcc -DSCALE=1.0f -Xcompiler '-fno-strict-aliasing -DTM=16' -arch=sm_90 -c k.cu")
    gate = run_cli(["gate", "k.acf.toml", "--static", "--json", "--compile-commands", "compile_commands.json"],
                   cwd=tmp_path)
    assert gate.returncode in (0, 1), gate.describe()
    stale = [f["message"] for f in json.loads(gate.stdout)["acfs"][0]["findings"] if f["rule"] == "stale-settings"]
    assert any("define.TM 2 (tune.toml's first value) -> 16" in m for m in stale), gate.stdout


@pytest.mark.parametrize("option, named", [
    ("-Xcompiler '-Wall -include cfg.h'", "-Xcompiler -include cfg.h (behind a space in"),
    ("--compiler-options '-O2 -imacros cfg.h'", "-imacros cfg.h (behind a space in"),
    ("-Xcompiler '-O3 -UTM'", "-Xcompiler -UTM undefines TM"),
    ("-Xcompiler '-Wall -DTM=8'", "gives TM=8"),
    ("-forward-unknown-to-host-compiler '-Wfoo -include cfg.h'", "hides '-include' behind a space"),
    ("-forward-unknown-to-host-compiler '-Wfoo -DTM=16'", "hides '-DTM=16' behind a space"),
    ("-Xcompiler '-Wall -DTM=\"16\"'", "holds '\"' beside a space"),
    ("-Xcompiler '-Wall \\-DTM=16'", "beside a space"),
    ("-Xcompiler '-Wall -D$TM'", "holds '$'"),
    ("-Xcompiler '-Wall${IFS}-DTM=16'", "holds '$'"),
    ("-Xcompiler '-W$X'", "holds '$'"),  # X=p,-DTM=16 makes -Wp,-DTM=16
    ("-Xcompiler '$X'", "holds '$'"),
    ("-Xcompiler '-ffile-prefix-map=$(pwd)=.'", "holds '$'"),
    ("-Xcompiler -isystem,/opt$X", "holds '$'"),
    ("-Xcompiler '-D$TM'", "holds '$'")])
def test_an_option_the_shell_would_hand_on_unseen_is_refused_in_one_line(tmp_path: Path, option: str,
                                                                         named: str) -> None:
    _kernel(tmp_path, f"nvcc -DSCALE=1.0f {option} -arch=sm_90 -c k.cu")
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 2, listed.describe()
    [line] = listed.stderr.strip().splitlines()
    assert named in line, line


def test_a_refused_expansion_names_the_way_out(tmp_path: Path) -> None:
    _kernel(tmp_path, "nvcc -DSCALE=1.0f -Xcompiler '-Wall${IFS}-DTM=16' -arch=sm_90 -c k.cu")
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 2 and "drop the host option from a copy of the command given to --compile-commands" \
        in listed.stderr, listed.describe()


@pytest.mark.parametrize("option", ["-Xcompiler -fdebug-prefix-map=$PWD=.", "-Xcompiler '-fmacro-prefix-map=${PWD}=.'",
                                    "-forward-unknown-to-host-compiler -ffile-prefix-map=$PWD/=",
                                    "-Xcompiler -Wall,-fdebug-prefix-map=$PWD=."])
def test_a_variable_inside_a_host_only_option_is_set_aside(tmp_path: Path, option: str) -> None:
    """rev51 7: `-Xcompiler -fdebug-prefix-map=$PWD=.` stopped `tune` ("holds '$'"). nvcc's shell expands
    it in the host and device preprocessing commands (`nvcc -dryrun`), but into the rest of a host-only
    option, never a -D of its own: it is set aside as given, as before the refusal."""
    _kernel(tmp_path, f"nvcc -DSCALE=1.0f {option} -arch=sm_90 -c k.cu")
    result = _tune(tmp_path)
    assert result.returncode == 0, result.describe()
    fixed = {f["flag"]: f["applied"] for f in tomllib.loads((tmp_path / "k.acf.toml").read_text())["baseline"]["fixed"]}
    given = shlex.split(option)
    assert fixed.get(" ".join(given)) is False or fixed.get(given[-1]) is False, fixed
    gate = run_cli(["gate", "k.acf.toml", "--static", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert gate.returncode == 0, gate.describe()
