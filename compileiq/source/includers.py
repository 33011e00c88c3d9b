"""Which compile commands of a database build a file by #including it (Rodinia's layout: the build
compiles backprop_cuda.cu, which is `#include "backprop_cuda_kernel.cu"`): read only when no entry
names the file itself, to say which command does build it and how to tune from it. Likewise which
source files beside a kernel include it, read only when the kernel does not build alone (`in_folder`).

A cheap reading, never a preprocessor run: an `#include` line of the entry's own file whose name ends
with the file's name. Each file is read bounded (a named pipe is never opened), and a file that
cannot be read is skipped: the finding is a hint in an error, never a verdict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compileiq.core import bounded_read
from compileiq.core.text import printable

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^">\n]+)[">]', re.MULTILINE)
_MAX_BYTES = 2**20  # per file: a larger one is skipped (a source that big is rarely an includer)
_MAX_FILES = 2000  # a huge database costs at most this many reads, on an error path only
_SOURCES = (".cu", ".cpp", ".cc", ".cxx", ".c")  # what a build compiles (a header's includer is compiled elsewhere)


@dataclass(frozen=True)
class Includer:
    """An entry whose file #includes the kernel's file."""

    file: Path  # the entry's file, resolved
    entry: str  # how the entry is named: its output, else "entry N"


def includers(found: list[tuple[dict[str, Any], Path, str]], wanted: Path) -> tuple[Includer, ...]:
    """The entries (entry, its folder, its name) whose file has an `#include` naming `wanted`'s file
    name (`"kernel.cu"`, `"dir/kernel.cu"`, `<kernel.cu>`)."""
    name = wanted.name
    hits: list[Includer] = []
    for entry, directory, label in found[:_MAX_FILES]:
        try:
            file = (directory / str(entry["file"])).resolve()
            if file == wanted:
                continue
            text = bounded_read.read_text(file, _MAX_BYTES, encoding="latin-1")  # any bytes: only ASCII is matched
        except (bounded_read.FileReadError, OSError, ValueError):  # ValueError: a NUL in the name
            continue
        if any(Path(included.strip()).name == name for included in _INCLUDE.findall(text)):
            hits.append(Includer(file, printable(label)))
    return tuple(hits)


def in_folder(kernel: Path) -> tuple[Includer, ...]:
    """The source files in the kernel's folder whose `#include` names the kernel's file (Rodinia's
    hotspot3D: 3D.cu is `#include "opt1.cu"`), by name; none where the folder cannot be listed."""
    wanted = kernel.expanduser().resolve()
    try:
        names = sorted(p.name for p in wanted.parent.iterdir() if p.suffix in _SOURCES and p.name != wanted.name)
    except OSError:
        return ()
    return includers([({"file": name}, wanted.parent, name) for name in names], wanted)
