"""A real compile command as cuda-samples, CMake and Bear write it: nvcc options that leave the
device code as it is are set aside (recorded, not applied), a multi-arch command says which arch is
tuned, and what is refused or not searched is said as it is."""

from __future__ import annotations

import json
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

from compileiq.core.space_files import load_space
from compileiq.source.compile_db import CompileDbError, read_command
from tests.helpers import CAPPED_KERNEL, LOOP_KERNEL, run_cli, with_kernel_arch

SPACE = load_space("13.0")
SPILLING_KERNEL = Path(__file__).resolve().parent.parent / "kernels" / "spill_heavy" / "spill_heavy.cu"


def _project(tmp_path: Path, command: str, kernel: str = LOOP_KERNEL) -> Path:
    (tmp_path / "k.cu").write_text(kernel)
    (tmp_path / "compile_commands.json").write_text(
        json.dumps([{"directory": str(tmp_path), "command": command, "file": "k.cu"}]))
    return tmp_path / "compile_commands.json"


@pytest.mark.parametrize("flags, fixed", [
    ("-m64", "-m64"), ("--m64", "--m64"), ("--machine 64", "--machine 64"), ("-m=64", "-m=64"),
    ("--threads 0", "--threads 0"), ("--threads=0", "--threads=0"), ("-t 4", "-t 4"), ("-t4", "-t4"),
    ("-res-usage", "-res-usage"), ("--resource-usage", "--resource-usage"), ("--keep", "--keep"),
    ("-keep-dir /tmp/kept", "-keep-dir /tmp/kept"), ("-Werror all-warnings", "-Werror all-warnings"),
    ("--Werror=reorder,deprecated-declarations", "--Werror=reorder,deprecated-declarations"),
])
def test_an_option_that_leaves_device_code_unchanged_is_set_aside(tmp_path: Path, flags: str, fixed: str) -> None:
    """cuda-samples' Makefiles give -m64 and --threads 0: `'-m64' is not an allowed base flag`
    stopped a --compile-commands run, and a value (`--threads 0`) would have been read apart."""
    db = _project(tmp_path, f"nvcc -arch=sm_90 {flags} --use_fast_math -c k.cu -o k.o")
    found = read_command(db, tmp_path / "k.cu", SPACE)
    assert found.base_flags == ()
    assert found.shipped is not None and [s.name for s in found.shipped.settings] == ["nvcc.use_fast_math"]
    assert [(f.flag, f.applied) for f in found.shipped.fixed] == [(fixed, False)]
    assert "device code is unchanged" in found.shipped.fixed[0].why


@pytest.mark.parametrize("flags", ["--split-compile-extended 0", "--split-compile 4", "--machine 32", "-Werror bogus", "--threads many",
                                   "-keep-device-functions"])
def test_an_option_that_could_change_device_code_or_nvcc_refuses_stays_refused(tmp_path: Path, flags: str) -> None:
    db = _project(tmp_path, f"nvcc -arch=sm_90 {flags} -c k.cu -o k.o")
    from compileiq.app import kernel_spec
    from compileiq.source.base_flags import BaseFlagError

    with pytest.raises(BaseFlagError, match="is not an allowed base flag"):
        kernel_spec(tmp_path / "k.cu", None, db)


def test_a_cuda_samples_command_runs_space_and_tune(tmp_path: Path) -> None:
    _project(tmp_path, "nvcc -ccbin g++ -m64 --threads 0 --std=c++17 -t 4 -res-usage --keep "
                       "-Werror all-warnings -Xptxas -dlcm=cg -arch=sm_90 -o k.o -c k.cu")
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()
    tuned = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--budget", "2", "--workers",
                     "local", "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", "k.acf.toml", "--no-simplify"],
                    cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    assert "-m64 (64-bit host code, the only machine nvcc 13 has: device code is unchanged)" in tuned.output
    fixed = {f["flag"]: f for f in tomllib.loads((tmp_path / "k.acf.toml").read_text())["baseline"]["fixed"]}
    assert {"-m64", "--threads 0", "-t 4", "-res-usage", "--keep",
            "-Werror all-warnings"} <= {flag for flag, f in fixed.items() if not f["applied"]}, fixed


