"""What a file is, from its first few KiB rather than its name: an output must not replace a
database, an ACF, a compileiq export (gzip or not), a C/C++/CUDA source or PTX, whatever it is called
(`params.inc`, `x.json.gz`, a header with no suffix), and may replace only an earlier output of its
own kind (`output_kind`: a report, a figure, a gate report, an export). Reads at most `HEAD_BYTES`,
and inflates at most as much of a gzip file: a bounded look, never a parse."""

from __future__ import annotations

import re
import zlib
from pathlib import Path

HEAD_BYTES = 4096
SQLITE_HEADER = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
ACF_HEADER = b"# compileiq advanced-control file"
EXPORT_FORMAT = re.compile(rb'\A\s*\{\s*"format"\s*:\s*"compileiq-study"')
# a preprocessor directive in C's shape at a line's start (`#include <`/`"`, `#define NAME`, `#ifdef`,
# `#pragma NAME`, `#if defined`/`!`/`(`...: a shell, YAML or TOML comment "# if the runner..." or
# "# include this" is none), or CUDA's kernel keywords in text that is no markup (a JUnit or HTML
# report quotes nvcc's "a __device__ function call cannot be configured")
_SOURCE = re.compile(
    rb"^[ \t]*#[ \t]*(?:include[ \t]*[<\"]|(?:define|undef|ifdef|ifndef)[ \t]+[A-Za-z_]\w*[ \t(\r\n]|"
    rb"(?:if|elif)[ \t]+(?:defined\b|[!(]|\d|[A-Z_][A-Z0-9_]*[ \t\r\n])|endif\b[ \t]*(?:$|//|/\*)|pragma[ \t]+\w+)|"
    rb"\b__(?:global|device|host|shared|constant)__\b",
    re.MULTILINE,
)
# PTX: its `.version` and `.target` directives, each at a line's start (what ptxas reads first)
_PTX_VERSION = re.compile(rb"^[ \t]*\.version[ \t]+\d", re.MULTILINE)
_PTX_TARGET = re.compile(rb"^[ \t]*\.target[ \t]+(?:sm|compute)_\d", re.MULTILINE)
_MARKUP = re.compile(rb"\A(?:\xef\xbb\xbf)?\s*<")  # XML, HTML: a source never starts with '<'

# compileiq's own outputs, by the first bytes each writer gives them (report/markdown.py, page.py,
# compare.py, svg.py `_open`, gating/ci_reports.py): what an output command may replace
REPORT = "a compileiq report"
FIGURE = "a compileiq report figure"
GATE_REPORT = "a compileiq gate report"
EXPORT = "a compileiq export"
_OUTPUTS = (
    (REPORT, re.compile(rb"\A# compileiq (?:report|comparison): ")),
    (REPORT, re.compile(rb'\A<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">(?:<meta [^>]*>)*'
                        rb"<title>compileiq (?:report|comparison): ")),
    (FIGURE, re.compile(rb'\A<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 \d+ \d+" width="\d+" height="\d+" '
                        rb'font-family="sans-serif" font-size="11" role="img"><title>')),
    (GATE_REPORT, re.compile(rb"\A## compileiq gate: (?:PASS|FAIL|ERROR)\r?\n")),
    (GATE_REPORT, re.compile(rb"\A<\?xml version=['\"]1\.0['\"] encoding=['\"]utf-8['\"]\?>\s*"
                             rb'<testsuites name="compileiq-gate" ')),
)


def head(path: Path) -> bytes | None:
    """The file's first `HEAD_BYTES`; None when it cannot be read."""
    try:
        with path.open("rb") as stream:
            return stream.read(HEAD_BYTES)
    except OSError:
        return None


def inflated(data: bytes) -> bytes | None:
    """At most `HEAD_BYTES` of what gzip data starts with; None when it is no gzip data."""
    try:
        return zlib.decompressobj(wbits=31).decompress(data, HEAD_BYTES)
    except zlib.error:
        return None


def content_kind(data: bytes) -> str | None:
    """What a file starting with `data` is, when no output may replace it: "an SQLite database",
    "a compileiq export" (gzip or not), "a gzip file", "an ACF", "a C/C++/CUDA source", "a PTX file"
    (`.version` and `.target` directives); None otherwise."""
    if data.startswith(SQLITE_HEADER):
        return "an SQLite database"
    if data.startswith(GZIP_MAGIC):
        inner = inflated(data)
        return "a compileiq export (gzip)" if inner is not None and EXPORT_FORMAT.match(inner) else "a gzip file"
    if EXPORT_FORMAT.match(data):
        return "a compileiq export"
    if data.lstrip(b"\xef\xbb\xbf").startswith(ACF_HEADER):
        return "an ACF"
    if b"\0" not in data and not _MARKUP.match(data) and _SOURCE.search(data):
        return "a C/C++/CUDA source"
    if b"\0" not in data and _PTX_VERSION.search(data) and _PTX_TARGET.search(data):
        return "a PTX file"
    return None


def output_kind(data: bytes) -> str | None:
    """Which of compileiq's outputs a file starting with `data` is (`REPORT`, `FIGURE`,
    `GATE_REPORT`, `EXPORT`, gzip or not), from the first bytes its writer gives it; None for
    anything else, whatever its name."""
    inner = inflated(data) if data.startswith(GZIP_MAGIC) else data
    if inner is not None and EXPORT_FORMAT.match(inner):
        return EXPORT
    return next((kind for kind, start in _OUTPUTS if start.match(data)), None)
