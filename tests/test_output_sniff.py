"""Outputs that went by file suffix alone (red team 52, finding 4).

`tune --out --force`, `report -o`, `gate --junit/--markdown` and `db export -o` refused a `.h`
or a `.json` file but replaced a header the kernel includes under another name (`params`, no
suffix; `defs.inc`) and a gzip export (`x.json.gz`). Now every file of the run's or the gate's
own source bundle (each file `nvcc -M` lists, however the path is spelled or linked) is an input,
and what a file is also comes from its first few KiB: a C/C++/CUDA source, a compileiq export
(gzip or not), an ACF, a database.

One real tune of a tiny kernel (budget 1) gives the database, the ACF and an export; each test
works on a copy.
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest
from helpers import CliResult, run_cli, workspace_copy

KERNEL = """\
#include "defs.inc"
__global__ void scale(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = SCALE * in[i] *
#include "params"
    ;
}
"""
DEFS = "#define SCALE 2.0f\n"
PARAMS = "3.0f\n"  # nothing in its name or its text says source: only the bundle does


def _tune(*extra: str) -> list[str]:
    return ["tune", "k/scale.cu", "--budget", "1", "--workers", "local", "--no-simplify", "--objective", "instructions",
            "--only", "ptxas.opt_level", "--arch", "sm_90", "--db", "sqlite:///t.db", "--study", "s", *extra]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    workspace = tmp_path_factory.mktemp("sniff")
    (workspace / "k").mkdir()
    for name, text in (("scale.cu", KERNEL), ("defs.inc", DEFS), ("params", PARAMS)):
        (workspace / "k" / name).write_text(text)
    done = run_cli(_tune("--out", "k.acf.toml"), cwd=workspace)
    assert done.returncode == 0, done.describe()
    exported = run_cli(["db", "export", "s", "--db", "sqlite:///t.db", "-o", "s.json.gz"], cwd=workspace)
    assert exported.returncode == 0, exported.describe()
    return workspace


@pytest.fixture()
def workspace(tuned, tmp_path) -> Path:
    return workspace_copy(tuned, tmp_path)


def _snapshot(workspace: Path) -> dict[str, bytes]:
    return {name: (workspace / name).read_bytes() for name in ("k/scale.cu", "k/defs.inc", "k/params", "s.json.gz")}


def _refused(done: CliResult, says: str) -> None:
    assert done.returncode == 2, done.describe()
    assert len(done.stderr_lines) == 1 and "Traceback" not in done.output, done.describe()
    assert "not replacing" in done.stderr_lines[0] and says in done.stderr_lines[0], done.describe()


@pytest.mark.parametrize(("out", "says"), [
    ("k/params", "it is this run's source (a file nvcc -M lists)"),
    ("k/../k/params", "it is this run's source (a file nvcc -M lists)"),
    ("params-link", "it is this run's source (a file nvcc -M lists)"),
    ("k/defs.inc", "it is a C/C++/CUDA source, not an ACF"),  # known by its text before the sources are read
])
def test_tune_never_replaces_a_header_of_its_bundle_even_with_force(workspace, out: str, says: str) -> None:
    os.link(workspace / "k" / "params", workspace / "params-link")
    before = _snapshot(workspace)
    _refused(run_cli(_tune("--out", out, "--force"), cwd=workspace), says)
    assert _snapshot(workspace) == before


@pytest.mark.parametrize("option", ["--junit", "--markdown"])
@pytest.mark.parametrize("out", ["k/params", "k/../k/params", "params-link", "k/tune-link"])
def test_gate_never_writes_a_report_over_a_file_it_read(workspace, option: str, out: str) -> None:
    """Refused before any build: the kernel's headers whatever their names, and a second hard
    link to one of them (since red2 #2 already as files that are no earlier gate report; the
    bundle's files are still inputs, refused even when empty, before the builds)."""
    os.link(workspace / "k" / "params", workspace / "params-link")
    (workspace / "k" / "tune.toml").write_text('arch = "sm_90"\n')
    os.link(workspace / "k" / "tune.toml", workspace / "k" / "tune-link")
    before = _snapshot(workspace)
    done = run_cli(["gate", "k.acf.toml", "--static", option, out], cwd=workspace)
    _refused(done, "not a compileiq gate report; choose another name or delete it first")
    assert "rebuild" not in done.output.lower() and _snapshot(workspace) == before


@pytest.mark.parametrize(("out", "says"), [
    ("k/defs.inc", "it is a C/C++/CUDA source"),
    ("s.json.gz", "it is a compileiq export (gzip)"),
    ("backup", "it is a compileiq export (gzip)"),
    ("plain-export", "it is a compileiq export"),
])
def test_report_never_replaces_a_header_or_an_export_whatever_its_name(workspace, out: str, says: str) -> None:
    shutil.copy(workspace / "s.json.gz", workspace / "backup")
    (workspace / "plain-export").write_bytes(gzip.decompress((workspace / "s.json.gz").read_bytes()))
    before = _snapshot(workspace) | {"backup": (workspace / "backup").read_bytes()}
    _refused(run_cli(["report", "s", "--db", "sqlite:///t.db", "-o", out], cwd=workspace), says)
    assert _snapshot(workspace) | {"backup": (workspace / "backup").read_bytes()} == before


def test_db_export_never_replaces_a_header_but_still_its_older_export(workspace) -> None:
    before = _snapshot(workspace)
    _refused(run_cli(["db", "export", "s", "--db", "sqlite:///t.db", "-o", "k/defs.inc"], cwd=workspace),
             "it is a C/C++/CUDA source")
    assert _snapshot(workspace) == before
    again = run_cli(["db", "export", "s", "--db", "sqlite:///t.db", "-o", "s.json.gz"], cwd=workspace)
    assert again.returncode == 0, again.describe()


@pytest.mark.parametrize("fmt", ["html", "md"])
def test_a_report_still_replaces_an_older_report(workspace, fmt: str) -> None:
    for _ in range(2):
        done = run_cli(["report", "s", "--db", "sqlite:///t.db", "--format", fmt, "-o", f"r.{fmt}"], cwd=workspace)
        assert done.returncode == 0, done.describe()


_FAILED_JUNIT = ("<?xml version='1.0' encoding='utf-8'?>\n<testsuites name=\"compileiq-gate\" tests=\"1\"><testsuite>"
                 "<failure>error: a __device__ function call cannot be configured</failure></testsuite></testsuites>\n")


@pytest.mark.parametrize(("option", "name", "text"), [
    ("--junit", "gate.xml", _FAILED_JUNIT),  # a failed gate's report quotes nvcc's error
    ("--markdown", "gate.md", "## compileiq gate: FAIL\n\n# if the runner is slow, rerun\n"),  # a comment line
])  # fmt: skip
def test_the_gate_replaces_its_own_earlier_report_whatever_it_quotes(workspace, option: str, name: str,
                                                                     text: str) -> None:
    """Reviewer: after a failed gate, the next gate refused its own JUnit report ("it is a C/C++/CUDA
    source", rc 2): the report quoted nvcc's "a __device__ function call ...". A report is markup,
    and a comment line "# if ..." is no preprocessor directive: the fix-and-rerun loop works again.
    (Since red2 #2 an earlier gate report is known by its first bytes, whatever it quotes.)"""
    (workspace / name).write_text(text)
    done = run_cli(["gate", "k.acf.toml", "--static", option, name], cwd=workspace)
    assert done.returncode == 0, done.describe()
    assert (workspace / name).read_text() != text
