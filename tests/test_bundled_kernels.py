"""The bundled kernels (kernels/<name>/<name>.cu + tune.toml): each loads, builds with the
measuring harness, and tunes with --objective static. No GPU needed.

The builds run once per kernel in a 2-thread pool (a full nvcc build with the harness takes
~5-15 s); the tuning test is marked slow but runs by default.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import compileiq
from compileiq import app
from compileiq.core.records import TrialState
from compileiq.results import acf
from compileiq.source.kernel import load_spec
from compileiq.source.spec import KernelSpec
from compileiq.tuning.progress import SilentProgress

KERNELS_DIR = Path(__file__).resolve().parents[1] / "kernels"
INCLUDE_DIR = Path(compileiq.__file__).resolve().parent / "include"
HARNESS = INCLUDE_DIR / "compileiq" / "harness.cuh"
# The nine classics, plus the spill demo.
EXPECTED = {
    "attention",
    "bsr_spmm",
    "conv2d",
    "reduction",
    "sgemm",
    "softmax",
    "spill_heavy",
    "spmv_sell",
    "stencil",
    "transpose",
}
KERNELS = sorted(p.name for p in KERNELS_DIR.iterdir() if (p / f"{p.name}.cu").is_file())
BUILD_TIMEOUT_S = 300


def _source(name: str) -> Path:
    return KERNELS_DIR / name / f"{name}.cu"


def _ifndef_default(text: str, name: str) -> str | None:
    match = re.search(rf"#ifndef {name}\s*\n\s*#define {name}\s+(\S+)", text)
    return match.group(1) if match else None


def test_the_bundled_set_is_complete() -> None:
    assert set(KERNELS) == EXPECTED
    for name in KERNELS:
        assert (KERNELS_DIR / name / "tune.toml").is_file(), f"{name} has no tune.toml"


@pytest.mark.parametrize("name", KERNELS)
def test_spec_loads_and_matches_the_source(name: str) -> None:
    spec = load_spec(_source(name))
    text = _source(name).read_text()
    assert spec.name == name and spec.arch == "sm_90"
    assert spec.entries, "tune.toml must name the kernel function(s)"
    for entry in spec.entries:
        assert re.search(rf"__global__[^;{{]*\b{entry}\s*\(", text), f"no __global__ {entry}"
    assert len(spec.tuned_defines) <= 2
    for define, values in spec.tuned_defines:
        assert 1 <= len(values) <= 3
        assert _ifndef_default(text, define) == str(values[0]), (
            f"{define}: baseline != #ifndef default"
        )
    _assert_block_sizes(spec)


def _assert_block_sizes(spec: KernelSpec) -> None:
    """Every config's block size is a legal block size (a number or a tuned define's values)."""
    configs: list[dict[str, int | str]] = [{}]
    if isinstance(spec.block_size, str):
        values = dict(spec.tuned_defines)[spec.block_size]
        configs = [{f"define.{spec.block_size}": v} for v in values]
    for config in configs:
        assert 32 <= spec.block_size_for(config) <= 1024


@pytest.mark.parametrize("name", KERNELS)
def test_source_is_a_harness_program_with_a_documented_header(name: str) -> None:
    text = _source(name).read_text()
    head = text.split("#include", 1)[0]
    assert head.startswith(f"// {name} — ")
    for topic in ("Launch:", "Default problem", "Expected bottleneck", "Reference", "olerance"):
        assert topic in head, f"the header comment of {name}.cu does not cover {topic!r}"
    assert "compileiq/harness.cuh" in text
    for call in ("ciq::Harness h(argc, argv)", "h.launch(", "h.reference(", "h.run()"):
        assert call in text


def _build(name: str, out_dir: Path) -> tuple[int, str]:
    nvcc = shutil.which("nvcc")
    assert nvcc is not None
    exe = out_dir / name
    argv = [
        nvcc,
        "-arch=sm_90",
        "-std=c++17",
        "-I",
        str(INCLUDE_DIR),
        str(_source(name)),
        "-o",
        str(exe),
        "-ldl",
    ]
    try:
        proc = subprocess.run(
            argv, check=False, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return -1, f"nvcc timed out after {BUILD_TIMEOUT_S} s"
    ok = proc.returncode == 0 and exe.is_file()
    return (0 if ok else proc.returncode or 1), proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str]]:
    """One full build per kernel (2 at a time): name -> (exit status, compiler output)."""
    if not HARNESS.is_file():
        pytest.skip(f"the measuring harness header is absent ({HARNESS}): nothing to build against")
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    out_dir = tmp_path_factory.mktemp("bundled-builds")
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(
            zip(KERNELS, pool.map(lambda name: _build(name, out_dir), KERNELS), strict=True)
        )


@pytest.mark.parametrize("name", KERNELS)
def test_builds_to_an_executable_with_the_harness(
    name: str, builds: dict[str, tuple[int, str]]
) -> None:
    status, output = builds[name]
    assert status == 0, output[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("name", KERNELS)
def test_tunes_with_the_static_objective(name: str, tmp_path: Path) -> None:
    options = app.TuneOptions(
        kernel=_source(name),
        objective="static",
        budget=3,
        workers="local",
        db=f"sqlite:///{tmp_path / 'kt.db'}",
        out=tmp_path / f"{name}.acf.toml",
        simplify=False,
    )
    report = app.tune(options, SilentProgress())
    baseline = report.result.baseline
    assert baseline.state is TrialState.COMPLETE, baseline.reason
    assert baseline.value is not None
    assert report.result.chosen.state is TrialState.COMPLETE
    written = acf.read(report.acf_path)
    assert written.objective["kind"].startswith("static estimate")
