"""A base flag given twice: the build tuned is the one nvcc makes from the whole command.

nvcc reads the last of `-std=...` (and every last-wins option) and the last `-D`/`-U` of a macro.
Keeping a repeat's first copy built `-std=c++14 -std=c++17 -std=c++14` as C++17, which nvcc builds
as C++14: every variant of such a command was scored on code the shipped build never makes.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from compileiq.build.compile import BuildStatus, FrontendJob, emit_ptx
from compileiq.core.processes import run_tool
from compileiq.core.toolchain import find_toolchain
from compileiq.source.base_flags import parse_base_flags
from compileiq.source.kernel import bundle_sources, load_spec
from tests.helpers import run_cli

NOT_CXX17 = """
static_assert(__cplusplus < 201703L, "built as C++17");
#ifndef FLAG
#error FLAG is not defined
#endif
extern "C" __global__ void k(float* y) { y[threadIdx.x] = 2.0f; }
"""
REPEATED = ["-std=c++14", "-std=c++17", "-std=c++14", "-DFLAG=1", "-UFLAG", "-DFLAG=1"]


def test_a_repeat_after_another_flag_of_its_option_is_the_one_kept_last() -> None:
    flags = parse_base_flags(REPEATED, "test").flags
    assert [f for f in flags if f.startswith("-std=")][-1] == "-std=c++14"
    assert [f for f in flags if f[2:].startswith("FLAG")][-1] == "-DFLAG=1"


def test_a_repeat_that_changes_nothing_keeps_its_first_place_and_so_its_identity() -> None:
    assert parse_base_flags(["-O3", "-lineinfo", "-O3", "-DA=1", "-DB=2", "-DA=1"], "test").flags == (
        "-O3", "-lineinfo", "-DA=1", "-DB=2")


def test_the_front_end_builds_a_repeated_standard_as_nvcc_does(tmp_path: Path) -> None:
    source = tmp_path / "k.cu"
    source.write_text(NOT_CXX17)
    tools = find_toolchain()
    # nvcc itself: the whole command builds, C++17 alone does not (so the build below means something)
    whole = run_tool([tools.nvcc, "-arch=sm_90", "-ptx", *REPEATED, str(source), "-o", str(tmp_path / "a.ptx")], 120)
    assert whole.returncode == 0, whole.output
    alone = run_tool([tools.nvcc, "-arch=sm_90", "-ptx", "-std=c++17", "-DFLAG=1", str(source),
                      "-o", str(tmp_path / "b.ptx")], 120)
    assert alone.returncode != 0 and "built as C++17" in alone.output
    (tmp_path / "tune.toml").write_text(f"nvcc_flags = {REPEATED!r}\n".replace("'", '"'))
    ptx = emit_ptx(FrontendJob(tools.nvcc, bundle_sources(load_spec(source)), "sm_90", (), 60))
    assert ptx.status is BuildStatus.OK, ptx.message


@pytest.mark.parametrize("flags", [["-O2", "-O3", "-O2"], ["-maxrregcount=32", "-maxrregcount=64", "-maxrregcount=32"],
                                   ["--default-stream=legacy", "--default-stream=per-thread", "--default-stream=legacy"]])
def test_every_last_wins_option_keeps_the_last_repeat(flags: list[str]) -> None:
    kept = parse_base_flags(flags, "test").flags
    assert kept[-1] == flags[-1] and len(kept) == 2


def test_every_view_of_a_shipped_command_reads_its_repeats_as_base_does(tmp_path: Path) -> None:
    """fix-hostlv fault 2: [baseline] shipped_flags, [[baseline.fixed]] and tune's "fixed, applied to
    every build" kept a repeat's first copy (`-std=c++14 -std=c++17`, which reads as C++17) while
    [base] said `-std=c++17 -std=c++14`: one ACF gave two standards."""
    (tmp_path / "k.cu").write_text(NOT_CXX17)
    command = f"nvcc {' '.join(REPEATED)} -arch=sm_90 -c k.cu -o k.o"
    (tmp_path / "cc.json").write_text(json.dumps([{"directory": str(tmp_path), "file": "k.cu", "command": command}]))
    done = run_cli(["tune", "k.cu", "--compile-commands", "cc.json", "--objective", "registers", "--budget", "2",
                    "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", "k.acf.toml"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    found = tomllib.loads((tmp_path / "k.acf.toml").read_text())
    base = found["base"]["nvcc_flags"]
    assert base == ["-std=c++17", "-std=c++14", "-UFLAG", "-DFLAG=1"], base
    banner = next(line for line in done.stderr.splitlines() if "fixed, applied to every build:" in line)
    views = {"shipped_flags": [f for f in found["baseline"]["shipped_flags"] if f != "-arch=sm_90"],
             "fixed": [f["flag"] for f in found["baseline"]["fixed"] if f["applied"] and f["flag"] != "-arch=sm_90"],
             "banner": [f for f in banner.partition("every build: ")[2].split() if f != "-arch=sm_90"]}
    assert all(view == base for view in views.values()), views
