"""No compiler option compileiq hands nvcc holds shell text (red team 49, finding 1).

nvcc runs its sub-tools through /bin/sh and passes every `-Xptxas=` value to it unquoted: a
search-space value "32`touch${IFS}FILE`" for ptxas.maxrregcount ran `touch` in the one-step build
of the measuring program (`build_executable`: `tune --objective time`, `gate --device`). Three
checks stand in its way, each tested here with real nvcc: the space file is refused when it is
read, an ACF whose arguments hold such text is refused when it is read, and `build_executable`
(and the front end's nvcc run) refuses such an argument before any process starts.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
import tomllib
from pathlib import Path

import pytest
import tomli_w
from helpers import TINY_KERNEL, CliResult, run_cli

from compileiq.build.compile import (
    BuildStatus,
    ExecutableJob,
    FrontendJob,
    build_executable,
    emit_ptx,
)
from compileiq.core.space_files import load_space
from compileiq.core.toolchain import find_toolchain
from compileiq.source.spec import SourceBundle

REPO = Path(__file__).resolve().parent.parent


def _shell_text(marker: Path) -> str:
    return f"`touch${{IFS}}{marker}`"


def _bundle(source: str) -> SourceBundle:
    data = source.encode()
    return SourceBundle("k.cu", (("k.cu", data),), (), hashlib.sha256(data).hexdigest())


def _one_error_line(result: CliResult) -> str:
    assert "Traceback" not in result.output, result.describe()
    assert result.returncode == 2, result.describe()
    errors = [line for line in result.stderr_lines if line.startswith("error:")]
    assert len(errors) == 1 and errors[0] == result.stderr_lines[-1], result.describe()
    return errors[0]


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """(a folder of search spaces whose ptxas.maxrregcount offers a value holding shell text,
    the marker file that text would create, the value)."""
    folder = tmp_path_factory.mktemp("poisoned-spaces")
    marker = folder / "ran"
    value = "32" + _shell_text(marker)
    for space in (REPO / "search_spaces").glob("*.toml"):
        shutil.copy(space, folder / space.name)
    ptxas = folder / "ptxas-13.0.toml"
    text = ptxas.read_text()
    old = 'values = ["default", 24, 32, 40, 48, 64, 80, 96, 128, 168, 255]'
    assert old in text
    ptxas.write_text(text.replace(old, f'values = ["default", 24, 32, 40, {value!r}]'.replace("'", '"')))
    return folder, marker, value


def test_build_executable_refuses_shell_text_in_a_ptxas_argument_before_nvcc_runs(tmp_path: Path) -> None:
    """The red team's demonstration: the build succeeded and the marker file was there."""
    marker = tmp_path / "ran"
    nvcc = find_toolchain().nvcc
    bundle = _bundle(TINY_KERNEL + "\nint main() { return 0; }\n")
    for ptxas_arg in (f"--maxrregcount=32{_shell_text(marker)}", f"--def-load-cache=ca;touch${{IFS}}{marker}",
                      f"--maxrregcount=32$(touch${{IFS}}{marker})", "--maxrregcount=32,--dont-merge-basicblocks"):
        built = build_executable(ExecutableJob(nvcc, bundle, "sm_90", (), (ptxas_arg,), 120.0))
        assert built.status is BuildStatus.COMPILE_ERROR and not built.executable, (ptxas_arg, built)
        assert built.message.startswith("compileiq refused to run nvcc with the ptxas argument"), built.message
        assert "\n" not in built.message
        assert not marker.exists(), ptxas_arg
    host = f"-Xcompiler=-O2;touch${{IFS}}{marker};true"  # nvcc hands -Xcompiler values to the shell as well
    built = build_executable(ExecutableJob(nvcc, bundle, "sm_90", (host,), (), 120.0))
    assert built.status is BuildStatus.COMPILE_ERROR and "refused" in built.message and not marker.exists()
    # what the searches render still builds: a ptxas cap, a define with parentheses (nvcc quotes a -D)
    built = build_executable(ExecutableJob(nvcc, bundle, "sm_90", ("-DN=(1<<10)", "--use_fast_math"),
                                           ("--maxrregcount=32", "-O3"), 300.0))
    assert built.ok, built.message


def test_the_front_end_refuses_shell_text_before_nvcc_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    nvcc = find_toolchain().nvcc
    job = FrontendJob(nvcc, _bundle(TINY_KERNEL), "sm_90", (f"-Xcompiler=-O2;touch${{IFS}}{marker};true",), 120.0)
    made = emit_ptx(job)
    assert made.status is BuildStatus.COMPILE_ERROR and "refused" in made.message, made
    assert not marker.exists()
    assert emit_ptx(FrontendJob(nvcc, _bundle(TINY_KERNEL), "sm_90", ("--use_fast_math", "-DN=(1<<10)"), 120.0)).status \
        is BuildStatus.OK


def test_a_search_space_value_holding_shell_text_is_refused_when_read(
        poisoned: tuple[Path, Path, str], tmp_path: Path) -> None:
    """`compileiq space` listed the value (exit 0); every command reads the space the same way."""
    folder, marker, _ = poisoned
    kernel = tmp_path / "k.cu"
    kernel.write_text(TINY_KERNEL)
    line = _one_error_line(run_cli(["space", str(kernel)], tmp_path, env={"COMPILEIQ_SEARCH_SPACES": str(folder)}))
    assert "ptxas.maxrregcount" in line and "contains '`'" in line, line
    with pytest.raises(Exception, match="plain word"):
        load_space("13.0", folder)
    assert not marker.exists()


