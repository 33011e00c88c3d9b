"""Screening for runtime objectives: compile many candidates, measure few (compileiq.evaluate.screening).

The end-to-end tests run the real tuner, store (SQLite) and searcher with two fakes at the
process boundaries: the compiler (workers whose ptxas reports registers and spills as a known
function of the flags) and the GPU (an evaluator whose runtime is a known function of the flags
and of those static facts). Spills and lowered optimisation are slow in that world, as they
usually are on a GPU.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from compileiq.app import TuneOptions, tuning_space
from compileiq.build.compile import Build, BuildStatus, EntryResources, PtxResult
from compileiq.build.workers import VariantJob, VariantResult
from compileiq.core.records import RUNTIME_KIND, Trial, TrialState
from compileiq.core.space import Config
from compileiq.core.toolchain import find_toolchain
from compileiq.evaluate import eligibility, screening
from compileiq.evaluate.metrics import Evaluation, StaticEvaluator
from compileiq.evaluate.unscored import Unscored
from compileiq.search.searcher import SearchSettings
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.source.spec import KernelSpec
from compileiq.store import Store
from compileiq.tuning.progress import SilentProgress
from compileiq.tuning.request import TuneRequest
from compileiq.tuning.tuner import Tuner
from tests.helpers import TINY_KERNEL

ONLY = ("ptxas.opt_level", "ptxas.maxrregcount", "ptxas.def_load_cache", "ptxas.register_usage_level")
NATURAL_REGISTERS = 64  # what the fake ptxas allocates without a cap
CACHE_MS = {"default": 0.0, "ca": 0.05, "cg": -0.2, "cs": 0.1, "lu": 0.15, "cv": 0.3}
BEST_MS = 0.8  # -O3, loads cached at L2 only (cg), no spills


def facts(args: Sequence[str]) -> tuple[int, int, int, str]:
    """(opt level, registers, spill bytes, load cache) that the fake ptxas reports for its args."""
    values: dict[str, str] = {}
    for arg in args:
        name, _, value = arg.lstrip("-").partition("=")
        values.update({name: value} if value else {name[:1]: name[1:]})  # -O2: ("O", "2")
    level = int(values.get("O", 3))
    cap = int(values.get("maxrregcount", 255))
    registers = min(NATURAL_REGISTERS, cap)
    return level, registers, (NATURAL_REGISTERS - registers) * 8, values.get("def-load-cache", "default")


def runtime_ms(level: int, spill_bytes: int, cache: str) -> float:
    return 1.0 + 0.02 * spill_bytes + 0.3 * (3 - level) + CACHE_MS[cache]


class FakePtxas:
    """Workers whose builds report the facts above (register_usage_level changes nothing)."""

    description = "fake ptxas"

    def run(self, jobs: Sequence[VariantJob], more: object = None, before: object = None) -> Iterator[VariantResult]:
        for job in jobs:
            level, registers, spills, cache = facts(job.assemble.args)
            code = hashlib.sha256(repr((level, registers, spills, cache)).encode()).hexdigest()
            entry = EntryResources("scale", registers, spills // 2, spills - spills // 2, 0, 0, 0, 100)
            build = Build(BuildStatus.OK, "", (entry,), code, b"", 0.001)
            yield VariantResult(job.tag, PtxResult(BuildStatus.OK, b"", 0.001, ""), build, True)

    def build_executables(self, jobs: Sequence[Any]) -> list[Any]:
        raise AssertionError("the fake runtime evaluator builds no executable")

    def close(self) -> None:
        pass


def timed(evaluation: Evaluation) -> Evaluation:
    """The evaluation as the GPU evaluator records a timing (`evaluate.timing`: the runtime kind and
    its median), which a runtime study's every view holds its trials to."""
    if evaluation.value is None:
        return evaluation
    return Evaluation(evaluation.value, evaluation.reason,
                      {**evaluation.metrics, "kind": RUNTIME_KIND, "median_ms": evaluation.value})