MULTI_ARCH = ("nvcc --generate-code arch=compute_80,code=sm_80 --generate-code arch=compute_90,code=sm_90 "
              "-c k.cu -o k.o")


def test_a_multi_arch_command_names_the_arch_tuned_and_the_ones_left_out(tmp_path: Path) -> None:
    """It was tuned for its first arch, silently: the chosen settings then went to sm_90 unchecked.
    user49 F3: then it was tuned for the first arch listed, and CMake lists CUDA_ARCHITECTURES oldest
    first (75 90 tuned sm_75); the newest arch is tuned now, whatever the order, and the CMake
    snippet says which arch the flags were checked on instead of telling the user to narrow
    CUDA_ARCHITECTURES to it (which drops an arch from the product)."""
    _project(tmp_path, MULTI_ARCH)
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()
    assert ("note: the compile command builds for sm_90, sm_80: tuned for sm_90 only; sm_80 left out "
            "(the chosen settings are not checked there): --arch sm_80 tunes for sm_80") in listed.stderr
    args = ["tune", "k.cu", "--compile-commands", "compile_commands.json", "--budget", "2", "--workers", "local",
            "--db", f"sqlite:///{tmp_path / 't.db'}", "--no-simplify"]
    tuned = run_cli([*args, "--out", "a.acf.toml"], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    assert "tuned for sm_90 only; sm_80 left out" in tuned.output, tuned.describe()
    data = tomllib.loads((tmp_path / "a.acf.toml").read_text())
    assert data["kernel"]["arch"] == "sm_90"
    fixed = {f["flag"]: f for f in data["baseline"]["fixed"]}
    left = fixed["--generate-code arch=compute_80,code=sm_80"]
    assert not left["applied"] and "builds for sm_80, not tuned" in left["why"], fixed
    cmake = run_cli(["flags", "a.acf.toml", "--format", "cmake", "--all"], cwd=tmp_path)
    assert cmake.returncode == 0, cmake.describe()
    assert "checked on sm_90 only" in cmake.stdout and "sm_80" in cmake.stdout, cmake.stdout
    assert "build it with CUDA_ARCHITECTURES" not in cmake.stdout, cmake.stdout
    # kernel.arch edited to the arch left out: `flags` would print -arch=sm_80 for settings chosen on sm_90
    edited = tmp_path / "edited.acf.toml"
    edited.write_text(with_kernel_arch((tmp_path / "a.acf.toml").read_text(), "sm_80"))
    refused = run_cli(["flags", str(edited)], cwd=tmp_path)
    assert refused.returncode == 2 and "kernel.arch = 'sm_80', but evidence.best was built for 'sm_90'" in refused.stderr
    assert "-arch" not in refused.stdout and "Traceback" not in refused.output, refused.describe()
    other = run_cli([*args, "--out", "b.acf.toml", "--arch", "sm_80"], cwd=tmp_path)
    assert other.returncode == 0, other.describe()
    assert "tuned for sm_80 only; sm_90 left out" in other.output and "overrides" not in other.output
    assert tomllib.loads((tmp_path / "b.acf.toml").read_text())["kernel"]["arch"] == "sm_80"


@pytest.mark.parametrize(("command", "tuned", "said"), [
    # compute_80 PTX: nvcc refuses sm_80 machine code from compute_90 ("Incompatible code generation")
    ("nvcc -gencode arch=compute_80,code=[sm_90,sm_80] -c k.cu", "sm_90", "tuned for sm_90 only; sm_80 left out"),
    # compute_80 PTX alone, no sm_80 machine code: JIT-compiled by the driver, no arch to tune (user53 #3)
    ("nvcc --generate-code=arch=compute_80,code=[sm_86,compute_80] -c k.cu", "sm_86",
     "builds for sm_86, tuned for it, and embeds PTX for compute_80 (JIT-compiled by the driver"),
])
def test_one_arch_flag_with_several_codes_is_tuned_for_its_newest(tmp_path: Path, command: str, tuned: str,
                                                                  said: str) -> None:
    """code=[sm_90,sm_80] was tuned for sm_80 (the last arch named), while the docs and the note
    say the first arch flag's arch is tuned: its first machine code, sm_90. Now its newest (user49 F3)."""
    db = _project(tmp_path, command)
    assert read_command(db, tmp_path / "k.cu", SPACE).arch == tuned
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()
    assert said in listed.stderr, listed.describe()


def test_one_arch_in_several_forms_is_no_multi_arch_build(tmp_path: Path) -> None:
    db = _project(tmp_path, "nvcc -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 "
                            "-c k.cu")
    found = read_command(db, tmp_path / "k.cu", SPACE)
    assert found.arch == "sm_90" and found.archs == ("sm_90",)
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 0 and "left out" not in listed.stderr, listed.describe()


def test_only_the_overridden_ptxas_cap_of_a_group_is_named_not_applied(tmp_path: Path) -> None:
    """`-Xptxas -O3,-v,--maxrregcount=128` beside nvcc's -maxrregcount 64 was listed as overridden as
    a whole, its -O3 searched all the same."""
    from compileiq.app import kernel_spec
    from compileiq.source.shipped import describe

    db = _project(tmp_path, "nvcc -arch=sm_90 -maxrregcount 64 -Xptxas -O3,-v,--maxrregcount=128 -c k.cu")
    spec = kernel_spec(tmp_path / "k.cu", None, db)
    assert spec.shipped is not None
    assert [(s.name, s.flag) for s in spec.shipped.settings] == [("ptxas.opt_level", "-Xptxas -O3,-v,--maxrregcount=128")]
    skipped = {f.flag: f.why for f in spec.shipped.fixed if not f.applied}
    assert set(skipped) == {"-Xptxas -v", "-Xptxas --maxrregcount=128"}, skipped
    assert "overridden by nvcc's -maxrregcount=64" in skipped["-Xptxas --maxrregcount=128"]
    line = describe(spec.shipped)[1]
    assert "-Xptxas --maxrregcount=128 (overridden" in line and "-O3,-v,--maxrregcount" not in line, line


@pytest.mark.parametrize("flags, message", [
    ("-Xptxas '-O3 -v'", "holds a space inside one -Xptxas value: nvcc passes it to ptxas through a shell"),
    ("-use_fast_math=true", "'-use_fast_math=true' gives a value to --use_fast_math, which takes none"),
])
def test_a_refused_shipped_flag_names_the_real_problem(tmp_path: Path, flags: str, message: str) -> None:
    """Both said "a value the search space does not have (it has ..., true)", the value shown in the list."""
    db = _project(tmp_path, f"nvcc -arch=sm_90 {flags} -c k.cu")
    with pytest.raises(CompileDbError) as raised:
        read_command(db, tmp_path / "k.cu", SPACE)
    assert message in str(raised.value) and "does not have" not in str(raised.value)


def test_space_does_not_list_the_cap_it_says_is_not_searched(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    (tmp_path / "tune.toml").write_text('nvcc_flags = ["-maxrregcount=64"]\n')
    listed = run_cli(["space", "k.cu", "--json"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()
    assert "ptxas.maxrregcount is not searched" in listed.stderr
    assert "ptxas.maxrregcount" not in [p["name"] for p in json.loads(listed.stdout)["parameters"]]


def test_space_shows_the_shipped_value_as_the_baseline(tmp_path: Path) -> None:
    _project(tmp_path, "nvcc -arch=sm_90 --use_fast_math -c k.cu")
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json", "--json"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()
    fast = next(p for p in json.loads(listed.stdout)["parameters"] if p["name"] == "nvcc.use_fast_math")
    assert fast["default"] is False and fast["baseline"] is True
    assert ("nvcc.use_fast_math starts from your build's true (--use_fast_math), not the default; --only or "
            "--exclude that leave it out hold it at that value in every build") in listed.stderr
    table = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path,
                    env={"COLUMNS": "250"})
    assert "True (your build; default False)" in table.stdout, table.describe()


def test_a_build_with_only_fixed_flags_is_the_baseline_as_shipped(tmp_path: Path) -> None:
    """nvcc's -maxrregcount=24 spills: the run called the baseline "defaults" and refused candidates
    for adding spill bytes "over the compiler defaults"."""
    _project(tmp_path, "nvcc -arch=sm_90 -maxrregcount=24 -c k.cu -o k.o", SPILLING_KERNEL.read_text())
    tuned = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--budget", "6", "--workers",
                     "local", "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", "k.acf.toml", "--no-simplify",
                     "--seed", "1"], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    assert "baseline (your build: compile_commands.json)" in tuned.output and "(defaults)" not in tuned.output
    assert "compiler defaults (" not in tuned.output, tuned.describe()
    assert "adds spill bytes over your build as shipped (compile_commands.json)" in tuned.output, tuned.describe()


def test_a_refusal_names_the_baseline_it_holds_to() -> None:
    from compileiq.evaluate.eligibility import Reference, refusal

    shipped = Reference(10, 0.5, {}, "static", "your build as shipped (compile_commands.json)")
    assert refusal({}, {"spill_bytes": 20, "occupancy": 0.5}, shipped) == (
        "adds spill bytes over your build as shipped (compile_commands.json) (10 -> 20)")
    assert "over the compiler defaults" in (refusal({}, {"spill_bytes": 20, "occupancy": 0.5}, Reference(10, 0.5, {})) or "")


def test_show_names_a_shipped_baseline_in_its_refusals(tmp_path: Path) -> None:
    """The run said "over your build as shipped", `show` of the same study "over the compiler
    defaults" (a user's MonteCarlo with --use_fast_math): views name the baseline alike."""
    _project(tmp_path, "nvcc -arch=sm_90 --use_fast_math -c k.cu -o k.o", CAPPED_KERNEL)
    db = f"sqlite:///{tmp_path / 't.db'}"
    tuned = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--budget", "8", "--workers",
                     "local", "--db", db, "--out", "k.acf.toml", "--no-simplify", "--strategy", "exhaustive",
                     "--only", "nvcc.use_fast_math,ptxas.maxrregcount"], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    shown = run_cli(["show", "1", "--db", db, "--top", "30"], cwd=tmp_path, env={"COLUMNS": "400"})
    assert "adds spill bytes over your build as" in shown.stdout, shown.describe()
    assert "shipped (compile_commands.json) (0 -> " in shown.stdout, shown.describe()  # as the run says it
    assert "over the compiler defaults" not in shown.stdout and "(as the baseline)" in shown.stdout


@pytest.mark.parametrize("flags, fixed", [
    ("-lcublas -lcublasLt", ["-lcublas", "-lcublasLt"]), ("-l cublas", ["-l cublas"]),
    ("--library=cublas", ["--library=cublas"]), ("-L/usr/local/cuda/lib64", ["-L/usr/local/cuda/lib64"]),
    ("-L /usr/local/cuda/lib64", ["-L /usr/local/cuda/lib64"]), ("--library-path=/opt/lib", ["--library-path=/opt/lib"]),
    ("-Xlinker=-rpath,/opt/lib", ["-Xlinker=-rpath,/opt/lib"]), ("--linker-options=--as-needed", ["--linker-options=--as-needed"]),
    ("-Xcompiler=-Wl,-z,now", ["-Xcompiler=-Wl,-z,now"]), ("-Xcompiler -fopenmp", ["-Xcompiler -fopenmp"]),
])
def test_a_linker_option_is_set_aside_however_spelled(tmp_path: Path, flags: str, fixed: list[str]) -> None:
    """llm.c's dev/cuda builds link with -lcublas -lcublasLt: `'-lcublas' is not an allowed base flag`
    stopped `space` and `tune`, while `-l cublas` was set aside as a linker option."""
    _project(tmp_path, f"nvcc -O3 --use_fast_math -arch=sm_90 {flags} -lineinfo -std=c++17 k.cu -o k")
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json", "--json"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()
    found = read_command(tmp_path / "compile_commands.json", tmp_path / "k.cu", SPACE)
    assert found.base_flags == ("-lineinfo", "-std=c++17")
    assert found.shipped is not None
    assert [f.flag for f in found.shipped.fixed if not f.applied] == ["-O3", *fixed]
    for flag in (f for f in found.shipped.fixed if f.flag in fixed):  # -fopenmp: _OPENMP in the device pass (rev50b #3)
        assert ("may change the macros" if "fopenmp" in flag.flag else "device code is unchanged") in flag.why, flag


@pytest.mark.parametrize("flags", ["-lto", "-ldir /opt/libdevice", "-ofile.o"])
def test_an_nvcc_option_spelled_like_a_library_is_not_taken_for_one(tmp_path: Path, flags: str) -> None:
    """-lto is nvcc's link-time optimisation (device code), not the library 'to'; nvcc refuses -ofile.o."""
    _project(tmp_path, f"nvcc -arch=sm_90 {flags} -c k.cu")
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 2 and "is not an allowed base flag" in listed.stderr, listed.describe()


def test_an_attached_isystem_folder_is_the_entry_directorys(tmp_path: Path) -> None:
    """red team F7: `-isysteminc` was kept as given and read against the kernel's folder, another
    folder than the build's (`-isystem inc` and `-Iinc` were resolved)."""
    (tmp_path / "build" / "inc").mkdir(parents=True)
    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    db = tmp_path / "build" / "compile_commands.json"
    db.write_text(json.dumps([{"directory": str(tmp_path / "build"), "file": "../k.cu",
                               "arguments": ["nvcc", "-isysteminc", "-arch=sm_90", "-c", "../k.cu"]}]))
    assert read_command(db, tmp_path / "k.cu", SPACE).base_flags == (f"-isystem={tmp_path / 'build' / 'inc'}",)


@pytest.mark.parametrize(("flag", "said"), [
    ("-arch=all", "every arch nvcc supports (-arch=all)"),
    ("--gpu-architecture=all-major", "every major arch nvcc supports (-arch=all-major)"),
    ("-arch all", "every arch nvcc supports (-arch=all)"),
])
def test_an_arch_set_is_named_with_the_arch_tuned(tmp_path: Path, flag: str, said: str) -> None:
    """user F2: `-arch=all` was tuned for sm_90 without a word, and the flag vanished from the ACF."""
    _project(tmp_path, f"nvcc {flag} -O3 -c k.cu -o k.o")
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()
    assert (f"note: the compile command builds for {said}: tuned for sm_90 only, the other archs left out (the "
            "chosen settings are not checked there): --arch sm_XY tunes for another") in listed.stderr, listed.describe()
    found = read_command(tmp_path / "compile_commands.json", tmp_path / "k.cu", SPACE)
    assert found.arch is None  # the tuned arch is --arch's, tune.toml's, the GPU's or the default


def test_an_all_arch_build_records_the_flag_in_the_baseline(tmp_path: Path) -> None:
    _project(tmp_path, "nvcc -arch=all -Xptxas -O3 -c k.cu -o k.o")
    tuned = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--budget", "2", "--workers",
                     "local", "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", "k.acf.toml", "--no-simplify",
                     "--arch", "sm_80"], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    assert "builds for every arch nvcc supports (-arch=all): tuned for sm_80 only" in tuned.output, tuned.describe()
    data = tomllib.loads((tmp_path / "k.acf.toml").read_text())
    assert data["kernel"]["arch"] == "sm_80"
    fixed = {f["flag"]: f for f in data["baseline"]["fixed"]}
    assert not fixed["-arch=all"]["applied"], fixed
    assert fixed["-arch=all"]["why"].startswith("builds for every arch nvcc supports (-arch=all), not tuned: the "
                                                "settings are chosen on sm_80 alone"), fixed
    gated = run_cli(["gate", "k.acf.toml"], cwd=tmp_path)
    assert gated.returncode == 0 and "stale-settings" not in gated.output, gated.describe()


