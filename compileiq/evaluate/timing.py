"""Evaluate variants by their GPU runtime: executable -> measurement cache -> GPU -> output check,
and confirm the fastest against the baseline before anything is crowned.

Screening runs each variant once with the harness's `--quick` protocol; the baseline's outputs are
the reference every variant must match (rtol/atol from tune.toml; NaN never passes). After the
search, the finalists are re-measured against the baseline in interleaved rounds (stats.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from compileiq.build.compile import Build, ExecutableBuild, ExecutableJob
from compileiq.build.workers import Workers
from compileiq.core.errors import CompileIQError
from compileiq.core.records import MEASURED_ON_KEY, RUNTIME_KIND, Measurement, Trial, TrialState
from compileiq.core.space import Config, SearchSpace
from compileiq.evaluate.confirm import (
    FINALISTS,
    Candidate,
    Confirmation,
    block_sampler,
    choose_finalists,
    confirm,
    confirmation_runs,
)
from compileiq.evaluate.measure import Measurer, RunResult, compare_outputs, program_time
from compileiq.evaluate.metrics import Evaluation, StaticEvaluator
from compileiq.evaluate.stats import Sampler
from compileiq.evaluate.timed_key import timed_key, trial_timed_key

SCREEN_ARGS = ("--quick",)
_TIMING_ONLY_CHEAPER = "; after each build's first, runs that only time take less"  # --timing-only blocks
SCREEN_TIMEOUT_S = 30.0  # the process start and input generation dominate, not the ~0.1 s of samples


class TimingError(CompileIQError):
    """The baseline cannot be measured, so no variant can be judged."""


@dataclass(frozen=True)
class TimingTarget:
    """Everything a variant's executable is built from."""

    nvcc: str
    bundle: Any  # kernel.SourceBundle
    arch: str
    space: SearchSpace
    fixed_defines: tuple[str, ...]
    timeout_s: float
    run_args: tuple[str, ...]
    rtol: float
    atol: float
    program_regex: str | None  # program mode: the metric's regex (None: a JSON line with time_ms)
    program: bool
    static: StaticEvaluator  # spills, registers... are recorded beside each runtime
    ptx_arch: str | None = None  # `KernelSpec.ptx_arch`: the machine code's PTX is compiled for it


