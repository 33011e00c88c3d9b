"""The real measuring path on a real GPU (run by scripts/gpu-check.sh; deselected by default)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from compileiq.build.compile import ExecutableJob, build_executable
from compileiq.evaluate.confirm import aa_noise, confirm_args, executable_sampler
from compileiq.evaluate.measure import LocalMeasurer, gpu_visible, run_executable
from compileiq.evaluate.stats import Verdict, interleaved, noise_delta
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.source.spec import SourceBundle

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_visible() or shutil.which("nvcc") is None, reason="needs a GPU and nvcc"),
]

ROOT = Path(__file__).resolve().parents[1]
ARCH = "sm_90"


def _build(bundle: SourceBundle, frontend: tuple[str, ...] = (), ptxas: tuple[str, ...] = ()) -> bytes:
    build = build_executable(ExecutableJob(shutil.which("nvcc") or "nvcc", bundle, ARCH, frontend, ptxas, 300))
    assert build.ok, build.message
    return build.executable


def _source(name: str, text: str) -> SourceBundle:
    return SourceBundle(name, ((name, text.encode()),), (), "test")


@pytest.fixture(scope="module")
def smoke() -> bytes:
    return _build(_source("main.cu", (ROOT / "tests" / "cuda" / "harness_smoke.cu").read_text()))


def test_saxpy_timing_is_sane_and_checked(smoke: bytes) -> None:
    run = LocalMeasurer().measure(smoke, ["--check"], 60)
    h = run.harness
    assert run.failure is None, run.failure
    assert h.check.run and h.check.passed
    assert h.median_ms is not None and 0.005 < h.median_ms < 5.0  # 2^24 floats: ~0.05 ms on an H200
    assert len(h.samples_ms) >= 10 and h.min_ms is not None and h.min_ms <= h.median_ms
    assert [o.name for o in h.outputs] == ["y"] and len(run.dump) == 4 * (1 << 24)
    assert h.device and h.driver
    phases = dict(h.phases_ms)
    assert list(phases) == ["cuda_context", "device_setup", "inputs", "warm_up", "sampling", "outputs"]
    assert all(ms >= 0 for ms in phases.values()) and sum(phases.values()) <= run.seconds * 1000


def test_a_confirmation_block_times_alone_and_costs_less_than_a_verified_run(smoke: bytes) -> None:
    """Confirmation blocks run `--timing-only`: exactly the samples asked for, no outputs copied
    back, hashed or dumped (on the H200 that was 0.1 to 3.4 s of every measuring process)."""
    verified = run_executable(smoke, list(confirm_args(5, timing_only=False)), 60)
    block = run_executable(smoke, list(confirm_args(5)), 60, dump=False)
    assert block.failure is None and block.harness.status == "ok", block.harness.message
    assert len(block.harness.samples_ms) == 5 and block.harness.outputs == () and block.dump == b""
    assert verified.harness.outputs and len(verified.dump) == 4 * (1 << 24)
    assert dict(block.harness.phases_ms)["outputs"] < dict(verified.harness.phases_ms)["outputs"]


def test_a_tiny_kernel_is_timed_as_a_graph_batch(smoke: bytes) -> None:
    run = run_executable(smoke, ["--set", "n=1024", "--quick"], 30)
    assert run.failure is None and run.harness.graph_batch >= 8
    assert run.harness.median_ms is not None and run.harness.median_ms < 0.01


def test_a_aa_comparison_is_same(smoke: bytes) -> None:
    measurer = LocalMeasurer()
    a = executable_sampler(measurer, smoke)
    b = executable_sampler(measurer, smoke)
    delta = noise_delta(aa_noise(a, samples=10))
    assert interleaved(a, b, delta=delta, samples=10).verdict is Verdict.SAME


def test_an_unwritten_output_element_is_caught() -> None:
    text = (ROOT / "tests" / "cuda" / "harness_smoke.cu").read_text().replace("if (i < n)", "if (i < n - 1)")
    run = run_executable(_build(_source("main.cu", text)), ["--quick", "--set", "n=4096"], 30)
    assert run.returncode == 3 and run.harness.status == "unwritten_output"
    assert run.harness.message.startswith("1 output elements")


def test_a_bundled_kernel_runs_and_checks() -> None:
    spec = load_spec(ROOT / "kernels" / "reduction" / "reduction.cu", arch=ARCH)
    exe = _build(bundle_sources(spec), spec.fixed_define_args())
    run = LocalMeasurer().measure(exe, ["--quick", "--check"], 60)
    assert run.failure is None, run.failure
    assert run.harness.check.passed and run.harness.median_ms


def test_a_program_is_tuned_confirmed_and_gated_as_the_program_it_is(tmp_path: Path) -> None:
    """`tune --program --metric-regex R` on a program with its own main that prints its time, then
    `gate --device --program --metric-regex R`: every run of it gets its own arguments alone and is
    read with R (confirmation and gate included), the ACF records how it was timed, and the gate
    reproduces the confirmed gain. UNROLL 8 (the baseline) reads each input eight times."""
    import contextlib

    from compileiq import app
    from compileiq.evaluate.timing import HarnessTiming
    from compileiq.gating import check as gating
    from compileiq.results import acf
    from compileiq.tuning.progress import SilentProgress

    shutil.copy(ROOT / "tests" / "cuda" / "program_timed.cu", tmp_path / "prog.cu")
    (tmp_path / "tune.toml").write_text("[tune.defines]\nUNROLL = [8, 1]\n")
    regex = r"elapsed: ([0-9.]+) ms"
    options = app.TuneOptions(kernel=Path("prog.cu"), objective="time", budget=2, workers="local",
                              strategy="exhaustive", only=("define.UNROLL",), db=f"sqlite:///{tmp_path}/t.db",
                              out=Path("prog.acf.toml"), arch=ARCH, program=True, metric_regex=regex, finalists=1)
    with contextlib.chdir(tmp_path):
        app.tune(options, SilentProgress())
    tuned = acf.read(tmp_path / "prog.acf.toml")
    assert (tuned.mode, tuned.metric_regex) == ("program", regex)
    assert tuned.controls["define.UNROLL"] == 1 and tuned.objective["verdict"] == "FASTER", tuned.objective
    report = gating.run(gating.GateOptions(acfs=(tmp_path / "prog.acf.toml",), device=True, program=True,
                                           metric_regex=regex), HarnessTiming())
    assert report.mode == "timing" and report.passed, report
    (result,) = report.results
    assert result.timing is not None and result.timing.vs_default.verdict.value == "FASTER"