def test_native_arch_says_what_it_builds_for_here(tmp_path: Path) -> None:
    from compileiq.source.arch import detect_arch

    _project(tmp_path, "nvcc -arch=native -c k.cu -o k.o")
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()
    gpu = detect_arch()
    expected = ("(-arch=native), and this machine has no GPU (nvcc builds it for its default arch here): tuned for "
                "sm_90" if gpu is None else f"(-arch=native), {gpu} here: tuned for {gpu}")
    assert f"note: the compile command builds for the GPUs of the machine that compiles it {expected}" in listed.stderr, \
        listed.describe()


def test_host_debug_information_is_set_aside(tmp_path: Path) -> None:
    """user F3: HeCBench's DEBUG=yes builds add -g (host debug information): `'-g' is not an
    allowed base flag` stopped the run. nvcc 13.0's cubin is the same with and without it."""
    db = _project(tmp_path, "nvcc -arch=sm_90 -g -O0 --debug -c k.cu -o k.o")
    found = read_command(db, tmp_path / "k.cu", SPACE)
    assert found.base_flags == ()
    assert found.shipped is not None
    assert [(f.flag, f.applied) for f in found.shipped.fixed] == [("-g", False), ("-O0", False), ("--debug", False)]
    assert found.shipped.fixed[0].why == "host debug information (nvcc -g; device debug is -G): device code is unchanged"
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()


