"""A tuned macro the shipped compile command gives no -D for has the kernel's own default in the
build that ships. The baseline holds such a macro at tune.toml's first value, so where the
kernel's default is another value, "your build" was a build nobody ships and every speedup over
it was false (a kernel defaulting to TILE=16, tuned over [8, 16, 32]: the baseline built TILE=8).
Now the run stops in one line naming the value the build has; real nvcc, the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import CliResult, run_cli

KERNEL = """\
{default}
__global__ void scale(float *x) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    for (int k = 0; k < TILE; ++k) v = v * 1.0001f + k;
    x[i] = v;
}}
"""
IFNDEF = "#ifndef TILE\n#define TILE {value}\n#endif"


def _project(tmp_path: Path, default: str, values: str, command: str = "nvcc -arch=sm_90 -c k.cu") -> None:
    (tmp_path / "k.cu").write_text(KERNEL.format(default=default))
    (tmp_path / "tune.toml").write_text(f'arch = "sm_90"\n[tune.defines]\nTILE = {values}\n')
    (tmp_path / "compile_commands.json").write_text(
        json.dumps([{"directory": str(tmp_path), "command": command, "file": "k.cu"}]))


def _tune(tmp_path: Path, *args: str):  # type: ignore[no-untyped-def]
    return run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--workers", "local",
                    "--db", f"sqlite:///{tmp_path / 't.db'}", "--budget", "3", "--objective", "instructions",
                    "--out", str(tmp_path / "k.acf.toml"), *args], cwd=tmp_path)


def _stopped(folder: Path) -> CliResult:
    """`tune` refused in one line (exit 2, no traceback)."""
    done = _tune(folder)
    assert done.returncode == 2, done.describe()
    assert len(done.stderr_lines) == 1 and "Traceback" not in done.stderr, done.describe()
    return done


def test_a_kernel_default_other_than_the_first_value_stops_the_run_naming_it(tmp_path: Path) -> None:
    _project(tmp_path, IFNDEF.format(value=16), "[8, 16, 32]")
    done = _stopped(tmp_path)
    assert "gives no -DTILE, so your build has the kernel's own TILE=16" in done.stderr, done.stderr
    assert "list 16 first (TILE = [16, 8, 32])" in done.stderr, done.stderr
    assert not (tmp_path / "k.acf.toml").exists()
    space = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert space.returncode == 2 and "the kernel's own TILE=16" in space.stderr, space.describe()


@pytest.mark.parametrize("spelled", ["16", "(16)", "0x10", "(BASE / 8)"])  # BASE is 128 (review: refused)
def test_the_kernel_default_listed_first_is_the_baseline_however_it_is_spelled(tmp_path: Path, spelled: str) -> None:
    _project(tmp_path, "#define BASE 128\n" + IFNDEF.format(value=spelled), "[16, 8, 32]")
    done = _tune(tmp_path, "--json")
    assert done.returncode == 0, done.describe()
    assert json.loads(done.stdout)["baseline"]["config"]["define.TILE"] == 16


def test_a_command_that_gives_the_macro_is_not_second_guessed(tmp_path: Path) -> None:
    _project(tmp_path, IFNDEF.format(value=16), "[8, 16, 32]", "nvcc -arch=sm_90 -DTILE=32 -c k.cu")
    done = _tune(tmp_path, "--json")
    assert done.returncode == 0, done.describe()
    assert json.loads(done.stdout)["baseline"]["config"]["define.TILE"] == 32


@pytest.mark.parametrize("default, said", [
    (IFNDEF.format(value=64), "which expands to '64' there: none of tune.toml's values 8, 16, 32"),
    ("", "which is not defined there: none of tune.toml's values 8, 16, 32"),
    ("#ifndef TILE\n#error TILE must be given\n#endif", "the kernel does not preprocess without it (nvcc -E fails)"),
])
def test_a_kernel_default_that_is_no_listed_value_stops_the_run(tmp_path: Path, default: str, said: str) -> None:
    _project(tmp_path, default, "[8, 16, 32]")
    done = _tune(tmp_path)
    assert done.returncode == 2, done.describe()
    assert len(done.stderr_lines) == 1 and said in done.stderr, done.describe()
    assert "add -DTILE=VALUE to the command" in done.stderr


def test_without_a_compile_command_the_first_value_is_the_baseline_as_before(tmp_path: Path) -> None:
    _project(tmp_path, IFNDEF.format(value=16), "[8, 16, 32]")
    done = run_cli(["tune", "k.cu", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}", "--budget", "3",
                    "--objective", "instructions", "--json", "--out", str(tmp_path / "k.acf.toml")], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    assert json.loads(done.stdout)["baseline"]["config"]["define.TILE"] == 8


def test_the_gate_does_not_pass_a_command_that_dropped_the_macro_for_another_default(tmp_path: Path) -> None:
    """Tuned from a command with -DTILE=32, then the command drops it: the build now ships the
    kernel's own TILE=16, not the ACF's baseline. The gate said PASS with nothing to say; now the
    user's --compile-commands is bad input naming the macro, and the database the ACF names is a
    stale-settings warning that points at `space`, which says why."""
    _project(tmp_path, IFNDEF.format(value=16), "[32, 16, 8]", "nvcc -arch=sm_90 -DTILE=32 -c k.cu")
    assert _tune(tmp_path).returncode == 0
    acf_path = str(tmp_path / "k.acf.toml")
    clean = run_cli(["gate", acf_path, "--static"], cwd=tmp_path)
    assert clean.returncode == 0 and "0 warning(s)" in clean.stdout, clean.describe()
    (tmp_path / "compile_commands.json").write_text(
        json.dumps([{"directory": str(tmp_path), "command": "nvcc -arch=sm_90 -c k.cu", "file": "k.cu"}]))
    given = run_cli(["gate", acf_path, "--static", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert given.returncode == 2, given.describe()
    assert "gives no -DTILE, so your build has the kernel's own TILE=16" in given.stdout, given.describe()
    named = run_cli(["gate", acf_path, "--static"], cwd=tmp_path)
    assert "warn stale-settings" in named.stdout and "cannot be read now" in named.stdout, named.describe()
    assert "gives no -DTILE, so your build has the kernel's own TILE=16" in named.stdout, named.describe()


SIDED = "#ifndef TILE\n#ifdef __CUDA_ARCH__\n#define TILE {device}\n#else\n#define TILE {host}\n#endif\n#endif"


def test_a_default_the_device_and_host_code_see_differently_stops_the_run_naming_both(tmp_path: Path) -> None:
    """The kernel's own TILE is 16 in device code and 32 in host code (`#ifdef __CUDA_ARCH__`): the
    probe read the device side alone, said 16, tune.toml's first, and the run went on, its baseline
    -DTILE=16 a host build nobody ships. Now it stops naming both; the gate says it too."""
    _project(tmp_path, SIDED.format(device=16, host=32), "[16, 8, 32]")
    done = _stopped(tmp_path)
    assert "the kernel's own TILE, which is 16 in device code and 32 in host code" in done.stderr, done.stderr
    assert "give the command -DTILE=VALUE" in done.stderr, done.stderr
    assert not (tmp_path / "k.acf.toml").exists()
    (tmp_path / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(tmp_path), "command": "nvcc -arch=sm_90 -DTILE=16 -c k.cu", "file": "k.cu"}]))
    assert _tune(tmp_path).returncode == 0
    (tmp_path / "dropped.json").write_text(
        json.dumps([{"directory": str(tmp_path), "command": "nvcc -arch=sm_90 -c k.cu", "file": "k.cu"}]))
    gate = run_cli(["gate", str(tmp_path / "k.acf.toml"), "--static", "--compile-commands", "dropped.json"],
                   cwd=tmp_path)
    assert gate.returncode == 2, gate.describe()
    assert "which is 16 in device code and 32 in host code" in gate.stdout, gate.describe()


@pytest.mark.parametrize("spelled", ["020", "0x10", "0b1'0000", "1'6"])
def test_a_default_spelled_as_any_c_integer_literal_is_read_as_nvcc_reads_it(tmp_path: Path, spelled: str) -> None:
    """`#define TILE 010` crashed space, tune and gate with a traceback (Python's int() refuses a
    leading 0); C reads it as octal 8. Now each literal is read as nvcc reads it: the first value
    passes, another is refused in one line naming its value."""
    _project(tmp_path, IFNDEF.format(value=spelled), "[16, 8, 32]")
    space = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert space.returncode == 0, space.describe()
    _project(tmp_path, IFNDEF.format(value=spelled), "[8, 16, 32]")
    space = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert space.returncode == 2 and len(space.stderr_lines) == 1, space.describe()
    assert "the kernel's own TILE=16" in space.stderr, space.describe()


@pytest.mark.parametrize("spelled", ["16u", "0x10u", "16ull", "16L", "(BASE / 8u)"])
def test_a_default_of_another_integer_type_is_not_the_plain_first_value(tmp_path: Path, spelled: str) -> None:
    """Red team (this round): `#define TILE 16u` was read as 16, tune.toml's first value, so the
    baseline (-DTILE=16, a signed int) was called "your build" and `flags` gave -DTILE=16, which
    changes what unsigned arithmetic on TILE does (`n - TILE < 0`). A suffixed literal is another
    build: refused in one line naming what it expands to."""
    _project(tmp_path, "#define BASE 128\n" + IFNDEF.format(value=spelled), "[16, 8, 32]")
    done = _stopped(tmp_path)
    shown = spelled.replace("BASE", "128")  # as the preprocessor expands it
    assert f"expands to '{shown}' there: none of tune.toml's values 16, 8, 32" in done.stderr, done.stderr


def test_the_gate_reads_an_octal_default_without_a_traceback(tmp_path: Path) -> None:
    """The gate crashed on `#define TILE 010` and exited 1, a regression's code, not bad input's."""
    _project(tmp_path, IFNDEF.format(value="010"), "[16, 8, 32]", "nvcc -arch=sm_90 -DTILE=16 -c k.cu")
    assert _tune(tmp_path).returncode == 0
    (tmp_path / "dropped.json").write_text(
        json.dumps([{"directory": str(tmp_path), "command": "nvcc -arch=sm_90 -c k.cu", "file": "k.cu"}]))
    gate = run_cli(["gate", str(tmp_path / "k.acf.toml"), "--static", "--compile-commands", "dropped.json"],
                   cwd=tmp_path)
    assert gate.returncode == 2 and "Traceback" not in gate.stdout + gate.stderr, gate.describe()
    assert "your build has the kernel's own TILE=8" in gate.stdout, gate.describe()


def test_a_default_redefined_after_the_code_that_reads_it_is_not_taken_for_the_first_value(tmp_path: Path) -> None:
    """The probe reads the macro at the end of the file: a kernel built with its own TILE=32 and then
    `#undef TILE` / `#define TILE 16` read as 16, tune.toml's first, and passed. Now a default read as
    the first value is confirmed by preprocessing with -D at it, and this one is refused."""
    _project(tmp_path, IFNDEF.format(value=32), "[16, 8, 32]")
    (tmp_path / "k.cu").write_text((tmp_path / "k.cu").read_text() + "#undef TILE\n#define TILE 16\n")
    done = _tune(tmp_path)
    assert done.returncode == 2 and len(done.stderr_lines) == 1, done.describe()
    assert "could not be confirmed that your build is the baseline; add -DTILE=VALUE" in done.stderr, done.stderr


SGEMM = Path(__file__).resolve().parents[1] / "kernels" / "sgemm"


def _sgemm(tmp_path: Path, before: str, default: str, command: list[str]) -> None:
    """The bundled sgemm with `default` before its own `#ifndef {before}`, built by `command`."""
    source = (SGEMM / "sgemm.cu").read_text()
    own = f"#ifndef {before}\n"
    assert source.count(own) == 1
    (tmp_path / "sgemm.cu").write_text(source.replace(own, default + "\n" + own))
    include = SGEMM.parents[1] / "compileiq" / "include"
    toml = (SGEMM / "tune.toml").read_text()
    (tmp_path / "tune.toml").write_text(toml.replace('"../../compileiq/include"', json.dumps(str(include))))
    assert json.dumps(str(include)) in (tmp_path / "tune.toml").read_text()
    arguments = ["nvcc", "-arch=sm_90", f"-I{include}", "-DBK=8", *command, "-c", "sgemm.cu", "-o", "sgemm.o"]
    (tmp_path / "compile_commands.json").write_text(
        json.dumps([{"directory": str(tmp_path), "file": "sgemm.cu", "arguments": arguments}]))


def _space(tmp_path: Path) -> CliResult:
    return run_cli(["space", "sgemm.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)


def test_an_unparenthesised_expression_equal_to_the_first_value_is_not_the_baseline(tmp_path: Path) -> None:
    """Red team: sgemm's own `#define TM 2+2`, tune.toml's TM = [4, 8], no -DTM: the `#if (TM) == (4)`
    probe said 4, and the confirming build (-DTM=2+2 against no -D: the same by construction) passed,
    so the baseline "your build" was -DTM=4 (58 registers) while the command ships `ty*2+2+m` (60).
    Now the build without the -D is compared with the baseline's -DTM=4, and the run stops in one line."""
    _sgemm(tmp_path, "TM", "#ifndef TM\n#define TM 2+2\n#endif", ["-DTN=4"])
    done = _space(tmp_path)
    assert done.returncode == 2 and len(done.stderr_lines) == 1, done.describe()
    assert "Traceback" not in done.stderr, done.describe()
    assert "the kernel's own TM, which expands to '2+2'" in done.stderr, done.stderr
    assert "-DTM=4" in done.stderr, done.stderr
    # parenthesised, it is one value wherever it is read: the first, as before
    _sgemm(tmp_path, "TM", "#ifndef TM\n#define TM (2+2)\n#endif", ["-DTN=4"])
    assert _space(tmp_path).returncode == 0, _space(tmp_path).describe()


