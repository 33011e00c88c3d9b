"""The gate's reports for CI systems: a markdown summary, JUnit XML and a JSON document.

Every report is a pure function of the gate's result: no timestamps, no host names, so the same
inputs give byte-identical reports.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from compileiq.core.file_sniff import GATE_REPORT
from compileiq.core.output_file import check_report_target, write_atomically
from compileiq.core.static_score import StaticMetrics
from compileiq.core.text import markdown_cell, printable
from compileiq.gating.check import BAD_INPUT, AcfResult, GateReport
from compileiq.gating.rules import Finding, Measured, Recorded, Severity
from compileiq.gating.timing_rules import Timing, describe

SUITE = "compileiq-gate"


def verdict(report: GateReport) -> str:
    return "ERROR" if report.exit_code == 2 else "PASS" if report.passed else "FAIL"


def summary_line(report: GateReport) -> str:
    results = report.results
    unchecked = sum(1 for r in results if r.bad_input)
    failed = sum(1 for r in results if not r.passed) - unchecked
    warnings = sum(1 for r in results for f in r.findings if f.severity is Severity.WARN)
    bad = f", {unchecked} could not be checked (bad input)" if unchecked else ""
    return (f"gate {verdict(report)}: {len(results) - failed - unchecked}/{len(results)} ACF(s) pass, {failed} fail"
            f"{bad}, {warnings} warning(s); mode {report.mode}")


def finding_line(finding: Finding) -> str:
    """One finding as a line; a re-tune command comes last, so that the rest of the line after
    "re-tune: " can be pasted into a shell."""
    if finding.rule == BAD_INPUT:
        return f"{finding.severity.value} {finding.rule}: {finding.message}"
    command = f"; re-tune: {finding.command}" if finding.command else ""
    return (f"{finding.severity.value} {finding.rule}: {finding.said} "
            f"(recorded {finding.recorded}, measured {finding.measured}){command}")


# --- markdown -----------------------------------------------------------------------------------


def markdown(report: GateReport) -> str:
    lines = [f"## compileiq gate: {verdict(report)}", "", summary_line(report) + ".",
             f"Mode: {report.mode}: {report.note}.", "",
             "| ACF | kernel | verdict | errors | warnings |", "|---|---|---|---|---|"]
    for result in report.results:
        lines.append(f"| {_cell(result.acf)} | {_cell(result.kernel)} | **{result.verdict}** | "
                     f"{_count(result, Severity.ERROR)} | {_count(result, Severity.WARN)} |")
    for result in report.results:
        lines += ["", *_markdown_result(result)]
    return "\n".join(lines) + "\n"


def _markdown_result(result: AcfResult) -> list[str]:
    if result.bad_input:
        return [f"### {_cell(result.acf)}: {result.verdict}", "",
                f"Could not be checked (bad input): {_cell(result.findings[0].message)}"]
    lines = [f"### {_cell(result.acf)}: {result.verdict}", "", f"Kernel {_cell(result.kernel_path)}.", ""]
    lines += [*(f"Note: {_cell(note)}." for note in result.notes), *([""] if result.notes else [])]
    if result.timing is not None:
        lines += [*_markdown_timing(result.timing), ""]
    if not result.findings:
        return [*lines, "No findings: the rebuild matches the recorded evidence."]
    lines += ["| rule | severity | recorded | measured | detail |", "|---|---|---|---|---|"]
    for f in result.findings:
        lines.append(f"| `{f.rule}` | {f.severity.value} | {_cell(f.recorded)} | {_cell(f.measured)} | "
                     f"{_cell(f.text)} |")
    return lines


def _markdown_timing(timing: Timing) -> list[str]:
    lines = [f"Timing vs {markdown_cell(timing.against)} (ACF/baseline): {describe(timing.vs_default)}."]
    if timing.vs_recorded is not None:
        lines.append(f"Timing vs recorded (ACF/recorded, {timing.recorded}): {describe(timing.vs_recorded)}.")
    return lines


def _cell(text: str) -> str:
    """Untrusted text (an ACF's kernel name, a compiler message) as a markdown cell: no raw HTML."""
    return markdown_cell(text)


def _count(result: AcfResult, severity: Severity) -> int:
    return sum(1 for f in result.findings if f.severity is severity)


# --- JUnit --------------------------------------------------------------------------------------


def junit(report: GateReport) -> str:
    """One testsuite `compileiq-gate`, one testcase per ACF; failures hold the error findings."""
    failures = str(sum(1 for r in report.results if not r.passed and not r.bad_input))
    errors = str(sum(1 for r in report.results if r.bad_input))
    tests = str(len(report.results))
    root = ET.Element("testsuites", name=SUITE, tests=tests, failures=failures, errors=errors)
    suite = ET.SubElement(root, "testsuite", name=SUITE, tests=tests, failures=failures, errors=errors,
                          skipped="0")
    for result in report.results:
        _testcase(suite, result)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _testcase(suite: ET.Element, result: AcfResult) -> None:
    case = ET.SubElement(suite, "testcase", classname=f"{SUITE}.{result.kernel}", name=result.acf)
    errors = [f for f in result.findings if f.severity is Severity.ERROR]
    if result.bad_input:  # JUnit's error: the test could not run
        error = ET.SubElement(case, "error", type="bad-input", message=errors[0].message)
        error.text = errors[0].message
    elif errors:
        failure = ET.SubElement(case, "failure", type="regression",
                                message="; ".join(f"{f.rule}: {f.text}" for f in errors))
        failure.text = "\n".join(finding_line(f) for f in errors)
    notes = [finding_line(f) for f in result.findings if f.severity is Severity.WARN]
    if result.timing is not None:
        notes += _markdown_timing(result.timing)
    if notes:
        ET.SubElement(case, "system-out").text = "\n".join(notes)


# --- JSON ---------------------------------------------------------------------------------------


def as_json(report: GateReport) -> dict[str, Any]:
    return {
        "verdict": verdict(report),
        "exit_code": report.exit_code,
        "mode": report.mode,
        "note": report.note,
        "rules": {name: severity.value for name, severity in report.severities},
        "acfs": [_result_json(r) for r in report.results],
    }


def _result_json(result: AcfResult) -> dict[str, Any]:
    r, m = result.recorded, result.measured
    if r is None or m is None:
        return {"acf": result.acf, "kernel": None, "kernel_path": None, "verdict": result.verdict,
                "findings": [{"rule": f.rule, "severity": f.severity.value, "message": f.message} for f in result.findings],
                "recorded": None, "measured": None, "timing": None, "notes": []}
    return {
        "acf": result.acf, "kernel": result.kernel, "kernel_path": result.kernel_path,
        "verdict": result.verdict,
        "findings": [{"rule": f.rule, "severity": f.severity.value, "recorded": f.recorded,
                      "measured": f.measured, "message": f.message,
                      **({"command": f.command} if f.command else {}),
                      **({"needs": list(f.needs)} if f.needs else {})} for f in result.findings],
        "recorded": {**_metrics_json(r), "code_hash": r.code_hash},
        "measured": {"build_failure": m.failure, "source_sha256": m.source_sha256,
                     "toolchain_build": m.toolchain_build, **_metrics_json(m),
                     **({"command_cap": m.command_cap} if m.command_cap else {})},  # a cap the ACF was not tuned with
        "timing": None if result.timing is None else _timing_json(result.timing),
        "notes": list(result.notes),
    }  # fmt: skip


def _metrics_json(values: Recorded | Measured) -> dict[str, Any]:
    """The static metrics the gate holds an ACF to, under their one names (`StaticMetrics.SCORED`):
    None for each where the rebuild failed, and for an instruction count the ACF does not record."""
    if isinstance(values, Recorded):
        return {name: values.code_instructions if name == "instructions" else getattr(values, name)
                for name in StaticMetrics.SCORED}
    built = values.failure is None
    return {**{name: getattr(values, name) if built else None for name in StaticMetrics.SCORED},
            "code_hash": values.code_hash if built else None}


def _timing_json(timing: Timing) -> dict[str, Any]:
    pairs = (("vs_default", timing.vs_default), ("vs_recorded", timing.vs_recorded))
    found: dict[str, Any] = {key: None if c is None else {"verdict": c.verdict.value, "ratio": c.estimate, "low": c.low,
                                                          "high": c.high, "rounds": c.rounds, "delta": c.delta}
                             for key, c in pairs}
    if found["vs_recorded"] is not None:
        found["vs_recorded"].update(recorded_ms=timing.recorded_ms, recorded_is=timing.recorded_is)
    return found


def write(path: Path, text: str, inputs: tuple[Path, ...] = ()) -> None:
    """OSError, or OutputFileError for a path that is no regular file (a named pipe would block),
    or that holds one of the gate's `inputs` (its ACFs) or anything but an earlier gate report. Every control
    character but the line breaks is written as an escape: an ACF's text (a hand-edited toolchain
    build holding ESC or NUL) would make the JUnit file unreadable XML."""
    check_report_target(path, GATE_REPORT, inputs)
    text = "\n".join(printable(line) for line in text.split("\n"))
    write_atomically(path, text.encode("utf-8"))  # a new file: never through a hard link, never half a report
