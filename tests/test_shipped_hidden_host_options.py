"""A -D hidden from compileiq in a host compiler option is refused in one line (red team 52,
findings 1 and 2), with real nvcc/ptxas: nvcc hands -Xcompiler values (and options
-forward-unknown-to-host-compiler forwards) to the host compiler through /bin/sh, and the host
compiler preprocesses the device code too.

- `${PS4}`/`$PS2` hold a space in dash by default (`+ `, `> `), so `-fdebug-prefix-map=a=b${PS4}-DX=1`
  is split into `...b+` and `-DX=1`, as `${IFS}` is: compileiq took a variable's value to hold no
  space, set the option aside and recorded a baseline without X (21 registers; the build as shipped
  has 32 and a stack frame), and the gate passed. Only $PWD is read, and only where the command's
  folder is one plain word (a folder `d -DX=1` splits it the same way).
- `-Xcompiler @FILE` (GCC's response file) and `-specs=FILE` (a spec file's `*cpp:` section) add
  options compileiq never sees: they were set aside as host options.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
from helpers import CliResult, run_cli, switched_kernel

KERNEL = switched_kernel("!defined(X)")


def _kernel(folder: Path, *options: str) -> list[str]:
    """k.cu in `folder` and its compilation database, whose command gives `options` as arguments."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "k.cu").write_text(KERNEL)
    (folder / "opts.txt").write_text("-DX=1\n")
    (folder / "x.specs").write_text("*cpp:\n+ -DX=1\n")
    arguments = ["nvcc", "-arch=sm_90", *options, "-c", "k.cu", "-o", "k.o"]
    (folder / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(folder), "file": str(folder / "k.cu"), "arguments": arguments}]))
    return arguments


def _space(folder: Path) -> CliResult:
    return run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=folder)


def _defines_x(folder: Path, arguments: list[str]) -> bool:
    """Whether nvcc's own build of the command (through /bin/sh, as it ships) compiles k with X:
    64 floats kept in a stack frame."""
    done = subprocess.run([*arguments, "-Xptxas", "-v"], cwd=folder, capture_output=True, text=True, check=True)
    return "bytes cumulative stack size" in done.stderr


@pytest.mark.parametrize(("option", "name"), [("-fdebug-prefix-map=a=b${PS4}-DX=1", "PS4"),
                                             ("-fdebug-prefix-map=a=b$PS2-DX=1", "PS2"),
                                             ("-fmacro-prefix-map=x=$HOME", "HOME")])
def test_a_variable_whose_value_may_hold_a_space_is_refused_in_one_line(tmp_path: Path, option: str,
                                                                         name: str) -> None:
    arguments = _kernel(tmp_path, "-Xcompiler", option)
    if name != "HOME":  # HOME: the building user's, which the command does not say
        assert _defines_x(tmp_path, arguments)  # the shell split the value: the build as shipped has X
    listed = _space(tmp_path)
    assert listed.returncode == 2, listed.describe()
    [line] = listed.stderr_lines
    assert f"holds '$' (${name}, " in line and "only $PWD is read" in line and line.endswith("--compile-commands"), line
    tuned = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--workers", "local", "--budget",
                     "1", "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", "k.acf.toml"], cwd=tmp_path)
    assert tuned.returncode == 2 and len(tuned.stderr_lines) == 1, tuned.describe()
    assert not (tmp_path / "k.acf.toml").exists()


def test_pwd_is_read_only_where_the_commands_folder_is_one_plain_word(tmp_path: Path) -> None:
    option = "-fmacro-prefix-map=x=$PWD"
    plain = _kernel(tmp_path / "plain", "-Xcompiler", option)
    assert not _defines_x(tmp_path / "plain", plain)
    assert _space(tmp_path / "plain").returncode == 0
    split = _kernel(tmp_path / "d -DX=1 -DY", "-Xcompiler", option)
    assert _defines_x(tmp_path / "d -DX=1 -DY", split)  # $PWD split at the folder's spaces: -DX=1 -DY
    listed = _space(tmp_path / "d -DX=1 -DY")
    assert listed.returncode == 2, listed.describe()
    [line] = listed.stderr_lines
    assert "holds '$' ($PWD, the command's folder, no plain path)" in line, line