def test_a_default_read_from_another_tuned_macro_is_read_at_the_commands_value(tmp_path: Path) -> None:
    """Red team: sgemm's own `#define TN TM`, the command's -DTM=8 and no -DTN: the kernel's TN was
    read with TM at tune.toml's first value, 4, and passed, so the baseline was TM=8,TN=4 (66
    registers) where the command ships TN=TM=8 (120). Now it is read with the command's macros."""
    _sgemm(tmp_path, "TN", "#ifndef TN\n#define TN TM\n#endif", ["-DTM=8"])
    done = _space(tmp_path)
    assert done.returncode == 2 and len(done.stderr_lines) == 1, done.describe()
    assert "gives no -DTN, so your build has the kernel's own TN=8" in done.stderr, done.stderr
    assert "TN=4, a build you do not ship" in done.stderr, done.stderr
    _sgemm(tmp_path, "TN", "#ifndef TN\n#define TN TM\n#endif", ["-DTM=4"])  # TN is 4, the first value
    assert _space(tmp_path).returncode == 0, _space(tmp_path).describe()


OPTIMIZED = """\
#ifndef BLOCK
#ifdef __OPTIMIZE__
#define BLOCK 256
#else
#define BLOCK 128
#endif
#endif
__global__ void k(float *x) {
  __shared__ float s[BLOCK];
  s[threadIdx.x % BLOCK] = x[threadIdx.x];
  __syncthreads();
  x[threadIdx.x] = s[(threadIdx.x + 1) % BLOCK];
}
"""


