"""The CI reports `compileiq gate` writes (--markdown, --junit): their paths checked before any
rebuild, the files written after it, each failure one line."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from compileiq.core.errors import UsageError
from compileiq.core.file_sniff import GATE_REPORT
from compileiq.core.output_file import OutputFileError, check_report_target, same_file

if TYPE_CHECKING:
    from compileiq.gating.check import GateReport


def check_targets(markdown: Path | None, junit: Path | None, inputs: tuple[Path, ...]) -> None:
    """UsageError (one line) for a report that may not be written (over an input, a pipe, any file
    that is no earlier gate report) or two reports naming one file: before any rebuild."""
    for option, path in (("--markdown", markdown), ("--junit", junit)):
        try:
            path is None or check_report_target(path, GATE_REPORT, inputs)
        except OutputFileError as error:
            raise UsageError(f"{option} {error}") from None
    if markdown is not None and junit is not None and same_file(markdown, junit):
        raise UsageError(f"--markdown and --junit name the same file ({markdown}): one report would overwrite the other")


def write_reports(report: GateReport, markdown: Path | None, junit: Path | None, inputs: tuple[Path, ...]) -> list[str]:
    """Write the reports asked for; what went wrong with each that could not be written (the
    others are written anyway)."""
    from compileiq.gating import ci_reports as gate_report

    written = (("--markdown", markdown, gate_report.markdown), ("--junit", junit, gate_report.junit))
    problems = [_write(option, path, render(report), inputs) for option, path, render in written if path is not None]
    return [problem for problem in problems if problem]


def _write(option: str, path: Path, text: str, inputs: tuple[Path, ...]) -> str:
    """Write one gate report; what went wrong, or ""."""
    from compileiq.gating import ci_reports as gate_report

    try:
        gate_report.write(path, text, inputs)
    except OSError as error:
        return f"{option} {path}: cannot write: {error.strerror or error}"
    except OutputFileError as error:  # "cannot write PATH: it is a named pipe, not a regular file"
        return f"{option} {error}"
    return ""
