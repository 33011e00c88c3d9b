"""The files untrusted input names are read by one bounded reader (`core.bounded_read`): an ACF
(`flags`), a compilation database and the options file its command names (`space
--compile-commands`). A named pipe, a folder, a file over the bound or bytes that are not UTF-8
are each one line naming the file and what it is, a non-zero exit, never a hang (a named pipe
opened for reading blocks until a writer comes: the CLI runs under a timeout here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import compile_commands_file, run_cli, space_from_database

from compileiq.results.acf import MAX_BYTES as ACF_BYTES
from compileiq.source.compile_db_file import MAX_DATABASE_BYTES
from compileiq.source.nvcc_argv import MAX_OPTIONS_FILE_BYTES

KINDS = ("fifo", "directory", "oversize", "not-utf8")


def _bad_file(path: Path, kind: str, limit: int) -> None:
    """`path` made into the bad input `kind`: an oversize file is sparse (its size, not its bytes)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "oversize":
        with path.open("wb") as stream:
            stream.truncate(limit + 1)
    else:
        path.write_bytes(b"\xff\xfe -I. \xe9\n")


def _one_line_error(result, *says: str) -> None:
    assert result.returncode == 2, result.describe()
    assert "Traceback" not in result.output, result.describe()
    [line] = result.stderr_lines
    assert line.startswith("error: "), result.describe()
    for text in says:
        assert text in line, result.describe()


ACF_SAYS = {"fifo": "is not a readable ACF: it is a named pipe, not a regular file",
            "directory": "is not a readable ACF: it is a directory, not a regular file",
            "oversize": f"is not an ACF: {ACF_BYTES + 1} bytes (an ACF is a few KiB)",
            "not-utf8": "is not a readable ACF: it is not UTF-8 text (byte 0xff at offset 0)"}


@pytest.mark.parametrize("kind", KINDS)
def test_an_acf_that_is_no_readable_file_is_one_line(tmp_path: Path, kind: str) -> None:
    acf = tmp_path / "k.acf.toml"
    _bad_file(acf, kind, ACF_BYTES)
    _one_line_error(run_cli(["flags", str(acf)], cwd=tmp_path, timeout=60), f"{acf} {ACF_SAYS[kind]}")


DATABASE_SAYS = {"fifo": "compile_commands.json: it is a named pipe, not a compilation database",
                 "directory": "compile_commands.json: it is a directory, not a compilation database",
                 "oversize": f"compile_commands.json: larger than 64 MiB ({MAX_DATABASE_BYTES + 1} bytes)",
                 "not-utf8": "compile_commands.json: not a compilation database: it is not UTF-8 text (byte 0xff "
                             "at offset 0)"}


@pytest.mark.parametrize("kind", KINDS)
def test_a_compilation_database_that_is_no_readable_file_is_one_line(tmp_path: Path, kind: str) -> None:
    database = tmp_path / "compile_commands.json"
    _bad_file(database, kind, MAX_DATABASE_BYTES)
    _one_line_error(space_from_database(tmp_path, database), DATABASE_SAYS[kind])


OPTIONS_SAYS = {"fifo": "--options-file {rsp} is a named pipe, not a file of arguments",
                "directory": "--options-file {rsp} is a directory, not a file of arguments",
                "oversize": f"--options-file {{rsp}} is {MAX_OPTIONS_FILE_BYTES + 1} bytes, over the 1 MiB bound",
                "not-utf8": "--options-file {rsp} is not UTF-8 text (byte 0xff at offset 0)"}


@pytest.mark.parametrize("kind", KINDS)
def test_an_options_file_that_is_no_readable_file_is_one_line(tmp_path: Path, kind: str) -> None:
    rsp = tmp_path / "includes_CUDA.rsp"
    _bad_file(rsp, kind, MAX_OPTIONS_FILE_BYTES)
    database = compile_commands_file(tmp_path, "nvcc --options-file includes_CUDA.rsp -O3 -c k.cu -o k.o")
    _one_line_error(space_from_database(tmp_path, database), "the command for k.cu", OPTIONS_SAYS[kind].format(rsp=rsp))