def _block(tmp_path: Path, kernel: str, values: str, command: str) -> CliResult:
    (tmp_path / "k.cu").write_text(kernel)
    (tmp_path / "tune.toml").write_text(f'arch = "sm_90"\n[tune.defines]\nBLOCK = {values}\n')
    (tmp_path / "cc.json").write_text(json.dumps([{"directory": str(tmp_path), "command": command, "file": "k.cu"}]))
    return run_cli(["space", "k.cu", "--compile-commands", "cc.json"], cwd=tmp_path)


@pytest.mark.parametrize("level", ["-O3", "-Xcompiler -O2", "--optimize=2", '-Xcompiler="-fPIC -O2"', "-Xcompiler -Og"])
def test_the_default_is_read_at_the_commands_host_level(tmp_path: Path, level: str) -> None:
    """Red team (m4): a default under `#ifdef __OPTIMIZE__` was read without the command's host -O3
    (which defines it in the device pass): BLOCK=[128, 256] passed with a baseline of 512 bytes of
    shared memory where the shipped build has 1024, and [256, 128] was refused as BLOCK=128."""
    done = _block(tmp_path, OPTIMIZED, "[128, 256]", f"nvcc -arch=sm_90 {level} -c k.cu")
    assert done.returncode == 2 and len(done.stderr_lines) == 1 and "Traceback" not in done.stderr, done.describe()
    assert "the kernel's own BLOCK=256" in done.stderr and "list 256 first (BLOCK = [256, 128])" in done.stderr, \
        done.stderr
    assert _block(tmp_path, OPTIMIZED, "[256, 128]", f"nvcc -arch=sm_90 {level} -c k.cu").returncode == 0
    assert _block(tmp_path, OPTIMIZED, "[128, 256]", "nvcc -arch=sm_90 -c k.cu").returncode == 0  # no level: 128


