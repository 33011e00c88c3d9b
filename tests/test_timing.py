"""The runtime objective end to end on the CPU: real nvcc builds of a harness program, a fake
measurer at the process boundary (no GPU here), the real store, search, confirmation and ACF."""

import random
import re
from typing import ClassVar

import pytest

from compileiq.app import SharedWorkers, TuneOptions, tuning_space
from compileiq.build.workers import LocalWorkers
from compileiq.core.records import TrialState
from compileiq.core.toolchain import find_toolchain
from compileiq.evaluate.measure import FakeMeasurer, OutputInfo, RunResult, synthetic_result
from compileiq.evaluate.metrics import StaticEvaluator
from compileiq.evaluate.screening import ScreeningPolicy
from compileiq.evaluate.timing import TimeEvaluator, TimingTarget
from compileiq.results import acf, evidence
from compileiq.search.searcher import SearchSettings
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.store import Store
from compileiq.tuning.progress import SilentProgress
from compileiq.tuning.request import TuneRequest
from compileiq.tuning.tuner import Tuner

KERNEL = r"""
#include <compileiq/harness.cuh>
#ifndef UNROLL
#define UNROLL 1
#endif
#define CIQ_STR2(x) #x
#define CIQ_STR(x) CIQ_STR2(x)
extern "C" const char ciq_variant_marker[] = "ciq-variant-UNROLL=" CIQ_STR(UNROLL) ";";
__global__ void scale(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0.0f;
  for (int k = 0; k < UNROLL; ++k) acc += x[i < n ? i : 0];
  if (i < n) y[i] = 2.0f * acc / UNROLL;
}
int main(int argc, char** argv) {
  ciq::Harness h(argc, argv);
  const int n = static_cast<int>(h.size("n", 1 << 20));
  auto x = h.input<float>("x", n);
  auto y = h.output<float>("y", n);
  h.launch([&](cudaStream_t s) { scale<<<(n + 255) / 256, 256, 0, s>>>(x.device(), y.device(), n); });
  return h.run();
}
"""
# What the fake GPU reports per UNROLL (read from the marker string compiled into each binary):
# 2 is the fastest correct variant; 4 is faster still but computes a wrong result.
TIMES_MS = {1: 2.0, 2: 1.0, 4: 0.5}
OUTPUT = OutputInfo("y", "float32", 4, "")
RIGHT, WRONG = b"\x00\x00\x80\x3f" * 4, b"\x00\x00\x00\x40" * 4  # 1.0f vs 2.0f


class CountingWorkers(LocalWorkers):
    """Local threads that note how many measuring executables each call asked for."""

    calls: ClassVar[list[int]] = []

    def build_executables(self, jobs):
        CountingWorkers.calls.append(len(jobs))
        return super().build_executables(jobs)


def _fake_gpu(executable: bytes, args) -> RunResult:
    unroll = int(re.search(rb"ciq-variant-UNROLL=(\d+);", executable).group(1))
    noise = random.Random(len(args) * 7919 + unroll)
    count = 10 if "--samples" in args else 5
    samples = [TIMES_MS[unroll] * noise.uniform(0.995, 1.005) for _ in range(count)]
    dump = WRONG if unroll == 4 else RIGHT
    return RunResult(synthetic_result(samples, outputs=[OUTPUT]), dump, 0, False, 0.01)


class NotedProgress(SilentProgress):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, message: str) -> None:
        self.notes.append(message)


def _tune_scale(tmp_path, screening: ScreeningPolicy | None = None, progress=None, finalists: int = 4,
                unroll: str = "[1, 2, 4]"):
    """Tune KERNEL (UNROLL x ptxas -O) on the fake GPU: (result, measurer, store)."""
    folder = tmp_path / "scale"
    folder.mkdir()
    (folder / "scale.cu").write_text(KERNEL)
    (folder / "tune.toml").write_text(f"[tune.defines]\nUNROLL = {unroll}\n")
    spec, tools = load_spec(folder / "scale.cu"), find_toolchain()
    options = TuneOptions(kernel=spec.source, only=("ptxas.opt_level",), objective="time")
    space = tuning_space(spec, tools, options)
    CountingWorkers.calls = []
    workers = SharedWorkers(CountingWorkers)
    measurer = FakeMeasurer(_fake_gpu)
    target = TimingTarget(tools.nvcc, bundle_sources(spec), spec.arch, space, spec.fixed_define_args(),
                          120, spec.run_args, spec.rtol, spec.atol, None, False, StaticEvaluator("static", spec))
    evaluator = TimeEvaluator(target, Store.open(f"sqlite:///{tmp_path}/t.db"), workers, measurer,
                              finalists=finalists)
    request = TuneRequest(spec, space, "time", budget=6, search=SearchSettings("exhaustive"), batch_size=6,
                          screening=screening)
    store = Store.open(f"sqlite:///{tmp_path}/t.db")
    return Tuner(request, store, tools, workers, progress or SilentProgress(), evaluator).run(), measurer, store


