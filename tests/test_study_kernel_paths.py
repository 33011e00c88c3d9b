"""Studies of different files of one name are told apart wherever studies are listed.

A first-time user tuned HeCBench programs, each `src/<name>-cuda/main.cu`, into one database: the
study list, `show --json` and the report named every study "main" beside a hash-like name, so no
one could tell which program a study was. A run now records its kernel's path in its decision
(`runs.decision.kernel_path`, relative to the working directory); the list names each study by the
shortest end of that path that tells it from the other files of its name, `show STUDY`, its JSON
and the report give the path. A forged path is never shown; a study whose runs recorded none
(older, imported) is listed by its kernel name as before. Study names and lookups are unchanged.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from helpers import TINY_KERNEL, forge_run, run_cli

from compileiq.results.recorded_sources import decided_path, kernel_path
from compileiq.results.study_labels import kernel_labels

OTHER_KERNEL = """\
__global__ void add(float* x, const float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i] * y[i];
}
"""


def _cli(folder: Path, db: Path, *args: str) -> str:
    result = run_cli([*args, "--db", f"sqlite:///{db}"], cwd=folder)
    assert result.returncode == 0 and "Traceback" not in result.output, result.describe()
    return result.stdout


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A HeCBench-like tree, src/a-cuda/main.cu and src/b-cuda/main.cu, each tuned from its root into b.db."""
    root = tmp_path_factory.mktemp("bench")
    for name, text in (("a", TINY_KERNEL), ("b", OTHER_KERNEL)):
        (root / "src" / f"{name}-cuda").mkdir(parents=True)
        (root / "src" / f"{name}-cuda" / "main.cu").write_text(text)
        _cli(root, root / "b.db", "tune", f"src/{name}-cuda/main.cu", "--budget", "2", "--workers", "local",
             "--out", f"{name}.acf.toml")
    return root


def test_show_and_the_report_tell_apart_studies_of_files_of_one_name(bench: Path) -> None:
    db = bench / "b.db"
    listed = json.loads(_cli(bench, db, "show", "--json"))
    assert [(s["kernel"], s["kernel_path"], s["kernel_shown"]) for s in listed] == [
        ("main", "src/a-cuda/main.cu", "a-cuda/main.cu"), ("main", "src/b-cuda/main.cu", "b-cuda/main.cu")]
    table = _cli(bench, db, "show")
    assert "a-cuda/main.cu" in table and "b-cuda/main.cu" in table, table
    first = listed[0]["name"]
    assert first.startswith("main-static-")  # the study's name and identity are as before
    one = json.loads(_cli(bench, db, "show", first, "--json"))
    assert one["study"]["kernel_path"] == "src/a-cuda/main.cu"
    assert f"{first} (src/a-cuda/main.cu): trials" in _cli(bench, db, "show", first)
    report = _cli(bench, db, "report", listed[1]["name"], "--format", "md", "-o", "-")
    assert "| kernel path (as its run recorded it) | src/b-cuda/main.cu |" in report, report


def test_a_forged_or_missing_kernel_path_is_never_shown(bench: Path, tmp_path: Path) -> None:
    """A later run row naming a path that is no short printable relative path (or none: a run from
    before paths were recorded) is not shown: the list names that study's kernel as before."""
    db = tmp_path / "f.db"
    shutil.copy(bench / "b.db", db)
    connection = sqlite3.connect(db)
    decision = json.loads(connection.execute("select decision from runs where study_id = 2").fetchone()[0])
    connection.close()
    for forged in ("../../etc/passwd", "/etc/passwd", "a//main.cu", "a-cuda/\x1b[31mmain.cu", "x" * 2000, 7, None,
                   "a\\..\\..\\etc/passwd", "src/c-cuda/other.cu"):  # not main.cu's path: the list called it "passwd"
        forge_run(db, {k: v for k, v in decision.items() if k != "kernel_path"} | {"kernel_path": forged}, study_id=2)
        listed = json.loads(_cli(tmp_path, db, "show", "--json"))
        assert [(s["kernel_path"], s["kernel_shown"]) for s in listed] == [
            ("src/a-cuda/main.cu", "main"), (None, "main")], forged
    assert "kernel path" not in _cli(tmp_path, db, "report", "2", "--format", "md", "-o", "-")
    assert json.loads(_cli(tmp_path, db, "show", "2", "--json"))["study"]["kernel_path"] is None


def test_the_shortest_distinguishing_end_of_each_path() -> None:
    kernels = [("main", "src/a-cuda/main.cu"), ("main", "src/b-cuda/main.cu"), ("main", "src/a-cuda/main.cu"),
               ("main", "x/main.cuh"), ("main", None), ("scan", "a/scan.cu"), ("k", "one/k.cu"), ("k", "two/one/k.cu")]
    assert kernel_labels(kernels) == ["a-cuda/main.cu", "b-cuda/main.cu", "a-cuda/main.cu", "main.cuh", "main",
                                      "scan", "one/k.cu", "two/one/k.cu"]


def test_the_recorded_path_is_relative_to_the_working_directory_and_never_less_than_its_folder(tmp_path: Path) -> None:
    source = tmp_path / "src" / "a-cuda" / "main.cu"
    assert kernel_path(source, tmp_path) == "src/a-cuda/main.cu"
    assert kernel_path(source, source.parent) == "a-cuda/main.cu"  # run in the program's own folder
    assert kernel_path(source, tmp_path / "elsewhere") == "a-cuda/main.cu"
    assert decided_path({"kernel_path": "src/a-cuda/main.cu"}, "main") == "src/a-cuda/main.cu"
    assert decided_path({"kernel_path": "src/../main.cu"}, "main") is None and decided_path("x", "main") is None
    assert decided_path({"kernel_path": "src/a-cuda/main.cu"}, "scan") is None  # another file's path
