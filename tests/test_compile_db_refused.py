"""Compile commands nvcc 13.0 refuses, and options files not shown (red team 54, findings 2 and 5),
through the CLI with real nvcc (-dryrun says what it takes):

- `-arch=sm_90 -code=sm_90` ("Value of -arch option ('sm_90') must be a virtual code architecture")
  and `-arch sm_90,sm_80` ("Unsupported gpu architecture 'sm_90,sm_80'") were tuned as "your build",
  an ACF written (the list tuned for sm_80) and the gate passed: refused in one line now, as is an
  arch in Unicode digits (`compute_９０`: Python's \\d takes them). What nvcc takes is still read.
- A word of an `--options-file` the allow-list refuses was quoted in the error
  (`'--password=hunter2' is not an allowed base flag`): the file may be any file the command names,
  so the error says which argument of which file instead.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers import CliResult, run_cli, switched_kernel

KERNEL = switched_kernel("!defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 900")


def _kernel(folder: Path, entry: dict[str, Any]) -> None:
    (folder / "k.cu").write_text(KERNEL)
    (folder / "compile_commands.json").write_text(json.dumps([{"directory": str(folder), "file": "k.cu", **entry}]))


def _dryrun(folder: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nvcc", "-dryrun", *args, "-c", "k.cu", "-o", "k.o"], cwd=folder, capture_output=True,
                          text=True, check=False)


def _tune(folder: Path) -> CliResult:
    return run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--workers", "local", "--budget",
                    "1", "--db", f"sqlite:///{folder / 't.db'}", "--out", "k.acf.toml"], cwd=folder)


@pytest.mark.parametrize(("arch_flags", "nvcc_says", "said"), [
    (["-arch=sm_90", "-code=sm_90"], "must be a virtual code architecture", "must be a virtual code architecture"),
    (["-arch=sm_90", "-code=compute_80"], "must be a virtual code architecture", "must be a virtual code architecture"),
    (["--gpu-architecture", "sm_90", "--gpu-code=sm_90,compute_90"], "must be a virtual code architecture",
     "must be a virtual code architecture"),
    (["-arch=compute_80", "-arch=sm_90", "-code=sm_90"], "must be a virtual code architecture",
     "must be a virtual code architecture"),
    (["-arch=all", "-code=sm_90"], "Cannot use '-arch=all'", "must be a virtual code architecture"),
    (["-arch", "sm_90,sm_80"], "Unsupported gpu architecture", "Unsupported gpu architecture"),
    (["-arch=compute_90,sm_90"], "Unsupported gpu architecture", "Unsupported gpu architecture"),
    (["-arch=compute_９０"], "Unsupported gpu architecture", "Unsupported gpu architecture"),
    (["-gencode", "arch=compute_80,code=sm_80", "-code=sm_90"], "-arch option not specified",
     "-arch option not specified"),
])
def test_arch_flags_nvcc_refuses_are_refused_in_one_line(tmp_path: Path, arch_flags: list[str], nvcc_says: str,
                                                        said: str) -> None:
    _kernel(tmp_path, {"arguments": ["nvcc", *arch_flags, "-c", "k.cu", "-o", "k.o"]})
    refused = _dryrun(tmp_path, arch_flags)
    assert refused.returncode != 0 and nvcc_says in refused.stderr, refused.stderr
    tuned = _tune(tmp_path)
    assert tuned.returncode == 2 and not (tmp_path / "k.acf.toml").exists(), tuned.describe()
    [line] = tuned.stderr_lines
    assert said in line and "the command builds nothing; fix its arch flags" in line, line


@pytest.mark.parametrize(("arch_flags", "arch"), [
    (["-arch=sm_90", "-arch=compute_80", "-code=sm_90"], "sm_90"),  # the last -arch is the one -code goes with
    (["-arch=compute_90", "-code=sm_90,compute_90"], "sm_90"),
    (["-arch", "sm_90", "-gencode", "arch=compute_80,code=sm_80"], "sm_90"),
])
def test_arch_flags_nvcc_takes_are_still_read(tmp_path: Path, arch_flags: list[str], arch: str) -> None:
    _kernel(tmp_path, {"arguments": ["nvcc", *arch_flags, "-c", "k.cu", "-o", "k.o"]})
    assert _dryrun(tmp_path, arch_flags).returncode == 0
    listed = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()


@pytest.mark.parametrize("word", ["--password=hunter2", "-Xcicc=--secret-" + "x" * 90])
def test_a_word_of_an_options_file_is_not_shown_in_an_error(tmp_path: Path, word: str) -> None:
    secret = tmp_path / "elsewhere" / "creds.rc"
    secret.parent.mkdir()
    secret.write_text(f"-DTILE=64 {word}\n")
    _kernel(tmp_path, {"arguments": ["nvcc", "-arch=sm_90", "--options-file", str(secret), "-c", "k.cu", "-o", "k.o"]})
    tuned = _tune(tmp_path)
    assert tuned.returncode == 2, tuned.describe()
    [line] = tuned.stderr_lines
    assert word[:20] not in line and "hunter2" not in line, line
    assert f"argument 2 of --options-file {secret}" in line, line


def test_an_options_file_word_is_named_only_where_it_stands_whole(tmp_path: Path) -> None:
    """rev54 finding 4: each word of an options file was replaced anywhere in the error, inside
    other words too: with the ordinary `-x cu` the message named `reduction.argument 2 of
    --options-file ...` for reduction.cu."""
    options = tmp_path / "bld" / "opts.rsp"
    options.parent.mkdir()
    options.write_text("-x cu -DBLOCK=64\n")  # its -D the last word of BLOCK, a value tune.toml does not tune
    (tmp_path / "reduction.cu").write_text(KERNEL)
    (tmp_path / "tune.toml").write_text('arch = "sm_90"\n\n[tune.defines]\nBLOCK = [256, 128]\n')
    (tmp_path / "compile_commands.json").write_text(json.dumps([{
        "directory": str(tmp_path), "file": "reduction.cu",
        "arguments": ["nvcc", "-DBLOCK=256", "--options-file", str(options), "-arch=sm_90", "-c", "reduction.cu",
                      "-o", "reduction.o"]}]))
    tuned = run_cli(["tune", "reduction.cu", "--compile-commands", "compile_commands.json", "--workers", "local",
                     "--budget", "1", "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", "k.acf.toml"], cwd=tmp_path)
    assert tuned.returncode == 2 and not (tmp_path / "k.acf.toml").exists(), tuned.describe()
    [line] = tuned.stderr_lines
    assert "the command for reduction.cu:" in line and "reduction.argument" not in line, line
    assert f"argument 3 of --options-file {options}" in line, line
    assert "-DBLOCK=64" not in line and "opts.rsp" + "argument" not in line, line  # its word named by place only