@pytest.mark.slow
def test_runtime_tuning_screens_checks_outputs_and_confirms(tmp_path):
    result, measurer, store = _tune_scale(tmp_path)

    wrong = [t for t in result.trials if t.config.get("define.UNROLL") == 4]
    assert wrong and all(t.state is TrialState.FAILED and t.reason.startswith("wrong result") for t in wrong)
    assert result.chosen.config["define.UNROLL"] == 2
    assert result.chosen.metrics["kind"] == evidence.RUNTIME_KIND
    assert result.confirmation is not None and not result.confirmation.keeps_baseline
    comparison = result.confirmation.winner.comparison
    assert comparison.low <= 0.5 / 0.99 and comparison.high >= 0.5 * 0.99
    table = evidence.objective_table(result)
    assert table["kind"] == evidence.RUNTIME_KIND and table["unit"] == "ms"
    assert table["speedup"] == pytest.approx(2.0, rel=0.02)
    assert table["speedup_interval_95"][0] <= table["speedup"] <= table["speedup_interval_95"][1]
    # the gate's reference: the chosen build over every confirmation round (UNROLL=2 runs 1.0 ms ± 0.5%)
    assert table["confirmed_median"] == pytest.approx(1.0, rel=0.006) and table["best"] == result.chosen.value
    # what the number is: a median of per-round ratios (the runtime landscapes showed it misses the
    # ratio of mean times whenever a first launch is slow), said where it is read
    assert table["speedup_is"].startswith("the median over the interleaved rounds")
    # every screened code was measured once: later lookups come from the measurement cache
    screened = [c for c in measurer.calls if "--quick" in c[1]]
    # and the baseline's screening is the reference run itself (on the H200 a second one cost ~17 s)
    assert len(screened) == len({t.code_hash for t in result.trials if t.code_hash})
    store.close()


LAUNCHED = KERNEL.replace("UNROLL", "BLOCK").replace("#define BLOCK 1", "#define BLOCK 256").replace(
    "for (int k = 0; k < BLOCK; ++k) acc += x[i < n ? i : 0];\n  if (i < n) y[i] = 2.0f * acc / BLOCK;",
    "acc += x[i < n ? i : 0];\n  if (i < n) y[i] = acc;").replace("(n + 255) / 256, 256", "(n + BLOCK - 1) / BLOCK, BLOCK")
LAUNCH_MS = {256: 2.0, 128: 1.0}  # the same device code: only the launch differs


def _launch_gpu(executable: bytes, args) -> RunResult:
    block = int(re.search(rb"ciq-variant-BLOCK=(\d+);", executable).group(1))
    noise = random.Random(len(args) * 7919 + block)
    samples = [LAUNCH_MS[block] * noise.uniform(0.995, 1.005) for _ in range(10 if "--samples" in args else 5)]
    return RunResult(synthetic_result(samples, outputs=[OUTPUT]), RIGHT, 0, False, 0.01)


def test_the_same_machine_code_launched_otherwise_is_timed_on_its_own(tmp_path):
    """A macro that only reaches the launch (Rodinia's gaussian: threads per block) leaves the
    device code as it was: its variants were answered from the defaults' cached measurement and
    never confirmed (one machine code, the baseline's), so the faster launch was never found."""
    folder = tmp_path / "launched"
    folder.mkdir()
    (folder / "k.cu").write_text(LAUNCHED)
    (folder / "tune.toml").write_text("[tune.defines]\nBLOCK = [256, 128]\n")
    spec, tools = load_spec(folder / "k.cu"), find_toolchain()
    space = tuning_space(spec, tools, TuneOptions(kernel=spec.source, only=("define.BLOCK",), objective="time"))
    workers = SharedWorkers(LocalWorkers)
    target = TimingTarget(tools.nvcc, bundle_sources(spec), spec.arch, space, spec.fixed_define_args(),
                          120, spec.run_args, spec.rtol, spec.atol, None, False, StaticEvaluator("static", spec))
    store = Store.open(f"sqlite:///{tmp_path}/t.db")
    evaluator = TimeEvaluator(target, store, workers, FakeMeasurer(_launch_gpu))
    request = TuneRequest(spec, space, "time", budget=2, search=SearchSettings("exhaustive"), batch_size=2)
    result = Tuner(request, store, tools, workers, SilentProgress(), evaluator).run()
    by_block = {t.config["define.BLOCK"]: t for t in result.trials if t.state is TrialState.COMPLETE}
    assert by_block[256].code_hash == by_block[128].code_hash  # the premise: one machine code
    assert by_block[128].value == pytest.approx(1.0, rel=0.01) and by_block[256].value == pytest.approx(2.0, rel=0.01)
    assert result.chosen.config["define.BLOCK"] == 128
    assert result.confirmation is not None and not result.confirmation.keeps_baseline
    # and the measurement cache answers for it (a key the cache could not read back re-ran the program)
    from compileiq.evaluate.timed_key import timed_key

    key = timed_key(by_block[128].code_hash, by_block[128].config)
    assert key != by_block[128].code_hash
    assert store.get_measurement(key, evaluator.kind, evaluator.driver, evaluator._args_hash()) is not None
    store.close()


