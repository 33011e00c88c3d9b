"""Shell text in a kernel's settings never runs: nvcc hands -D values, file names and include
folders to /bin/sh (in double quotes), so `$(...)`, backticks and quotes there would execute.

Each case is a real `compileiq tune` (the console command, --workers local) on a valid kernel
whose settings carry a payload that touches $CIQ_MARKER; the run must stop with a one-line
error naming the offending key, exit non-zero, and the marker must not exist. Before the
allow-lists the -D, file-name and include-folder cases created the marker.
"""

from __future__ import annotations

import codecs
import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomli_w
from helpers import TINY_KERNEL, CliResult, run_cli

from compileiq.core.defines import define_arg_problem, macro_problem
from compileiq.results.acf import AcfError
from compileiq.source.base_flags import BaseFlagError, parse_base_flags
from compileiq.source.kernel import load_spec
from compileiq.source.launch import ExpressionError, evaluate

KERNEL = """\
#ifndef SCALE
#define SCALE 2.0f
#endif
extern "C" __global__ void scale(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= SCALE;
}
"""
RUN = "$(touch $CIQ_MARKER)"
TICK = "`touch $CIQ_MARKER`"


@dataclass(frozen=True)
class Hostile:
    toml: str = ""
    says: str = ""  # the key (or name) the error line must name
    file_name: str = "k.cu"
    folder: str = ""  # a folder to create beside the kernel (an include dir with shell text)
    header: str = ""  # a header to create and include


# fmt: off
CASES: dict[str, Hostile] = {
    "define-subshell": Hostile(f'[defines]\nSCALE = "{RUN}"\n', "defines.SCALE"),
    "define-backtick": Hostile(f'[defines]\nSCALE = "{TICK}"\n', "defines.SCALE"),
    "define-semicolon": Hostile('[defines]\nSCALE = "1; touch $CIQ_MARKER"\n', "defines.SCALE"),
    "define-and": Hostile('[defines]\nSCALE = "1 && touch x"\n', "defines.SCALE"),
    "define-pipe": Hostile('[defines]\nSCALE = "1 | tee x"\n', "defines.SCALE"),
    "define-newline": Hostile('[defines]\nSCALE = "1\\ntouch x"\n', "defines.SCALE"),
    "define-double-quote": Hostile('[defines]\nSCALE = \'1"; touch $CIQ_MARKER; echo "\'\n', "defines.SCALE"),
    "define-single-quote": Hostile("[defines]\nSCALE = \"1'x\"\n", "defines.SCALE"),
    "define-ifs": Hostile('[defines]\nSCALE = "1${IFS}x"\n', "defines.SCALE"),
    "define-backslash": Hostile('[defines]\nSCALE = "1\\\\"\n', "defines.SCALE"),
    "define-comma": Hostile('[defines]\nSCALE = "1,EVIL=2"\n', "defines.SCALE"),
    "define-redirect-append": Hostile('[defines]\nSCALE = "1 >> x &"\n', "defines.SCALE"),
    "define-name-subshell": Hostile(f'[defines]\n"A{RUN}" = 1\n', "defines.A"),
    "tuned-subshell": Hostile(f'[tune.defines]\nSCALE = ["2.0f", "{RUN}"]\n', "tune.defines.SCALE"),
    "tuned-backtick": Hostile(f'[tune.defines]\nSCALE = ["{TICK}"]\n', "tune.defines.SCALE"),
    "tuned-semicolon": Hostile('[tune.defines]\nSCALE = ["2.0f;touch x"]\n', "tune.defines.SCALE"),
    "tuned-name-subshell": Hostile(f'[tune.defines]\n"B{RUN}" = [1]\n', "tune.defines.B"),
    "flags-define-subshell": Hostile(f'nvcc_flags = ["-DSCALE={RUN}"]\n', "nvcc_flags"),
    "flags-define-split": Hostile(f'nvcc_flags = ["-D", "SCALE={TICK}"]\n', "nvcc_flags"),
    "flags-include-subshell": Hostile(f'nvcc_flags = ["-I{RUN}"]\n', "nvcc_flags"),
    "flags-xcompiler": Hostile('nvcc_flags = ["-Xcompiler=-fPIC"]\n', "-Xcompiler"),
    "flags-ccbin": Hostile('nvcc_flags = ["-ccbin=/bin/sh"]\n', "-ccbin"),
    "flags-compiler-bindir": Hostile('nvcc_flags = ["--compiler-bindir", "/tmp"]\n', "--compiler-bindir"),
    "flags-output": Hostile('nvcc_flags = ["-o", "/tmp/x"]\n', "-o"),
    "flags-run": Hostile('nvcc_flags = ["--run"]\n', "--run"),
    "flags-xlinker": Hostile('nvcc_flags = ["-Xlinker", "-rpath"]\n', "-Xlinker"),
    "flags-odir": Hostile('nvcc_flags = ["-odir", "/tmp"]\n', "-odir"),
    "flags-dryrun": Hostile('nvcc_flags = ["--dryrun"]\n', "--dryrun"),
    "flags-std-injection": Hostile(f'nvcc_flags = ["-std=c++17{RUN}"]\n', "nvcc_flags"),
    "include-dir-subshell": Hostile(f'include_dirs = ["inc{RUN}"]\n', "include_dirs", folder=f"inc{RUN}"),
    "include-dir-backtick": Hostile(f'include_dirs = ["inc{TICK}"]\n', "include_dirs", folder=f"inc{TICK}"),
    "file-name-subshell": Hostile("", "kernel file name", file_name=f"k{RUN}.cu"),
    "file-name-backtick": Hostile("", "kernel file name", file_name=f"k{TICK}.cu"),
    "file-name-semicolon": Hostile("", "kernel file name", file_name="k;touch x.cu"),
    "header-name-subshell": Hostile("", "header", header=f"h{RUN}.h"),
    "toml-nested-arrays": Hostile("x = " + "[" * 5000 + "]" * 5000 + "\n", "malformed TOML: nested too deeply"),
    "toml-nested-tables": Hostile("x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n", "malformed TOML: nested too deeply"),
    "launch-python": Hostile('[launch.scale]\ndynamic_smem = "__import__(\'os\').system(\'touch x\')"\n',
                             "launch.scale.dynamic_smem"),
}
# fmt: on