PASTED = """\
#include <cstdio>
#ifndef BLOCK
#define BLOCK {default}
#endif
#define XCAT(a,b) a##b
#define CAT(a,b) XCAT(a,b)
#define XSTR(a) #a
#define STR(a) XSTR(a)
__global__ void CAT(kern_, BLOCK)(float *x) {{
  __shared__ float s[BLOCK];
  s[threadIdx.x % BLOCK] = x[threadIdx.x];
  __syncthreads();
  x[threadIdx.x] = s[(threadIdx.x + 1) % BLOCK];
  if (threadIdx.x == 0) printf("block " STR(BLOCK) "\\n");
}}
"""


@pytest.mark.parametrize("spelled", ["0x100", "0400"])
def test_a_default_spelled_otherwise_that_code_pastes_or_stringifies_is_not_the_baseline(
        tmp_path: Path, spelled: str) -> None:
    """Red team (m3): `#define BLOCK 0x100` with BLOCK = [256, 128] passed, but the baseline's
    -DBLOCK=256 builds a kernel named kern_256 that prints "block 256" where the shipped build has
    kern_0x100 and "block 0x100". Now the two builds' device code (PTX) decides."""
    done = _block(tmp_path, PASTED.format(default=spelled), "[256, 128]", "nvcc -arch=sm_90 -c k.cu")
    assert done.returncode == 2 and len(done.stderr_lines) == 1 and "Traceback" not in done.stderr, done.describe()
    assert f"the kernel's own BLOCK, spelled '{spelled}'" in done.stderr, done.stderr
    assert "tune.toml's first value, 256" in done.stderr and "add -DBLOCK=256 to the command" in done.stderr
    assert _block(tmp_path, PASTED.format(default="256"), "[256, 128]", "nvcc -arch=sm_90 -c k.cu").returncode == 0