@pytest.mark.parametrize("options", [("-Xcompiler", "@opts.txt"), ("-Xcompiler", "-Wall,@opts.txt"),
                                     ("-Xcompiler", "-specs=x.specs"), ("-Xcompiler", "--specs,x.specs"),
                                     ("--compiler-options", "-O2 --specs=x.specs"),
                                     ("-forward-unknown-to-host-compiler", "-specs=x.specs"),
                                     ("-forward-unknown-to-host-compiler", "--specs=x.specs")])
def test_a_file_of_host_compiler_options_is_refused_in_one_line(tmp_path: Path, options: tuple[str, str]) -> None:
    arguments = _kernel(tmp_path, *options)
    assert _defines_x(tmp_path, arguments)  # the file's -DX=1 reached the device pass
    listed = _space(tmp_path)
    assert listed.returncode == 2, listed.describe()
    [line] = listed.stderr_lines
    assert "reads more host compiler options from a file" in line and line.endswith("without it"), line


@pytest.mark.parametrize("options", [("-ccbin", "clang++", "-Xcompiler", "--config=opts.cfg"),
                                     ("-ccbin", "clang++", "-Xcompiler", "--config,opts.cfg"),
                                     ("-ccbin", "clang++", "-Xcompiler", "--config-user-dir=.")])
def test_clangs_config_file_is_refused_as_a_file_of_host_compiler_options(tmp_path: Path,
                                                                         options: tuple[str, ...]) -> None:
    """clang, nvcc's host compiler with -ccbin clang++, reads more options from --config=FILE (or a
    config file from the folder --config-user-dir names): a -DX=1 there reaches the device pass as
    an @FILE's does. There is no clang here to show it build; the refusal is what is checked."""
    _kernel(tmp_path, *options)
    (tmp_path / "opts.cfg").write_text("-DX=1\n")
    listed = _space(tmp_path)
    assert listed.returncode == 2, listed.describe()
    [line] = listed.stderr_lines
    assert "reads more host compiler options from a file" in line and "--config" in line, line


@pytest.mark.parametrize("option", ["-[D]X=1", "-D?=1", "-D*"])
def test_a_one_word_host_option_holding_a_glob_is_refused_in_one_line(tmp_path: Path, option: str) -> None:
    """red53 #6: a one-word `-Xcompiler -[D]X=1` was set aside as a host option, but nvcc's /bin/sh
    globs it where a file of that name lies in the build's folder: the device pass had -DX=1."""
    arguments = _kernel(tmp_path, "-Xcompiler", option)
    (tmp_path / "-DX=1").touch()
    assert _defines_x(tmp_path, arguments)  # the shell globbed the value: the build as shipped has X
    listed = _space(tmp_path)
    assert listed.returncode == 2, listed.describe()
    [line] = listed.stderr_lines
    assert f"holds {option[2] if option != '-[D]X=1' else '['!r}" in line and "through a shell" in line, line
    tuned = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--workers", "local", "--budget",
                     "1", "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", "k.acf.toml"], cwd=tmp_path)
    assert tuned.returncode == 2 and len(tuned.stderr_lines) == 1, tuned.describe()
    assert not (tmp_path / "k.acf.toml").exists()


def test_a_quoted_one_word_host_option_is_read_as_the_shell_hands_it_on(tmp_path: Path) -> None:
    """rev53 #4: `--compiler-options "'-fPIC'"` (PyTorch's cpp_extension writes it so, and many
    setup.py files copy it) was refused once one-word values with shell syntax were; before that,
    a quoted `"-DX=1"` was set aside as a host option while the shell handed the device pass -DX=1.
    Quotes in one word add no option: they are removed, as the shell removes them."""
    _kernel(tmp_path / "pic", "--compiler-options", "'-fPIC'")
    assert (listed := _space(tmp_path / "pic")).returncode == 0, listed.describe()
    fixed = {}
    for name, option in (("plain", "-DX=1"), ("double", '"-DX=1"'), ("single", "-D'X=1'")):
        arguments = _kernel(tmp_path / name, "--compiler-options", option)
        assert _defines_x(tmp_path / name, arguments)  # nvcc's own build: X defined in every spelling
        done = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--budget", "1", "--workers",
                        "local", "--db", f"sqlite:///{tmp_path / name / 't.db'}", "--out", "k.acf.toml"],
                       cwd=tmp_path / name)
        assert done.returncode == 0, done.describe()
        document = tomllib.loads((tmp_path / name / "k.acf.toml").read_text())
        fixed[name] = sorted(f["flag"] for f in document["baseline"]["fixed"])
    assert "-DX=1" in fixed["plain"] and fixed["double"] == fixed["single"] == fixed["plain"], fixed