def _workspace(root: Path, case: Hostile) -> tuple[Path, Path]:
    root.mkdir(parents=True)
    source = KERNEL
    if case.header:
        (root / case.header).write_text("#define FROM_HEADER 1\n")
        source = f'#include "{case.header}"\n' + KERNEL
    if case.folder:
        (root / case.folder).mkdir()
    (root / case.file_name).write_text(source)
    if case.toml:
        (root / "tune.toml").write_text(case.toml)
    return root / case.file_name, root / "MARKER"


def _run(root: Path, case: Hostile) -> tuple[CliResult, Path]:
    cu, marker = _workspace(root, case)
    args = ["tune", str(cu), "--objective", "static", "--budget", "2", "--workers", "local", "--only",
            "ptxas.opt_level", "--arch", "sm_90", "--db", f"sqlite:///{root / 'db.sqlite'}"]
    return run_cli(args, cwd=root, env={"CIQ_MARKER": str(marker)}, timeout=300), marker


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Future[tuple[CliResult, Path]]]:
    base = tmp_path_factory.mktemp("hostile")
    pool = ThreadPoolExecutor(max_workers=3)
    futures = {name: pool.submit(_run, base / name, case) for name, case in CASES.items()}
    pool.shutdown(wait=False)
    return futures


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_tune_toml_saved_with_a_byte_order_mark_is_read(tmp_path: Path, newline: str) -> None:
    """Windows editors start a UTF-8 file with U+FEFF; TOML readers must not see it as a key."""
    (tmp_path / "k.cu").write_text(KERNEL)
    text = newline.join(['arch = "sm_80"', "[defines]", 'SCALE = "3.0f"', ""])
    (tmp_path / "tune.toml").write_bytes(codecs.BOM_UTF8 + text.encode())
    spec = load_spec(tmp_path / "k.cu")
    assert spec.arch == "sm_80" and spec.defines == (("SCALE", "3.0f"),)


def test_there_are_many_distinct_payloads() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize("name", sorted(CASES))
def test_shell_text_in_settings_never_runs(results: dict[str, Future[tuple[CliResult, Path]]], name: str) -> None:
    result, marker = results[name].result()
    assert not marker.exists(), f"the payload ran: {result.describe()}"
    assert not (marker.parent / "x").exists()
    assert result.returncode != 0, result.describe()
    assert len(result.stderr_lines) == 1, result.describe()
    assert CASES[name].says in result.stderr_lines[0], result.describe()
    assert "Traceback" not in result.output


