"""The files a kernel's build reads, as the compiler itself reports them (`nvcc -M`)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from compileiq.core.errors import UsageError
from compileiq.core.processes import COMPILER_MEMORY, first_error_line, run_tool, scratch_full
from compileiq.source.arch_support import unsupported_arch_hint
from compileiq.source.missing_header import missing_header_hint

_TOKEN = re.compile(r"(?:\\.|[^\s\\])+")


class DependencyError(UsageError):
    """The preprocessor could not read the kernel (a missing header, a bad flag)."""


class UnsupportedArchError(DependencyError):
    """The installed nvcc does not build the arch asked for (nvcc 13.0: nothing before sm_75):
    nothing about the kernel can be checked or tuned for it (`space` stops on it too)."""


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?:"([^"\n]+)"|<([^>\n]+)>)', re.MULTILINE)
_SCANNED_FILES = 256  # the preprocessor's own limits and the memory cap cover a deeper tree


def compiler_dependencies(nvcc: str, root: Path, main: str, args: Sequence[str], timeout_s: float,
                          include_dirs: Sequence[Path] = ()) -> list[Path]:
    """Every file `nvcc -M` reads for ``root/main`` (run in ``root``), normalised, main first."""
    if problem := special_include(root / main, include_dirs):
        raise DependencyError(problem)
    argv = [nvcc, "-M", "-MT", "deps", "-x", "cu", *args, main]
    run = run_tool(argv, timeout_s, cwd=str(root), memory_bytes=COMPILER_MEMORY)
    if run.timed_out:
        raise DependencyError(f"{main}: nvcc -M did not finish within {timeout_s:g} s")
    if run.returncode != 0:
        error = first_error_line(run.output)
        if arch_hint := unsupported_arch_hint(error, nvcc):
            raise UnsupportedArchError(f"{main}: the preprocessor failed: {error}{arch_hint}")
        hint = f" ({full})" if (full := scratch_full()) else missing_header_hint(error, root)
        raise DependencyError(f"{main}: the preprocessor failed: {error}{hint}")
    return parse_make_rule(run.output, root)


def parse_make_rule(text: str, root: Path) -> list[Path]:
    """The prerequisites of a make rule ``deps : a b \\`` as absolute, normalised paths."""
    _, _, body = text.replace("\\\n", " ").partition("deps :")
    names = [token.replace("\\ ", " ").replace("$$", "$") for token in _TOKEN.findall(body)]
    return list(dict.fromkeys(Path(os.path.normpath(root / name)) for name in names))


def quoted_includes(text: str) -> list[str]:
    """The names of a source text's ``#include "..."`` lines, as written."""
    return [quoted.strip() for quoted, _ in _INCLUDE.findall(text) if quoted]


def special_include(main: Path, search: Sequence[Path]) -> str | None:
    """An ``#include`` of the kernel's own files that names a device, a named pipe or a folder
    (``#include "/dev/zero"``): the preprocessor would read it until it runs out of memory or
    time. Found by following the includes that resolve, as the preprocessor looks them up, to
    files beside the including file ("...") or in ``search``, the include folders; None when
    there is none."""
    from compileiq.core.output_file import not_regular

    pending: list[Path] = [main]
    seen: set[Path] = set()
    while pending and len(seen) < _SCANNED_FILES:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            text = current.read_bytes()[: 4 << 20].decode(errors="replace")
        except OSError:
            continue
        for match in _INCLUDE.finditer(text):
            quoted, angled = match.groups()
            name = (quoted or angled).strip()
            for folder in (current.parent, *search) if quoted else search:
                candidate = folder / name
                if kind := not_regular(candidate):
                    line = text.count("\n", 0, match.start()) + 1
                    where = os.path.relpath(current, main.parent)
                    return f"{where}:{line}: #include {name!r} is {kind}, not a source file"
                if candidate.is_file():
                    pending.append(Path(os.path.normpath(candidate)))
                    break
    return None