class FakeGpu:
    """A runtime evaluator: static facts from the build, the time from `runtime_ms`; each
    machine code is measured once (as the measurement cache does)."""

    kind = "fake GPU"

    def __init__(self, kernel: KernelSpec) -> None:
        self._static = StaticEvaluator("static", kernel)
        self._times: dict[str, float] = {}
        self.measured: list[tuple[Config, dict[str, Any], float]] = []

    def evaluate(self, build: Build, config: Config) -> Evaluation:
        static = self._static.evaluate(build, config).metrics
        code = build.code_hash or ""
        if code not in self._times:
            level, _, spills, cache = facts(_ptxas_args(config))
            self._times[code] = runtime_ms(level, spills, cache)
            self.measured.append((config, static, self._times[code]))
        return timed(Evaluation(self._times[code], None, static))

    def measurements_to_best(self) -> int | None:
        return next((i + 1 for i, (_, _, ms) in enumerate(self.measured) if ms <= BEST_MS + 1e-9), None)


_SPACE: list[Any] = []


def _ptxas_args(config: Config) -> tuple[str, ...]:
    return _SPACE[0].ptxas_args(config)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> tuple[KernelSpec, Any, Any]:
    folder = tmp_path_factory.mktemp("scale")
    (folder / "scale.cu").write_text(TINY_KERNEL)
    (folder / "tune.toml").write_text('arch = "sm_90"\nblock_size = 256\n')
    spec, tools = load_spec(folder / "scale.cu"), find_toolchain()
    space = tuning_space(spec, tools, TuneOptions(kernel=spec.source, only=ONLY))
    _SPACE[:] = [space]
    return spec, space, bundle_sources(spec, tools.nvcc)


def tune(kernel: tuple[KernelSpec, Any, Any], folder: Path, seed: int,
         policy: screening.ScreeningPolicy | None, budget: int = 64) -> tuple[FakeGpu, list[Any]]:
    spec, space, bundle = kernel
    gpu = FakeGpu(spec)
    request = TuneRequest(spec, space, "time", budget=budget, search=SearchSettings("bayes", seed),
                          simplify=False, ablate=False, screening=policy)
    store = Store.open(f"sqlite:///{folder / f'seed{seed}-{policy is not None}.db'}")
    try:
        result = Tuner(request, store, find_toolchain(), FakePtxas, SilentProgress(), gpu, bundle).run()
    finally:
        store.close()
    return gpu, list(result.trials)


@pytest.mark.slow
def test_screening_reaches_the_fastest_flags_with_fewer_measurements(kernel: Any, tmp_path: Path) -> None:
    plain, screened = [], []
    for seed in range(4):
        gpu, _ = tune(kernel, tmp_path, seed, None)
        plain.append(gpu.measurements_to_best() or 10**6)
        gpu, _ = tune(kernel, tmp_path, seed, screening.ScreeningPolicy(factor=3))
        screened.append(gpu.measurements_to_best() or 10**6)
    print(f"measurements to the fastest flags, seeds 0-3: plain {plain}, screened {screened}")
    assert max(screened) < 10**6, "every screened run finds the fastest flags"
    assert statistics.median(screened) * 2 <= statistics.median(plain)


def test_a_refused_candidate_is_recorded_with_its_reason_and_never_measured(kernel: Any, tmp_path: Path) -> None:
    gpu, trials = tune(kernel, tmp_path, 0, screening.ScreeningPolicy(factor=3), budget=24)
    baseline = next(t for t in trials if t.config == _SPACE[0].default_config().as_dict())
    reference = eligibility.Reference.of(baseline, "time")  # the rules --objective time screens by
    assert reference is not None
    for config, static, _ in gpu.measured:
        assert eligibility.refusal(config.as_dict(), static, reference) is None, config
    refused = [t for t in trials if screening.is_screened(t)]
    assert refused, "the search proposed spilling or de-optimised configurations"
    measured = {config.key for config, _, _ in gpu.measured}
    for trial in refused:
        assert trial.state is TrialState.FAILED and not trial.retryable
        assert trial.config_key not in measured
        assert trial.reason.startswith("screened: ")
        assert "spill_bytes" in trial.metrics  # the static facts are kept as data
    spilling = [t for t in refused if t.metrics["spill_bytes"] > 0]
    assert spilling and all("adds spill bytes over the compiler defaults (0 -> " in t.reason for t in spilling)
    # the budget counts the trials that reached the GPU, not the screened ones
    assert sum(1 for t in trials if not screening.is_screened(t)) == 24