def test_the_shipped_search_spaces_render_plain_words_only() -> None:
    space = load_space("13.0", REPO / "search_spaces")
    for parameter in space.parameters:
        for value in parameter.values:
            for token in parameter.argv(value) + parameter.forwarded(value):
                assert shlex.quote(token) == token, (parameter.name, token)


def test_an_acf_whose_arguments_hold_shell_text_is_refused_by_flags_and_gate(
        poisoned: tuple[Path, Path, str], tmp_path: Path) -> None:
    """An ACF built on the poisoned space naming the value: `flags --format json` printed it and
    `gate` read it (its `--device` run builds with it); both refuse it in one line now, whatever
    space is installed."""
    folder, marker, value = poisoned
    kernel = tmp_path / "k.cu"
    kernel.write_text(TINY_KERNEL)
    good = tmp_path / "good.acf.toml"
    tuned = run_cli(["tune", str(kernel), "--workers", "local", "--budget", "2", "--only", "ptxas.opt_level",
                     "--db", f"sqlite:///{tmp_path}/t.db", "--out", str(good)], tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    data = tomllib.loads(good.read_text())
    data["controls"]["ptxas.maxrregcount"] = value
    argv = data["args"]["argv"]
    data["args"]["argv"] = [t for t in argv if not t.startswith("-D")] + [f"-Xptxas=--maxrregcount={value}"] + \
        [t for t in argv if t.startswith("-D")]
    data["args"]["ptxas"] = [*data["args"]["ptxas"], f"--maxrregcount={value}"]
    evil = tmp_path / "evil.acf.toml"
    evil.write_text(tomli_w.dumps(data))
    for env in ({"COMPILEIQ_SEARCH_SPACES": str(folder)}, None):
        for args in (["flags", str(evil), "--format", "json"], ["flags", str(evil)], ["gate", str(evil), "--static"]):
            line = _one_error_line(run_cli(args, tmp_path, env=env))
            assert "args.argv holds" in line and "contains '`'" in line, line
    assert not marker.exists()


# A CI workspace's path holds '@' (Jenkins checks out a second concurrent build of `proj` into
# `proj@2`): the shipped build's -I flag tuned and gated, but `flags --all` refused it as not one
# plain word, and the measuring program's build (`build_executable`: `tune --objective time`,
# `gate --device`) would have refused to run nvcc with it. '@' inside a name is a plain character
# for a shell; '@' that starts a word (or follows a comma or '=') is a host compiler's @FILE.
WORKSPACE_KERNEL = '#include "scale.h"\n__global__ void k(float* a) { a[threadIdx.x] *= SCALE; }\n'


def test_an_include_path_in_a_ci_workspace_with_at_is_applied_in_every_flags_format(tmp_path: Path) -> None:
    include = tmp_path / "workspace" / "proj@2" / "include"
    include.mkdir(parents=True)
    (include / "scale.h").write_text("#define SCALE 2.0f\n")
    (tmp_path / "k.cu").write_text(WORKSPACE_KERNEL)
    flag = f"-I{include}"
    (tmp_path / "compile_commands.json").write_text(
        f'[{{"directory": "{tmp_path}", "file": "k.cu", '
        f'"command": "nvcc -O3 {flag} -arch=sm_80 -c k.cu -o k.o"}}]')
    tuned = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--workers", "local",
                     "--budget", "2", "--only", "ptxas.opt_level", "--db", f"sqlite:///{tmp_path}/t.db",
                     "--out", "k.acf.toml"], tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    for fmt in ("args", "optf", "cmake", "bazel"):
        shown = run_cli(["flags", "k.acf.toml", "--all", "--format", fmt], tmp_path)
        assert shown.returncode == 0, (fmt, shown.describe())
        assert "proj@2/include" in shown.stdout, (fmt, shown.stdout)
    args = shlex.split(run_cli(["flags", "k.acf.toml", "--all"], tmp_path).stdout)
    assert any(a.endswith("proj@2/include") and a.startswith("-I") for a in args), args
    nvcc = find_toolchain().nvcc
    made = emit_ptx(FrontendJob(nvcc, _bundle(WORKSPACE_KERNEL), "sm_90", (flag,), 120.0))
    assert made.status is BuildStatus.OK, made  # the header is found through the path: nvcc ran with it


@pytest.mark.parametrize("arg", ["@opts.txt", "-Xcompiler=-Wall,@opts.txt", "-Xcompiler=@opts.txt", "-I/x/@y"])
def test_an_at_that_would_name_a_host_compilers_options_file_is_refused_before_nvcc_runs(arg: str) -> None:
    made = emit_ptx(FrontendJob(find_toolchain().nvcc, _bundle(TINY_KERNEL), "sm_90", (arg,), 120.0))
    assert made.status is BuildStatus.COMPILE_ERROR and "refused" in made.message and "'@'" in made.message, made


@pytest.mark.parametrize(("arg", "culprit"), [("-I/x/proj@2/a;b", "';'"), ("-I/x/proj@2/a b", "' '"),
                                              ("-Xcompiler=-Wall,@f", "'@'")])
def test_the_refusal_names_the_character_the_rule_stops_at(arg: str, culprit: str) -> None:
    """rev50b #7: after an '@' the message named the next (allowed) character, not the culprit."""
    made = emit_ptx(FrontendJob(find_toolchain().nvcc, _bundle(TINY_KERNEL), "sm_90", (arg,), 120.0))
    assert made.status is BuildStatus.COMPILE_ERROR and f"it contains {culprit}" in made.message, made