class TimeEvaluator:
    """Screens each distinct machine code once; results are cached in the database per device."""

    def __init__(self, target: TimingTarget, store: Any, workers: Callable[[], Workers], measurer: Measurer,
                 confirm_on: Measurer | None = None, finalists: int = FINALISTS) -> None:
        """`measurer` screens (a MeasurerPool spreads runs over GPUs); `confirm_on`, one GPU for
        every interleaved confirmation round (default: `measurer`); `finalists`: how many of the
        fastest screened codes are confirmed against the baseline."""
        self._target = target
        self._store = store
        self._workers = workers
        self._measurer = measurer
        self._confirm_on = confirm_on or measurer
        self._finalists = finalists
        self._reference: RunResult | None = None
        self._reference_of: tuple[str, bytes] | None = None  # the baseline's config key and executable, until its trial
        self._executables: dict[str, bytes] = {}  # timed key -> executable, kept for confirmation
        self._unbuilt: dict[str, str] = {}  # timed key -> why its executable did not build (`build_batch`)
        self.driver = ""

    @property
    def kind(self) -> str:
        return self._measurer.device

    def prepare(self, baseline: Config) -> None:
        """Measure the baseline first: its outputs are the reference and it names the device."""
        executable = self._build(baseline)
        if isinstance(executable, str):
            raise TimingError(f"the baseline's measuring executable does not build: {executable}")
        run = self._run(executable, SCREEN_ARGS)
        if self._value(run) is None:
            raise TimingError(f"the baseline cannot be measured: {self._failure(run) or 'the program printed no time'}")
        self._reference = run
        self._reference_of = (baseline.key, executable)
        self.driver = run.harness.driver

    def evaluate(self, build: Build, config: Config) -> Evaluation:
        if not build.ok or build.code_hash is None:
            return Evaluation(None, f"{build.status.value}: {build.message}", {})
        static = self._target.static.evaluate(build, config).metrics
        key = timed_key(build.code_hash, config.as_dict())
        cached = self._store.get_measurement(key, self.kind, self.driver, self._args_hash())
        if cached is not None:
            return _from_measurement(cached, static)
        if self._reference is not None and self._reference_of is not None and self._reference_of[0] == config.key:
            self._executables[key] = self._reference_of[1]  # run in `prepare`: its screening run
            self._reference_of = None  # is that run, not built or run twice
            return self._screened(self._reference, key, static)
        executable = self._executables.get(key) or self._unbuilt.get(key) or self._build(config)
        if isinstance(executable, str):
            return Evaluation(None, f"measuring executable does not build: {executable}", static)
        self._executables[key] = executable
        return self._screen(executable, key, static)

    def build_batch(self, variants: Sequence[tuple[Build, Config]]) -> None:
        """Build the measuring executables of a batch about to be measured, all at once on the
        workers, so that the GPU then measures them back to back instead of waiting on nvcc
        before each (a variant whose runtime is cached, or whose executable is built, is skipped)."""
        wanted: dict[str, Config] = {}
        for build, config in variants:
            if not build.ok or build.code_hash is None:
                continue
            key = timed_key(build.code_hash, config.as_dict())
            if key in wanted or key in self._executables or key in self._unbuilt:
                continue
            if self._store.get_measurement(key, self.kind, self.driver, self._args_hash()) is None:
                wanted[key] = config
        if len(wanted) < 2:  # one is built where it is measured
            return
        built = self._workers().build_executables([self._job(c) for c in wanted.values()])
        for key, result in zip(wanted, built):
            outcome = _executable_or_complaint(result)
            if isinstance(outcome, bytes):
                self._executables[key] = outcome
            else:
                self._unbuilt[key] = outcome

    def executable(self, trial: Trial) -> bytes:
        """The executable of a finished trial (rebuilt when it came from the cache)."""
        key = timed_key(trial.code_hash or "", trial.config)
        if key not in self._executables:
            built = self._build(Config.of(trial.config))
            if isinstance(built, str):
                raise TimingError(f"trial #{trial.number}: measuring executable does not build: {built}")
            self._executables[key] = built
        return self._executables[key]

    def confirm(self, trials: Sequence[Trial], baseline: Trial, seed: int = 0,
                note: Callable[[str], None] | None = None) -> Confirmation:
        """Re-measure the fastest screened variants against the baseline, interleaved; `note`
        hears what it will cost (runs, and time at the baseline's run time) and each outcome."""
        candidates = [Candidate(t.number, timed_key(t.code_hash, t.config), t.value, True)
                      for t in trials if t.state is TrialState.COMPLETE and t.value is not None and t.code_hash]
        finalists = choose_finalists(candidates, trial_timed_key(baseline), self._finalists)
        by_number = {t.number: t for t in trials}
        base, samples = self._sampler(self.executable(baseline))
        pairs = [(c, self._sampler(self.executable(by_number[c.trial]))[0]) for c in finalists]
        if note is not None and finalists and self._reference is not None:
            fewest, most = confirmation_runs(len(finalists))
            each = self._reference.seconds
            note(f"confirming {len(finalists)} finalist{'s' * (len(finalists) > 1)}: {fewest} to {most} runs of the "
                 f"measuring program, about {fewest * each / 60:.1f} to {most * each / 60:.1f} min at "
                 f"{each:.1f} s a run (the baseline's{'' if self._target.program else _TIMING_ONLY_CHEAPER})")
        return confirm(base, pairs, samples=samples, seed=seed, note=note)

    def _sampler(self, executable: bytes) -> tuple[Sampler, int]:
        target = self._target
        return block_sampler(self._confirm_on, executable, target.run_args, target.program, target.program_regex)

    def _screen(self, executable: bytes, code_hash: str, static: dict[str, Any]) -> Evaluation:
        return self._screened(self._run(executable, SCREEN_ARGS), code_hash, static)

    def _screened(self, run: RunResult, code_hash: str, static: dict[str, Any]) -> Evaluation:
        """A screening run judged: its time, unless it failed or its outputs differ from the reference's."""
        value = self._value(run)
        if value is None:
            reason = self._failure(run) or "the program printed no time"
            self._remember(code_hash, run, reason)
            return Evaluation(None, reason, static)
        check = self._check(run)
        if check is not None:
            self._remember(code_hash, run, check)
            return Evaluation(None, check, static)
        self._remember(code_hash, run, "ok")
        return Evaluation(value, None, {**static, **_timing(run, value)})

    def _value(self, run: RunResult) -> float | None:
        if self._target.program:
            return program_time(run, self._target.program_regex)
        return run.harness.median_ms if run.failure is None else None

    def _failure(self, run: RunResult) -> str | None:
        """Why a run gave no time: a program is judged by its exit, a harness by its report."""
        if not self._target.program:
            return run.failure
        if run.timed_out:
            return f"timeout: killed after {run.seconds:.1f} s"
        return f"the program exited with code {run.returncode}" if run.returncode else None

    def _check(self, run: RunResult) -> str | None:
        reference = self._reference
        if self._target.program or reference is None:
            return None
        check = compare_outputs(reference.dump, reference.harness.outputs, run.dump, run.harness.outputs,
                                self._target.rtol, self._target.atol)
        return None if check.passed else check.reason

    def _remember(self, code_hash: str, run: RunResult, status: str) -> None:
        samples = tuple(s / 1000.0 for s in run.harness.samples_ms)
        value = self._value(run)
        self._store.put_measurement(Measurement(
            code_hash=code_hash, device=self.kind, driver=self.driver, harness_args_hash=self._args_hash(),
            samples=samples, median=(value or 0.0) / 1000.0, iqr=(run.harness.iqr_ms or 0.0) / 1000.0,
            min=(run.harness.min_ms or 0.0) / 1000.0, clocks=tuple(float(c) for c in run.harness.clocks_mhz),
            status=status,
        ))  # fmt: skip

    def _run(self, executable: bytes, extra: Sequence[str]) -> RunResult:
        program = self._target.program  # a program gets its own arguments alone: no harness option, no --dump
        args = [*self._target.run_args] if program else [*self._target.run_args, *extra]
        return self._measurer.measure(executable, args, SCREEN_TIMEOUT_S, dump=not program)

    def _build(self, config: Config) -> bytes | str:
        """The executable, or the compiler's first line of complaint."""
        (built,) = self._workers().build_executables([self._job(config)])
        return _executable_or_complaint(built)

    def _job(self, config: Config) -> ExecutableJob:
        target, space = self._target, self._target.space
        return ExecutableJob(target.nvcc, target.bundle, target.arch, (*space.frontend_args(config), *target.fixed_defines),
                             space.ptxas_args(config), target.timeout_s, ptx_arch=target.ptx_arch)

    def _args_hash(self) -> str:
        args = [*self._target.run_args, *([] if self._target.program else SCREEN_ARGS)]
        return hashlib.sha256(json.dumps(args).encode()).hexdigest()[:16]


