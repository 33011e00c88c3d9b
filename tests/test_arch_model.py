"""A command's -arch and -code flags read as nvcc 13.0 reads them together (red team: the arch model),
checked with real nvcc --dryrun: the last -arch wins, every -code is kept (a comma list or a repeated
flag alike), each -gencode adds its own pair.

- `-arch=compute_90 -code=sm_90 -arch=compute_80 -code=sm_80` builds sm_80 and sm_90 from compute_80
  PTX; compileiq refused it, saying it paired compute_90 with sm_80 and built nothing.
- `flags` said its arch words, appended to the command, replaced its -code list ("builds sm_90 alone,
  no sm_80"): nvcc keeps every -code. And it printed -arch=sm_90 for a command that gives -code, which
  appended stops nvcc ("must be a virtual code architecture").
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from helpers import CliResult, run_cli, switched_kernel

KERNEL = switched_kernel("!defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 900")


def _images(folder: Path, *args: str) -> tuple[int, list[tuple[str, str]]]:
    """nvcc --dryrun's exit status and fat binary images (kind, sm) for these arch arguments."""
    dry = subprocess.run(["nvcc", "--dryrun", *args, "-c", "k.cu", "-o", "k.o"], cwd=folder, capture_output=True,
                         text=True, check=False)
    return dry.returncode, sorted(set(re.findall(r"image3=kind=(\w+),sm=(\d+)", dry.stderr)))


def _tuned(folder: Path, arch_flags: list[str]) -> CliResult:
    (folder / "k.cu").write_text(KERNEL)
    entry = {"directory": str(folder), "file": "k.cu", "arguments": ["nvcc", *arch_flags, "-c", "k.cu", "-o", "k.o"]}
    (folder / "compile_commands.json").write_text(json.dumps([entry]))
    tuned = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--workers", "local", "--budget",
                     "1", "--db", f"sqlite:///{folder / 't.db'}", "--out", "k.acf.toml"], cwd=folder)
    assert tuned.returncode == 0, tuned.describe()
    return tuned


def _arch_words(flags: CliResult) -> list[str]:
    return [w for w in flags.stdout.split() if w.startswith(("-arch", "-code", "--gpu"))]


def test_a_repeated_arch_with_code_lists_is_tuned_as_nvcc_builds_it(tmp_path: Path) -> None:
    command = ["-arch=compute_90", "-code=sm_90", "-arch=compute_80", "-code=sm_80"]
    tuned = _tuned(tmp_path, command)  # refused before: "pair arch=compute_90 with code=sm_80"
    assert _images(tmp_path, *command) == (0, [("elf", "80"), ("elf", "90")])
    assert "builds sm_90 machine code from compute_80 PTX" in tuned.output, tuned.describe()
    flags = run_cli(["flags", "k.acf.toml"], cwd=tmp_path)
    assert flags.returncode == 0 and _arch_words(flags) == ["-arch=compute_80", "-code=sm_90"], flags.describe()
    assert _images(tmp_path, *command, *_arch_words(flags)) == _images(tmp_path, *command)


def test_flags_appended_to_a_code_list_says_every_code_is_still_built(tmp_path: Path) -> None:
    command = ["-arch=compute_80", "-code=sm_80,sm_90"]
    _tuned(tmp_path, command)
    flags = run_cli(["flags", "k.acf.toml"], cwd=tmp_path)
    assert flags.returncode == 0 and _arch_words(flags) == ["-arch=compute_80", "-code=sm_90"], flags.describe()
    built = _images(tmp_path, *command, *_arch_words(flags))
    assert built == (0, [("elf", "80"), ("elf", "90")])  # nvcc keeps both -code lists
    [note] = [line for line in flags.stderr_lines if "appended to your build's command" in line]
    assert "builds what the command builds, sm_80, sm_90 (from compute_80 PTX)" in note, note
    assert "sm_80 gets them unchecked" in note and "alone" not in note, note
    as_json = run_cli(["flags", "k.acf.toml", "--format", "json"], cwd=tmp_path)  # the same note, in "notes" too
    assert as_json.returncode == 0 and note in json.loads(as_json.stdout)["notes"], as_json.describe()


def test_flags_for_a_command_with_code_never_prints_an_arch_nvcc_refuses_after_it(tmp_path: Path) -> None:
    command = ["--gpu-architecture=compute_90", "--gpu-code=sm_90,compute_90"]
    _tuned(tmp_path, command)
    assert _images(tmp_path, *command, "-arch=sm_90")[0] != 0  # "must be a virtual code architecture"
    flags = run_cli(["flags", "k.acf.toml"], cwd=tmp_path)
    assert flags.returncode == 0, flags.describe()
    assert _arch_words(flags) == ["-arch=compute_90", "-code=sm_90", "-code=compute_90"], flags.describe()
    assert _images(tmp_path, *command, *_arch_words(flags)) == _images(tmp_path, *command) \
        == (0, [("elf", "90"), ("ptx", "90")])
    assert _images(tmp_path, *_arch_words(flags)) == _images(tmp_path, "-arch=sm_90")  # alone: the same build
    assert not any("alone" in line for line in flags.stderr_lines), flags.describe()


def test_flags_refuses_arch_words_that_appended_would_stop_nvcc(tmp_path: Path) -> None:
    command = ["-arch=compute_80", "-code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]
    _tuned(tmp_path, command)
    assert _images(tmp_path, *command, "-arch=compute_90", "-code=sm_90")[0] != 0  # compute_90 with sm_80
    flags = run_cli(["flags", "k.acf.toml"], cwd=tmp_path)
    assert flags.returncode == 2 and flags.stdout == "", flags.describe()
    [line] = flags.stderr_lines
    assert "nvcc would build nothing" in line and "compileiq flags --no-arch" in line, line
    assert run_cli(["flags", "k.acf.toml", "--no-arch"], cwd=tmp_path).returncode == 0
    as_json = run_cli(["flags", "k.acf.toml", "--format", "json"], cwd=tmp_path)  # its "args" would stop nvcc too
    assert as_json.returncode == 2 and as_json.stdout == "" and as_json.stderr_lines == [line], as_json.describe()
    assert run_cli(["flags", "k.acf.toml", "--format", "json", "--no-arch"], cwd=tmp_path).returncode == 0
