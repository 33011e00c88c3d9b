"""Report outputs replaced the build files `flags`'s snippets are pasted into, and PTX (red53 #5):
`gate --markdown CMakeLists.txt` (and Makefile, k.ptx) exited 0 and the file then began
`## compileiq gate: PASS`. A build file is known by its name (CMakeLists.txt, *.cmake, Makefile,
BUILD/BUILD.bazel, WORKSPACE, MODULE.bazel, *.bzl, meson.build), PTX by its `.version`/`.target`
directives or its suffix; each refused in one line like a source, the file unchanged.
red54 F4: `report --out` still replaced build files outside that exact list (Makefile.in, build.ninja,
BUILD.gn, SConstruct, configure.ac, .bazelrc, CMakePresets.json.in, Makefile.linux...).
red2 #2: and every file on no list (build.sh, Dockerfile, ci.yml, compile_commands.json by
`db export`...). Now an output replaces only an earlier output of its own kind, known by its first
bytes, or an empty file whose name says no build file, source or input; the name lists remain for
the clearer message and for empty files."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import CliResult, run_cli, tuned_quickly, workspace_copy

BUILD_FILES = {
    "CMakeLists.txt": "cmake_minimum_required(VERSION 3.24)\nproject(x LANGUAGES CUDA)\nadd_library(k k.cu)\n",
    "Makefile": "all:\n\tnvcc -c k.cu\n",
    "GNUmakefile": "all:\n\tnvcc -c k.cu\n",
    "cuda.cmake": "set(CMAKE_CUDA_ARCHITECTURES 90)\n",
    "BUILD.bazel": 'cuda_library(name = "k", srcs = ["k.cu"])\n',
    "BUILD": 'cuda_library(name = "k", srcs = ["k.cu"])\n',
    "WORKSPACE": 'workspace(name = "x")\n',
    "MODULE.bazel": 'bazel_dep(name = "rules_cuda", version = "0.2.1")\n',
    "defs.bzl": "def f():\n    pass\n",
    "meson.build": "project('x', 'cuda')\n",
}
PTX = ".version 8.0\n.target sm_90\n.address_size 64\n"


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    return tuned_quickly(tmp_path_factory.mktemp("buildfiles"),
                         "__global__ void k(float* p) { p[threadIdx.x] = 1.0f; }\n", "ptxas.opt_level", 1)


@pytest.fixture()
def workspace(tuned, tmp_path) -> Path:
    found = workspace_copy(tuned, tmp_path)
    for name, text in (*BUILD_FILES.items(), ("k.ptx", PTX), ("kernel.s", PTX), ("empty.ptx", "")):
        (found / name).write_text(text)
    return found


def _refused(done: CliResult, says: str) -> None:
    assert done.returncode == 2, done.describe()
    assert len(done.stderr_lines) == 1 and "Traceback" not in done.output, done.describe()
    assert "not replacing" in done.stderr_lines[0] and says in done.stderr_lines[0], done.describe()


@pytest.mark.parametrize("option", ["--markdown", "--junit"])
@pytest.mark.parametrize("out", [*BUILD_FILES, "k.ptx", "kernel.s", "empty.ptx"])
def test_gate_never_writes_a_report_over_a_build_file_or_ptx(workspace, option: str, out: str) -> None:
    before = (workspace / out).read_bytes()
    says = "it is a PTX file" if out in ("k.ptx", "kernel.s", "empty.ptx") else "it is a build file"
    _refused(run_cli(["gate", "k.acf.toml", "--static", option, out], cwd=workspace), says)
    assert (workspace / out).read_bytes() == before


@pytest.mark.parametrize("out", ["CMakeLists.txt", "Makefile", "k.ptx"])
def test_report_and_tune_never_replace_a_build_file_or_ptx(workspace, out: str) -> None:
    before = (workspace / out).read_bytes()
    _refused(run_cli(["report", "s", "--db", "sqlite:///t.db", "-o", out], cwd=workspace), "not a compileiq report")
    again = run_cli(["tune", "k.cu", "--budget", "1", "--workers", "local", "--no-simplify", "--objective",
                     "instructions", "--only", "ptxas.opt_level", "--arch", "sm_90", "--db", "sqlite:///t.db",
                     "--study", "s2", "--out", out, "--force"], cwd=workspace)
    _refused(again, "it is a")
    assert (workspace / out).read_bytes() == before


MORE_BUILD_FILES = ("Makefile.in", "Makefile.am", "GNUmakefile.in", "Makefile.linux", "makefile-cuda", "build.ninja",
                    "rules.ninja", "BUILD.gn", "cuda.gni", "SConstruct", "SConscript", "configure.ac", "configure.in",
                    ".bazelrc", "CMakePresets.json", "CMakePresets.json.in", "CMakeUserPresets.json",
                    "CMakeLists.txt.in", "cuda.cmake.in", "meson_options.txt", "WORKSPACE.bzlmod")


@pytest.mark.parametrize("out", MORE_BUILD_FILES)
def test_report_never_replaces_a_build_file_by_a_broader_name(workspace, out: str) -> None:
    (workspace / out).write_text("all:\n\tnvcc -c k.cu\n")
    _refused(run_cli(["report", "s", "--db", "sqlite:///t.db", "-o", out], cwd=workspace), "it is a build file")
    assert (workspace / out).read_text() == "all:\n\tnvcc -c k.cu\n"


@pytest.mark.parametrize("out", ["report.md", "build.md", "workspace.html", "configure.log", "notes.in",
                                 "BUILD.md", "makefile_gen.report.html", "WORKSPACE.summary.xml"])  # rev54 6
def test_report_still_replaces_an_ordinary_output(workspace, out: str) -> None:
    """A name like a build file's is no build file with a report's suffix: an empty file of that
    name takes the report, and then the report its newer one."""
    (workspace / out).write_text("")
    for _ in range(2):
        done = run_cli(["report", "s", "--db", "sqlite:///t.db", "--format", "md", "-o", out], cwd=workspace)
        assert done.returncode == 0, done.describe()
        assert (workspace / out).read_text().startswith("# compileiq report: s")


# red2 #2: files on no list, each replaced by `report -o` (a markdown report) or `db export -o`.
# The rule is no longer a list: an output replaces only an earlier output of its own kind, known
# by its first bytes, or an empty file.
RED2_FILES = {
    "build.sh": "#!/bin/sh\nnvcc -O3 -c k.cu\n",
    "xmake.lua": 'target("k")\n  add_files("k.cu")\n',
    "conanfile.txt": "[requires]\nzlib/1.2\n",
    "detail.inl": "template <class T> T twice(T x) { return x + x; }\n",
    "compile_commands.json": '[{"directory":"/x","file":"k.cu","command":"nvcc -c k.cu"}]\n',
    "Dockerfile": "FROM nvidia/cuda\n",
    "BUCK": 'cuda_library(name="k", srcs=["k.cu"])\n',
    "ci.yml": "name: ci\non: push\n",
    "k.cuf": "attributes(global) subroutine k()\nend subroutine\n",
}
OUTPUT_COMMANDS = {
    "report": ["report", "s", "--db", "sqlite:///t.db", "-o"],
    "report-md": ["report", "s", "--db", "sqlite:///t.db", "--format", "md", "-o"],
    "gate-markdown": ["gate", "k.acf.toml", "--static", "--markdown"],
    "gate-junit": ["gate", "k.acf.toml", "--static", "--junit"],
    "export": ["db", "export", "s", "--db", "sqlite:///t.db", "-o"],
}


@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_no_output_replaces_a_file_it_did_not_write(workspace, command: str) -> None:
    """Every file for the red team's commands (report --format md, db export); three for the others,
    which go through the same check."""
    names = list(RED2_FILES) if command in ("report-md", "export") else ["build.sh", "Dockerfile", "ci.yml"]
    for name, text in RED2_FILES.items():
        (workspace / name).write_text(text)
    for name in names:
        text = RED2_FILES[name]
        done = run_cli([*OUTPUT_COMMANDS[command], name], cwd=workspace)
        _refused(done, "choose another name or delete it first")
        assert (workspace / name).read_text() == text, name
    assert not list(workspace.glob("*.svg"))  # no figure written for a report refused


@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_each_output_replaces_its_own_earlier_output_or_an_empty_file(workspace, command: str) -> None:
    for name in ("out.json" if command == "export" else "out", "out.json.gz" if command == "export" else "empty"):
        (workspace / name).write_text("")
        for _ in range(2):  # the empty file, then the earlier output
            done = run_cli([*OUTPUT_COMMANDS[command], name], cwd=workspace)
            assert done.returncode == 0, done.describe()
            assert (workspace / name).stat().st_size > 0


@pytest.mark.parametrize(("command", "other", "says"), [
    ("report", "gate-markdown", "it is a compileiq gate report, not a compileiq report"),
    ("gate-junit", "report", "it is a compileiq report, not a compileiq gate report"),
    ("export", "report-md", "it is a compileiq report, not a compileiq export"),
    ("report-md", "export", "it is a compileiq export, not a compileiq report"),
])
def test_an_output_never_replaces_another_commands_output(workspace, command: str, other: str, says: str) -> None:
    assert run_cli([*OUTPUT_COMMANDS[other], "out"], cwd=workspace).returncode == 0
    before = (workspace / "out").read_bytes()
    _refused(run_cli([*OUTPUT_COMMANDS[command], "out"], cwd=workspace), says)
    assert (workspace / "out").read_bytes() == before


def test_a_report_replaces_its_earlier_figures_never_a_foreign_svg(workspace) -> None:
    args = [*OUTPUT_COMMANDS["report-md"], "r.md"]
    assert run_cli(args, cwd=workspace).returncode == 0
    assert run_cli(args, cwd=workspace).returncode == 0  # report and figures replaced
    figure = next(workspace.glob("r-*.svg"))
    figure.write_text('<svg xmlns="http://www.w3.org/2000/svg"><title>logo</title></svg>\n')
    before = (workspace / "r.md").read_bytes()
    _refused(run_cli(args, cwd=workspace), f"{figure.name}: it is not a compileiq report figure")
    assert figure.read_text().startswith('<svg xmlns="http://www.w3.org/2000/svg"><title>logo')
    assert (workspace / "r.md").read_bytes() == before


@pytest.mark.parametrize("name", ["tune.toml", "CMakeLists.txt", "k.acf.toml"])
def test_a_protected_file_that_starts_like_a_report_is_never_replaced(workspace, name: str) -> None:
    """review55 finding 6: a file was replaced when its first bytes were a compileiq report's, before
    its name was asked: a tune.toml, CMakeLists.txt or ACF starting with `# compileiq report:`."""
    text = "# compileiq report: s\n[tune]\n"
    (workspace / name).write_text(text)
    done = run_cli([*OUTPUT_COMMANDS["report-md"], name], cwd=workspace)
    _refused(done, "choose another name or delete it first")
    assert (workspace / name).read_text() == text
