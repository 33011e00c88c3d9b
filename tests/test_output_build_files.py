"""Report outputs replaced the build files `flags`'s snippets are pasted into, and PTX (red53 #5):
`gate --markdown CMakeLists.txt` (and Makefile, k.ptx) exited 0 and the file then began
`## compileiq gate: PASS`. A build file is known by its name (CMakeLists.txt, *.cmake, Makefile,
BUILD/BUILD.bazel, WORKSPACE, MODULE.bazel, *.bzl, meson.build), PTX by its `.version`/`.target`
directives or its suffix; each refused in one line like a source, the file unchanged.
red54 F4: `report --out` still replaced build files outside that exact list (Makefile.in, build.ninja,
BUILD.gn, SConstruct, configure.ac, .bazelrc, CMakePresets.json.in, Makefile.linux...)."""

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
    _refused(run_cli(["report", "s", "--db", "sqlite:///t.db", "-o", out], cwd=workspace), "not an output")
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
    (workspace / out).write_text("an older report\n")
    done = run_cli(["report", "s", "--db", "sqlite:///t.db", "--format", "md", "-o", out], cwd=workspace)
    assert done.returncode == 0, done.describe()
    assert "an older report" not in (workspace / out).read_text()
