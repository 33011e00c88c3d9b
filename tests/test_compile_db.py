"""Reading a file's compile command from a compilation database (CMake's or Bear's)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from compileiq.core.errors import CompileIQError
from compileiq.core.space_files import load_space
from compileiq.source.compile_db import CompileDbError, read_command
from compileiq.source.kernel import load_spec, with_base_flags

SPACE = load_space("13.0")


def _database(tmp_path: Path, entries: list[dict[str, object]]) -> Path:
    path = tmp_path / "build" / "compile_commands.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries))
    return path


def test_cmake_style_command_keeps_what_the_code_needs_and_strips_what_is_tuned(tmp_path: Path) -> None:
    source = tmp_path / "src" / "k.cu"
    command = ("/usr/local/bin/nvcc -forward-unknown-to-host-compiler -DTILE=64 -DWIDE=1 -I../include "
               "-isystem /opt/dep/include --generate-code=arch=compute_90,code=[compute_90,sm_90] "
               "--expt-relaxed-constexpr -lineinfo -std=c++20 -O3 -Xptxas=-O3 --use_fast_math "
               "-Xcompiler=-fPIC -x cu -c ../src/k.cu -o CMakeFiles/k.dir/src/k.cu.o")
    db = _database(tmp_path, [{"directory": str(tmp_path / "build"), "command": command, "file": "../src/k.cu"}])
    found = read_command(db, source, SPACE)
    assert found.base_flags == ("-DTILE=64", "-DWIDE=1", f"-I{tmp_path / 'include'}", "-isystem=/opt/dep/include",
                                "--expt-relaxed-constexpr", "-lineinfo", "-std=c++20")
    assert found.arch == "sm_90"
    assert found.stripped == ("-O3", "-Xptxas=-O3", "--use_fast_math", "-Xcompiler=-fPIC")


def test_bear_style_arguments_with_separate_values(tmp_path: Path) -> None:
    source = tmp_path / "k.cu"
    arguments = ["nvcc", "-I", "inc", "-D", "N=4", "-gencode", "arch=compute_80,code=sm_80", "-rdc=true",
                 "-Xptxas", "-v", "-ccbin", "g++-12", "--extended-lambda", "-c", "k.cu", "-o", "k.o"]
    db = _database(tmp_path, [{"directory": str(tmp_path), "arguments": arguments, "file": str(source)}])
    found = read_command(db, source, SPACE)
    assert found.base_flags == (f"-I{tmp_path / 'inc'}", "-DN=4", "-rdc=true", "--extended-lambda")
    assert found.arch == "sm_80"
    assert found.stripped == ("-Xptxas -v", "-ccbin g++-12")


def test_cmake_3_29_include_folders_in_an_options_file_are_read(tmp_path: Path) -> None:
    # CMake >= 3.29.5 with nvcc >= 11 writes the -I folders to includes_CUDA.rsp (all platforms)
    source = tmp_path / "src" / "k.cu"
    rsp = tmp_path / "build" / "CMakeFiles" / "k.dir" / "includes_CUDA.rsp"
    rsp.parent.mkdir(parents=True)
    rsp.write_text(f'-I{tmp_path}/include -isystem "{tmp_path}/third party"\n')
    command = ("/usr/local/bin/nvcc -forward-unknown-to-host-compiler -DTILE=64 --options-file "
               "CMakeFiles/k.dir/includes_CUDA.rsp -O3 -DNDEBUG -std=c++17 -x cu -c ../src/k.cu -o k.cu.o")
    db = _database(tmp_path, [{"directory": str(tmp_path / "build"), "command": command, "file": "../src/k.cu"}])
    found = read_command(db, source, SPACE)
    assert found.base_flags == ("-DTILE=64", f"-I{tmp_path / 'include'}", f"-isystem={tmp_path / 'third party'}",
                                "-DNDEBUG", "-std=c++17")
    joined = command.replace("--options-file CMakeFiles", "--options-file=CMakeFiles")
    db = _database(tmp_path, [{"directory": str(tmp_path / "build"), "command": joined, "file": "../src/k.cu"}])
    assert read_command(db, source, SPACE).base_flags == found.base_flags
    rsp.unlink()
    with pytest.raises(CompileDbError, match=r"k.cu: its --options-file .*includes_CUDA.rsp is missing: run .* \(cmake\) first"):
        read_command(db, source, SPACE)
    rsp.mkdir()
    with pytest.raises(CompileDbError, match=r"includes_CUDA.rsp is a directory, not a file of arguments"):
        read_command(db, source, SPACE)


def test_an_options_file_that_is_not_one_is_refused_without_echoing_it(tmp_path: Path) -> None:
    """A hostile compile_commands.json can name any file as --options-file (/etc/shadow): its first
    line was echoed in the error. A file of nvcc options holds options and their values only."""
    source = tmp_path / "k.cu"
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$s3cretHash:19000:0:99999:7:::\n")
    db = _database(tmp_path, [{"directory": str(tmp_path), "command": f"nvcc --options-file {secret} -c k.cu",
                               "file": "k.cu"}])
    with pytest.raises(CompileDbError) as raised:
        read_command(db, source, SPACE)
    assert "s3cret" not in str(raised.value) and "root:" not in str(raised.value)
    assert str(raised.value).endswith(f"--options-file {secret} is not a file of nvcc options (argument 1 is "
                                      "neither an option nor an option's value; not shown)")


@pytest.mark.parametrize("flag", ["-Xcompiler=-O2\nfake line", "-DX=1\x1b[31m"])
def test_a_control_character_in_an_argument_is_refused_when_read(tmp_path: Path, flag: str) -> None:
    """It used to pass, run the whole search and stop at the end: the ACF could not record it."""
    source = tmp_path / "k.cu"
    db = _database(tmp_path, [{"directory": str(tmp_path), "arguments": ["nvcc", "-c", "k.cu", flag],
                               "file": str(source)}])
    with pytest.raises(CompileDbError, match=r"the command for k.cu: argument .* holds a control character") as raised:
        read_command(db, source, SPACE)
    assert "\n" not in str(raised.value) and "\x1b" not in str(raised.value)


def test_a_define_with_a_space_is_refused_when_read(tmp_path: Path) -> None:
    """'-DX=1.o -ccbin=evil -DY=2' as one argument: `nvcc $(compileiq flags ...)` would split it."""
    source = tmp_path / "k.cu"
    db = _database(tmp_path, [{"directory": str(tmp_path), "file": str(source),
                               "arguments": ["nvcc", "-c", "k.cu", "-DX=1.o -ccbin=/tmp/evil -DY=2"]}])
    source.write_text("__global__ void k(float* x) { x[0] = 1; }\n")
    with pytest.raises(CompileIQError, match="contains ' '"):
        found = read_command(db, source, SPACE)
        with_base_flags(load_spec(source), found.base_flags, str(db))


def test_the_entry_of_the_requested_file_is_chosen(tmp_path: Path) -> None:
    entries = [{"directory": str(tmp_path), "command": f"nvcc -DWHICH={n} -c {n}.cu", "file": f"{n}.cu"}
               for n in ("a", "b")]
    db = _database(tmp_path, entries)
    assert read_command(db, tmp_path / "b.cu", SPACE).base_flags == ("-DWHICH=b",)


@pytest.mark.parametrize("content, message", [
    ("{not json", "not a compilation database"),
    ('{"directory": "."}', "expected a JSON list of objects"),
    ("[1, 2]", "expected a JSON list of objects"),
    ("[" * 100_000 + "]" * 100_000, "not a compilation database"),
    ('[{"directory": ".", "file": "k.cu"}]', "has no command or arguments"),
    ('[{"directory": ".", "file": "k.cu", "command": "nvcc \\"unclosed"}]', "No closing quotation"),
    ('[{"directory": ".", "file": "other.cu", "command": "nvcc -c other.cu"}]', "no compile command for"),
])
def test_a_bad_database_is_one_clear_error(tmp_path: Path, content: str, message: str) -> None:
    db = tmp_path / "compile_commands.json"
    db.write_text(content)
    (tmp_path / "k.cu").write_text("")
    with pytest.raises(CompileDbError, match=message) as raised:
        read_command(db, tmp_path / "k.cu", SPACE)
    assert "\n" not in str(raised.value)


def test_a_missing_database_is_named(tmp_path: Path) -> None:
    with pytest.raises(CompileDbError, match="compilation database not found"):
        read_command(tmp_path / "nope.json", tmp_path / "k.cu", SPACE)


CMAKE_PROJECT = {
    "CMakeLists.txt": """\