@pytest.mark.parametrize(("flags", "why"), [
    ("-G", "-G builds device debug code, every device optimisation off: nothing to tune"),
    ("--device-debug", "--device-debug builds device debug code"),
    ("-G --dopt on", "-G builds device debug code"),
    ("--dopt on", "--dopt on sets device optimisation for a -G debug build: nothing to tune"),
    ("-dlto", "-dlto makes link-time-optimisation IR: the device code is made at link time"),
    ("--dlink-time-opt", "--dlink-time-opt makes link-time-optimisation IR"),
])
def test_a_build_with_nothing_to_tune_is_refused_saying_why(tmp_path: Path, flags: str, why: str) -> None:
    """user F3: -G, --dopt and -dlto got the generic base-flag allow-list."""
    _project(tmp_path, f"nvcc -arch=sm_90 {flags} -c k.cu -o k.o")
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 2, listed.describe()
    [line] = listed.stderr.strip().splitlines()
    assert why in line and "allowed base flag" not in line, line
    assert listed.stdout == "", listed.describe()


CMAKE_FORWARDING = ("nvcc -forward-unknown-to-host-compiler -DTILE=64 -O3 -Wall -Wextra -fopenmp -march=native "
                    "-fvisibility=hidden -Wno-unused-parameter -arch=sm_90 -Xptxas -O3 -x cu -c k.cu -o k.cu.o")


