"""userfix: a compile command that names no arch (llm.c's `nvcc -O3 --use_fast_math softmax_forward.cu`)
was tuned for tune.toml's default arch (sm_90) as "your build", and `flags` then printed -arch=sm_90,
which turns the user's build into sm_90-only code. nvcc builds its own default arch there (13.0: sm_75
machine code and compute_75 PTX, as its `--dryrun` shows): that arch is tuned, said in one note, recorded
in [baseline], and `flags` gives -arch=sm_75, which builds the same. An explicit --arch still overrides."""

from __future__ import annotations

import json
import re
import shlex
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
    assert (f"note: --arch sm_80 overrides the arch {default}, nvcc's default, which the compile command builds as "
            f"it names no arch: `flags` then gives -arch=sm_80, which replaces the command's default arch (sm_80 code "
            "alone)") in tuned.stderr_lines, tuned.describe()
    assert not any("names no arch, so" in line for line in tuned.stderr_lines), tuned.describe()
    # fix-arch2: the command builds nvcc's default alone, never the arch --arch tunes
    assert not any(f"builds for sm_80, {default}" in line for line in tuned.stderr_lines), tuned.describe()
    assert (f"note: the compile command builds for {default}, not sm_80: tuned for sm_80 (--arch), {default} left out "
            f"(the chosen settings are not checked there): --arch {default} tunes for {default}") in tuned.stderr_lines
    flags = run_cli(["flags", "k.acf.toml"], cwd=tmp_path)
    assert flags.returncode == 0 and flags.stdout.split()[0] == "-arch=sm_80", flags.describe()
    gated = run_cli(["gate", "k.acf.toml", "--static", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert gated.returncode == 0 and "stale-settings" not in gated.stdout, gated.describe()  # --arch's, as tuned


def _as_an_earlier_release_wrote_it(acf: Path) -> None:
    """An ACF tuned at sm_90 from a command that names no arch, as a release before nvcc's default arch
    was read wrote it: no arch flag of the command in [baseline] (tune set none aside)."""
    text = acf.read_text()
    flag = re.search(r'\n\[\[baseline\.fixed\]\]\nflag = "-arch=sm_\d+"\n[^\[]*', text)
    assert flag is not None, text
    text = text.replace(flag[0], "\n")
    text = re.sub(r'\n    "-arch=sm_\d+",', "", text)
    acf.write_text(text)


def test_an_earlier_releases_acf_of_a_command_with_no_arch_is_said_as_it_is_and_retuned_for_its_arch(
        tmp_path: Path) -> None:
    """fix-arch2 fault 1: an ACF an earlier release tuned at tune.toml's sm_90 from a command that names
    no arch was gated as "the compile command changed since the ACF was tuned (builds for sm_75, not the
    ACF's sm_90)" with the same hash recorded and measured, and its re-tune command kept --arch sm_90:
    following it wrote an ACF whose `flags` gives -arch=sm_90, the sm_90-only build."""
    default = _nvcc_default()
    _kernel(tmp_path)
    (tmp_path / "tune.toml").write_text('arch = "sm_90"\n')
    tuned = tune_in(tmp_path, "--compile-commands", "compile_commands.json", "--arch", "sm_90", budget=1)
    assert tuned.returncode == 0, tuned.describe()
    _as_an_earlier_release_wrote_it(tmp_path / "k.acf.toml")
    gated = run_cli(["gate", "k.acf.toml", "--static", "--json"], cwd=tmp_path)
    assert gated.returncode == 0, gated.describe()
    [found] = [f for f in json.loads(gated.stdout)["acfs"][0]["findings"] if f["rule"] == "stale-settings"]
    assert (f"the compile command in compile_commands.json names no arch, so it builds nvcc's default {default}, "
            "but the ACF was tuned for sm_90") in found["message"], found
    assert "changed since" not in found["message"], found
    assert (found["recorded"], found["measured"]) == ("sm_90", f"{default} (nvcc's default)"), found
    retune = shlex.split(found["command"])
    assert "--arch" not in retune and retune[:2] == ["compileiq", "tune"], found
    again = run_cli(retune[1:], cwd=tmp_path)  # following the advice tunes the arch the command builds
    assert again.returncode == 0, again.describe()
    assert not any("builds for sm_90" in line for line in again.stderr_lines), again.describe()
    flags = run_cli(["flags", "k.acf.toml"], cwd=tmp_path)
    assert flags.returncode == 0 and flags.stdout.split()[0] == f"-arch={default}", flags.describe()
    passed = run_cli(["gate", "k.acf.toml", "--static"], cwd=tmp_path)
    assert passed.returncode == 0 and "stale-settings" not in passed.output, passed.describe()


def test_an_arch_chosen_over_a_command_with_no_arch_is_kept_by_the_retune(tmp_path: Path) -> None:
    """--arch sm_90 over a command that names no arch is the user's choice ([baseline] sets nvcc's default
    aside): a stale ACF's re-tune keeps it."""
    _kernel(tmp_path)
    tuned = tune_in(tmp_path, "--compile-commands", "compile_commands.json", "--arch", "sm_90", budget=1)
    assert tuned.returncode == 0, tuned.describe()
    (tmp_path / "k.cu").write_text(LOOP_KERNEL + "// changed\n")
    gated = run_cli(["gate", "k.acf.toml", "--static", "--json"], cwd=tmp_path)
    [found] = [f for f in json.loads(gated.stdout)["acfs"][0]["findings"] if f["rule"] == "stale-source"]
    assert "--arch sm_90" in found["command"], found


def test_an_arch_the_installed_nvcc_dropped_says_what_to_do_and_space_stops(tmp_path: Path) -> None:
    """User 4: a compile command with -arch=sm_60 (dropped by nvcc 13.0) stopped tune with "the
    preprocessor failed: nvcc fatal : Unsupported gpu architecture 'sm_60'" and nothing on what to
    do, while `space` printed the whole table, exit 0, with that line as a trailing note. Both now
    stop in one line naming the oldest arch this nvcc builds and `tune --arch`; --arch works."""
    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    compile_commands_file(tmp_path, "nvcc -arch=sm_60 -c k.cu -o k.o")
    listed = subprocess.run([find_toolchain().nvcc, "--list-gpu-arch"], capture_output=True, text=True, check=False)
    oldest = min(int(n) for n in re.findall(r"compute_(\d+)", listed.stdout))
    says = (f"nvcc {find_toolchain().nvcc_version} builds sm_{oldest} and newer, as `nvcc --list-gpu-arch` lists: "
            "pass tune --arch sm_XY for your GPU, one it lists; sm_60 needs an older CUDA toolkit")
    space = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert space.returncode != 0 and space.stdout == "" and "Traceback" not in space.stderr, space.describe()
    assert len(space.stderr_lines) == 1 and says in space.stderr, space.describe()
    tuned = tune_in(tmp_path, "--compile-commands", "compile_commands.json", budget=1)
    assert tuned.returncode != 0 and "Unsupported gpu architecture 'sm_60'" in tuned.stderr, tuned.describe()
    assert says in tuned.stderr and "Traceback" not in tuned.stderr, tuned.describe()
    assert tune_in(tmp_path, "--compile-commands", "compile_commands.json", "--arch", f"sm_{oldest}",
                   budget=1).returncode == 0
