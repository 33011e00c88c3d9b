"""What a shipped build's arch flags embed, kept true through `tune` and every `flags` format (fix51A),
with real nvcc (-dryrun: the fat binary's images, and whether ptxas runs) and a compile_commands.json:

- `-arch=compute_80` or `-gencode arch=compute_80,code=compute_80` embeds compute_80 PTX only: the
  driver compiles it when it loads, with its own settings, so ptxas settings cannot apply to it.
  `flags` printed -arch=sm_80 (machine code and PTX: another fat binary) and said nothing.
- `-arch=compute_80 -code=sm_86` builds sm_86 machine code from compute_80 PTX and nothing for sm_80:
  `tune` said "sm_80 left out" and `flags` printed -arch=sm_86 (compute_86 PTX, embedded too).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.helpers import APPLY_PROJECT, LOOP_KERNEL, run_cli


def _tune(tmp_path: Path, arch_flags: str, ptxas: str) -> str:
    """Tune k.cu from a compile command with these arch flags and `-Xptxas ptxas`; budget 1: the
    choice is the shipped build, so whether it holds a ptxas setting is the test's to say."""
    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    command = f"nvcc -O3 -DNDEBUG {arch_flags} -Xptxas {ptxas} -x cu -c k.cu -o k.o"
    (tmp_path / "compile_commands.json").write_text(
        json.dumps([{"directory": str(tmp_path), "command": command, "file": "k.cu"}]))
    done = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--workers", "local", "--budget",
                    "1", "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", str(tmp_path / "k.acf.toml")], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    return done.stdout + done.stderr


