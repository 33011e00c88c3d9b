"""Tune the CUDA code people actually have: each shape in tests/corpus/ is tuned, with no wrapper,
by the real `compileiq tune ... --objective static --budget 6 --workers local`; then the spec
side of it (dependencies from `nvcc -M`, base flags, per-entry launch facts, the study identity,
errors that say what failed, a relocatable ACF) is checked through the library and the CLI.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sqlite3
import subprocess
import time
import tomllib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import CliResult, run_cli, tune_in

from compileiq import app
from compileiq.core.errors import CompileIQError, UsageError
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.source.macros import check_macros_take_effect
from compileiq.tuning.progress import SilentProgress

CORPUS = Path(__file__).resolve().parent / "corpus"
NARROW = ["--only", "ptxas.opt_level", "--only", "ptxas.maxrregcount"]


@dataclass(frozen=True)
class Shape:
    kernel: str  # relative to tests/corpus
    entries: tuple[str, ...]  # every kernel the compiled module must hold (plain or mangled prefix)


# fmt: off
SHAPES: dict[str, Shape] = {
    "included_kernel": Shape("included_kernel/main.cu", ("saxpy",)),
    "headers_cuh": Shape("headers_cuh/ops.cuh", ("normalize", "histogram")),
    "include_dirs": Shape("include_dirs/blur.cu", ("blur",)),
    "dynamic_parallelism": Shape("dynamic_parallelism/tree.cu", ("parent", "child")),
    "extended_lambda": Shape("extended_lambda/transform.cu", ("transform",)),
    "header_templates": Shape("header_templates/sum.cu", ("block_sum",)),
    "many_kernels": Shape("many_kernels/pipeline.cu", ("scan_tile", "copy4", "stage")),
    "relative_include": Shape("relative_include/examples/block/block_sum.cu", ("BlockSumKernel",)),
}
# fmt: on


def _tune(workspace: Path, name: str) -> tuple[CliResult, Path]:
    folder = workspace / name
    shutil.copytree(CORPUS / name, folder)
    kernel = folder / Path(SHAPES[name].kernel).relative_to(name)
    acf = workspace / "acfs" / f"{name}.acf.toml"
    args = ["tune", str(kernel), "--objective", "static", "--budget", "6", "--workers", "local", "--arch",
            "sm_90", "--db", f"sqlite:///{workspace / f'{name}.db'}", "--out", str(acf), "--json", *NARROW]
    return run_cli(args, cwd=workspace, timeout=600), acf


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Future[tuple[CliResult, Path]]]:
    workspace = tmp_path_factory.mktemp("real")
    pool = ThreadPoolExecutor(max_workers=3)
    futures = {name: pool.submit(_tune, workspace, name) for name in SHAPES}
    pool.shutdown(wait=False)
    return futures


def _acf(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


def _entries(db: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("select metrics from trials where number = 0").fetchall()
    import json

    return [entry["name"] for entry in json.loads(rows[0][0])["entries"]]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_real_code_shape_tunes_without_a_wrapper(tuned: dict[str, Future[tuple[CliResult, Path]]], name: str) -> None:
    result, acf = tuned[name].result()
    assert result.returncode == 0, result.describe()
    document = _acf(acf)
    assert document["evidence"]["baseline"]["instructions"] > 0  # the module was built and scored
    assert document["objective"]["best"] <= document["objective"]["baseline"]
    entries = _entries(acf.parent.parent / f"{name}.db")
    for wanted in SHAPES[name].entries:
        assert any(e == wanted or e.startswith(f"_Z{len(wanted)}{wanted}") for e in entries), (wanted, entries)


@pytest.mark.slow
def test_base_flags_are_recorded_and_printed_for_a_rebuild(tuned: dict[str, Future[tuple[CliResult, Path]]]) -> None:
    result, acf = tuned["dynamic_parallelism"].result()
    assert result.returncode == 0, result.describe()
    assert _acf(acf)["base"]["nvcc_flags"] == ["-rdc=true"]
    everything = run_cli(["flags", str(acf), "--all"], cwd=acf.parent)
    tuned_only = run_cli(["flags", str(acf)], cwd=acf.parent)
    assert everything.stdout.split() == ["-arch=sm_90", "-rdc=true", *tuned_only.stdout.split()[1:]]
    assert "-rdc=true" not in tuned_only.stdout
    ptxas = run_cli(["flags", str(acf), "--all", "--stage", "ptxas"], cwd=acf.parent)
    assert ptxas.stdout.split()[:1] == ["--compile-only"]  # relocatable PTX: ptxas -c
    _, lambda_acf = tuned["extended_lambda"].result()
    assert _acf(lambda_acf)["base"]["nvcc_flags"] == ["--extended-lambda", "-std=c++17"]


@pytest.mark.slow
def test_per_entry_launch_facts_score_each_kernel(tuned: dict[str, Future[tuple[CliResult, Path]]]) -> None:
    result, acf = tuned["many_kernels"].result()
    assert result.returncode == 0, result.describe()
    import json

    with contextlib.closing(sqlite3.connect(acf.parent.parent / "many_kernels.db")) as conn:
        metrics = json.loads(conn.execute("select metrics from trials where number = 0").fetchone()[0])
    # scan_tile and copy4: __launch_bounds__ in include/kernels.cuh with macros from bounds.h;
    # stage: the [launch.stage] table, STAGE_BLOCK * sizeof(float) bytes of dynamic smem.
    assert metrics["launch"] == {"scan_tile": [512, 0], "copy4": [64, 0], "stage": [256, 1024]}


# -- dependencies from the compiler --------------------------------------------------------------


def _copy(tmp_path: Path, name: str) -> Path:
    shutil.copytree(CORPUS / name, tmp_path / name)
    return tmp_path / name


def test_angle_bracket_headers_from_include_dirs_are_bundled_and_hashed(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "include_dirs")
    spec = load_spec(folder / "blur.cu", arch="sm_90")
    start = time.perf_counter()
    bundle = bundle_sources(spec)
    seconds = time.perf_counter() - start
    assert [rel for rel, _ in bundle.files] == ["blur.cu", "include/mylib/helper.h", "include/mylib/config.h"]
    assert bundle.include_args == ("-Iinclude",) and seconds < 10  # nvcc -M: ~0.3 s unloaded
    (folder / "include" / "mylib" / "config.h").write_text("#pragma once\n#define MYLIB_WEIGHT 0.5f\n")
    assert bundle_sources(spec).sha256 != bundle.sha256
    main = bundle.write_to(tmp_path / "worker")  # relocatable: builds where nothing else is
    assert (main.parent / "include" / "mylib" / "config.h").is_file()


def test_toolchain_headers_are_not_bundled(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text('#include <cuda_fp16.h>\n#include <cstdio>\n__global__ void k(__half* x) {}\n')
    assert [rel for rel, _ in bundle_sources(load_spec(tmp_path / "k.cu", arch="sm_90")).files] == ["k.cu"]


def test_a_header_by_absolute_path_outside_the_kernel_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "h.h").write_text("#define H 1\n")
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "k.cu").write_text(f'#include "{tmp_path}/elsewhere/h.h"\n__global__ void k(int* x) {{ *x = H; }}\n')
    with pytest.raises(UsageError, match="lies outside the kernel's folder and its include_dirs") as info:
        bundle_sources(load_spec(tmp_path / "k" / "k.cu", arch="sm_90"))
    assert "\n" not in str(info.value)


# -- the study identity --------------------------------------------------------------------------

TAPS_KERNEL = """\
extern "C" __global__ void fir(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    #pragma unroll
    for (int k = 0; k < TAPS; ++k) acc += in[(i + k) % n] * (k + 1);
    if (i < n) out[i] = acc;
}
"""


def _tune_lib(folder: Path, out: Path, budget: int = 2, kernel: str = "fir.cu", arch: str = "sm_90",
              only: tuple[str, ...] = ("ptxas.opt_level",)) -> Any:
    options = app.TuneOptions(kernel=folder / kernel, objective="static", budget=budget, workers="local",
                              db=f"sqlite:///{folder.parent / 'id.db'}", out=out, arch=arch, only=only,
                              simplify=False)
    return app.tune(options, SilentProgress())


def _project(folder: Path, name: str, source: str, toml: str = "") -> Path:
    """``folder`` made, holding the kernel file ``name`` and, when given, its tune.toml."""
    folder.mkdir()
    (folder / name).write_text(source)
    if toml:
        (folder / "tune.toml").write_text(toml)
    return folder


def _baseline_of(tmp_path: Path, name: str, source: str) -> Any:
    """The baseline trial of a one-trial tune of ``source``, written to tmp_path/k/NAME."""
    folder = _project(tmp_path / "k", name, source)
    return _tune_lib(folder, tmp_path / "k.acf.toml", budget=1, kernel=name).result.trials[0]


def test_a_changed_tune_toml_is_a_new_study_and_the_acf_agrees(tmp_path: Path) -> None:
    folder = tmp_path / "fir"
    folder.mkdir()
    (folder / "fir.cu").write_text(TAPS_KERNEL)
    (folder / "tune.toml").write_text("[defines]\nTAPS = 64\n")
    out = tmp_path / "fir.acf.toml"
    first = _tune_lib(folder, out)
    acf64 = _acf(out)
    assert _tune_lib(folder, out).result.study.name == first.result.study.name  # same settings: same study
    (folder / "tune.toml").write_text("[defines]\nTAPS = 8\n")
    second = _tune_lib(folder, out)
    assert second.result.study.name != first.result.study.name
    assert second.result.study.key.source_sha256 != first.result.study.key.source_sha256
    assert [t.number for t in second.result.trials] == [0, 1]  # nothing reused from the TAPS=64 study
    acf8 = _acf(out)
    assert acf64["args"]["defines"] == ["-DTAPS=64"] and acf8["args"]["defines"] == ["-DTAPS=8"]
    assert acf8["provenance"]["study"] == second.result.study.name
    assert acf8["kernel"]["settings_sha256"] != acf64["kernel"]["settings_sha256"]


@pytest.mark.parametrize("change", ['entries = ["fir"]\n', "block_size = 128\n", "dynamic_smem = 64\n",
                                    "rtol = 0.1\n", 'nvcc_flags = ["-lineinfo"]\n', 'run_args = ["--n", "4"]\n',
                                    '[launch.fir]\nblock_size = 64\n'])
def test_every_build_or_score_setting_is_in_the_identity(tmp_path: Path, change: str) -> None:
    (tmp_path / "fir.cu").write_text(TAPS_KERNEL)
    (tmp_path / "tune.toml").write_text("[defines]\nTAPS = 4\n")
    before = load_spec(tmp_path / "fir.cu", arch="sm_90").settings_sha256()
    (tmp_path / "tune.toml").write_text(change + "[defines]\nTAPS = 4\n" if not change.startswith("[")
                                        else "[defines]\nTAPS = 4\n" + change)
    assert load_spec(tmp_path / "fir.cu", arch="sm_90").settings_sha256() != before


# -- errors that say what failed -----------------------------------------------------------------


def test_a_kernel_that_does_not_build_stops_after_the_baseline_alone(tmp_path: Path) -> None:
    folder = tmp_path / "fir"
    folder.mkdir()
    (folder / "fir.cu").write_text(TAPS_KERNEL.replace("float acc = 0.0f;", "float acc = ;"))
    (folder / "tune.toml").write_text("[defines]\nTAPS = 4\n")
    with pytest.raises(CompileIQError, match=r"fir.cu does not build with default settings: .*error: expected an expression"):
        _tune_lib(folder, tmp_path / "x.acf.toml", budget=8)
    with contextlib.closing(sqlite3.connect(tmp_path / "id.db")) as conn:
        assert conn.execute("select number, state from trials").fetchall() == [(0, "failed")]


def test_a_call_into_another_file_without_rdc_says_what_to_put_in_tune_toml(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "separate_compilation")
    with pytest.raises(CompileIQError, match=r'transform.cu does not build .*function .* needs nvcc_flags = \["-rdc=true"\] in tune.toml'):
        _tune_lib(folder, tmp_path / "x.acf.toml", kernel="transform.cu")
    (folder / "tune.toml").write_text('nvcc_flags = ["-rdc=true"]\n')
    _tune_lib(folder, tmp_path / "y.acf.toml", kernel="transform.cu")  # the hint is all it needed


def test_a_baseline_past_the_compile_timeout_names_the_tune_toml_key(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "relative_include") / "examples" / "block"
    (folder / "tune.toml").write_text('include_dirs = ["../.."]\ncompile_timeout_s = 0.05\n')
    with pytest.raises(CompileIQError, match=r"does not build .*timeout: .* needs a larger compile_timeout_s in tune.toml: now 0.05 s"):
        _tune_lib(folder, tmp_path / "x.acf.toml", kernel="block_sum.cu")


ROWS_KERNEL = """// After NVIDIA/cuda-samples convolutionSeparable.cu (BSD-3): its tile sizes are plain #defines
#define ROWS_BLOCKDIM_X 16
/* a comment
   over two lines */