cmake_minimum_required(VERSION 3.24)
project(demo LANGUAGES CXX CUDA)
set(CMAKE_CUDA_ARCHITECTURES 90)
set(CMAKE_EXPORT_COMPILE_COMMANDS ON)
option(USE_WIDE "wide tiles" OFF)
add_library(kernels STATIC src/axpy.cu src/stencil.cu)
target_include_directories(kernels PRIVATE include)
target_compile_definitions(kernels PRIVATE TILE=64 $<$<BOOL:${USE_WIDE}>:WIDE=1>)
target_compile_options(kernels PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo -Xptxas=-O3>)
""",
    "include/proj/util.cuh": """\
#pragma once
#ifndef TILE
#error TILE must be defined
#endif
__device__ inline float twice(float x) { return 2.0f * x; }
""",
    "src/axpy.cu": """\
#include <proj/util.cuh>
__global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * twice(x[i]) + y[i];
}
""",
    "src/stencil.cu": """\
#include <proj/util.cuh>
#ifndef WIDE
#error configure with -DUSE_WIDE=ON
#endif
__global__ void stencil(const float* in, float* out, int n) {
  __shared__ float tile[TILE + 2];
  int i = blockIdx.x * TILE + threadIdx.x;
  if (i < n) tile[threadIdx.x + 1] = in[i];
  __syncthreads();
  if (i + 1 < n && i > 0) out[i] = twice(tile[threadIdx.x] + tile[threadIdx.x + 2]);
}
""",
}


@pytest.mark.slow
def test_a_real_cmake_project_tunes_from_its_compilation_database(tmp_path: Path) -> None:
    from tests.helpers import run_cli
    from tests.test_build_integration import cmake_command

    project = tmp_path / "project"
    for name, text in CMAKE_PROJECT.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    configured = subprocess.run([cmake_command(), "-S", str(project), "-B", str(project / "build"), "-G", "Ninja",
                                 "-DUSE_WIDE=ON"], capture_output=True, text=True, check=False, timeout=300)
    assert configured.returncode == 0, configured.stdout + configured.stderr
    database = project / "build" / "compile_commands.json"
    common = ["--workers", "local", "--budget", "3", "--only", "ptxas.opt_level",
              "--db", f"sqlite:///{tmp_path / 't.db'}"]
    alone = run_cli(["tune", "src/stencil.cu", *common], cwd=project)
    assert alone.returncode != 0 and "proj/util.cuh" in alone.stderr, alone.describe()
    for source in ("src/axpy.cu", "src/stencil.cu"):
        acf = tmp_path / f"{Path(source).stem}.acf.toml"
        tuned = run_cli(["tune", "--compile-commands", str(database), source, *common, "--out", str(acf)],
                        cwd=project)
        assert tuned.returncode == 0, tuned.describe()
        rebuild = run_cli(["flags", "--all", str(acf)], cwd=project).stdout.split()
        assert rebuild[0] == "-arch=sm_90"
        assert {"-DTILE=64", "-DWIDE=1", "--expt-relaxed-constexpr", "-lineinfo",
                "-Iinclude"} <= set(rebuild)  # the include folder from here (the ACF: from the kernel's folder)
        assert not any(flag.startswith("-Xptxas=-O3") for flag in rebuild)  # the build's own -O3: tuned here
        assert run_cli(["flags", str(acf)], cwd=project).stdout.split()[0] == "-arch=sm_90"