class SpillingPtxas(FakePtxas):
    """Every setting but the defaults spills: screening refuses whole batches."""

    def run(self, jobs: Sequence[VariantJob], more: object = None, before: object = None) -> Iterator[VariantResult]:
        for result in super().run(jobs):
            spills = 0 if not jobs[0].assemble.args and len(jobs) == 1 else 64
            entry = EntryResources("scale", 32, spills, 0, 0, 0, 0, 100)
            code = hashlib.sha256(f"{result.tag}-{spills}".encode()).hexdigest()
            build = Build(BuildStatus.OK, "", (entry,), code, b"", 0.001)
            yield VariantResult(result.tag, result.ptx, build, True)


def test_a_batch_screened_out_whole_does_not_end_the_run(kernel: Any, tmp_path: Path) -> None:
    spec, space, bundle = kernel
    request = TuneRequest(spec, space, "time", budget=4, search=SearchSettings("bayes", 0), batch_size=2,
                          simplify=False, ablate=False, screening=screening.ScreeningPolicy(factor=2))
    store = Store.open(f"sqlite:///{tmp_path / 'spilling.db'}")
    try:
        result = Tuner(request, store, find_toolchain(), SpillingPtxas, SilentProgress(), FakeGpu(spec), bundle).run()
    finally:
        store.close()
    refused = [t for t in result.trials if screening.is_screened(t)]
    assert not result.exhausted  # the space is far from spent: screening's bound ended the run
    assert len(refused) >= 2 * 4 and len(result.trials) - len(refused) == 1  # only the baseline measured


def _candidate(name: str, spills: int, occupancy: float, code: str, level: int = 3, ok: bool = True
               ) -> screening.Candidate:
    config = Config.of({"ptxas.opt_level": level, "name": name})
    build = Build(BuildStatus.OK if ok else BuildStatus.COMPILE_ERROR, "", (), code, b"", 0.0)
    metrics = {"spill_bytes": spills, "occupancy": occupancy}
    static = Evaluation(1.0, None, metrics) if ok else Evaluation(None, "compile_error: bad flag", {})
    return screening.Candidate(config, build, static)


REFERENCE = eligibility.Reference(0, 0.5, {"ptxas.opt_level": 3}, "time")  # --objective time screens by it


def test_select_refuses_by_the_static_rules_and_keeps_a_build_failure_as_it_is() -> None:
    candidates = [
        _candidate("spills", 12, 0.5, "a"),
        _candidate("occupancy", 0, 0.25, "b"),
        _candidate("lowered", 0, 0.5, "c", level=1),
        _candidate("broken", 0, 0.0, "", ok=False),
        _candidate("fine", 0, 0.5, "d"),
    ]
    selection = screening.select(candidates, REFERENCE, 8)
    reasons = {r.candidate.config["name"]: r.evaluation.reason for r in selection.rejected}
    assert reasons["spills"] == "screened: adds spill bytes over the compiler defaults (0 -> 12)"
    assert str(reasons["occupancy"]).startswith("screened: lowers occupancy")
    assert str(reasons["lowered"]).startswith("screened: lowers optimisation")
    assert reasons["broken"] == "compile_error: bad flag"
    assert [c["name"] for c in selection.measure] == ["fine"] and not selection.held
    assert all(r.evaluation.value is None for r in selection.rejected)