@pytest.mark.slow
def test_a_screened_batch_has_its_measuring_executables_built_at_once(tmp_path):
    """`compileiq tune --objective time` screens: the batch it will measure is built in one call
    to the workers, not nvcc then the GPU by turns (on the first GPU lent, nvcc before each
    measurement was a quarter of the tuning's time)."""
    progress = NotedProgress()
    result, measurer, store = _tune_scale(tmp_path, ScreeningPolicy(), progress, finalists=1)  # --finalists 1
    measured = [c for c in measurer.calls if "--quick" in c[1]]
    assert result.chosen.config["define.UNROLL"] == 2 and len(measured) >= 3
    assert sum(CountingWorkers.calls) == len(measured)  # each once: the baseline's with its reference run
    assert max(CountingWorkers.calls) >= 2
    # what the confirmation will cost is said before it starts (at the baseline's 0.01 s a run)
    assert "confirming 1 finalist: 40 to 80 runs of the measuring program, about 0.0 to 0.0 min at 0.0 s a run " \
           "(the baseline's; after each build's first, runs that only time take less)" in progress.notes
    assert result.confirmation is not None and len(result.confirmation.confirmed) == 1
    assert evidence.objective_table(result)["confirmed_finalists"] == 1  # the ACF says how many
    assert any(n.startswith("A/A: the baseline against itself") for n in progress.notes)
    store.close()


@pytest.mark.slow
def test_with_nothing_to_confirm_the_acf_records_no_threshold(tmp_path):
    """One UNROLL and screening refuses every lower -O: only the baseline's code is measured, no
    A/A runs, and the ACF records that nothing was confirmed rather than a threshold nobody measured."""
    result, measurer, store = _tune_scale(tmp_path, ScreeningPolicy(), unroll="[1]")
    assert result.confirmation is not None and result.confirmation.confirmed == ()
    assert len(measurer.calls) == 1  # the baseline's reference run, which is also its trial's
    table = evidence.objective_table(result)
    assert table["confirmed_finalists"] == 0 and "confirmation_delta" not in table
    assert table["verdict"].startswith("nothing to confirm") and table["improved"] is False
    store.close()


def test_the_acf_records_a_runtime_as_such(tmp_path):
    """The ACF for a runtime objective says so, in ms, with the confirmed speedup and interval."""
    space = tuning_space(load_spec(_tiny(tmp_path)), find_toolchain(), TuneOptions(kernel=tmp_path))
    content = acf.AcfContent("k", "k.cu", "k.cu", "ab" * 32, "sm_90", "13.0", "13.0", "b", space,
                             space.default_config(), (), {"name": "time", "kind": evidence.RUNTIME_KIND,
                                                           "unit": "ms", "speedup": 1.5}, {}, {})
    read = acf.read(acf.write(tmp_path / "k.acf.toml", content))
    assert read.objective["kind"].startswith("runtime") and read.objective["unit"] == "ms"


def _tiny(tmp_path):
    path = tmp_path / "k.cu"
    path.write_text("__global__ void k(float* x) { x[0] = 1; }\n")
    return path


PROGRAM = r"""
#include <cstdio>
#ifndef VARIANT
#define VARIANT 1
#endif
extern "C" const char ciq_variant_marker[] = "ciq-variant-" "VARIANT" ";";
__global__ void k(float* x) { x[threadIdx.x] *= VARIANT; }
int main() { std::printf("elapsed: %d.5 ms\n", VARIANT); return 0; }
"""