@pytest.mark.parametrize("value", ["2*BLOCK", "1.5f", "float", "-1", "(N+1)/2", "a<b", "x:y", "1e-3", "A=B", ""])
def test_real_macro_values_pass(value: str) -> None:
    assert macro_problem("V", value) is None
    assert define_arg_problem(f"-DV={value}") is None


def test_a_macro_value_with_a_space_is_refused() -> None:
    """"unsigned int" was allowed; but `nvcc $(compileiq flags ...)` splits a flag at its spaces, and
    "1.o -ccbin=evil" made the second word an option of the input's choosing (the red team's)."""
    for value in ("unsigned int", "1.o -ccbin=/tmp/evil -DY=2"):
        assert "contains ' '" in (macro_problem("V", value) or "")
        assert "contains ' '" in (define_arg_problem(f"-DV={value}") or "")


def test_real_base_flags_pass_in_canonical_spelling() -> None:
    flags = parse_base_flags(["-rdc=true", "--std", "c++20", "--expt-extended-lambda", "-expt-relaxed-constexpr",
                              "-lineinfo", "-I", "include", "-Ithird_party/lib", "-DUSE_X", "-D", "N=2*BLOCK",
                              "--diag-suppress=177,550", "-w"], "test")
    assert flags.flags == ("-rdc=true", "-std=c++20", "--extended-lambda", "--expt-relaxed-constexpr",
                           "-lineinfo", "-DUSE_X", "-DN=2*BLOCK", "--diag-suppress=177,550", "-w")
    assert flags.include_dirs == ("include", "third_party/lib") and flags.relocatable


@pytest.mark.parametrize("flag", ["--use_fast_math", "-O4", "-G", "-arch=sm_80", "-gencode", "--keep",
                                  "-Xptxas=-v", "-Xcudafe", "--dlink-time-opt", "-std=gnu++17"])
def test_other_flags_are_refused_with_one_line(flag: str) -> None:
    with pytest.raises(BaseFlagError) as info:
        parse_base_flags([flag], "k/tune.toml: nvcc_flags")
    assert "\n" not in str(info.value) and str(info.value).startswith("k/tune.toml: nvcc_flags: ")


@pytest.mark.parametrize("text", ["__import__('os')", "open('x')", "x.y", "[1]", "lambda: 1", "2**99999999",
                                  "sizeof(evil)", "1 if 1 else 2"])
def test_launch_expressions_are_arithmetic_only(text: str) -> None:
    with pytest.raises(ExpressionError):
        evaluate(text, {"x": 1})


def _balanced_sum(name: str, count: int) -> str:
    if count == 1:
        return name
    return f"({_balanced_sum(name, count // 2)}+{_balanced_sum(name, count - count // 2)})"


def test_macros_that_fan_out_are_evaluated_in_well_under_a_second() -> None:
    """A = (B+B+... 230 times), B = (C+...), C = (D+...): read at every reference, 230**3 nodes hung
    flags, gate and tune (a forged ACF's restrictions, a tune.toml's launch facts). Each macro's
    value is read once now. Read at every reference, the evaluator's step bound would refuse it
    (`test_an_evaluation_that_visits_too_many_nodes_is_one_line`); the time bound is a backstop
    wide enough for a loaded CI machine (0.04 s quiet; 0.5 s failed once beside other work)."""
    import time

    macros: dict[str, int | str] = {name: _balanced_sum(chr(ord(name) + 1), 230) for name in "ABCDEFG"}
    macros["H"] = 1
    assert all(len(str(v)) < 1000 for v in macros.values())
    started = time.monotonic()
    assert evaluate("A > 0", macros, condition=True) == 1
    assert evaluate("A", {**macros, "H": 0}) == 0
    assert time.monotonic() - started < 5


def test_an_evaluation_that_visits_too_many_nodes_is_one_line() -> None:
    wide: dict[str, int | str] = {f"W{i}": _balanced_sum("1", 230) for i in range(60)}  # 459 nodes each, all distinct
    with pytest.raises(ExpressionError, match="steps to evaluate") as info:
        evaluate(_balanced_sum_of(list(wide)), wide)
    assert "\n" not in str(info.value)