def test_options_forwarded_to_the_host_compiler_are_set_aside(tmp_path: Path) -> None:
    """user F7: CMake adds -forward-unknown-to-host-compiler, so `target_compile_options(t PRIVATE
    -Wall)` is the host compiler's: `'-Wall' is not an allowed base flag` stopped the run."""
    db = _project(tmp_path, CMAKE_FORWARDING)
    found = read_command(db, tmp_path / "k.cu", SPACE)
    assert found.base_flags == ("-DTILE=64",)
    assert found.shipped is not None
    host = ["-Wall", "-Wextra", "-fopenmp", "-march=native", "-fvisibility=hidden", "-Wno-unused-parameter"]
    forwarded = [f.flag for f in found.shipped.fixed if "not an nvcc 13.0 option: -forward-unknown-to-host-compiler forwards it" in f.why]
    assert forwarded == host and not any(f.applied for f in found.shipped.fixed if f.flag in host), found.shipped.fixed
    why = {f.flag: f.why for f in found.shipped.fixed}  # -fopenmp defines _OPENMP in the device pass too (rev50b #3)
    assert all("may change the macros the device pass predefines" in why[o] for o in ("-O3", "-fopenmp", "-march=native"))
    assert all(len(w) <= 200 for w in why.values()), why  # an ACF's [baseline] takes 200 characters of why
    assert all(why[o].startswith("host compiler warning option: device code is unchanged") for o in ("-Wall", "-Wextra"))
    applied = [f.flag for f in found.shipped.fixed if f.applied]  # every token accounted for (user49 F8)
    assert applied == ["-DTILE=64"], found.shipped.fixed
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()
    # what nvcc itself does with them: the host compiler gets each, cicc and ptxas none
    dry = subprocess.run(["nvcc", "--dryrun", *shlex.split(CMAKE_FORWARDING)[1:]], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stderr.splitlines()
    for option in host:
        assert any(line.startswith("#$ gcc") and f" {option} " in f"{line} " for line in dry), option
        assert not any(option in line for line in dry if "cicc" in line or "ptxas" in line), option
    # without the flag nvcc refuses -Wall itself; with it, an option nvcc knows is still held to the allow-list
    _project(tmp_path, CMAKE_FORWARDING.replace("-forward-unknown-to-host-compiler ", ""))
    refused = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert refused.returncode == 2 and "'-Wall' is not an allowed base flag" in refused.stderr, refused.describe()
    _project(tmp_path, CMAKE_FORWARDING.replace("-Wall", "-keep-device-functions"))
    refused = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert refused.returncode == 2 and "'-keep-device-functions' is not an allowed base flag" in refused.stderr


def test_every_option_nvcc_lists_is_known() -> None:
    """The options nvcc does not hand to the host compiler: its own, as `nvcc --help` lists them."""
    from compileiq.source.nvcc_options import NVCC_OPTIONS

    listed = subprocess.run(["nvcc", "--help"], capture_output=True, text=True, check=True).stdout
    options = {word.strip("(),") for line in listed.splitlines() if line.startswith("--")
               for word in line.split() if word.strip("(),").startswith("-") and "<" not in word}
    assert options and options <= NVCC_OPTIONS, sorted(options - NVCC_OPTIONS)


def test_a_string_macro_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    """user F7: `target_compile_definitions(t PRIVATE VERSION="1.2")` was refused with the value
    allow-list alone, no way forward. It stays refused (nvcc hands -D values to /bin/sh)."""
    _project(tmp_path, 'nvcc -forward-unknown-to-host-compiler -DVERSION=\\"1.2\\" -arch=sm_90 -c k.cu -o k.o')
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 2, listed.describe()
    [line] = listed.stderr.strip().splitlines()
    assert ("-DVERSION=\"1.2\": value '\"1.2\"' of VERSION contains '\"', which nvcc would hand to /bin/sh: "
            "refused; if the code builds without it, give VERSION a default in the source (#ifndef VERSION) and tune "
            "from a copy of the compilation database without it, or without --compile-commands") in line, line


@pytest.mark.parametrize("define, shown", [("-D=1", "-D=1: '' is not a valid macro name"),
                                           ("-D -c", "-D -c: '-c' is not a valid macro name"),
                                           ("-D1X=2", "-D1X=2: '1X' is not a valid macro name")])
def test_a_define_that_names_no_macro_is_refused_without_advice_about_its_value(tmp_path: Path, define: str,
                                                                                  shown: str) -> None:
    """review F9: a -D whose name is bad got the string-value advice, naming an empty macro
    ("give  a default in the source (#ifndef )") or another option ("#ifndef -c")."""
    _project(tmp_path, f"nvcc {define} -arch=sm_90 -c k.cu -o k.o")
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 2, listed.describe()
    [line] = listed.stderr.strip().splitlines()
    assert shown in line and "a -D names a macro (-DNAME or -DNAME=VALUE)" in line, line
    assert "#ifndef" not in line and "/bin/sh" not in line, line

def test_a_quoted_include_above_the_kernel_needs_no_include_dirs(tmp_path: Path) -> None:
    """user F1: PolyBench's 2DCONV (`#include "../../common/polybench.h"`, built by its Makefile
    with no -I) stopped `space` and `tune` asking for include_dirs, though the README says a Bear
    build needs none; `space` printed its whole table first, then failed."""
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "polybench.h").write_text("#define SCALE 2.0f\n")
    folder = tmp_path / "CUDA" / "2DCONV"
    folder.mkdir(parents=True)
    (folder / "conv.cu").write_text('#include "../../common/polybench.h"\n'
                                    "__global__ void conv(float* p) { p[threadIdx.x] *= SCALE; }\n")
    (folder / "compile_commands.json").write_text(json.dumps([{
        "directory": str(folder), "file": str(folder / "conv.cu"),
        "arguments": ["nvcc", "-O3", "-arch=sm_90", "-Xptxas", "-O3", "conv.cu", "-o", "conv.exe"]}]))
    listed = run_cli(["space", "conv.cu", "--compile-commands", "compile_commands.json"], cwd=folder)
    assert listed.returncode == 0 and "include_dirs" not in listed.stderr, listed.describe()
    tuned = run_cli(["tune", "conv.cu", "--compile-commands", "compile_commands.json", "--budget", "2", "--workers",
                     "local", "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", "k.acf.toml", "--no-simplify"],
                    cwd=folder)
    assert tuned.returncode == 0, tuned.describe()
    # a header a worker could not find (an absolute #include) stops `space` before its table
    (folder / "conv.cu").write_text(f'#include "{tmp_path}/common/polybench.h"\n'
                                    "__global__ void conv(float* p) { p[threadIdx.x] *= SCALE; }\n")
    refused = run_cli(["space", "conv.cu", "--compile-commands", "compile_commands.json"], cwd=folder)
    assert refused.returncode == 2 and "polybench.h lies outside the kernel's folder" in refused.stderr
    assert refused.stdout == "", refused.describe()


