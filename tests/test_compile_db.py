"""Reading a file's compile command from a compilation database (CMake's or Bear's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compileiq.compile_db import CompileDbError, read_command
from compileiq.space import load_space

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
    assert found.base_flags == ("-DTILE=64", "-DWIDE=1", f"-I{tmp_path / 'include'}", "-I/opt/dep/include",
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
