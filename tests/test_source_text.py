"""Reading a kernel's sources as text (its __launch_bounds__, #defines and enums): linear in the
text, and a comment opener inside a literal is no comment. Real nvcc (`nvcc -M`) bundles them."""

from __future__ import annotations

import time
from pathlib import Path

from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.source.launch import LaunchModel
from compileiq.source.macros import MacroError, check_macros_take_effect
from tests.helpers import run_cli

STARTS = 40_000  # "/*" that never close: 120 KB, 19 s for the comment stripper alone before (quadratic)
KERNEL = """\
#include "blob.h"
enum Mode { FAST, SLOW };
template <Mode M>
__global__ void __launch_bounds__(BLOCK) k(float* p) { p[threadIdx.x] = blob[threadIdx.x] + M; }
template __global__ void k<FAST>(float*);
"""


def _kernel(folder: Path, blob: str, after: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "blob.h").write_text(f'static const char blob[] = "{blob}";\n{after}')
    (folder / "k.cu").write_text(KERNEL)
    (folder / "tune.toml").write_text('arch = "sm_90"\nentries = ["k<FAST>"]\n[tune.defines]\nBLOCK = [64, 128]\n')
    return folder / "k.cu"


def test_unclosed_comment_openers_in_a_string_are_read_in_linear_time(tmp_path: Path) -> None:
    """red team F5: each "/*" with no "*/" after it rescanned the rest of the file (a 120 KB
    header: 44 s before the first trial); `enum E :` and `__launch_bounds__(a,` never closed did too."""
    blob = "/*a" * STARTS + "enum E : " * (STARTS // 4) + "__launch_bounds__(a, " * (STARTS // 4)
    spec = load_spec(_kernel(tmp_path, blob))
    started = time.perf_counter()
    bundle = bundle_sources(spec)  # nvcc -M, and the enumerators of `entries` looked up in every file
    model = LaunchModel(spec, bundle)
    check_macros_take_effect(spec, bundle)
    seconds = time.perf_counter() - started
    assert bundle.enumerators == (("FAST", "(Mode)0"),)
    assert model.facts("k", {"define.BLOCK": 128}) == (128, 0)
    assert seconds < 10, f"{seconds:.1f} s: linear takes well under 1 s"  # quadratic: minutes


def test_a_comment_opener_in_a_string_hides_no_code(tmp_path: Path) -> None:
    """A "/*" in a string literal was taken for a comment running to the next "*/", so the
    unguarded #define between them went unseen and the macro was tuned to no effect."""
    folder = tmp_path / "k"
    _kernel(folder, "/* not a comment", after="#define BLOCK 64\n/* a real comment */\n")
    spec = load_spec(folder / "k.cu")
    try:
        check_macros_take_effect(spec, bundle_sources(spec))
    except MacroError as error:
        assert "blob.h:2 #defines BLOCK itself" in str(error), error
    else:
        raise AssertionError("the #define after the string went unseen")
    listed = run_cli(["space", "k/k.cu"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()
    assert "blob.h:2 #defines BLOCK itself, so -DBLOCK has no effect" in listed.stderr, listed.describe()


def test_every_unguarded_define_of_a_tuned_macro_is_named_at_once(tmp_path: Path) -> None:
    """user F10 (HeCBench stencil_1d: #define RADIUS 7, #define BLOCK_SIZE 256): the error named
    RADIUS alone; fixed, the next run named BLOCK_SIZE."""
    (tmp_path / "k.cu").write_text("#define RADIUS 7\n#define BLOCK_SIZE 256\n#ifndef GUARDED\n#define GUARDED 1\n"
                                   "#endif\n__global__ void k(float* p) { p[threadIdx.x] = RADIUS * BLOCK_SIZE * "
                                   "GUARDED; }\n")
    (tmp_path / "tune.toml").write_text('arch = "sm_90"\n[tune.defines]\nRADIUS = [3, 7]\nBLOCK_SIZE = [128, 256]\n'
                                        "GUARDED = [1, 2]\n")
    tuned = run_cli(["tune", "k.cu", "--budget", "2", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}"],
                    cwd=tmp_path)
    assert tuned.returncode == 2, tuned.describe()
    [line] = tuned.stderr.strip().splitlines()
    assert ("the kernel #defines 2 of its tune.toml macros itself, so their -D has no effect: "
            "tune.defines.RADIUS: k.cu:1; tune.defines.BLOCK_SIZE: k.cu:2: guard each line") in line, line
    assert "GUARDED" not in line and "Traceback" not in tuned.output