def test_program_mode_reads_the_time_the_program_prints(tmp_path):
    from compileiq.build.compile import Build, BuildStatus
    from compileiq.core.space import Config

    (tmp_path / "prog.cu").write_text(PROGRAM)
    spec, tools = load_spec(tmp_path / "prog.cu"), find_toolchain()
    space = tuning_space(spec, tools, TuneOptions(kernel=spec.source, only=("ptxas.opt_level",)))
    printed = iter(["elapsed: 3.5 ms\n", "elapsed: 2.5 ms\n", "no time here\n"])

    def program(executable, args):
        assert "--quick" not in args  # a program gets only its own arguments
        return RunResult(synthetic_result([]), b"", 0, False, 0.1, next(printed))

    target = TimingTarget(tools.nvcc, bundle_sources(spec), spec.arch, space, (), 120, (), 1e-5, 1e-6,
                          r"elapsed: ([0-9.]+) ms", True, StaticEvaluator("static", spec))
    evaluator = TimeEvaluator(target, Store.open(f"sqlite:///{tmp_path}/p.db"), SharedWorkers(LocalWorkers),
                              FakeMeasurer(program))
    evaluator.prepare(space.default_config())  # the baseline: 3.5 ms
    baseline = Build(BuildStatus.OK, "", (), "0" * 64, b"", 0.0)
    assert evaluator.evaluate(baseline, space.default_config()).value == 3.5  # that run, not another
    variant = Config.of({"ptxas.opt_level": 2})
    build = Build(BuildStatus.OK, "", (), "a" * 64, b"", 0.0)
    assert evaluator.evaluate(build, variant).value == 2.5
    silent = evaluator.evaluate(Build(BuildStatus.OK, "", (), "b" * 64, b"", 0.0), variant)
    assert silent.value is None and "printed no time" in silent.reason
    assert evaluator.evaluate(build, variant).value == 2.5  # cached per machine code
    assert evaluator.evaluate(baseline, space.default_config()).value == 3.5


TIMED_PROGRAM = r"""
#include <cstdio>
#ifndef UNROLL
#define UNROLL 1
#endif
#define CIQ_STR2(x) #x
#define CIQ_STR(x) CIQ_STR2(x)
extern "C" const char ciq_variant_marker[] = "ciq-variant-UNROLL=" CIQ_STR(UNROLL) ";";
__global__ void k(float* x) { x[threadIdx.x] *= UNROLL; }
int main() { std::printf("took 1 ms\n"); return 0; }
"""


def test_program_mode_confirms_on_the_times_the_program_prints_and_passes_it_only_its_own_arguments(tmp_path):
    """A program with its own main gets its own arguments alone, also when confirming: before,
    the confirmation passed it the harness's block options and --dump FILE and read harness
    samples it never prints, so no program-mode run could confirm a speedup (`ok: no message`)."""
    folder = tmp_path / "prog"
    folder.mkdir()
    (folder / "prog.cu").write_text(TIMED_PROGRAM)
    (folder / "tune.toml").write_text('mode = "program"\nmetric_regex = "took ([0-9.]+) ms"\n'
                                      'run_args = ["--size", "7"]\n[tune.defines]\nUNROLL = [1, 2]\n')
    spec, tools = load_spec(folder / "prog.cu"), find_toolchain()
    space = tuning_space(spec, tools, TuneOptions(kernel=spec.source, only=("ptxas.opt_level",), objective="time"))

    def program(executable: bytes, args) -> RunResult:
        assert list(args) == ["--size", "7"], args  # its own arguments, nothing of the harness's
        unroll = int(re.search(rb"ciq-variant-UNROLL=(\d+);", executable).group(1))
        ms = (2.0 if unroll == 1 else 1.0) * random.uniform(0.995, 1.005)
        return RunResult(synthetic_result([]), b"", 0, False, 0.01, f"took {ms:.4f} ms\n")

    measurer = FakeMeasurer(program)
    target = TimingTarget(tools.nvcc, bundle_sources(spec), spec.arch, space, spec.fixed_define_args(), 120,
                          spec.run_args, spec.rtol, spec.atol, spec.metric_regex, True, StaticEvaluator("static", spec))
    workers = SharedWorkers(LocalWorkers)
    evaluator = TimeEvaluator(target, Store.open(f"sqlite:///{tmp_path}/p.db"), workers, measurer, finalists=1)
    request = TuneRequest(spec, space, "time", budget=4, search=SearchSettings("exhaustive"), batch_size=4,
                          simplify=False, ablate=False)
    store = Store.open(f"sqlite:///{tmp_path}/p.db")
    try:
        result = Tuner(request, store, tools, workers, SilentProgress(), evaluator).run()
    finally:
        store.close()
    assert not any(measurer.dumps), "a program was asked for --dump"
    assert result.confirmation is not None and not result.confirmation.keeps_baseline
    assert result.chosen.config["define.UNROLL"] == 2
    comparison = result.confirmation.winner.comparison
    assert comparison.estimate == pytest.approx(0.5, rel=0.02) and comparison.rounds == 10
    assert len(measurer.calls) >= 2 + 2 * 10 + 2 * 10  # screening, A/A and 10 rounds: one run a block
