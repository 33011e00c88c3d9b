"""A shipped build that makes sm_86 machine code from compute_80 PTX (`-arch=compute_80 -code=sm_86`,
its `-gencode`, or `-code=sm_80,sm_86` tuned for sm_86) is tuned, recorded and gated as that code
(rev51 #1): the trials, the "your build" baseline and the gate's rebuild compiled their PTX from
compute_86, so a kernel whose code depends on __CUDA_ARCH__ was recorded with 204 registers while
the flags `flags` printed (and the shipped build) give 8. Real nvcc/ptxas and SQLite: the evidence's
registers and code hash are an nvcc build's with the printed flags, whole and in two stages.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

from compileiq.build.compile import code_hash
from compileiq.build.cubin import text_sections
from tests.helpers import APPLY_PROJECT, compile_commands_file, run_cli, tune_in

# a big register tile where __CUDA_ARCH__ >= 860 (compute_86 PTX), a trivial body from compute_80
ARCH_KERNEL = """\
__global__ void k(float* a, int n) {
#if __CUDA_ARCH__ >= 860
  float acc[64];
  for (int i = 0; i < 64; i++) acc[i] = a[i * n + threadIdx.x];
  for (int r = 0; r < 4; r++) for (int i = 0; i < 64; i++) acc[i] = acc[(i * 7 + r) % 64] * 1.5f + acc[i];
  for (int i = 0; i < 64; i++) a[i * n + threadIdx.x] = acc[i];
#else
  a[threadIdx.x] = 1.f;
#endif
}
"""


def _nvcc(folder: Path, *argv: str) -> str:
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, check=False)
    assert done.returncode == 0, (argv, done.stderr)
    return done.stdout + done.stderr


def _built(folder: Path, cubin: str, report: str) -> tuple[int, str]:
    """Registers (from ptxas -v's report) and code hash of a cubin built in `folder`."""
    (registers,) = {int(r) for r in re.findall(r"Used (\d+) registers", report)}
    return registers, code_hash(text_sections((folder / cubin).read_bytes()))


def _flags(folder: Path, *args: str) -> list[str]:
    done = run_cli(["flags", "k.acf.toml", *args], cwd=folder)
    assert done.returncode == 0, done.describe()
    return done.stdout.split()


@pytest.mark.parametrize(("shipped", "printed"), [
    ("-arch=compute_80 -code=sm_86", ["-arch=compute_80", "-code=sm_86"]),
    ("-gencode arch=compute_80,code=sm_86", ["-arch=compute_80", "-code=sm_86"]),
    ("-arch=compute_80 -code=sm_80,sm_86", ["-arch=compute_80", "-code=sm_86"]),  # sm_80 left out
])
def test_evidence_is_the_code_the_printed_flags_build(tmp_path: Path, shipped: str, printed: list[str]) -> None:
    (tmp_path / "k.cu").write_text(ARCH_KERNEL)
    # the same kernel built -arch=sm_86 first, in the same database: its builds and study are not the shipped one's
    compile_commands_file(tmp_path, "nvcc -arch=sm_86 -c k.cu -o k.o")
    own = tune_in(tmp_path, "--compile-commands", "compile_commands.json", "--only", "ptxas.opt_level")
    assert own.returncode == 0, own.describe()
    own_study = re.search(r"study (k-static-[0-9a-f]+)", own.stdout + own.stderr)
    compile_commands_file(tmp_path, f"nvcc -O3 {shipped} -c k.cu -o k.o")
    tuned = tune_in(tmp_path, "--compile-commands", "compile_commands.json", "--arch", "sm_86",
                    "--only", "ptxas.opt_level")
    said = tuned.stdout + tuned.stderr
    assert tuned.returncode == 0, tuned.describe()
    assert own_study and own_study[1] not in said, said
    assert "sm_86 machine code from compute_80 PTX" in said and "compute_86" not in said, said

    words = _flags(tmp_path, "--all")
    assert [w for w in words if w.startswith(("-arch", "-code"))] == printed, words
    whole = _built(tmp_path, "whole.cubin", _nvcc(tmp_path, "nvcc", *words, "-cubin", "-Xptxas", "-v", "k.cu",
                                                   "-o", "whole.cubin"))
    assert _flags(tmp_path, "--stage", "frontend")[:1] == ["-arch=compute_80"]
    _nvcc(tmp_path, "nvcc", *_flags(tmp_path, "--stage", "frontend", "--all"), "-ptx", "k.cu", "-o", "k.ptx")
    ptxas = _flags(tmp_path, "--stage", "ptxas", "--all")
    assert "-arch=sm_86" in ptxas, ptxas
    split = _built(tmp_path, "split.cubin", _nvcc(tmp_path, "ptxas", "-v", *ptxas, "k.ptx", "-o", "split.cubin"))
    evidence = tomllib.loads((tmp_path / "k.acf.toml").read_text())["evidence"]
    for table in ("best", "baseline"):
        assert (evidence[table]["registers"], evidence[table]["code_hash"]) == whole == split, (evidence, whole)
    # the kernel tells them apart: compute_86 PTX gives the register tile
    assert _built(tmp_path, "own.cubin", _nvcc(tmp_path, "nvcc", "-arch=sm_86", "-cubin", "-Xptxas", "-v", "k.cu",
                                                "-o", "own.cubin"))[0] > whole[0]

    gated = run_cli(["gate", "k.acf.toml", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert gated.returncode == 0 and "gate PASS" in gated.stdout, gated.describe()


def _tuned_from_older_ptx(folder: Path) -> None:
    """k.cu (ARCH_KERNEL) tuned from a shipped `-arch=compute_80 -code=sm_86`: its ACF in folder/k.acf.toml."""
    (folder / "k.cu").write_text(ARCH_KERNEL)
    compile_commands_file(folder, "nvcc -O3 -arch=compute_80 -code=sm_86 -c k.cu -o k.o")
    tuned = tune_in(folder, "--compile-commands", "compile_commands.json", "--arch", "sm_86",
                    "--only", "ptxas.opt_level")
    assert tuned.returncode == 0, tuned.describe()


def test_build_files_and_flags_without_the_arch_keep_the_older_ptx(tmp_path: Path) -> None:
    """rev52 #3, #4: the CMake snippet and the JSON's cuda_architectures said 86-real (sm_86 from
    compute_86 PTX: other code than the evidence, the snippet's own note said so one line above),
    the Bazel file `archs=sm_86`, and `flags --no-arch` (args, optf, the JSON's note) said nothing
    of compute_80 to the user who supplies the arch."""
    _tuned_from_older_ptx(tmp_path)
    snippet = run_cli(["flags", "k.acf.toml", "--format", "cmake"], cwd=tmp_path)
    assert snippet.returncode == 0, snippet.describe()
    comments = [line for line in snippet.stdout.splitlines() if line.startswith("#")]
    assert len(comments) == 2 and all("CUDA_ARCHITECTURES OFF" in line for line in comments), comments
    assert "CUDA_ARCHITECTURES 86-real" not in snippet.stdout, snippet.stdout
    assert 'COMPILE_OPTIONS "-arch=compute_80;-code=sm_86' in snippet.stdout, snippet.stdout
    document = json.loads(run_cli(["flags", "k.acf.toml", "--format", "json"], cwd=tmp_path).stdout)
    assert document["cuda_architectures"] == "OFF", document
    assert document["arch_flags"] == ["-arch=compute_80", "-code=sm_86"], document
    bazel = run_cli(["flags", "k.acf.toml", "--format", "bazel"], cwd=tmp_path)
    assert bazel.returncode == 0 and "cuda:archs=sm_86" not in bazel.stdout, bazel.stdout
    assert "keep -arch=compute_80 -code=sm_86" in bazel.stdout, bazel.stdout

    keep = "keep -arch=compute_80 -code=sm_86; -arch=sm_86 builds sm_86 from compute_86 PTX, other code"
    for fmt in ("args", "optf"):
        bare = run_cli(["flags", "k.acf.toml", "--no-arch", "--format", fmt], cwd=tmp_path)
        assert bare.returncode == 0 and "-arch" not in bare.stdout and keep in bare.stderr, bare.describe()
    frontend = run_cli(["flags", "k.acf.toml", "--no-arch", "--stage", "frontend"], cwd=tmp_path)
    assert "keep -arch=compute_80;" in frontend.stderr, frontend.describe()
    bare_json = json.loads(run_cli(["flags", "k.acf.toml", "--no-arch", "--format", "json"], cwd=tmp_path).stdout)
    assert keep in bare_json["note"], bare_json
    # with the arch the flags say it themselves: no note, as before
    whole = run_cli(["flags", "k.acf.toml"], cwd=tmp_path)
    assert whole.stdout.split()[:2] == ["-arch=compute_80", "-code=sm_86"] and "note" not in whole.stderr, whole.describe()
    assert json.loads(run_cli(["flags", "k.acf.toml", "--format", "json"], cwd=tmp_path).stdout)["note"] == ""




def test_compileiq_apply_builds_the_older_ptx_as_the_evidence(tmp_path: Path) -> None:
    """rev52 #3: `compileiq_apply(TARGET ...)` set a target to 86-real, which CMake builds from
    compute_86 PTX (the register tile here). It sets it OFF and gives the shipped arch words in the
    options: the real CMake build's code is the ACF's evidence. A target that builds sm_86 among
    other archs stops configure (OFF would drop them)."""
    from tests.helpers import clean_env, compileiq_command, venv_tool

    _tuned_from_older_ptx(tmp_path)
    cmake = venv_tool("cmake", "pip install -e '.[test]' installs it")
    cmake_dir = run_cli(["cmake-dir"], cwd=tmp_path).stdout.strip()

    def configure(archs: str) -> subprocess.CompletedProcess[str]:
        (tmp_path / "CMakeLists.txt").write_text(APPLY_PROJECT.format(cmake_dir=cmake_dir, archs=archs))
        return subprocess.run([cmake, "-S", ".", "-B", f"build-{archs.replace(' ', '-')}",
                               "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", f"-DCOMPILEIQ_EXECUTABLE={compileiq_command()}"],
                              cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=600, check=False)

    configured = configure("75")
    assert configured.returncode == 0, configured.stdout + configured.stderr
    (command,) = [e["command"] for e in json.loads((tmp_path / "build-75" / "compile_commands.json").read_text())]
    # the command CMake runs, made to write its cubin: the code the ACF records
    words = shlex.split(command)
    out = words.index("-o")
    words = [w for w in words[:out] + words[out + 2:] if w != "-c"]
    built = _built(tmp_path, "cmake.cubin", _nvcc(tmp_path, *words, "-cubin", "-Xptxas", "-v", "-o", "cmake.cubin"))
    best = tomllib.loads((tmp_path / "k.acf.toml").read_text())["evidence"]["best"]
    assert built == (best["registers"], best["code_hash"]), (command, built, best)
    assert "-arch=compute_80 -code=sm_86" in command and "generate-code" not in command, command
    assert ("-arch=compute_80 -code=sm_86 in its options, CUDA_ARCHITECTURES OFF; CUDA_ARCHITECTURES 75 replaced"
            in configured.stdout), configured.stdout

    refused = configure("75 86")
    assert refused.returncode != 0 and "CUDA_ARCHITECTURES 75;86 builds other archs too" in refused.stderr, refused.stderr
