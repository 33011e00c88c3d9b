"""A shipped command's arch flags read as nvcc 13.0 reads them (red team 52, finding 3), with real
nvcc (-dryrun) and ptxas:

- nvcc takes a -gencode code list in double quotes (`code="sm_90,compute_80"`, an `arguments` item,
  or `code=\\"...\\"` in a `command` string) as `code=[sm_90,compute_80]`: sm_90 machine code made
  from compute_80 PTX. compileiq missed the quoted form, tuned sm_90 from compute_90 PTX (32
  registers; the build as shipped has 21) and `flags` printed -arch=sm_90.
- `-arch=compute_100 -code=sm_90` is refused by nvcc ("Incompatible code generation requested"):
  compileiq tuned it for sm_100, which that command never builds. Refused in one line now, as is a
  -gencode nvcc does not take (`code=sm_90,compute_80` unbracketed).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers import CliResult, run_cli, switched_kernel

from compileiq.results import acf

# Its code depends on __CUDA_ARCH__: compute_80 PTX keeps 4 floats, compute_90 PTX 64 in a stack frame.
KERNEL = switched_kernel("!defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 900")
QUOTED = '-gencode=arch=compute_80,code="sm_90,compute_80"'


def _kernel(folder: Path, entry: dict[str, Any]) -> None:
    (folder / "k.cu").write_text(KERNEL)
    (folder / "compile_commands.json").write_text(json.dumps([{"directory": str(folder), "file": "k.cu", **entry}]))


def _nvcc(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nvcc", *args, "-c", "k.cu", "-o", "k.o"], cwd=folder, capture_output=True, text=True,
                          check=False)


def _images(folder: Path, *args: str) -> list[tuple[str, str]]:
    """nvcc -dryrun's fat binary images (kind, sm) for these arch arguments."""
    dry = _nvcc(folder, "-dryrun", *args)
    assert dry.returncode == 0, dry.stderr
    return sorted(set(re.findall(r"image3=kind=(\w+),sm=(\d+)", dry.stderr)))


def _registers(folder: Path, *args: str) -> int:
    built = _nvcc(folder, *args, "-Xptxas", "-v")
    found = re.search(r"Used (\d+) registers", built.stderr)
    assert built.returncode == 0 and found, built.stderr
    return int(found[1])


def _space(folder: Path) -> CliResult:
    return run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=folder)


@pytest.mark.parametrize("entry", [
    {"arguments": ["nvcc", QUOTED, "-c", "k.cu", "-o", "k.o"]},
    {"command": 'nvcc -gencode=arch=compute_80,code=\\"sm_90,compute_80\\" -c k.cu -o k.o'},
    {"arguments": ["nvcc", "-gencode", 'arch=compute_80,"code=sm_90,compute_80"', "-c", "k.cu", "-o", "k.o"]},
])
def test_a_quoted_gencode_code_list_is_read_as_nvcc_reads_it(tmp_path: Path, entry: dict[str, Any]) -> None:
    _kernel(tmp_path, entry)
    # nvcc takes the quotes: sm_90 machine code from compute_80 PTX, and compute_80 PTX
    assert _images(tmp_path, QUOTED) == _images(tmp_path, "-gencode=arch=compute_80,code=[sm_90,compute_80]") \
        == [("elf", "90"), ("ptx", "80")]
    shipped = _registers(tmp_path, QUOTED)
    assert shipped != _registers(tmp_path, "-arch=sm_90")
    tuned = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--workers", "local", "--budget",
                     "1", "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", "k.acf.toml"], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    assert "builds sm_90 machine code from compute_80 PTX" in tuned.output, tuned.describe()
    assert acf.read(tmp_path / "k.acf.toml").evidence["baseline"]["registers"] == shipped
    flags = run_cli(["flags", "k.acf.toml"], cwd=tmp_path)
    assert flags.returncode == 0 and flags.stdout.split() == ["-arch=compute_80", "-code=sm_90"], flags.describe()
    assert _registers(tmp_path, *flags.stdout.split()) == shipped


@pytest.mark.parametrize(("arch_flags", "pair"), [
    (["-arch=compute_100", "-code=sm_90"], "arch=compute_100 with code=sm_90"),
    (["--gpu-architecture=compute_90", "--gpu-code=sm_90,compute_80"], "arch=compute_90 with code=compute_80"),
    (["-gencode", "arch=compute_90,code=compute_80"], "arch=compute_90 with code=compute_80"),
    (["-gencode=arch=compute_100,code=\"sm_100,sm_90\""], "arch=compute_100 with code=sm_90"),
])
def test_arch_flags_nvcc_refuses_as_incompatible_are_refused_in_one_line(tmp_path: Path, arch_flags: list[str],
                                                                         pair: str) -> None:
    _kernel(tmp_path, {"arguments": ["nvcc", *arch_flags, "-c", "k.cu", "-o", "k.o"]})
    refused = _nvcc(tmp_path, "-dryrun", *arch_flags)
    assert refused.returncode != 0 and "Incompatible code generation requested" in refused.stderr, refused.stderr
    listed = _space(tmp_path)
    assert listed.returncode == 2, listed.describe()
    [line] = listed.stderr_lines
    assert pair in line and "Incompatible code generation requested" in line, line


@pytest.mark.parametrize("gencode", ["-gencode=arch=compute_80,code=sm_90,compute_80",
                                     '-gencode=arch=compute_80,code="sm_90', '-gencode=arch=compute_80,code="[sm_90]"'])
def test_a_gencode_nvcc_does_not_take_is_refused_in_one_line(tmp_path: Path, gencode: str) -> None:
    _kernel(tmp_path, {"arguments": ["nvcc", gencode, "-c", "k.cu", "-o", "k.o"]})
    assert _nvcc(tmp_path, "-dryrun", gencode).returncode != 0
    listed = _space(tmp_path)
    assert listed.returncode == 2, listed.describe()
    [line] = listed.stderr_lines
    assert "is no -gencode nvcc 13.0 builds from" in line, line