TOGETHER = """\
__global__ void scale(float *x) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
#if defined(A) && defined(B)
    x[i] = x[i] * A + B;
#else
    x[i] = x[i] * 2.0f;
#endif
}
"""


def _together(tmp_path: Path) -> None:
    """Two tuned macros the kernel never defines, whose -D change the code only together."""
    (tmp_path / "k.cu").write_text(TOGETHER)
    (tmp_path / "tune.toml").write_text('arch = "sm_90"\n[tune.defines]\nA = [1, 3]\nB = [2, 4]\n')
    (tmp_path / "compile_commands.json").write_text(
        json.dumps([{"directory": str(tmp_path), "command": "nvcc -arch=sm_90 -c k.cu", "file": "k.cu"}]))


def test_macros_that_change_the_code_only_together_are_refused_in_true_words(tmp_path: Path) -> None:
    """The refusal said "each of the kernel's own defaults is tune.toml's first value" of macros the
    kernel gives no default at all, never read (alone, their -D changes no code)."""
    _together(tmp_path)
    done = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr_lines) == 1, done.describe()
    assert "each of the kernel's own defaults is tune.toml's first value" not in done.stderr, done.stderr
    assert ("gives no -D for A, B: none of them alone builds other code than the baseline's -D at tune.toml's first "
            "value (the kernel's own default reads as that value, or the -D changes no code on its own), but together "
            "they preprocess to other code than the baseline's -DA=1 -DB=2") in done.stderr, done.stderr


def test_each_left_out_macro_at_its_first_value_is_preprocessed_in_the_first_batch(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Each macro's build at its first value was preprocessed in a round of its own, one macro after
    another (one `nvcc -E` wait per macro); they run in the first concurrent batch again."""
    from compileiq import app
    from compileiq.source import macro_effect
    from compileiq.source.shipped_macros import KernelDefaultError

    _together(tmp_path)
    batches: list[list[tuple[str, dict[str, object]]]] = []
    real = macro_effect.Preprocessed.prefetch

    def recorded(self, wanted):  # type: ignore[no-untyped-def]
        batches.append([(side, dict(macros)) for side, macros in wanted])
        return real(self, wanted)

    monkeypatch.setattr(macro_effect.Preprocessed, "prefetch", recorded)
    with pytest.raises(KernelDefaultError):
        app.kernel_spec(tmp_path / "k.cu", None, tmp_path / "compile_commands.json")
    for side in macro_effect.SIDES:
        for alone in ({"A": 1, "B": None}, {"A": None, "B": 2}):
            assert (side, alone) in batches[0], batches