def test_nvcc_options_it_does_not_list_are_never_set_aside_as_the_host_compilers(tmp_path: Path) -> None:
    """review F1: nvcc takes -Xcicc (and -Xcudafe, -Xfatbin, ...) without listing them in --help;
    under -forward-unknown-to-host-compiler `-Xcicc -O0` was set aside as a host option (and its -O0
    as host -O), so "your build" was built without it: the shipped build makes other device code."""
    for option in ("-Xcicc -O0", "--cicc-options=-O0", "-Xcudafe --display_error_number", "-Xassembler -O0"):
        command = f"nvcc -forward-unknown-to-host-compiler {option} -arch=sm_90 -c k.cu -o k.o"
        _project(tmp_path, command)
        listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
        first = option.split()[0].partition("=")[0]
        assert listed.returncode == 2 and "not an allowed base flag" in listed.stderr, listed.describe()
        assert first in listed.stderr and "Traceback" not in listed.stderr, listed.describe()
    # nvcc itself takes -Xcicc and hands -O0 to cicc, not to the host compiler
    dry = subprocess.run(["nvcc", "--dryrun", "-forward-unknown-to-host-compiler", "-Xcicc", "-O0", "-arch=sm_90",
                          "-c", "k.cu"], cwd=tmp_path, capture_output=True, text=True, check=True).stderr.splitlines()
    assert any("cicc" in line and " -O0 " in f"{line} " for line in dry), dry