def _executable_or_complaint(built: ExecutableBuild) -> bytes | str:
    if not built.ok:
        lines = built.message.strip().splitlines()
        return lines[0] if lines else built.status.value
    return built.executable


def _timing(run: RunResult, value: float) -> dict[str, Any]:
    """A screening run's timing metrics: the harness's report, or a program's one printed time
    (a program reports no spread, no minimum and no device: None there failed the metric ranges,
    and every program-mode trial was skipped when the study was read back)."""
    harness = run.harness
    spread = ({"iqr_ms": harness.iqr_ms, "min_ms": harness.min_ms, "device": harness.device,
               "graph_batch": harness.graph_batch} if harness.median_ms is not None else {})
    return {"kind": RUNTIME_KIND, "median_ms": value, "samples": len(harness.samples_ms) or 1, **spread,
            **({MEASURED_ON_KEY: run.where} if run.where else {})}


def _from_measurement(cached: Measurement, static: dict[str, Any]) -> Evaluation:
    if cached.status != "ok":
        return Evaluation(None, cached.status, static)
    timing = {"kind": RUNTIME_KIND, "median_ms": cached.median * 1000, "iqr_ms": cached.iqr * 1000,
              "min_ms": cached.min * 1000, "samples": len(cached.samples), "device": cached.device}
    return Evaluation(cached.median * 1000, None, {**static, **timing})


class HarnessTiming:
    """The gate's timing source: the kernel's harness built with the ACF's flags and as the
    baseline the gate's rules judge against (the compiler defaults with tune.toml's first macro
    values, or the build an ACF's [baseline] records as shipped), sampled on this machine's GPU."""

    def __init__(self, measurer: Measurer | None = None) -> None:
        from compileiq.evaluate.measure import LocalMeasurer

        self._measurer = measurer or LocalMeasurer()

    def samplers(self, target: Any, baseline: Any) -> Any:
        """`baseline`: its `frontend_args` and `ptxas_args` (gating's `Defaults`)."""
        from concurrent.futures import ThreadPoolExecutor

        from compileiq.build.compile import build_executable
        from compileiq.core.toolchain import find_toolchain
        from compileiq.evaluate.stats import TimingSamplers
        from compileiq.source.kernel import bundle_sources

        acf, spec = target.acf, target.spec  # the kernel's own settings; the ACF is built with its base flags
        tools, bundle = find_toolchain(), bundle_sources(spec)
        acf_bundle = bundle if target.built_spec is spec else bundle_sources(target.built_spec)
        jobs = {
            "acf": ExecutableJob(tools.nvcc, acf_bundle, acf.arch, (*acf.frontend_args, *spec.fixed_define_args()),
                                 acf.ptxas_args, spec.compile_timeout_s, ptx_arch=acf.ptx_arch()),
            "default": ExecutableJob(tools.nvcc, bundle, acf.arch, (*baseline.frontend_args, *spec.fixed_define_args()),
                                     baseline.ptxas_args, spec.compile_timeout_s, ptx_arch=acf.ptx_arch()),
        }
        with ThreadPoolExecutor(len(jobs)) as pool:  # both at once
            built = dict(zip(jobs, pool.map(build_executable, jobs.values()), strict=True))
        for name, result in built.items():
            if not result.ok:
                raise TimingError(f"{target.acf_label}: the {name} build of the harness fails: {result.message[:200]}")
        objective = acf.objective  # the confirmation's median of the chosen build; else its screening run
        key = "confirmed_median" if "confirmed_median" in objective else "best"
        recorded = objective.get(key) if objective.get("name") == "time" else None
        sample = {name: block_sampler(self._measurer, result.executable, spec.run_args, spec.mode == "program",
                                      spec.metric_regex) for name, result in built.items()}
        return TimingSamplers(sample["acf"][0], sample["default"][0], float(recorded) if recorded else None,
                              f"objective.{key}", sample["acf"][1])

