"""The shipped command's preprocessor options build the code it ships (review rev50, findings 2-4),
with real nvcc/ptxas: a -D of a macro tune.toml tunes is the baseline's value of it (never a base
flag the ACF's own -D overrides), one tune.toml fixes must agree; -Xcompiler's -D/-I reach the
device pass (applied, or refused in one line); -isystem stays -isystem (not -I, which is searched
first and reads another copy of a header)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from helpers import CliResult, run_cli, shipped_registers, tile_kernel

from compileiq.results import acf

KERNEL = tile_kernel("BK", '#ifndef BK\n#define BK 1\n#endif')
TUNE_TOML = 'arch = "sm_90"\nentries = ["k"]\nblock_size = 256\n\n[defines]\nBK = 1\n\n[tune.defines]\nTM = [2, 16]\n'


def _kernel(folder: Path, command: str, source: str = KERNEL, tune_toml: str = TUNE_TOML) -> None:
    (folder / "k.cu").write_text(source)
    (folder / "tune.toml").write_text(tune_toml)
    (folder / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(folder), "file": str(folder / "k.cu"), "command": command}]))


def _tune(folder: Path, budget: int = 2) -> CliResult:
    return run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--workers", "local",
                    "--budget", str(budget), "--db", f"sqlite:///{folder}/t.db", "--out", "k.acf.toml"], cwd=folder)


def test_a_shipped_define_of_a_tuned_macro_is_the_baseline_value(tmp_path: Path) -> None:
    command = "nvcc -DTM=16 -arch=sm_90 -c k.cu"
    _kernel(tmp_path, command)
    result = _tune(tmp_path)
    assert result.returncode == 0, result.describe()
    assert "define.TM=16 (-DTM=16)" in result.stdout + result.stderr  # searched from its shipped value
    found = acf.read(tmp_path / "k.acf.toml")
    shipped = shipped_registers(tmp_path, command)
    assert found.evidence["baseline"]["registers"] == shipped != shipped_registers(tmp_path, "nvcc -arch=sm_90 -c k.cu")
    flags = run_cli(["flags", "k.acf.toml", "--all"], cwd=tmp_path)
    assert flags.returncode == 0, flags.describe()
    assert len(re.findall(r"-DTM=", flags.stdout)) == 1 and len(re.findall(r"-DBK=", flags.stdout)) == 1, flags.stdout
    chosen = found.controls["define.TM"]
    assert list(found.remove) == ([] if chosen == 16 else ["-DTM=16"])
    gate = run_cli(["gate", "k.acf.toml", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert gate.returncode == 0, gate.describe()


def test_a_shipped_define_that_disagrees_with_tune_toml_is_refused_in_one_line(tmp_path: Path) -> None:
    for command, named in (("nvcc -DTM=8 -arch=sm_90 -c k.cu", ("-DTM=8", "TM=8", "2, 16")),
                           ("nvcc -UTM -arch=sm_90 -c k.cu", ("-UTM", "undefines TM", "2, 16")),
                           ("nvcc -DBK=16 -arch=sm_90 -c k.cu", ("-DBK=16", "BK=16", "BK=1")),
                           ("nvcc -Xcompiler -DBK=2 -arch=sm_90 -c k.cu", ("BK=2", "BK=1"))):
        _kernel(tmp_path, command)
        result = _tune(tmp_path)
        assert result.returncode == 2, result.describe()
        assert len(result.stderr_lines) == 1 and all(n in result.stderr for n in named), result.describe()


def test_a_shipped_define_of_a_fixed_macro_at_its_value_is_given_once(tmp_path: Path) -> None:
    _kernel(tmp_path, "nvcc -DBK=1 -arch=sm_90 -c k.cu")
    result = _tune(tmp_path)
    assert result.returncode == 0, result.describe()
    flags = run_cli(["flags", "k.acf.toml", "--all"], cwd=tmp_path)
    assert flags.stdout.count("-DBK=") == 1, flags.stdout


SCALED = """\
#ifndef SCALE
#error the device pass must see the command's -Xcompiler -DSCALE
#endif
__global__ void k(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= SCALE; }
"""
PLAIN_TOML = 'arch = "sm_90"\nentries = ["k"]\nblock_size = 256\n'


def test_xcompiler_preprocessor_options_reach_every_build(tmp_path: Path) -> None:
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "cfg.cuh").write_text("#define OFFSET 1.0f\n")
    source = '#include "cfg.cuh"\n' + SCALED.replace("*= SCALE", "*= SCALE + OFFSET")
    _kernel(tmp_path, "nvcc -ccbin g++ -Xcompiler=-DSCALE=7.0f,-O2 -Xcompiler -Iinc -arch=sm_90 -c k.cu",
            source, PLAIN_TOML)
    result = _tune(tmp_path)
    assert result.returncode == 0, result.describe()
    skipped = next(line for line in (result.stdout + result.stderr).splitlines() if line.startswith("not applied:"))
    assert "SCALE" not in skipped and "-Xcompiler -O2" in skipped, skipped
    ccbin = skipped[skipped.index("-ccbin g++"):].split(";")[0]
    assert "device code is unchanged" not in ccbin, skipped
    flags = run_cli(["flags", "k.acf.toml", "--all"], cwd=tmp_path)
    assert "-DSCALE=7.0f" in flags.stdout.split() and "-Iinc" in flags.stdout.split(), flags.stdout


def test_an_xcompiler_preprocessor_option_no_build_can_give_is_refused_in_one_line(tmp_path: Path) -> None:
    _kernel(tmp_path, "nvcc -Xcompiler=-O2,-include,cfg.h -arch=sm_90 -c k.cu", SCALED, PLAIN_TOML)
    result = _tune(tmp_path)
    assert result.returncode == 2, result.describe()
    assert len(result.stderr_lines) == 1 and "-include" in result.stderr, result.describe()


def test_gcc_long_spellings_in_xcompiler_are_their_short_forms(tmp_path: Path) -> None:
    """rev50b #3: nvcc preprocesses the device code with the host compiler, so `-Xcompiler
    --define-macro=X` is -DX there; it was set aside as "device code is unchanged" (the device
    pass saw SCALE, compileiq's builds did not), and host options that predefine macros
    (-O3: __OPTIMIZE__, -fopenmp: _OPENMP) said the same."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "cfg.cuh").write_text("#define OFFSET 1.0f\n")
    source = '#include "cfg.cuh"\n' + SCALED.replace("*= SCALE", "*= SCALE + OFFSET")
    _kernel(tmp_path, "nvcc -O3 -Xcompiler --define-macro=SCALE=7.0f -Xcompiler --include-directory,inc "
            "-Xcompiler -fopenmp -Xcompiler -Wall -arch=sm_90 -c k.cu", source, PLAIN_TOML)
    result = _tune(tmp_path)
    assert result.returncode == 0, result.describe()
    flags = run_cli(["flags", "k.acf.toml", "--all"], cwd=tmp_path)
    assert "-DSCALE=7.0f" in flags.stdout.split() and "-Iinc" in flags.stdout.split(), flags.stdout
    skipped = next(line for line in (result.stdout + result.stderr).splitlines() if line.startswith("not applied:"))
    # -O3 predefines __OPTIMIZE__ in the device pass: tune compiles the PTX both ways and, as this kernel
    # never reads it, sets -O3 aside as checked; -fopenmp is not checked and says what it may change
    assert "-O3 (host optimisation level (nvcc -O): the device code is the same without it (checked))" in skipped, \
        skipped
    assert "-Xcompiler -fopenmp (host compiler option: may change the macros the device pass predefines" in skipped, \
        skipped
    assert "-Xcompiler -Wall (host compiler warning option: device code is unchanged)" in skipped, skipped


@pytest.mark.parametrize("command", [
    "nvcc -Xcompiler --include=cfg.h -arch=sm_90 -c k.cu", "nvcc -Xcompiler=--imacros,cfg.h -arch=sm_90 -c k.cu",
    "nvcc -Xcompiler -Wp,-DSCALE=2.0f -arch=sm_90 -c k.cu", "nvcc -Xcompiler -Xpreprocessor -arch=sm_90 -c k.cu",
    "nvcc -Xcompiler --no-standard-includes -arch=sm_90 -c k.cu",
    "nvcc -forward-unknown-to-host-compiler --include-directory=inc -arch=sm_90 -c k.cu"])
def test_a_preprocessor_option_under_another_spelling_is_refused_in_one_line(tmp_path: Path, command: str) -> None:
    """rev50b #3: `--include=` is GCC's -include (refused), and -Wp, -Xpreprocessor hand the
    preprocessor anything: they were set aside as host options the device pass never sees."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "cfg.h").write_text("#define SCALE 2.0f\n")
    _kernel(tmp_path, command, SCALED, PLAIN_TOML)
    result = _tune(tmp_path)
    assert result.returncode == 2, result.describe()
    assert len(result.stderr_lines) == 1 and "preprocess" in result.stderr, result.describe()


def test_isystem_stays_a_system_folder_searched_after_the_include_folders(tmp_path: Path) -> None:
    for folder, text in (("sysinc", "#error the -I copy comes first\n"), ("userinc", "#define SCALE 3.0f\n")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "cfg.cuh").write_text(text)
    source = '#include "cfg.cuh"\n' + SCALED
    _kernel(tmp_path, "nvcc -isystem sysinc -I userinc -arch=sm_90 -c k.cu", source, PLAIN_TOML)
    result = _tune(tmp_path)
    assert result.returncode == 0, result.describe()
    flags = run_cli(["flags", "k.acf.toml", "--all"], cwd=tmp_path)
    assert flags.stdout.split() == ["-arch=sm_90", "-Iuserinc", "-isystem=sysinc"], flags.stdout
    preprocessed = subprocess.run(["nvcc", *flags.stdout.split(), "-E", "k.cu"], cwd=tmp_path, capture_output=True,
                                  text=True, check=True)
    assert "x[i] *= 3.0f" in preprocessed.stdout
    cmake = run_cli(["flags", "k.acf.toml", "--all", "--format", "cmake"], cwd=tmp_path)
    assert "-isystem=${CMAKE_CURRENT_SOURCE_DIR}/sysinc" in cmake.stdout, cmake.stdout  # any checkout's
    bazel = run_cli(["flags", "k.acf.toml", "--all", "--format", "bazel"], cwd=tmp_path)
    assert "sysinc" not in bazel.stdout and "system include folder(s) (-isystem) left out (sysinc)" in bazel.stderr
    gate = run_cli(["gate", "k.acf.toml", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert gate.returncode == 0, gate.describe()


def _tuned_at_tm_16(folder: Path, command: str) -> dict[str, str]:
    """Tune from `command`, which ships TM=16: its baseline is that build (searched from TM=16, nvcc's
    own register count); the flags set aside as not applied, with why."""
    _kernel(folder, command)
    result = _tune(folder)
    assert result.returncode == 0, result.describe()
    assert "define.TM=16 (-DTM=16)" in result.stderr, result.describe()
    found = acf.read(folder / "k.acf.toml")
    assert found.evidence["baseline"]["registers"] == shipped_registers(folder, command)
    return {f.flag: f.why for f in found.shipped.fixed if not f.applied} if found.shipped else {}


def test_only_a_macros_last_define_or_undefine_is_held_to_tune_toml(tmp_path: Path) -> None:
    """fix-hostlv fault 3: `-DBK=8 -UBK -DBK=1` builds BK=1 (the preprocessor takes a macro's last
    -D/-U), yet it was refused as "-DBK=8 gives BK=8, and tune.toml's [defines] gives BK=1: one build
    cannot have both"; a tuned macro's earlier -D was refused as a value tune.toml does not tune."""
    overridden = _tuned_at_tm_16(tmp_path, "nvcc -DBK=8 -UBK -DBK=1 -DTM=8 -DTM=16 -arch=sm_90 -c k.cu")
    assert set(overridden) >= {"-DBK=8", "-UBK", "-DTM=8"}, overridden
    assert overridden["-UBK"].startswith("overridden by the later -DBK=1"), overridden
    gate = run_cli(["gate", "k.acf.toml", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert gate.returncode == 0, gate.describe()


def test_the_commands_own_define_wins_over_an_xcompiler_one_wherever_it_stands(tmp_path: Path) -> None:
    """Review (this round): nvcc hands the preprocessor every -Xcompiler item first and its own -D
    after them (`nvcc -dryrun`), so `-DTM=16 -Xcompiler -DTM=2` builds TM=16. Read in command order,
    the -Xcompiler one was taken for the last word: "your build" was TM=2, a build nobody ships."""
    overridden = _tuned_at_tm_16(tmp_path, "nvcc -DTM=16 -arch=sm_90 -Xcompiler -DTM=2 -c k.cu")
    assert overridden.get("-Xcompiler -DTM=2", "").startswith("overridden by the later -DTM=16"), overridden


@pytest.mark.parametrize(("command", "named"), [("nvcc -DBK=1 -UBK -arch=sm_90 -c k.cu", "-UBK undefines it"),
                                                ("nvcc -DBK=1 -DBK=2 -arch=sm_90 -c k.cu", "-DBK=2 gives BK=2"),
                                                ("nvcc -DTM=16 -UTM -arch=sm_90 -c k.cu", "-UTM undefines TM")])
def test_a_macros_last_word_that_disagrees_with_tune_toml_is_still_refused(tmp_path: Path, command: str,
                                                                          named: str) -> None:
    _kernel(tmp_path, command)
    result = _tune(tmp_path)
    assert result.returncode == 2 and len(result.stderr_lines) == 1, result.describe()
    assert named in result.stderr, result.describe()