#define ROWS_RESULT_STEPS 8
__global__ void rows(float* d) { d[threadIdx.x * ROWS_RESULT_STEPS] = ROWS_BLOCKDIM_X; }
"""


def test_a_tuned_macro_the_kernel_defines_itself_is_refused_naming_the_line(tmp_path: Path) -> None:
    folder = tmp_path / "conv"
    folder.mkdir()
    (folder / "conv.cu").write_text(ROWS_KERNEL)
    (folder / "tune.toml").write_text("[tune.defines]\nROWS_RESULT_STEPS = [8, 4]\n")
    result = tune_in(tmp_path, kernel="conv/conv.cu")
    assert result.returncode == 2, result.describe()
    assert result.stderr.strip().splitlines() == [
        (f"error: {folder / 'tune.toml'}: tune.defines.ROWS_RESULT_STEPS: conv.cu:5 #defines ROWS_RESULT_STEPS "
         "itself, so -DROWS_RESULT_STEPS has no effect: guard that line with #ifndef ROWS_RESULT_STEPS")]
    (folder / "tune.toml").write_text("[defines]\nROWS_BLOCKDIM_X = 32\n")
    spec = load_spec(folder / "conv.cu", arch="sm_90")
    with pytest.raises(UsageError, match=r"defines.ROWS_BLOCKDIM_X: conv.cu:2 #defines ROWS_BLOCKDIM_X itself"):
        check_macros_take_effect(spec, bundle_sources(spec))


@pytest.mark.parametrize("guard", ["#ifndef ROWS_RESULT_STEPS", "#if !defined(ROWS_RESULT_STEPS)",
                                   "#  if defined ROWS_RESULT_STEPS && 0\n#else"])
def test_a_guarded_macro_define_is_tunable(tmp_path: Path, guard: str) -> None:
    source = ROWS_KERNEL.replace("#define ROWS_RESULT_STEPS 8", f"{guard}\n#define ROWS_RESULT_STEPS 8\n#endif")
    (tmp_path / "conv.cu").write_text(source)
    (tmp_path / "tune.toml").write_text("[tune.defines]\nROWS_RESULT_STEPS = [8, 4]\n")
    spec = load_spec(tmp_path / "conv.cu", arch="sm_90")
    check_macros_take_effect(spec, bundle_sources(spec))


def test_a_kernel_of_arch_specific_instructions_names_the_arch_it_needs(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "arch_specific")
    with pytest.raises(CompileIQError, match=r"'wgmma.fence' not supported on .target 'sm_90' \(arch-specific "
                                             r"instructions need --arch sm_90a, or arch = \"sm_90a\" in tune.toml\)"):
        _tune_lib(folder, tmp_path / "x.acf.toml", kernel="fence.cu")
    _tune_lib(folder, tmp_path / "y.acf.toml", kernel="fence.cu", arch="sm_90a")  # what the hint says works


def test_a_header_of_kernel_templates_says_they_need_an_instantiation(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "kernel_template")
    with pytest.raises(CompileIQError, match=r"sgemm.cuh: no kernel .*: its kernels are templates that nothing instantiates"):
        _tune_lib(folder, tmp_path / "x.acf.toml", kernel="sgemm.cuh")
    (folder / "inst.cu").write_text('#include "sgemm.cuh"\ntemplate __global__ void sgemmTiled<32, 32, 8>(int, int, int, '
                                    "const float*, const float*, float*);\n")
    _tune_lib(folder, tmp_path / "y.acf.toml", kernel="inst.cu")  # what the hint says works


def test_a_quoted_include_that_climbs_out_of_the_kernel_folder_builds_in_the_bundle(tmp_path: Path) -> None:
    # cub/examples/block/*.cu include "../../test/test_util.h"; with include_dirs = ["../.."] the
    # bundle mirrors that folder, so the worker finds the header where the source says it is
    # (before: the kernel's folder was the bundle's root and the header went to inc0/: not found).
    folder = _copy(tmp_path, "relative_include")
    bundle = bundle_sources(load_spec(folder / "examples" / "block" / "block_sum.cu", arch="sm_90"))
    assert bundle.main == "examples/block/block_sum.cu"
    assert {rel for rel, _ in bundle.files} == {"examples/block/block_sum.cu", "test/test_util.h"}
    assert bundle.include_args == ("-I.",)


def test_a_header_outside_every_include_folder_is_bundled_where_the_include_finds_it(tmp_path: Path) -> None:
    """Without include_dirs the quoted ../../test/test_util.h stopped the run; nvcc needs no -I for it."""
    folder = _copy(tmp_path, "relative_include")
    (folder / "examples" / "block" / "tune.toml").unlink()
    bundle = bundle_sources(load_spec(folder / "examples" / "block" / "block_sum.cu", arch="sm_90"))
    assert bundle.main == "examples/block/block_sum.cu" and bundle.include_args == ()
    assert {rel for rel, _ in bundle.files} == {"examples/block/block_sum.cu", "test/test_util.h"}


def test_a_missing_header_names_the_error_not_the_include_chain(tmp_path: Path) -> None:
    (tmp_path / "h.h").write_text('#include "nothere.h"\n')
    (tmp_path / "k.cu").write_text('#include "h.h"\n__global__ void k(int* x) { *x = 1; }\n')
    result = run_cli(["tune", "k.cu", "--workers", "local", "--arch", "sm_90", "--db", "sqlite:///db.sqlite"],
                     cwd=tmp_path)
    assert result.returncode != 0 and len(result.stderr_lines) == 1, result.describe()
    assert "fatal error: nothere.h: No such file or directory" in result.stderr_lines[0]
    assert "In file included from" not in result.stderr_lines[0]


def test_a_file_without_a_kernel_says_so(tmp_path: Path) -> None:
    (tmp_path / "host.cu").write_text("// no __global__ here, only a comment naming it\nint twice(int x) { return 2 * x; }\n")
    result = run_cli(["tune", "host.cu", "--workers", "local", "--arch", "sm_90", "--db", "sqlite:///db.sqlite",
                      "--json"], cwd=tmp_path)
    assert result.returncode == 1 and len(result.stderr_lines) == 1, result.describe()
    assert result.stderr_lines[0] == "error: host.cu: no kernel (__global__ function) in the compiled module"


def test_a_utf8_tune_toml_reads_whatever_the_locale(tmp_path: Path) -> None:
    (tmp_path / "fir.cu").write_text(TAPS_KERNEL)
    (tmp_path / "tune.toml").write_text("# Größe der Filter (TOML is UTF-8)\n[tune.defines]\nTAPS = [4, 8]\n", encoding="utf-8")
    result = run_cli(["space", "fir.cu"], cwd=tmp_path, env={"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0",
                                                             "PYTHONCOERCECLOCALE": "0"})
    assert result.returncode == 0, result.describe()  # before: 'ascii' codec can't decode byte 0xc3
    assert "define.TAPS" in result.stdout


# -- a relocatable ACF ---------------------------------------------------------------------------


def test_a_clone_elsewhere_gates_the_acf(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "fir").mkdir(parents=True)
    (repo / "fir" / "fir.cu").write_text(TAPS_KERNEL)
    (repo / "fir" / "tune.toml").write_text("[defines]\nTAPS = 4\n")
    with contextlib.chdir(repo):
        _tune_lib(Path("fir").resolve(), Path("acfs/fir.acf.toml"))
    assert _acf(repo / "acfs" / "fir.acf.toml")["kernel"]["path"] == "../fir/fir.cu"
    clone = tmp_path / "clone"
    shutil.copytree(repo, clone)
    shutil.rmtree(repo)
    result = run_cli(["gate", str(clone / "acfs" / "fir.acf.toml"), "--static"], cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    assert "gate PASS: 1/1" in result.stdout


def test_flags_all_rebuilds_a_kernel_whose_headers_are_in_a_sibling_folder(tmp_path: Path) -> None:
    # apps/scale/scale.cu includes "check_macros.h" from ../../common (tune.toml include_dirs), as
    # a samples repository does; the ACF goes to acfs/ and the rebuild runs from the repository root.
    from compileiq.core.toolchain import find_toolchain

    repo = _copy(tmp_path, "sibling_common")
    args = ["tune", "apps/scale/scale.cu", "--objective", "static", "--budget", "2", "--workers", "local",
            "--arch", "sm_90", "--db", "sqlite:///db.sqlite", "--out", "acfs/scale.acf.toml", *NARROW]
    result = run_cli(args, cwd=repo)
    assert result.returncode == 0, result.describe()
    assert _acf(repo / "acfs" / "scale.acf.toml")["base"]["nvcc_flags"] == ["-I../../common"]  # from the kernel's folder
    everything = run_cli(["flags", "acfs/scale.acf.toml", "--all"], cwd=repo)
    assert everything.stdout.split() == ["-arch=sm_90", "-Icommon"], everything.describe()
    build = [find_toolchain().nvcc, *everything.stdout.split(), "-c", "apps/scale/scale.cu", "-o", str(tmp_path / "k.o")]
    done = subprocess.run(build, check=False, cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr  # before: check_macros.h: No such file or directory
    from_acfs = run_cli(["flags", "scale.acf.toml", "--all"], cwd=repo / "acfs")
    assert from_acfs.stdout.split() == ["-arch=sm_90", "-I../common"], from_acfs.describe()
    cmake = run_cli(["flags", "acfs/scale.acf.toml", "--all", "--format", "cmake"], cwd=repo)
    # CMake builds elsewhere: absolute at configure, from whichever checkout includes the snippet
    assert 'COMPILE_OPTIONS "-I${CMAKE_CURRENT_SOURCE_DIR}/common")' in cmake.stdout, cmake.describe()


# -- tune.toml keys of this layer ----------------------------------------------------------------


@pytest.mark.parametrize(("toml", "key"), [
    ('nvcc_flags = "-rdc=true"\n', "nvcc_flags"),
    ('nvcc_flags = ["-rdc=maybe"]\n', "nvcc_flags"),
    ('nvcc_flags = ["-I", "missing"]\n', "include_dirs"),
    ("[launch.fir]\nthreads = 3\n", "launch.fir"),
    ('[launch.fir]\nblock_size = "2 ** 10"\n', "launch.fir.block_size"),
    ("[launch.fir]\nblock_size = true\n", "launch.fir.block_size"),
    ('[launch."bad name"]\nblock_size = 1\n', "launch.bad name"),
])
def test_bad_base_flags_and_launch_tables_name_the_key(tmp_path: Path, toml: str, key: str) -> None:
    (tmp_path / "fir.cu").write_text(TAPS_KERNEL)
    (tmp_path / "tune.toml").write_text(toml)
    with pytest.raises(UsageError) as info:
        load_spec(tmp_path / "fir.cu", arch="sm_90")
    assert "\n" not in str(info.value) and f"{key}:" in str(info.value)


@pytest.mark.parametrize(("table", "says"), [
    ("block_size = 0", "launch.fir.block_size: 0 must be from 1 to 1024"),
    ("block_size = 2048", "launch.fir.block_size: 2048 must be from 1 to 1024"),
    ('block_size = "-32"', "launch.fir.block_size: -32 must be from 1 to 1024"),
    ('block_size = "TAPS * 512"', "launch.fir.block_size: 'TAPS * 512' is 2048 with the defaults: it must be"),
    ("dynamic_smem = -4", "launch.fir.dynamic_smem: -4 must be from 0 to 2147483647"),
    ('dynamic_smem = "TAPS * 1024 * 1024 * 1024"', "launch.fir.dynamic_smem: 'TAPS * 1024 * 1024 * 1024' is"),
])
def test_a_launch_table_no_launch_could_ask_for_fails_before_any_build(tmp_path: Path, table: str, says: str) -> None:
    # Before, each scored every variant alike (occupancy 0, or 100% for negative bytes) and the
    # run "succeeded"; the top-level block_size and dynamic_smem were already range-checked.
    from compileiq.source.launch import LaunchModel

    (tmp_path / "fir.cu").write_text(TAPS_KERNEL)
    (tmp_path / "tune.toml").write_text(f"[tune.defines]\nTAPS = [4, 8]\n[launch.fir]\n{table}\n")
    with pytest.raises(UsageError) as info:
        LaunchModel(load_spec(tmp_path / "fir.cu", arch="sm_90"))
    assert "\n" not in str(info.value) and says in str(info.value)
    (tmp_path / "tune.toml").write_text('[tune.defines]\nTAPS = [4, 8]\n[launch.fir]\nblock_size = "TAPS * 256"\n')
    assert LaunchModel(load_spec(tmp_path / "fir.cu", arch="sm_90")).facts("fir", {})[0] == 1024


def test_a_variant_whose_macros_take_its_launch_out_of_range_fails_alone(tmp_path: Path) -> None:
    # The defaults are checked before any build; other values of a tuned macro only per variant.
    # Before, TAPS = -64 scored -64 KiB of dynamic smem as extra occupancy and TAPS = 12 (a
    # division by zero in block_size) stopped the whole run.
    folder = _project(tmp_path / "fir", "fir.cu", TAPS_KERNEL,
                      '[tune.defines]\nTAPS = [4, -64, 12, 8]\n[launch.fir]\n'
                      'dynamic_smem = "TAPS * 1024"\nblock_size = "1024 / (TAPS - 12) + 512"\n')
    result = _tune_lib(folder, tmp_path / "fir.acf.toml", budget=8, only=("define.TAPS",)).result
    trials = {t.config["define.TAPS"]: t for t in result.trials}
    assert sorted(trials) == [-64, 4, 8, 12]
    assert trials[-64].value is None and "launch.fir.dynamic_smem: 'TAPS * 1024' is -65536 in this variant: it must be from 0" in (trials[-64].reason or "")
    assert trials[12].value is None and "launch.fir.block_size: '1024 / (TAPS - 12)': division by zero" in (trials[12].reason or "")
    assert trials[4].value is not None and trials[8].value is not None


TEMPLATE_BOUNDS = """\
template <int THREADS> __global__ void __launch_bounds__(THREADS) tile(float* x) { x[threadIdx.x] *= 2.0f; }
template __global__ void tile<128>(float*);
__global__ void unbounded(float* x) { x[threadIdx.x] += 1.0f; }
"""


def test_a_template_parameters_launch_bounds_is_read_from_the_compiled_code(tmp_path: Path) -> None:
    # __launch_bounds__(THREADS) of a template (CUB's kernels, most GEMM libraries) cannot be read
    # from the source; it was scored at the default 256 threads. The PTX says .maxntid 128.
    baseline = _baseline_of(tmp_path, "tile.cu", TEMPLATE_BOUNDS)
    assert baseline.metrics["launch"] == {"_Z4tileILi128EEvPf": [128, 0], "_Z9unboundedPf": [256, 0]}
    by_name = {e["name"]: e for e in baseline.metrics["entries"]}
    assert by_name["_Z4tileILi128EEvPf"]["max_threads"] == 128 and by_name["_Z9unboundedPf"]["max_threads"] == 0


def test_cubs_placeholder_kernel_is_not_scored_as_one_of_the_kernels(tmp_path: Path) -> None:
    # Every file that includes CUB or Thrust compiles cub::EmptyKernel<void>, which the code never
    # launches: it was scored with the user's kernel (its instructions added, its occupancy counted).
    baseline = _baseline_of(tmp_path, "mine.cu", "#include <cub/cub.cuh>\n"
                            "__global__ void mine(float* x) { x[threadIdx.x] += 1.0f; }\n")
    assert [e["name"] for e in baseline.metrics["entries"]] == ["_Z4minePf"], baseline.metrics["entries"]


def test_a_launch_table_naming_an_unknown_macro_fails_before_any_build(tmp_path: Path) -> None:
    from compileiq.source.launch import LaunchModel

    (tmp_path / "fir.cu").write_text(TAPS_KERNEL)
    (tmp_path / "tune.toml").write_text('[defines]\nTAPS = 4\n[launch.fir]\ndynamic_smem = "NOPE * 4"\n')
    with pytest.raises(UsageError, match=r"tune.toml: launch.fir.dynamic_smem: unknown macro 'NOPE'"):
        LaunchModel(load_spec(tmp_path / "fir.cu", arch="sm_90"))


def test_a_blackwell_kernel_names_sm_100a_from_any_other_target_and_tunes_there(tmp_path: Path) -> None:
    # tcgen05 is sm_100a's: the hint said "--arch sm_90a" on sm_90 (which fails the same way) and
    # "sm_90aa" on sm_90a; and sm_100a itself stopped with "no occupancy table for sm_100a".
    folder = _copy(tmp_path, "blackwell_namespace")
    for arch in ("sm_90", "sm_90a", "sm_100"):
        with pytest.raises(CompileIQError, match=rf"'tcgen05.alloc' not supported on .target '{arch}' \(arch-specific "
                                                 r"instructions need --arch sm_100a, or arch = \"sm_100a\" in tune.toml\)"):
            _tune_lib(folder, tmp_path / f"{arch}.acf.toml", kernel="tmem.cu", arch=arch)
    tuned = _tune_lib(folder, tmp_path / "ok.acf.toml", kernel="tmem.cu", arch="sm_100a")  # what the hint says works
    assert tuned.result.trials[0].metrics["occupancy"] > 0


@pytest.mark.parametrize("name", ["gemm", "gemm_n7168_k5120::gemm"])
def test_a_kernel_in_a_namespace_is_named_by_its_plain_or_qualified_name(tmp_path: Path, name: str) -> None:
    # [launch.gemm] stopped the run ("names no kernel of the build; found: _ZN16gemm_n7168_k51204gemm...")
    # and [launch."gemm_n7168_k5120::gemm"] was refused as "not a kernel name".
    folder = _copy(tmp_path, "blackwell_namespace")
    (folder / "tune.toml").write_text(f'entries = ["{name}"]\n[launch."{name}"]\ndynamic_smem = "64 * 1024"\n')
    baseline = _tune_lib(folder, tmp_path / "x.acf.toml", budget=1, kernel="tmem.cu", arch="sm_100a").result.trials[0]
    assert baseline.metrics["launch"] == {"_ZN16gemm_n7168_k51204gemmE14CUtensorMap_stPj": [128, 65536]}
    assert baseline.metrics["occupancy"] == pytest.approx(3 * 4 / 64)  # 3 blocks of 64 KiB + 1 KiB in 228 KiB


TEMPLATED_REDUCTION = """\
template <typename T, unsigned int blockSize, bool nIsPow2>
__global__ void reduce6(const T* in, T* out, unsigned int n) {
    extern __shared__ unsigned char raw[];
    T* sdata = reinterpret_cast<T*>(raw);
    T sum = 0;
    for (unsigned int i = blockIdx.x * blockSize * 2 + threadIdx.x; i < n; i += blockSize * 2 * gridDim.x) {
        sum += in[i];
        if (nIsPow2 || i + blockSize < n) sum += in[i + blockSize];
    }
    sdata[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned int s = blockSize / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sdata[threadIdx.x] = sum = sum + sdata[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = sum;
}
template __global__ void reduce6<float, 256, true>(const float*, float*, unsigned int);
template __global__ void reduce6<double, 128, false>(const double*, double*, unsigned int);
"""


def test_a_template_instance_with_type_and_bool_arguments_is_named_as_written(tmp_path: Path) -> None:
    # cuda-samples' reduction kernels: [launch."reduce6<float, 256, true>"] was refused as "not a
    # kernel name" (only integer arguments were read); only the mangled name worked.
    (tmp_path / "reduction.cu").write_text(TEMPLATED_REDUCTION)
    (tmp_path / "tune.toml").write_text('entries = ["reduce6<float, 256, true>"]\n'
                                        '[launch."reduce6<float,256,true>"]\nblock_size = 256\n'
                                        'dynamic_smem = "256*sizeof(float)"\n')
    baseline = _tune_lib(tmp_path, tmp_path / "r.acf.toml", budget=1, kernel="reduction.cu").result.trials[0]
    assert baseline.metrics["launch"] == {"_Z7reduce6IfLj256ELb1EEvPKT_PS0_j": [256, 1024]}


def test_a_header_the_preprocessor_cannot_find_names_the_include_dirs_line_that_finds_it(tmp_path: Path) -> None:
    # cuda-samples: Samples/<group>/<sample>/shfl_scan.cu includes <helper_cuda.h> from Common/, three
    # folders up. The error named the missing header but not what to put in tune.toml.
    sample = tmp_path / "Samples" / "2_Concepts_and_Techniques" / "shfl_scan"
    sample.mkdir(parents=True)
    (tmp_path / "Common").mkdir()
    (tmp_path / "Common" / "helper_cuda.h").write_text("#pragma once\n#define checkCudaErrors(x) (x)\n")
    (sample / "shfl_scan.cu").write_text('#include <helper_cuda.h>\n__global__ void k(int* x) { *x = 1; }\n')
    args = ["tune", "shfl_scan.cu", "--workers", "local", "--arch", "sm_90", "--db", "sqlite:///db.sqlite", "--budget", "1"]
    result = run_cli(args, cwd=sample)
    assert result.returncode == 2 and len(result.stderr_lines) == 1, result.describe()
    assert result.stderr_lines[0].endswith('helper_cuda.h: No such file or directory (found in ../../../Common: '
                                           'add include_dirs = ["../../../Common"] to tune.toml)')
    (sample / "tune.toml").write_text('include_dirs = ["../../../Common"]\n')
    assert run_cli(args, cwd=sample).returncode == 0  # what the hint says works
    (tmp_path / "Common" / "helper_cuda.h").unlink()
    result = run_cli(args, cwd=sample)
    assert result.stderr_lines[0].endswith("(add the folder that holds it to include_dirs in tune.toml, relative to "
                                           "the kernel's folder)"), result.describe()


def test_a_block_size_expression_at_the_top_of_tune_toml_names_the_table_that_takes_it(tmp_path: Path) -> None:
    # llm.c / ggml kernels launch 32 * ROWS_PER_BLOCK threads; the top-level key takes only a number
    # or a tuned macro's name, and its error did not say where an expression goes.
    (tmp_path / "fir.cu").write_text(TAPS_KERNEL)
    (tmp_path / "tune.toml").write_text('block_size = "32*TAPS"\n[tune.defines]\nTAPS = [4, 8]\n')
    with pytest.raises(UsageError, match=r"block_size: '32\*TAPS' is not a tuned define \(an expression such as "
                                         r"\"32\*ROWS\" goes in a \[launch.KERNEL\] table\)$"):
        load_spec(tmp_path / "fir.cu", arch="sm_90")


@pytest.mark.parametrize(("code", "toml", "says"), [
    # std::numeric_limits in device code (top-k, argmax, FasterTransformer-style reductions)
    ("#include <limits>\n__global__ void argmax(float* x) { x[0] = -std::numeric_limits<float>::infinity(); }\n",
     "", 'nvcc_flags = ["--expt-relaxed-constexpr"]'),
    # a __device__ lambda handed to Thrust: the flags already given are kept in the line to paste
    (("#include <thrust/transform.h>\n#include <thrust/device_vector.h>\nvoid f(thrust::device_vector<float>& v) {\n"
     "  thrust::transform(v.begin(), v.end(), v.begin(), [] __device__ (float x) { return 2 * x; });\n}\n"),
     'nvcc_flags = ["-std=c++17"]\n', 'nvcc_flags = ["-std=c++17", "--extended-lambda"]'),
])
def test_a_front_end_switch_the_code_needs_is_named_as_the_tune_toml_line(tmp_path: Path, code: str, toml: str,
                                                                          says: str) -> None:
    # nvcc names the switch ("'--expt-relaxed-constexpr' can be used", "requires --extended-lambda nvcc
    # flag"), but not where compileiq takes it.
    folder = tmp_path / "k"
    folder.mkdir()
    (folder / "k.cu").write_text(code)
    (folder / "tune.toml").write_text(toml)
    with pytest.raises(CompileIQError, match=re.escape(f"(add it in tune.toml: {says})") + "$"):
        _tune_lib(folder, tmp_path / "k.acf.toml", kernel="k.cu")
    (folder / "tune.toml").write_text(says + "\n")
    _tune_lib(folder, tmp_path / "k.acf.toml", kernel="k.cu")  # what the hint says works


MATRIX_MUL = """\
// After NVIDIA/cuda-samples Samples/0_Introduction/matrixMul/matrixMul.cu: one kernel template,
// MatrixMulCUDA<16> launched with 16x16 threads and MatrixMulCUDA<32> with 32x32.
template <int BLOCK_SIZE> __global__ void MatrixMulCUDA(float *C, float *A, float *B, int wA, int wB) {
    __shared__ float As[BLOCK_SIZE][BLOCK_SIZE];
    As[threadIdx.y][threadIdx.x] = A[wA * threadIdx.y + threadIdx.x];
    __syncthreads();
    C[wB * threadIdx.y + threadIdx.x] = As[threadIdx.x][threadIdx.y] * B[threadIdx.x];
}
template __global__ void MatrixMulCUDA<16>(float *, float *, float *, int, int);
template __global__ void MatrixMulCUDA<32>(float *, float *, float *, int, int);
"""


def test_one_instance_of_a_kernel_template_is_named_with_its_arguments(tmp_path: Path) -> None:
    # The instances of matrixMul run 256 and 1024 threads; only their mangled names
    # (_Z13MatrixMulCUDAILi16EEvPfS0_S0_ii) could tell them apart: "MatrixMulCUDA<16>" was refused
    # as "not a kernel name".
    folder = _project(tmp_path / "matrixMul", "matrixMul.cu", MATRIX_MUL,
                      '[launch."MatrixMulCUDA<16>"]\nblock_size = "16*16"\n'
                      '[launch."MatrixMulCUDA< 32 >"]\nblock_size = "32*32"\n')
    baseline = _tune_lib(folder, tmp_path / "mm.acf.toml", budget=1, kernel="matrixMul.cu").result.trials[0]
    assert baseline.metrics["launch"] == {"_Z13MatrixMulCUDAILi16EEvPfS0_S0_ii": [256, 0],
                                          "_Z13MatrixMulCUDAILi32EEvPfS0_S0_ii": [1024, 0]}
    (folder / "tune.toml").write_text('[launch."MatrixMulCUDA<8>"]\nblock_size = 64\n')  # no such instance
    with pytest.raises(CompileIQError, match=r"\[launch.MatrixMulCUDA<8>\] names no kernel of the build"):
        _tune_lib(folder, tmp_path / "mm.acf.toml", budget=1, kernel="matrixMul.cu")


def test_a_kernel_without_launch_bounds_is_not_scored_at_another_kernels(tmp_path: Path) -> None:
    # llm.c's layernorm_forward.cu: kernel6 has __launch_bounds__(512), kernel5 none. The file's first
    # __launch_bounds__ became the default of every kernel, so kernel5 was scored at 512 threads.
    baseline = _baseline_of(tmp_path, "ln.cu", "__global__ void __launch_bounds__(1024) big(float* x) { x[threadIdx.x] *= 2.0f; }\n"
                            "__global__ void plain(float* x) { x[threadIdx.x] += 1.0f; }\n")
    assert baseline.metrics["launch"] == {"_Z3bigPf": [1024, 0], "_Z5plainPf": [256, 0]}


def test_a_header_of_templates_with_launch_bounds_before_static_says_they_need_an_instantiation(tmp_path: Path) -> None:
    # llama.cpp's ggml-cuda writes `template <...> __launch_bounds__(calc_nwarps(N)*32, 1) static __global__
    # void ...`: the arguments of __launch_bounds__ hid the template from the hint.
    folder = tmp_path / "ggml"
    folder.mkdir()
    (folder / "mmvq.cuh").write_text(
        "#pragma once\nstatic constexpr __device__ int calc_nwarps(int n) { return n <= 4 ? 4 : 2; }\n"
        "template <int ncols_dst>\n__launch_bounds__(calc_nwarps(ncols_dst)*32, 1)\n"
        "static __global__ void mul_mat_vec_q(const float* x, float* dst) { dst[threadIdx.x] = x[ncols_dst]; }\n")
    with pytest.raises(CompileIQError, match=r"mmvq.cuh: no kernel .*: its kernels are templates that nothing instantiates"):
        _tune_lib(folder, tmp_path / "x.acf.toml", kernel="mmvq.cuh")


def test_a_baseline_an_older_compileiq_could_not_name_is_scored_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A study whose baseline an older compileiq recorded as "no entry matches ['gemm']" (a namespaced
    # kernel it could not name) kept failing after the upgrade: the failure was read back, never rescored.
    from compileiq.evaluate import metrics

    folder = _copy(tmp_path, "blackwell_namespace")
    (folder / "tune.toml").write_text('entries = ["gemm"]\n')
    with monkeypatch.context() as patch:
        patch.setattr(metrics, "entry_matches", lambda entry, name: False)  # the older naming
        with pytest.raises(CompileIQError, match=r"no entry matches \['gemm'\]"):
            _tune_lib(folder, tmp_path / "x.acf.toml", budget=1, kernel="tmem.cu", arch="sm_100a")
    tuned = _tune_lib(folder, tmp_path / "x.acf.toml", budget=1, kernel="tmem.cu", arch="sm_100a")
    assert tuned.result.trials[0].value is not None


def test_a_macro_a_conditional_chain_defines_names_every_line_and_what_would_work(tmp_path: Path) -> None:
    """Rodinia's nw (needle.h): BLOCK_SIZE is #defined in every branch of an #ifdef chain. The error
    named the first line and suggested guarding it, which leaves the active #else branch to win."""
    shutil.copytree(Path(__file__).parent / "corpus" / "rodinia_nw", tmp_path / "nw")
    (tmp_path / "nw" / "tune.toml").write_text("[tune.defines]\nBLOCK_SIZE = [16, 32]\n")
    spec = load_spec(tmp_path / "nw" / "needle.cu", arch="sm_90")
    with pytest.raises(UsageError) as error:
        check_macros_take_effect(spec, bundle_sources(spec))
    message = str(error.value)
    assert "needle.h #defines BLOCK_SIZE itself on lines 7, 9, 11, 13" in message, message
    assert "wrap them in #ifndef BLOCK_SIZE ... #endif, or tune a macro they read instead" in message