def _balanced_sum_of(names: list[str]) -> str:
    if len(names) == 1:
        return names[0]
    half = len(names) // 2
    return f"({_balanced_sum_of(names[:half])}+{_balanced_sum_of(names[half:])})"


def test_an_acf_with_shell_text_in_a_base_flag_is_refused(tmp_path: Path) -> None:
    from compileiq.core.space_files import load_space
    from compileiq.results import acf

    space = load_space("13.0")
    content = acf.AcfContent("k", "k.cu", "k.cu", "ab" * 32, "sm_90", "13.0", "13.0", "b", space,
                             space.default_config(), (), {"name": "static"}, {}, {}, ("-DX=$(id)",))
    with pytest.raises(AcfError, match=r"base.nvcc_flags: .*contains '\$'"):
        acf.write(tmp_path / "k.acf.toml", content)  # compileiq never writes one
    path = tmp_path / "k.acf.toml"
    path.write_text(tomli_w.dumps(acf.render(content)))  # a hand-made one
    with pytest.raises(AcfError, match=r"base.nvcc_flags: .*contains '\$'"):
        acf.read(path)


@pytest.mark.parametrize(("include", "says"), [
    ('"/dev/zero"', "k.cu:1: #include '/dev/zero' is a character device, not a source file"),
    ('"inc/deeper.h"', "inc/deeper.h:2: #include 'pipe.h' is a named pipe, not a source file"),
    ("<inc>", "k.cu:1: #include 'inc' is a directory, not a source file"),
])
def test_an_include_of_a_device_pipe_or_folder_is_one_line_before_any_compiler_runs(
        tmp_path: Path, include: str, says: str) -> None:
    # Before, the preprocessor read /dev/zero until it held gigabytes, and a named pipe until the timeout.
    (tmp_path / "inc").mkdir()
    os.mkfifo(tmp_path / "inc" / "pipe.h")
    (tmp_path / "inc" / "deeper.h").write_text('#pragma once\n#include "pipe.h"\n')
    (tmp_path / "k.cu").write_text(f"#include {include}\n{KERNEL}")
    (tmp_path / "tune.toml").write_text('include_dirs = ["."]\n')
    args = ["tune", "k.cu", "--budget", "2", "--workers", "local", "--db", f"sqlite:///{tmp_path / 'db.sqlite'}"]
    result = run_cli(args, cwd=tmp_path, timeout=120)
    assert result.returncode == 2 and result.stderr_lines == [f"error: {says}"], result.describe()


SECRET_TOKEN = "--S3cretToken"


@pytest.fixture(scope="module")
def baseline_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kernel tuned from its compile_commands.json (checkout/k), and a compilation database
    outside the checkout standing in for another project's (its command holds a secret token)."""
    root = tmp_path_factory.mktemp("baseline-path")
    k = root / "checkout" / "k"
    k.mkdir(parents=True)
    (k / "scale.cu").write_text(TINY_KERNEL)
    entry = {"directory": str(k), "file": "scale.cu", "command": "nvcc -arch=sm_90 -c scale.cu -o s.o"}
    (k / "compile_commands.json").write_text(json.dumps([entry]))
    (root / "secret.json").write_text(json.dumps([entry | {"command": f"nvcc -DX=1 {SECRET_TOKEN} -c scale.cu"}]))
    (k / "inside.json").write_text((root / "secret.json").read_text())
    (k / "linked.json").symlink_to(root / "secret.json")
    done = run_cli(["tune", "scale.cu", "--compile-commands", "compile_commands.json", "--workers", "local",
                    "--budget", "2", "--no-simplify", "--db", f"sqlite:///{root / 't.db'}", "--out", "k.acf.toml"],
                   cwd=k)  # fmt: skip
    assert done.returncode == 0, done.describe()
    return k


@pytest.mark.parametrize(("named", "outside"), [("{root}/secret.json", True), ("../../secret.json", True),
                                                ("linked.json", True), ("/etc/passwd", True),
                                                ("inside.json", False)],
                         ids=["absolute", "dot-dot", "symlink-out", "etc-passwd", "inside"])  # fmt: skip
