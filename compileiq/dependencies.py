"""The files a kernel's build reads, as the compiler itself reports them (`nvcc -M`)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from compileiq.compile import first_error_line, run_tool
from compileiq.errors import UsageError

_TOKEN = re.compile(r"(?:\\.|[^\s\\])+")


class DependencyError(UsageError):
    """The preprocessor could not read the kernel (a missing header, a bad flag)."""


def compiler_dependencies(nvcc: str, root: Path, main: str, args: Sequence[str], timeout_s: float) -> list[Path]:
    """Every file `nvcc -M` reads for ``root/main`` (run in ``root``), normalised, main first."""
    argv = [nvcc, "-M", "-MT", "deps", "-x", "cu", *args, main]
    run = run_tool(argv, timeout_s, cwd=str(root))
    if run.timed_out:
        raise DependencyError(f"{main}: nvcc -M did not finish within {timeout_s:g} s")
    if run.returncode != 0:
        raise DependencyError(f"{main}: the preprocessor failed: {first_error_line(run.output)}")
    return parse_make_rule(run.output, root)


def parse_make_rule(text: str, root: Path) -> list[Path]:
    """The prerequisites of a make rule ``deps : a b \\`` as absolute, normalised paths."""
    _, _, body = text.replace("\\\n", " ").partition("deps :")
    names = [token.replace("\\ ", " ").replace("$$", "$") for token in _TOKEN.findall(body)]
    return list(dict.fromkeys(Path(os.path.normpath(root / name)) for name in names))
