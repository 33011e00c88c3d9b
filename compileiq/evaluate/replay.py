"""Recorded GPU runtimes as a measurer, for benchmarks and tests only: a `ReplayMeasurer` answers
each run from a brute-forced landscape (a Kernel Tuner cache file, e.g. the FAIR Benchmark Hub's),
so the real `--objective time` loop (screening, output checks, confirmation) runs without a GPU.

Every result is labelled as a replay: the device (the evaluator's kind, filed with each
measurement and in the ACF) is ``replay:<file>``. The CLI's `tune` never builds one; the Python
entry point is `compileiq.app.tune(..., measurers=[ReplayMeasurer(...)])`.

A configuration reaches the measurer inside its executable: the stand-in kernel (`stand_in_source`)
compiles its macros' values into a marker string, which the measurer reads back and looks up by
the landscape's parameter order (cache keys like ``"16,1,1,1,0,0,0,1,15,15"``). A configuration
the landscape lacks, or recorded as failed, is a failed launch. Samples are drawn with
replacement (seeded) from the configuration's steady-state timings (`Landscape.timed`: its recorded
``times`` less the first, a cold launch; a cache that kept only each configuration's ``time``
replays that one value: no noise); outputs are one fixed dump, so every output check passes.

Why the first timing is left out: Kernel Tuner records the first launch of a configuration among
its ``times``, and it is a cold one. On the FAIR Benchmark Hub's convolution it is the slowest of
the 32 in 98% of the A100's configurations (4,134 of 4,201; a median 6% above the configuration's
median, up to 81%) and in 67% of the A4000's. compileiq's harness never times such a launch: it
runs warm-up launches first (design: at least one, and 25 ms on the first variant). A replay that
drew it would add a noise no real measurement has.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from compileiq.core.errors import UsageError
from compileiq.evaluate.measure import HarnessResult, OutputInfo, RunResult, synthetic_result

MAX_LANDSCAPE_BYTES = 512 << 20  # decompressed
_MARKER = re.compile(rb"ciq-replay-key:([0-9A-Za-z_.+,-]{1,400});")
Field = int | str  # one value of a cache key: an integer, else its text as the key spells it ("alg_2", "True", "2.45")
_INTEGER = re.compile(r"-?[0-9]+")
_OUTPUT = OutputInfo("y", "float32", 4, "")
_DUMP = b"\x00\x00\x80\x3f" * 4
QUICK_SAMPLES = 10
WARMUP = 1  # leading recorded timings per configuration that are cold launches (not replayed)
FAILED_TIME = 1e20  # Kernel Tuner's time of a configuration that failed (older caches)


class LandscapeError(UsageError):
    """A landscape file that cannot be read as a Kernel Tuner cache."""


@dataclass(frozen=True)
class Landscape:
    """A brute-forced space: per configuration (values in `parameters` order) its recorded
    times in ms, or () when it failed, and what recording it cost (compile and benchmark, ms)."""

    name: str  # the file's name: what every replayed result is labelled with
    device: str  # the GPU it was recorded on
    parameters: tuple[str, ...]
    times: Mapping[tuple[Field, ...], tuple[float, ...]]
    costs_ms: Mapping[tuple[Field, ...], float] = field(default_factory=dict)  # compile_time + benchmark_time
    values: Mapping[str, tuple[Field, ...]] = field(default_factory=dict)  # the cache's `tune_params` ({}: not given)

    @property
    def repeated(self) -> bool:
        """Whether configurations were timed more than once (else a replay's draws have no noise)."""
        return any(len(t) > 1 for t in self.times.values())

    def mean(self, values: Sequence[Field]) -> float | None:
        """The mean of all the recorded times (the cache's `time`: what the search is judged on)."""
        found = self.times.get(tuple(values))
        return sum(found) / len(found) if found else None

    def timed(self, values: Sequence[Field]) -> tuple[float, ...]:
        """The timings a warmed-up harness would see: the recorded times less the first WARMUP
        (cold launches), or the one timing of a cache that kept one; () when failed or missing."""
        found = self.times.get(tuple(values), ())
        return found[WARMUP:] if len(found) > WARMUP else found

    def steady_mean(self, values: Sequence[Field]) -> float | None:
        """The mean of `timed`: a configuration's steady-state time."""
        found = self.timed(values)
        return sum(found) / len(found) if found else None

    @property
    def best(self) -> float:
        return min(sum(t) / len(t) for t in self.times.values() if t)


def read_cache(path: Path) -> Any:
    """A Kernel Tuner cache file's JSON (``.json`` or ``.json.gz``, at most MAX_LANDSCAPE_BYTES
    decompressed); LandscapeError with one line otherwise."""
    try:
        opener: Any = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as handle:
            raw = handle.read(MAX_LANDSCAPE_BYTES + 1)
        if len(raw) > MAX_LANDSCAPE_BYTES:
            raise LandscapeError(f"{path}: larger than {MAX_LANDSCAPE_BYTES >> 20} MiB")
        return json.loads(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        raise LandscapeError(f"{path}: cannot read: {error}") from None
    except ValueError as error:
        raise LandscapeError(f"{path}: not a Kernel Tuner cache file: {str(error)[:120]}") from None


def load_landscape(path: Path) -> Landscape:
    """Read a Kernel Tuner cache (``.json`` or ``.json.gz``); LandscapeError with one line otherwise."""
    data = read_cache(path)
    try:
        parameters = tuple(str(p) for p in data["tune_params_keys"])
        times: dict[tuple[Field, ...], tuple[float, ...]] = {}
        costs: dict[tuple[Field, ...], float] = {}
        for key, entry in data["cache"].items():
            values = key_fields(str(key))
            if len(values) != len(parameters):
                raise ValueError(f"cache key {str(key)[:40]!r} has {len(values)} values for {len(parameters)} parameters")
            times[values] = _recorded_times(entry)
            costs[values] = sum(float(entry[k]) for k in ("compile_time", "benchmark_time")
                                if isinstance(entry.get(k), int | float) and math.isfinite(entry[k]) and entry[k] >= 0)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise LandscapeError(f"{path}: not a Kernel Tuner cache file: {str(error)[:120]}") from None
    return Landscape(path.name, str(data.get("device_name", "")), parameters, times, costs, _value_lists(data, parameters))


def key_fields(key: str) -> tuple[Field, ...]:
    """A cache key's values: each an integer, or its text (a string, bool or float parameter)."""
    return tuple(field_of(v) for v in key.split(","))


def field_of(value: object) -> Field:
    """A parameter's value as a cache key holds it: an integer, else the text Kernel Tuner's key
    writes (``str(value)``: "alg_2", "True", "2.45")."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value)
    return int(text) if _INTEGER.fullmatch(text) else text


def _recorded_times(entry: Any) -> tuple[float, ...]:
    """A cache entry's timings in ms: its ``times``, else its one ``time`` (a cache that kept one
    timing per configuration); () for a failed configuration (an error string, or Kernel Tuner's 1e20)."""
    time = entry.get("time")
    if not _a_time(time):
        return ()
    recorded = entry.get("times")
    if isinstance(recorded, list) and recorded and all(_a_time(t) for t in recorded):
        return tuple(float(t) for t in recorded)
    return (float(time),)


def _a_time(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and 0 < value < FAILED_TIME


def _value_lists(data: Mapping[str, Any], parameters: Sequence[str]) -> dict[str, tuple[Field, ...]]:
    """The cache's own value list of each parameter (``tune_params``), as integers; {} when it has
    none or one is not a list of integers (then only a tuning space file says what was tuned)."""
    tuned = data.get("tune_params")
    if not isinstance(tuned, Mapping) or any(not isinstance(tuned.get(p), list) or not tuned[p] for p in parameters):
        return {}
    if any(not isinstance(v, int | float | str) for p in parameters for v in tuned[p]):
        return {}
    return {p: tuple(field_of(v) for v in tuned[p]) for p in parameters}


class ReplayMeasurer:
    """A `Measurer` that answers from a recorded landscape (see the module docstring)."""

    def __init__(self, landscape: Landscape, seed: int = 0) -> None:
        self._landscape = landscape
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()
        self.runs = 0

    @property
    def device(self) -> str:
        return f"replay:{self._landscape.name}"

    def measure(self, executable: bytes, args: Sequence[str], timeout_s: float, *, dump: bool = True) -> RunResult:
        self.runs += 1
        match = _MARKER.search(executable)
        if match is None:
            return self._failed("no replay key in the executable: build the stand-in kernel (replay.stand_in_source)")
        key = key_fields(match.group(1).decode())
        recorded = self._landscape.timed(key)
        if not recorded:
            shown = ",".join(map(str, key))
            why = "recorded as failed" if key in self._landscape.times else "not in the landscape"
            return self._failed(f"replayed launch failed: configuration {shown} {why}")
        count = _samples(args)
        with self._lock:
            drawn = self._rng.choice(np.asarray(recorded), size=count, replace=True)
        result = synthetic_result([float(t) for t in drawn], outputs=[_OUTPUT], device=self.device)
        return RunResult(replace(result, driver="replay"), _DUMP, 0, False, 0.0, where=self.device)

    def _failed(self, message: str) -> RunResult:
        return RunResult(HarnessResult("error", message, device=self.device, driver="replay"), b"", 1, False, 0.0)


def _samples(args: Sequence[str]) -> int:
    if "--samples" in args:
        index = list(args).index("--samples")
        try:
            return max(1, min(int(args[index + 1]), 1000))
        except (IndexError, ValueError):
            return QUICK_SAMPLES
    return QUICK_SAMPLES


def stand_in_source(parameters: Sequence[str]) -> str:
    """A measuring-harness program whose executable carries its macros' values (the replay key,
    in the landscape's parameter order) and whose machine code differs per configuration (an
    immediate folded from them), so no two configurations share a build or a measurement."""
    names = [p for p in parameters if re.fullmatch(r"[A-Za-z_]\w*", p)]
    if len(names) != len(parameters) or not names:
        raise LandscapeError("landscape parameters must be macro names")
    key = ' "," '.join(f"CIQ_STR({n})" for n in names)
    folded = "0LL"
    for name in names:
        folded = f"({folded} * 1000003LL + (long long)({name}))"
    return f"""// A stand-in for a recorded landscape (compileiq.evaluate.replay): nothing here is the kernel.
#include <compileiq/harness.cuh>
#define CIQ_STR2(x) #x
#define CIQ_STR(x) CIQ_STR2(x)
extern "C" const char ciq_replay_key[] = "ciq-replay-key:" {key} ";";
__device__ long long ciq_sink;
__global__ void stand_in(float* y, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 1.0f;
  if (i == 0) ciq_sink = {folded};
}}
int main(int argc, char** argv) {{
  ciq::Harness h(argc, argv);
  auto y = h.output<float>("y", 4);
  h.launch([&](cudaStream_t s) {{ stand_in<<<1, 32, 0, s>>>(y.device(), 4); }});
  return h.run();
}}
"""


def tune_toml_of_t1(t1: Mapping[str, Any]) -> str:
    """A tune.toml of a T1 tuning space (the FAIR Benchmark Hub's format): its parameters as tuned
    macros (each default listed first) and its `Conditions` as restrictions."""
    space = t1["ConfigurationSpace"]
    lines = ["[tune]", "restrictions = ["]
    lines += [f"  {json.dumps(c['Expression'])}," for c in space.get("Conditions", [])]
    lines += ["]", "", "[tune.defines]"]
    for parameter in space["TuningParameters"]:
        values = parameter["Values"]
        values = json.loads(values) if isinstance(values, str) else list(values)
        default = parameter.get("Default", values[0])
        ordered = [default] + [v for v in values if v != default]
        lines.append(f"{parameter['Name']} = {json.dumps(ordered)}")
    return "\n".join(lines) + "\n"