def test_select_measures_new_code_up_to_the_quota_by_the_static_prior() -> None:
    candidates = [
        _candidate("first", 0, 0.5, "x"),
        _candidate("better occupancy", 0, 0.75, "y"),
        _candidate("known code", 0, 0.5, "known"),
        _candidate("same code as first", 0, 0.5, "x"),
        _candidate("third", 0, 0.5, "z"),
    ]
    selection = screening.select(candidates, REFERENCE, 2, measured_codes={"known"})
    assert [c["name"] for c in selection.measure] == ["known code", "better occupancy", "first",
                                                      "same code as first"]
    assert [c["name"] for c in selection.held] == ["third"]


@pytest.mark.slow
def test_screening_with_the_real_compiler_measures_only_what_the_rules_allow(tmp_path: Path) -> None:
    """spill_heavy spills under its launch bounds: capped or de-optimised builds spill more and
    are refused before measuring; the measured ones are build-cache hits of the screening compile."""
    from compileiq.app import SharedWorkers
    from compileiq.build.workers import LocalWorkers

    path = Path(__file__).resolve().parent.parent / "kernels/spill_heavy/spill_heavy.cu"
    spec, tools = load_spec(path), find_toolchain()
    only = ("ptxas.opt_level", "ptxas.maxrregcount", "ptxas.override_directive_values")
    space = tuning_space(spec, tools, TuneOptions(kernel=path, only=only))
    _SPACE[:] = [space]

    class StaticGpu(FakeGpu):  # measures the static facts: this test is about who gets measured
        def evaluate(self, build: Build, config: Config) -> Evaluation:
            static = self._static.evaluate(build, config)
            self.measured.append((config, static.metrics, 0.0))
            return timed(static)

    gpu = StaticGpu(spec)
    request = TuneRequest(spec, space, "time", budget=9, search=SearchSettings("bayes", 0), simplify=False,
                          ablate=False, screening=screening.ScreeningPolicy(factor=3))
    store = Store.open(f"sqlite:///{tmp_path / 'real.db'}")
    try:
        tuner = Tuner(request, store, tools, SharedWorkers(LocalWorkers), SilentProgress(), gpu,
                      bundle_sources(spec, tools.nvcc))
        result = tuner.run()
    finally:
        store.close()
    refused = [t for t in result.trials if screening.is_screened(t)]
    assert any("adds spill bytes over the compiler defaults (672 -> " in (t.reason or "") for t in refused)
    measured = {config.key for config, _, _ in gpu.measured}
    assert len(measured) == 9 and not measured & {t.config_key for t in refused}
    assert result.counters.build_cache_hits == 8  # every measured variant but the baseline was compiled once


def test_a_candidate_of_other_macros_is_judged_against_its_own_tiling_and_a_lowered_level_is_repaired() -> None:
    baseline = {"define.TILE": 4, "ptxas.opt_level": 3}
    reference = eligibility.Reference(0, 0.5, baseline, "time")
    big_tile = Config.of({"define.TILE": 8, "ptxas.opt_level": 3, "name": "big tile"})
    assert screening.tiling(Config.of({**baseline, "name": "x"}), baseline) is None  # the baseline's macros
    tile = screening.tiling(big_tile, baseline)
    assert tile is not None and tile.as_dict() == {"define.TILE": 8, "ptxas.opt_level": 3}
    own = screening.tiling_reference(tile, Evaluation(1.0, None, {"spill_bytes": 0, "occupancy": 0.25}), reference)
    assert own is not None and own.occupancy == 0.25 and own.config == tile.as_dict()
    assert screening.tiling_reference(tile, Evaluation(None, "compile_error: x", {}), reference) is None
    found = [screening.Candidate(big_tile, Build(BuildStatus.OK, "", (), "big", b"", 0.0),
                                 Evaluation(1.0, None, {"spill_bytes": 0, "occupancy": 0.25})),
             _candidate("lowered", 0, 0.5, "low", level=1)]
    against_baseline = screening.select(found, reference, 8)
    assert [r.candidate.config["name"] for r in against_baseline.rejected] == ["big tile", "lowered"]
    judged = screening.select(found, reference, 8, references={big_tile.key: own})
    assert [c["name"] for c in judged.measure] == ["big tile"]  # its occupancy is its tile's
    repaired = screening.repairs(judged.rejected, {"ptxas.opt_level": 3})
    assert [c.as_dict() for c in repaired] == [{"ptxas.opt_level": 3, "name": "lowered"}]


