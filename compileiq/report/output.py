"""Writing reports: the formats, a report file written safely (never into a named pipe or a
device), and a study's report in either format (markdown has its SVG figures beside it)."""

from __future__ import annotations

import sys
from pathlib import Path

from compileiq.core.errors import UsageError
from compileiq.core.file_sniff import FIGURE, REPORT
from compileiq.core.output_file import check_report_target, write_atomically
from compileiq.report.markdown import markdown
from compileiq.report.page import build, html_page
from compileiq.store import Store

FORMATS = ("html", "md")
ALIASES = {"markdown": "md"}  # the README calls it markdown


def format_name(fmt: str) -> str:
    """The format `fmt` names (`markdown` is `md`); UsageError for any other."""
    fmt = ALIASES.get(fmt, fmt)
    check_format(fmt)
    return fmt


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)} (markdown: md), got {fmt!r}")


def to_stdout(out: Path) -> bool:
    """`-o -`: the report on standard output (html: the self-contained page; md: without figures)."""
    return str(out) == "-"


def write(store: Store, study: str, out: Path, fmt: str, pareto: str | None = None, pick: str | None = None) -> list[Path]:
    """Write the report; the files written (markdown has SVG files beside it; none for `-o -`)."""
    check_format(fmt)
    report = build(store, study, pareto, pick)
    if fmt == "html":
        return written(write_file(out, html_page(report)))
    document, figures = markdown(report, None if to_stdout(out) else out.stem)
    for path, kind in (((out, REPORT), *((out.with_name(name), FIGURE) for name in figures)) if figures else ()):
        check_report_target(path, kind)  # every file before the first is written: no report without its figures
    return written(write_file(out, document),
                   *(write_file(out.with_name(name), svg, FIGURE) for name, svg in figures.items()))


def written(*paths: Path | None) -> list[Path]:
    """The files written (standard output is none)."""
    return [path for path in paths if path is not None]


def write_file(path: Path, content: str, kind: str = REPORT) -> Path | None:
    """Write one report file (None: `-`, written to standard output); it replaces only an earlier
    file of its `kind` (a report, a figure: `check_report_target`)."""
    if to_stdout(path):
        sys.stdout.write(content)
        sys.stdout.flush()
        return None
    check_report_target(path, kind)  # a named pipe would block the write, a device swallow it; never an ACF or a database
    write_atomically(path, content.encode("utf-8"))  # a new file: never through a hard link, never half a report
    return path