def _dryrun(tmp_path: Path, args: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """nvcc --dryrun's fat binary images (kind, sm) and its ptxas commands for these arguments."""
    dry = subprocess.run(["nvcc", "--dryrun", *args, "-c", "k.cu", "-o", "k.o"], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stderr
    return sorted(set(re.findall(r"image3=kind=(\w+),sm=(\d+)", dry))), re.findall(r"ptxas\s.*", dry)


def _flags(tmp_path: Path, *args: str) -> tuple[list[str], str]:
    done = run_cli(["flags", "k.acf.toml", *args], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    return done.stdout.split(), done.stdout + done.stderr


@pytest.mark.parametrize("shipped", ["-arch=compute_80", "-gencode arch=compute_80,code=compute_80"])
def test_a_ptx_only_build_gets_machine_code_for_its_ptxas_settings_and_says_so(tmp_path: Path, shipped: str) -> None:
    said = _tune(tmp_path, shipped, "-O2")
    assert ("note: the compile command embeds compute_80 PTX only, no sm_80 machine code: ptxas never runs in that "
            "build") in said, said
    assert re.search(r"the ptxas settings tuned here take effect only where sm_80 machine code is embedded", said)
    assert tomllib.loads((tmp_path / "k.acf.toml").read_text())["args"]["ptxas"] == ["-O2"]
    words, output = _flags(tmp_path, "--all")
    arch = [w for w in words if w.startswith(("-arch", "-code"))]
    assert arch == ["-arch=compute_80", "-code=sm_80", "-code=compute_80"] and "-Xptxas=-O2" in words, output
    assert "note: your build as shipped embeds compute_80 PTX only, no sm_80 machine code" in output, output
    assert "the tuned ptxas settings (-O2) take effect only where sm_80 machine code is embedded" in output, output
    # as shipped: PTX alone and no ptxas run (the -O2 reaches nothing); as printed: the PTX kept, sm_80
    # machine code added, and ptxas runs with -O2
    assert _dryrun(tmp_path, shlex.split(shipped)) == ([("ptx", "80")], [])
    images, ptxas = _dryrun(tmp_path, words)
    assert images == [("elf", "80"), ("ptx", "80")] and len(ptxas) == 1 and "-O2" in ptxas[0].split(), ptxas
    _, output = _flags(tmp_path, "--format", "cmake")
    assert "CUDA_ARCHITECTURES 80\n" in output and "80-virtual" in output, output
    assert output.startswith("# compileiq: your build as shipped embeds compute_80 PTX only"), output
    document = json.loads(run_cli(["flags", "k.acf.toml", "--format", "json"], cwd=tmp_path).stdout)
    assert document["cuda_architectures"] == "80" and "PTX only" in document["note"], document
    assert "CUDA_ARCHITECTURES 80, not 80-virtual" in document["cmake_note"], document


@pytest.mark.parametrize("shipped", ["-arch=compute_80", "-gencode arch=compute_80,code=compute_80"])
def test_a_ptx_only_build_without_ptxas_settings_is_printed_as_shipped(tmp_path: Path, shipped: str) -> None:
    _tune(tmp_path, shipped, "-O3")  # ptxas's default: the choice holds no ptxas setting
    words, output = _flags(tmp_path, "--all")
    assert [w for w in words if w.startswith(("-arch", "-code"))] == ["-arch=compute_80"], output
    assert _dryrun(tmp_path, words)[0] == _dryrun(tmp_path, shlex.split(shipped))[0] == [("ptx", "80")]
    assert "embeds compute_80 PTX only, kept so (-arch=compute_80)" in output, output
    _, snippet = _flags(tmp_path, "--format", "cmake")
    assert "CUDA_ARCHITECTURES 80-virtual\n" in snippet, snippet
    fixed = tomllib.loads((tmp_path / "k.acf.toml").read_text())["baseline"]["fixed"]
    [entry] = [f for f in fixed if "compute_80" in f["flag"]]
    assert entry["applied"] and "-arch=compute_80 (PTX only)" in entry["why"], entry


@pytest.mark.parametrize("shipped", ["-arch=compute_80 -code=sm_86", "-gencode arch=compute_80,code=sm_86"])
def test_machine_code_from_older_ptx_is_tuned_and_printed_as_it_builds(tmp_path: Path, shipped: str) -> None:
    said = _tune(tmp_path, shipped, "-O3")
    assert "sm_80 left out" not in said and "--arch sm_80" not in said, said
    assert ("note: the compile command builds sm_86 machine code from compute_80 PTX (and nothing for sm_80): tuned "
            "for sm_86, its trials compiled as it does, from compute_80 PTX") in said, said
    document = tomllib.loads((tmp_path / "k.acf.toml").read_text())
    assert document["kernel"]["arch"] == "sm_86"
    arch_flags = [f for f in document["baseline"]["fixed"] if "compute_80" in f["flag"] or "sm_86" in f["flag"]]
    assert arch_flags and all(f["applied"] for f in arch_flags), arch_flags
    words, output = _flags(tmp_path, "--all")
    assert [w for w in words if w.startswith(("-arch", "-code"))] == ["-arch=compute_80", "-code=sm_86"], output
    assert _dryrun(tmp_path, words)[0] == _dryrun(tmp_path, shlex.split(shipped))[0] == [("elf", "86")]
    assert "note:" not in output.replace("note: --all leaves out", ""), output  # the flags build what was scored
    _, snippet = _flags(tmp_path, "--format", "cmake")
    assert "CUDA_ARCHITECTURES OFF, the options carrying -arch=compute_80 -code=sm_86\n" in snippet, snippet
    assert "CUDA_ARCHITECTURES cannot say so" in snippet and "86-real\n" not in snippet, snippet
    assert "other archs" not in snippet, snippet




@pytest.mark.parametrize(("ptxas", "target", "replaced", "code"), [
    ("-O3", "75", "75 replaced by 80-virtual", "code=[compute_80]"),  # PTX only, kept so
    ("-O2", "80-virtual", "80-virtual made 80", "code=[compute_80,sm_80]"),  # -O2 needs machine code
])
def test_compileiq_apply_builds_a_ptx_only_build_as_flags_does(tmp_path: Path, ptxas: str, target: str, replaced: str,
                                                               code: str) -> None:
    """The CMake package refused the ACF's 80-virtual, and kept a target's 80-virtual (PTX alone) for
    an ACF whose ptxas settings need sm_80 machine code; it now says which, with the ACF's note."""
    from tests.helpers import clean_env, compileiq_command, venv_tool

    _tune(tmp_path, "-arch=compute_80", ptxas)
    cmake_dir = run_cli(["cmake-dir"], cwd=tmp_path).stdout.strip()
    (tmp_path / "CMakeLists.txt").write_text(APPLY_PROJECT.format(cmake_dir=cmake_dir, archs=target))
    configured = subprocess.run(
        [venv_tool("cmake", "pip install -e '.[test]' installs it"), "-S", ".", "-B", "build",
         "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", f"-DCOMPILEIQ_EXECUTABLE={compileiq_command()}"],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=600, check=False)
    assert configured.returncode == 0, configured.stdout + configured.stderr
    assert f"CUDA_ARCHITECTURES {replaced}" in configured.stdout, configured.stdout
    assert "compileiq: k.acf.toml: your build as shipped embeds compute_80 PTX only" in configured.stdout
    (command,) = [e["command"] for e in json.loads((tmp_path / "build" / "compile_commands.json").read_text())]
    assert f"--generate-code=arch=compute_80,{code}" in command, command