def _unscored(spills: int) -> dict[str, object]:
    return {"unscored": {"spill_bytes": spills, "occupancy": 0.5, "spilling": ["other"] if spills else [],
                         "kernels": 1, "registers": {"other": 32}, "kernel_spill_bytes": {"other": spills},
                         "kernel_occupancy": {"other": 0.5}}}


def test_a_candidate_of_other_macros_is_held_to_its_tilings_unscored_kernels() -> None:
    """Review: a tiling's reference carried no unscored kernels, so under `--objective time` flags that
    made a kernel tune.toml's entries leave out spill were measured (and could win) for any macro values
    but the baseline's, while every view said those kernels were held."""
    baseline = {"define.TILE": 4, "ptxas.opt_level": 3}
    reference = eligibility.Reference(0, 0.5, baseline, "time", unscored=Unscored.of(_unscored(0)))
    tile = screening.tiling(Config.of({"define.TILE": 8, "ptxas.opt_level": 3}), baseline)
    assert tile is not None
    own = screening.tiling_reference(tile, Evaluation(1.0, None, {"spill_bytes": 0, "occupancy": 0.5, **_unscored(0)}),
                                     reference)
    assert own is not None
    capped = Config.of({"define.TILE": 8, "ptxas.opt_level": 3, "ptxas.maxrregcount": 32})
    found = [screening.Candidate(capped, Build(BuildStatus.OK, "", (), "capped", b"", 0.0),
                                 Evaluation(1.0, None, {"spill_bytes": 0, "occupancy": 0.5, **_unscored(96)}))]
    judged = screening.select(found, reference, 8, references={capped.key: own})
    assert not judged.measure, judged
    assert "adds spill bytes over the compiler defaults in kernels tune.toml's entries leave unscored" in str(judged.rejected[0].evaluation.reason), judged.rejected


class StaticStandIn(FakeGpu):
    """Measures a build's static score: these tests count what reaches the measurement."""

    def evaluate(self, build: Build, config: Config) -> Evaluation:
        static = self._static.evaluate(build, config)
        self.measured.append((config, static.metrics, static.value or 0.0))
        return timed(static)


@pytest.mark.parametrize("policy", [screening.ScreeningPolicy(), screening.ScreeningPolicy(tilings=False, repair=False)],
                         ids=["now", "before"])
def test_a_time_tune_of_sgemm_measures_its_whole_budget(policy: screening.ScreeningPolicy, tmp_path: Path) -> None:
    """On the H200, sgemm's run stopped at screening's bound with 3 of 16 trials measured: its other
    tile sizes were refused for less occupancy than the defaults' tile. With the real compiler, the
    tiles are now judged against their own builds and lowered levels repaired; the old policy still
    stops short (seed 0: 2 of 8), so this is the comparison, not a constant."""
    from compileiq.app import SharedWorkers
    from compileiq.build.workers import LocalWorkers

    path = Path(__file__).resolve().parent.parent / "kernels/sgemm/sgemm.cu"
    spec, tools = load_spec(path), find_toolchain()
    space = tuning_space(spec, tools, TuneOptions(kernel=path))
    gpu = StaticStandIn(spec)
    request = TuneRequest(spec, space, "time", budget=8, search=SearchSettings("bayes", 0), simplify=False,
                          ablate=False, screening=policy)
    store = Store.open(f"sqlite:///{tmp_path / 'sgemm.db'}")
    try:
        result = Tuner(request, store, tools, SharedWorkers(LocalWorkers), SilentProgress(), gpu,
                       bundle_sources(spec, tools.nvcc)).run()
    finally:
        store.close()
    measured = [t for t in result.trials if not screening.is_screened(t)]
    base = space.default_config().as_dict()
    other_tiles = [t for t in measured if any(t.config[k] != base[k] for k in base if k.startswith("define."))]
    if policy.tilings:
        assert len(measured) == 8 and result.stopped.startswith("budget"), result.stopped
        assert len({t.code_hash for t in measured}) >= 6
        assert any(t.metrics["occupancy"] < measured[0].metrics["occupancy"] for t in other_tiles)
    else:
        assert len(measured) < 8 and result.stopped.startswith("screened")


