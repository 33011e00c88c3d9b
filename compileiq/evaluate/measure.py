"""Run a measuring executable and read its result: the harness's JSON line, its output dump.

A variant runs as its own process group with a timeout, so a crash or a hang never takes the
tuner down. `Measurer` is the one-method plug-in the tuner times through; `LocalMeasurer` runs
on this machine's GPU, `FakeMeasurer` replays scripted results in tests.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from compileiq.core.processes import run_tool, scratch_dir
from compileiq.source.harness import harness_include_dir

HARNESS_KEY = "compileiq_harness"
STATUSES = ("ok", "error", "check_failed", "unwritten_output")
QUICK_ARGS = ("--quick",)  # screening: ~0.1 s of samples
TIMING_ONLY = "--timing-only"  # confirmation blocks: samples alone, no output verified (and no --dump)
SCREEN_TIMEOUT_S = 3.0


def include_dir() -> Path:
    """The directory to pass to nvcc as -I for `#include <compileiq/harness.cuh>`."""
    return harness_include_dir()


@dataclass(frozen=True)
class OutputInfo:
    name: str
    dtype: str  # a numpy dtype name: float32, float64, int32, uint32, int8, float16
    count: int
    sha256: str


@dataclass(frozen=True)
class HarnessCheck:
    run: bool = False
    passed: bool | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None


@dataclass(frozen=True)
class HarnessResult:
    """One harness run as it reported itself (times in milliseconds)."""

    status: str
    message: str = ""
    device: str = ""
    driver: str = ""
    samples_ms: tuple[float, ...] = ()
    clocks_mhz: tuple[int, ...] = ()
    dropped_low_clock: int = 0
    median_ms: float | None = None
    iqr_ms: float | None = None
    min_ms: float | None = None
    graph_batch: int = 0
    sm_clock_default_mhz: int | None = None
    outputs: tuple[OutputInfo, ...] = ()
    check: HarnessCheck = field(default_factory=HarnessCheck)
    phases_ms: tuple[tuple[str, float], ...] = ()  # where the process's wall time went, in order

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.median_ms is not None


@dataclass(frozen=True)
class RunResult:
    harness: HarnessResult
    dump: bytes
    returncode: int | None
    timed_out: bool
    seconds: float
    stdout: str = ""  # the program's own output (program mode reads its metric from it)
    where: str = ""  # the GPU that ran it: "IP/node-id GPU n" on Ray, "GPU n" locally

    @property
    def failure(self) -> str | None:
        """Why this run gives no timing (None when it does)."""
        if self.timed_out:
            return f"timeout: killed after {self.seconds:.1f} s"
        if self.returncode is not None and self.returncode < 0:
            return f"crashed: killed by signal {-self.returncode} ({self.harness.message or 'no result'})"
        if not self.harness.ok:
            return f"{self.harness.status}: {self.harness.message or 'no message'}"
        return None


@dataclass(frozen=True)
class OutputCheck:
    passed: bool
    max_abs_err: float
    max_rel_err: float
    reason: str


def parse_harness_output(stdout: str) -> HarnessResult:
    """The last line of `stdout` that is a harness JSON object; never raises."""
    for line in reversed(stdout.splitlines()):
        data = _json_object(line)
        if data is not None and HARNESS_KEY in data:
            try:
                return _harness_result(data)
            except (TypeError, ValueError, KeyError, AttributeError) as error:
                return HarnessResult("error", f"malformed harness result: {error}")
    tail = stdout.strip().splitlines()[-1:] or ["(no output)"]
    return HarnessResult("error", f"no harness result in the output; last line: {tail[0][:300]}")


def _json_object(line: str) -> dict[str, Any] | None:
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _harness_result(data: dict[str, Any]) -> HarnessResult:
    status = str(data.get("status", "error"))
    check = data.get("check") or {}
    return HarnessResult(
        status=status if status in STATUSES else "error",
        message=str(data.get("message", "")),
        device=str(data.get("device", "")),
        driver=str(data.get("driver", "")),
        samples_ms=tuple(float(v) for v in data.get("samples_ms") or ()),
        clocks_mhz=tuple(int(v) for v in data.get("clocks_mhz") or ()),
        dropped_low_clock=int(data.get("dropped_low_clock") or 0),
        median_ms=_number(data.get("median_ms")),
        iqr_ms=_number(data.get("iqr_ms")),
        min_ms=_number(data.get("min_ms")),
        graph_batch=int(data.get("graph_batch") or 0),
        sm_clock_default_mhz=_int_or_none(data.get("sm_clock_default_mhz")),
        outputs=tuple(OutputInfo(str(o["name"]), str(o["dtype"]), int(o["count"]), str(o.get("sha256", "")))
                      for o in data.get("outputs") or ()),
        check=HarnessCheck(bool(check.get("run", False)), check.get("passed"),
                           _number(check.get("max_abs_err")), _number(check.get("max_rel_err"))),
        phases_ms=tuple((str(name), float(ms)) for name, ms in (data.get("phases_ms") or {}).items()),
    )


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


_JSON_TIME_KEY = "time_ms"


def parse_program_metric(stdout: str, regex: str | None = None) -> float | None:
    """Program mode: the first group of `regex`, else the last JSON line's "time_ms"."""
    if regex:
        match = re.search(regex, stdout, re.MULTILINE)
        return _float(match.group(1) if match and match.groups() else None)
    for line in reversed(stdout.splitlines()):
        data = _json_object(line)
        if data is not None and _JSON_TIME_KEY in data:
            return _float(data[_JSON_TIME_KEY])
    return None


