"""The one bounded reader of a file named by untrusted input (an ACF, a compilation database, the
options file a compile command names): its text, or a typed `FileReadError` saying why not.

Anything but a regular file is refused from `stat` alone, never opened (a named pipe would block
the reader forever, a device could be endless); the file is then opened without blocking and
checked again on the open handle (it may have been swapped for a pipe in between); at most
`limit` bytes are read, so a file larger than the bound, or growing past it, is refused without
reading it whole; the bytes must be text in the encoding. Lines end in "\\n" as Python's text
mode gives them ("\\r\\n" and "\\r" translated), so a caller sees what `Path.read_text` gave it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Literal

from compileiq.core.errors import UsageError
from compileiq.core.output_file import kind_of, not_regular

Problem = Literal["not-regular", "too-large", "missing", "unreadable", "not-text"]


class FileReadError(UsageError):
    """Why a file could not be read: `problem` (which kind) and `detail` (what, without the
    path: callers say which file it is their own way). Its message is "PATH: DETAIL"."""

    def __init__(self, path: Path, problem: Problem, detail: str, size: int | None = None,
                 kind: str | None = None) -> None:
        super().__init__(f"{path} {detail}" if problem == "not-regular" else f"{path}: {detail}")
        self.path, self.problem, self.detail = path, problem, detail
        self.size = size  # too-large: the bytes it holds (or read past the bound)
        self.kind = kind  # not-regular: what it is ("a named pipe", "a directory"...)


def read_text(path: Path, limit: int, encoding: str = "utf-8") -> str:
    """The text of the regular file `path`, at most `limit` bytes; FileReadError otherwise."""
    if kind := not_regular(path):
        raise FileReadError(path, "not-regular", f"is {kind}, not a regular file", kind=kind)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    try:
        handle = os.open(path, flags)
    except FileNotFoundError:
        raise FileReadError(path, "missing", "not found") from None
    except (OSError, ValueError) as error:  # ValueError: a NUL in the path
        raise FileReadError(path, "unreadable", _reason(error)) from None
    with os.fdopen(handle, "rb") as stream:
        try:
            info = os.fstat(stream.fileno())
            if not stat.S_ISREG(info.st_mode):  # swapped for something else after the check
                kind = kind_of(info.st_mode)
                raise FileReadError(path, "not-regular", f"is {kind}, not a regular file", kind=kind)
            if info.st_size > limit:
                raise FileReadError(path, "too-large", f"is {info.st_size} bytes, over the {_size(limit)} bound",
                                    info.st_size)
            data = stream.read(limit + 1)
        except OSError as error:  # EISDIR, EIO...
            raise FileReadError(path, "unreadable", _reason(error)) from None
    if len(data) > limit:  # it grew while read
        raise FileReadError(path, "too-large", f"is over the {_size(limit)} bound", len(data))
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as error:
        label = "UTF-8" if encoding.lower().startswith("utf-8") else encoding
        raise FileReadError(path, "not-text", f"is not {label} text (byte {data[error.start]:#04x} at "
                            f"offset {error.start})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def is_file(path: Path) -> bool:
    """Whether `path` is a file (or a link to one); False, never an error, for a path the system
    refuses: `Path.is_file` raises OSError for a name past 255 bytes (ENAMETOOLONG), which an ACF
    may hold, and a traceback stopped the gate over every other ACF."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def is_dir(path: Path) -> bool:
    """Whether `path` is a folder; False, never an error, as `is_file` (an -I folder a compile
    command names may be any text)."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return f"cannot be read: {error.strerror}"
    return f"cannot be read: {' '.join(str(error).split()) or type(error).__name__}"


def _size(limit: int) -> str:
    return f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit} bytes"
