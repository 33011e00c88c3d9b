"""Reading a compilation database file (compile_commands.json, read bounded): its entries, what
names each (its output), and the errors of reading one; `compile_db` makes a command of an entry."""

from __future__ import annotations

import json
import shlex
from itertools import pairwise
from pathlib import Path
from typing import Any

from compileiq.core import bounded_read
from compileiq.core.errors import UsageError

MAX_DATABASE_BYTES = 64 * 2**20


class CompileDbError(UsageError):
    """A compilation database that cannot be read, has no command for the file, or a command whose
    tuned flags compileiq cannot reproduce."""


class NoCommand(CompileDbError):
    """A database with no command for the file at all (a kernel built only in another configuration)."""


class SeveralCommands(CompileDbError):
    """Several commands for the file that build it differently, and none chosen."""


class OutputGone(CompileDbError):
    """No command for the file has the output chosen (`--compile-output`, an ACF's `[baseline] output`)."""


class NotADatabase(CompileDbError):
    """The file is not a compilation database compileiq reads (not JSON, not a list of entries,
    an entry whose `directory` or `file` is not a string, not a regular file, gone): unlike a
    database with no command for the file, it says nothing about the file."""



def output_of(entry: dict[str, Any]) -> str | None:
    """What names an entry: its `output` (CMake 3.20+, Bear), else its -o; None: neither (its place does)."""
    if isinstance(output := entry.get("output"), str) and output:
        return output
    argv = entry.get("arguments") if isinstance(entry.get("arguments"), list) else None
    if argv is None and isinstance(entry.get("command"), str):
        try:
            argv = shlex.split(entry["command"])
        except ValueError:
            argv = []
    words = [str(a) for a in argv or ()]
    for flag, following in pairwise(words):
        if flag in ("-o", "--output-file"):
            return following
    return None


def entries(database: Path) -> list[dict[str, Any]]:
    """The database's entries, each naming its file in its folder; NotADatabase otherwise."""
    try:
        data = json.loads(bounded_read.read_text(database.expanduser(), MAX_DATABASE_BYTES))
    except bounded_read.FileReadError as error:
        if error.problem == "missing":
            raise NotADatabase(f"compilation database not found: {database}") from None
        if error.problem == "not-regular":  # never opened: a named pipe would block the reader
            raise NotADatabase(f"{database}: it is {error.kind}, not a compilation database") from None
        if error.problem == "too-large":
            raise NotADatabase(f"{database}: larger than {MAX_DATABASE_BYTES // 2**20} MiB ({error.size} bytes)") from None
        if error.problem == "unreadable":
            raise NotADatabase(f"{database}: {error.detail}") from None
        raise NotADatabase(f"{database}: not a compilation database: it {error.detail}") from None
    except (ValueError, RecursionError) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise NotADatabase(f"{database}: not a compilation database: {reason}") from None
    if not isinstance(data, list) or not all(isinstance(e, dict) for e in data):
        raise NotADatabase(f"{database}: not a compilation database: expected a JSON list of objects")
    for entry in data:  # each entry names its file in its folder (clang's JSON Compilation Database)
        if not isinstance(entry.get("file"), str) or not isinstance(entry.get("directory", "."), str):
            raise NotADatabase(f"{database}: not a compilation database: an entry's \"directory\" or \"file\" "
                               "is missing or not a string")
    return data