def program_time(run: RunResult, regex: str | None = None) -> float | None:
    """Program mode: the time a run printed (`parse_program_metric`), if it exited cleanly."""
    return parse_program_metric(run.stdout, regex) if run.returncode == 0 else None


def _float(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def run_executable(
    executable: bytes, args: Sequence[str], timeout_s: float, *, dump: bool = True,
    env: Mapping[str, str] | None = None,
) -> RunResult:
    """Write `executable` to a scratch folder and run it with `args` (+ --dump); kill its group on
    timeout. The folder (`scratch_dir`: its executable and its whole output dump) goes with this
    process even when it is killed, like a compile's."""
    with scratch_dir("run") as workdir:
        exe, dump_path = Path(workdir) / "variant", Path(workdir) / "outputs.bin"
        exe.write_bytes(executable)
        exe.chmod(0o755)
        argv = [str(exe), *args, *(["--dump", str(dump_path)] if dump else [])]
        stdout, returncode, timed_out, seconds = _run(argv, timeout_s, workdir, env)
        dumped = dump_path.read_bytes() if dump and dump_path.exists() else b""
    harness = parse_harness_output(stdout)
    return RunResult(harness, dumped, returncode, timed_out, seconds, stdout)


def _run(
    argv: list[str], timeout_s: float, cwd: str, env: Mapping[str, str] | None
) -> tuple[str, int | None, bool, float]:
    run = run_tool(argv, timeout_s, cwd, env=env, with_stderr=False)
    return run.output, run.returncode, run.timed_out, run.seconds


def compare_outputs(
    baseline_dump: bytes, baseline_outputs: Sequence[OutputInfo],
    variant_dump: bytes, variant_outputs: Sequence[OutputInfo], rtol: float, atol: float,
) -> OutputCheck:
    """Variant against baseline: |v - b| <= atol + rtol·|b| everywhere; NaN never passes."""
    shapes = [(o.name, o.dtype, o.count) for o in baseline_outputs]
    if shapes != [(o.name, o.dtype, o.count) for o in variant_outputs]:
        return OutputCheck(False, math.inf, math.inf, "outputs differ in name, dtype or count")
    try:
        pairs = list(zip(_arrays(baseline_dump, baseline_outputs), _arrays(variant_dump, variant_outputs),
                         strict=True))
    except ValueError as error:
        return OutputCheck(False, math.inf, math.inf, str(error))
    worst_abs = worst_rel = 0.0
    for info, (base, variant) in zip(baseline_outputs, pairs, strict=True):
        passed, abs_err, rel_err = _close(base, variant, rtol, atol)
        worst_abs, worst_rel = max(worst_abs, abs_err), max(worst_rel, rel_err)
        if not passed:
            return OutputCheck(False, worst_abs, worst_rel,
                               f"wrong result: output {info.name} max rel err {rel_err:.3g}")
    return OutputCheck(True, worst_abs, worst_rel, "")


def _arrays(dump: bytes, outputs: Sequence[OutputInfo]) -> list[np.ndarray]:
    arrays, offset = [], 0
    for info in outputs:
        try:
            dtype = np.dtype(info.dtype)
        except TypeError:
            raise ValueError(f"output {info.name} has an unknown dtype {info.dtype!r}") from None
        size = dtype.itemsize * info.count
        if offset + size > len(dump):
            raise ValueError(f"the output dump is too short for {info.name}")
        arrays.append(np.frombuffer(dump, dtype=dtype, count=info.count, offset=offset))
        offset += size
    if offset != len(dump):
        raise ValueError("the output dump is longer than its outputs")
    return arrays


def _close(base: np.ndarray, variant: np.ndarray, rtol: float, atol: float) -> tuple[bool, float, float]:
    b, v = base.astype(np.float64), variant.astype(np.float64)
    if b.size == 0:
        return True, 0.0, 0.0
    if np.isnan(b).any() or np.isnan(v).any():
        return False, math.inf, math.inf
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(b == v, 0.0, np.abs(v - b))  # equal infinities differ by 0
    rel = diff / np.maximum(np.abs(b), np.finfo(np.float64).tiny)
    abs_err, rel_err = float(np.max(diff)), float(np.max(rel))
    passed = bool(np.all(diff <= atol + rtol * np.abs(b)))
    return passed, abs_err, rel_err


class Measurer(Protocol):
    """Times one executable on one GPU (one call at a time)."""

    @property
    def device(self) -> str: ...

    def measure(self, executable: bytes, args: Sequence[str], timeout_s: float, *, dump: bool = True) -> RunResult:
        """Run it; `dump`: ask a harness for its outputs (--dump); a program gets its own arguments alone."""
        ...


def gpu_count() -> int:
    """How many GPUs `nvidia-smi -L` lists on this machine (0 without a driver)."""
    listing = run_tool(["nvidia-smi", "-L"], 20, with_stderr=False)
    if listing.returncode != 0 or listing.timed_out:
        return 0
    return sum(line.startswith("GPU ") for line in listing.output.splitlines())


def gpu_visible() -> bool:
    """True when `nvidia-smi -L` lists a GPU on this machine."""
    return gpu_count() > 0


class LocalMeasurer:
    """Runs variants on this machine's GPU: `gpu` pins one (CUDA_VISIBLE_DEVICES), else the
    process's own visibility applies (as set by Ray for an actor that holds a GPU)."""

    def __init__(self, gpu: int | None = None, device: str = "local GPU") -> None:
        self._env = {"CUDA_VISIBLE_DEVICES": str(gpu)} if gpu is not None else None
        self._where = f"GPU {gpu}" if gpu is not None else ""
        self._device = device

    @property
    def device(self) -> str:
        return self._device

    def measure(self, executable: bytes, args: Sequence[str], timeout_s: float, *, dump: bool = True) -> RunResult:
        result = run_executable(executable, args, timeout_s, dump=dump, env=self._env)
        if result.harness.device:
            self._device = result.harness.device
        return replace(result, where=self._where)


def synthetic_result(samples_ms: Sequence[float], status: str = "ok",
                     outputs: Sequence[OutputInfo] = (), device: str = "fake GPU") -> HarnessResult:
    """A HarnessResult as a real run would report `samples_ms` (for fakes and tests)."""
    values = sorted(samples_ms)
    q = np.quantile(values, [0.25, 0.5, 0.75]) if values else [math.nan] * 3
    return HarnessResult(
        status=status, device=device, driver="fake", samples_ms=tuple(samples_ms),
        median_ms=float(q[1]) if values else None, iqr_ms=float(q[2] - q[0]) if values else None,
        min_ms=values[0] if values else None, outputs=tuple(outputs),
    )


Script = Callable[[bytes, Sequence[str]], RunResult]


class FakeMeasurer:
    """A Measurer for tests: answers from a script `(executable, args) -> RunResult`."""

    def __init__(self, script: Script, device: str = "fake GPU") -> None:
        self._script = script
        self._device = device
        self.calls: list[tuple[bytes, tuple[str, ...]]] = []
        self.dumps: list[bool] = []  # whether each call asked for the outputs (--dump)

    @property
    def device(self) -> str:
        return self._device

    def measure(self, executable: bytes, args: Sequence[str], timeout_s: float, *, dump: bool = True) -> RunResult:
        self.calls.append((executable, tuple(args)))
        self.dumps.append(dump)
        return self._script(executable, args)