# -- review 49 F7: missing static metrics are a refusal, never zero spills ---------------------------


def _record(number: int, value: float, config: dict[str, Any], metrics: dict[str, Any], purpose: str = "search") -> Trial:
    return Trial(number, 1, number, f"k{number}", config, TrialState.COMPLETE, value, None, False, metrics,
                 f"code{number}", 0.1, datetime.now(UTC), datetime.now(UTC), "host:1", purpose)


_SHIPPED = {"ptxas.opt_level": 3, "ptxas.maxrregcount": 0}
_STRIPPED = {"registers": 32, "instructions": 80}  # spill_bytes and occupancy lost (an import, an edited row)


def test_screening_refuses_a_candidate_without_spill_bytes_instead_of_counting_none() -> None:
    baseline = _record(0, 1.0, _SHIPPED, {"spill_bytes": 16, "occupancy": 1.0, "registers": 64})
    reference = eligibility.Reference.of(baseline, "time")
    assert reference is not None
    candidate = screening.Candidate(Config.of({**_SHIPPED, "ptxas.maxrregcount": 32}),
                                    Build(BuildStatus.OK, "", (), "c1", b"", 0.001),
                                    Evaluation(1.0, None, {**_STRIPPED, "occupancy": 1.0}))
    reason = screening.verdict(candidate, reference.screening())
    assert reason == "screened: no static metrics to check it by (spill_bytes missing)"
    chosen = screening.select([candidate], reference.screening(), 4)
    assert chosen.measure == () and [r.evaluation.reason for r in chosen.rejected] == [reason]


def test_the_no_harm_rules_refuse_a_time_trial_whose_static_metrics_are_missing() -> None:
    baseline = _record(0, 1.0, _SHIPPED, {"spill_bytes": 16, "occupancy": 1.0})
    stripped = _record(1, 0.5, {**_SHIPPED, "ptxas.maxrregcount": 32}, dict(_STRIPPED))
    reference = eligibility.Reference.of(baseline, "time")
    assert reference is not None
    assert eligibility.refusal(stripped.config, stripped.metrics, reference.screening()) == \
        "no static metrics to check it by (spill_bytes, occupancy missing)"
    half = _record(2, 0.5, stripped.config, {**_STRIPPED, "occupancy": 1.0})  # spill_bytes alone lost
    assert eligibility.refusal(half.config, half.metrics, reference) == \
        "no static metrics to check it by (spill_bytes missing)"


def test_a_static_study_never_chooses_nor_lists_to_time_a_trial_without_spill_bytes() -> None:
    baseline = _record(0, 16000.0, _SHIPPED, {"spill_bytes": 16, "occupancy": 1.0})
    stripped = _record(1, 375.0, {**_SHIPPED, "ptxas.maxrregcount": 32}, {**_STRIPPED, "occupancy": 0.375})
    refuse = eligibility.study_refusal(baseline, "static", True)
    assert refuse(stripped) == "no static metrics to check it by (spill_bytes missing)"
    assert eligibility.choose([baseline, stripped], baseline, refuse) is baseline
    assert eligibility.candidates_to_time([baseline, stripped], baseline, baseline, "static") == ()