def test_an_acfs_baseline_path_is_read_only_inside_its_tree_and_never_quoted(baseline_project: Path, tmp_path: Path,
                                                                            named: str, outside: bool) -> None:  # fmt: skip
    """A forged ACF's `[baseline] path` made the gate open any file of the CI machine (absolute,
    ../, a link) and quote a refused token of it into the PR comment. A database outside the ACF's
    checkout is not read ("not checked"); none is quoted."""
    text = (baseline_project / "k.acf.toml").read_text()
    assert 'path = "compile_commands.json"' in text
    forged = baseline_project / f"forged-{tmp_path.name}.acf.toml"
    forged.write_text(text.replace('path = "compile_commands.json"',
                                   f'path = "{named.format(root=baseline_project.parent.parent)}"'))
    done = run_cli(["gate", forged.name, "--static", "--markdown", str(tmp_path / "g.md")], cwd=baseline_project)
    output = done.output + (tmp_path / "g.md").read_text()
    assert done.returncode == 0 and "Traceback" not in output, done.describe()
    assert "S3cret" not in output and "root:" not in output, output
    assert "stale-settings" in output
    assert ("and was not read" in output) == outside, output  # outside its checkout, or its folder where none


def _forge_outside_kernel(baseline_project: Path, acf_folder: Path) -> Path:
    """The ACF of checkout/k moved to `acf_folder`, its `kernel.path` and `[baseline] path` naming
    another project's folder (a copy of the kernel, and a compile command with a secret define)."""
    other = baseline_project.parent.parent / "other-project"
    other.mkdir(exist_ok=True)
    (other / "scale.cu").write_text((baseline_project / "scale.cu").read_text())
    entry = {"directory": str(other), "file": "scale.cu", "command": "nvcc -DSECRET_VALUE=hunter2 -arch=sm_90 -c scale.cu"}
    (other / "secret.json").write_text(json.dumps([entry]))
    text = (baseline_project / "k.acf.toml").read_text()
    assert text.count('path = "scale.cu"') == 1 and text.count('path = "compile_commands.json"') == 1
    forged = acf_folder / "k.acf.toml"
    forged.write_text(text.replace('path = "scale.cu"', f'path = "{other / "scale.cu"}"')
                      .replace('path = "compile_commands.json"', f'path = "{other / "secret.json"}"'))
    return forged


def test_a_database_in_the_folder_of_a_kernel_the_acf_names_is_not_read(baseline_project: Path,
                                                                         tmp_path: Path) -> None:
    """The kernel's folder was trusted for an ACF's `[baseline] path`, and the ACF names the kernel:
    a forged one named a `.cu` in another project and a database beside it, and the gate quoted the
    command's secret define into the PR comment ("adds -DSECRET_VALUE=hunter2"). Outside a git
    checkout the kernel is still found as the ACF says; the database beside it is 'not checked'."""
    forged = _forge_outside_kernel(baseline_project, tmp_path)
    done = run_cli(["gate", forged.name, "--static", "--markdown", "g.md"], cwd=tmp_path)
    output = done.output + (tmp_path / "g.md").read_text()
    assert done.returncode == 0 and "Traceback" not in output, done.describe()
    assert "SECRET" not in output and "hunter2" not in output, output
    assert "secret.json, is outside the ACF's folder, which is in no git checkout" in output, output
    assert "and was not read" in output, output
    assert "not checked" in output, output


def test_an_acf_in_a_git_checkout_naming_a_kernel_outside_it_is_bad_input(baseline_project: Path,
                                                                          tmp_path: Path) -> None:
    """An ACF in a pull request made the gate read, hash and compile any `.cu` of the CI machine (and
    the database beside it): in a git checkout, a kernel outside it is bad input for that ACF (pass
    --kernel), nothing of it read; the user's --kernel is still taken."""
    (tmp_path / ".git").mkdir()
    forged = _forge_outside_kernel(baseline_project, tmp_path)
    done = run_cli(["gate", forged.name, "--static", "--markdown", "g.md"], cwd=tmp_path)
    output = done.output + (tmp_path / "g.md").read_text()
    assert done.returncode == 2 and "Traceback" not in output, done.describe()
    assert "SECRET" not in output and "hunter2" not in output, output
    assert ("k.acf.toml: the ACF names a kernel outside its checkout "
            f"({baseline_project.parent.parent / 'other-project' / 'scale.cu'}): pass --kernel") in done.stderr
    given = run_cli(["gate", forged.name, "--static", "--kernel", str(baseline_project / "scale.cu")], cwd=tmp_path)
    assert given.returncode == 0 and "SECRET" not in given.output, given.describe()
