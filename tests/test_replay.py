"""The recorded-GPU measurer: the real `--objective time` loop (real nvcc builds of the stand-in,
screening, output checks, confirmation) answered from a brute-forced landscape, labelled as a
replay everywhere, with the kernel's restrictions in place."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest

from compileiq import app
from compileiq.cli import json_views, render
from compileiq.core.records import TrialState
from compileiq.evaluate.measure import RunResult
from compileiq.evaluate.replay import (
    LandscapeError,
    ReplayMeasurer,
    load_landscape,
    stand_in_source,
    tune_toml_of_t1,
)
from compileiq.evaluate.stats import Verdict
from compileiq.evaluate.timing import HarnessTiming
from compileiq.gating import check as gating
from compileiq.results import acf
from compileiq.tuning.progress import SilentProgress
from tests.helpers import load_benchmark

DATA = Path("/work/shared/data/runtime-landscapes")
T1 = DATA / "convolution_milo.json"
CACHE = DATA / "convolution_A4000.json.gz"
pytestmark = pytest.mark.skipif(not T1.is_file() or not CACHE.is_file(), reason="landscape data not here")


def _cache() -> dict:
    with gzip.open(CACHE) as handle:
        return json.loads(handle.read())


def _executable(key: str) -> bytes:
    return b"\x7fELF...ciq-replay-key:" + key.encode() + b";..."


def test_a_run_draws_from_the_recorded_times_and_a_missing_one_fails() -> None:
    landscape = load_landscape(CACHE)
    raw = _cache()["cache"]
    good = next(k for k, v in raw.items() if isinstance(v["time"], float))
    failed = next(k for k, v in raw.items() if not isinstance(v["time"], float))
    measurer = ReplayMeasurer(landscape, seed=5)
    assert measurer.device == "replay:convolution_A4000.json.gz"
    run: RunResult = measurer.measure(_executable(good), ["--samples", "7"], 10)
    assert run.failure is None and len(run.harness.samples_ms) == 7
    assert set(run.harness.samples_ms) <= set(raw[good]["times"])
    again = ReplayMeasurer(landscape, seed=5).measure(_executable(good), ["--samples", "7"], 10)
    assert again.harness.samples_ms == run.harness.samples_ms  # seeded
    for executable in (_executable(failed), _executable("1,2,3"), b"no key here"):
        assert ReplayMeasurer(landscape).measure(executable, ["--quick"], 10).failure is not None


def test_a_cache_with_string_bool_and_float_parameters_is_replayed() -> None:
    """Kernel Tuner's own test cache tunes strings, a bool and a mixed list (keys such as
    "128,alg_2,15,True,2.45"): each value is kept as its key spells it, and the replay reads it back."""
    landscape = load_landscape(Path(__file__).resolve().parent / "landscapes" / "kt_strategies_cache.json")
    key = (128, "alg_2", 15, "True", "2.45")
    assert key in landscape.times and landscape.values["test_mixed"] == ("test", 1, "True", "2.45")
    run = ReplayMeasurer(landscape, seed=1).measure(_executable("128,alg_2,15,True,2.45"), ["--samples", "5"], 10)
    assert run.failure is None and set(run.harness.samples_ms) <= set(landscape.timed(key))


def test_a_replay_never_draws_the_cold_first_launch(tmp_path: Path) -> None:
    """Kernel Tuner records a configuration's first, cold launch among its times; a warmed-up
    harness never times one, so the replay leaves it out (and a failed one stays failed)."""
    cache = {"tune_params_keys": ["bx"], "cache": {
        "32": {"time": 2.0, "times": [9.0, 1.0, 1.0, 1.0]}, "64": {"time": 1e20, "times": [1e20, 1e20]}}}
    path = tmp_path / "cold_first.json"
    path.write_text(json.dumps(cache))
    landscape = load_landscape(path)
    assert landscape.timed((32,)) == (1.0, 1.0, 1.0) and landscape.steady_mean((32,)) == 1.0
    assert landscape.mean((32,)) == 3.0  # the search's value: every recorded time, as the cache's peers read it
    run = ReplayMeasurer(landscape, seed=3).measure(_executable("32"), ["--samples", "50"], 10)
    assert run.harness.samples_ms == (1.0,) * 50
    failed = ReplayMeasurer(landscape).measure(_executable("64"), ["--quick"], 10).failure
    assert failed is not None and "recorded as failed" in failed
    real = load_landscape(CACHE)
    slow_first = sum(1 for t in real.times.values() if len(t) > 1 and t[0] == max(t))
    assert slow_first > len(real.times) / 2  # why: the A4000's first timing is its slowest in most configurations


def test_a_file_that_is_no_cache_is_a_one_line_error(tmp_path: Path) -> None:
    wrong_key = b'{"tune_params_keys": ["x"], "cache": {"1,2": {}}}'
    for name, content in [("a.json", b"{}"), ("b.json.gz", b"not gzip"), ("c.json", wrong_key)]:
        (tmp_path / name).write_bytes(content)
        with pytest.raises(LandscapeError) as caught:
            load_landscape(tmp_path / name)
        assert "\n" not in str(caught.value) and name in str(caught.value)


def test_a_cache_that_kept_one_time_per_configuration_replays_it(tmp_path: Path) -> None:
    cache = {"tune_params_keys": ["bx", "t"], "tune_params": {"bx": [32, 64], "t": [1, 2]},
             "cache": {"32,1": {"time": 4.0}, "32,2": {"time": 1e20}, "64,1": {"time": "InvalidConfig"},
                       "64,2": {"time": 3.0, "times": [3.0, "x"]}}}
    path = tmp_path / "only_time.json"
    path.write_text(json.dumps(cache))
    landscape = load_landscape(path)
    assert landscape.times == {(32, 1): (4.0,), (32, 2): (), (64, 1): (), (64, 2): (3.0,)}
    assert not landscape.repeated and landscape.values == {"bx": (32, 64), "t": (1, 2)}
    run = ReplayMeasurer(landscape, seed=1).measure(_executable("32,1"), ["--samples", "5"], 10)
    assert run.failure is None and run.harness.samples_ms == (4.0,) * 5
    assert ReplayMeasurer(landscape).measure(_executable("32,2"), ["--quick"], 10).failure is not None
    assert load_landscape(CACHE).repeated


@pytest.mark.slow
def test_a_replayed_time_tune_beats_the_defaults(tmp_path: Path, capsys) -> None:
    landscape = load_landscape(CACHE)
    folder = tmp_path / "convolution"
    folder.mkdir()
    (folder / "tune.toml").write_text(tune_toml_of_t1(json.loads(T1.read_text())))
    (folder / "convolution.cu").write_text(stand_in_source(landscape.parameters))
    measurer = ReplayMeasurer(landscape, seed=0)
    options = app.TuneOptions(
        kernel=folder / "convolution.cu", db=f"sqlite:///{tmp_path / 't.db'}", out=tmp_path / "c.acf.toml",
        objective="time", budget=10, batch_size=5, workers="local", simplify=False,
        only=tuple(f"define.{p}" for p in landscape.parameters),
    )
    report = app.tune(options, SilentProgress(), measurers=[measurer])
    result = report.result

    def recorded_mean(config: dict) -> float | None:
        return landscape.mean([config[f"define.{p}"] for p in landscape.parameters])

    assert all(report.space.allows(t.config) for t in result.trials)  # restrictions in place
    done = [t for t in result.trials if t.state is TrialState.COMPLETE]
    assert len(done) >= 5 and all(t.metrics["device"] == measurer.device for t in done)
    for trial in done:  # each value is the median of samples drawn from its own recorded times: inside
        # their range (not near their mean: some are bimodal, e.g. 64x16 tiles spans 3.37-4.47 ms, mean 4.00)
        times = landscape.times[tuple(trial.config[f"define.{p}"] for p in landscape.parameters)]
        assert times and min(times) <= trial.value <= max(times), (trial.config, trial.value)
    assert result.confirmation is not None and not result.confirmation.keeps_baseline
    assert recorded_mean(result.chosen.config) < recorded_mean(result.baseline.config)
    written = acf.read(report.acf_path)
    assert written.objective["kind"].startswith("runtime") and "replay:convolution_A4000" in json.dumps(
        written.data, default=str)
    assert written.restrictions and measurer.runs > len(done)  # confirmation ran its rounds too

    # The CI gate on that ACF, timed (`gate --device`: real rebuilds of the harness, the ACF's and
    # the baseline's, and the interleaved A/B statistic) with samples replayed from the same table.
    # Unchanged, it passes; once the chosen build runs 10% slower (a driver update, say), only its
    # timing can tell, and the comparison with the recorded median fails the gate.
    options = gating.GateOptions(acfs=(report.acf_path,), device=True)
    passed = gating.run(options, HarnessTiming(ReplayMeasurer(landscape, seed=7)), visible=lambda: True)
    (checked,) = passed.results
    assert passed.exit_code == 0 and checked.timing is not None, [f.message for f in checked.findings]
    assert checked.timing.vs_default.verdict is Verdict.FASTER
    assert checked.timing.vs_recorded is not None and checked.timing.vs_recorded.verdict is not Verdict.SLOWER
    key = tuple(result.chosen.config[f"define.{p}"] for p in landscape.parameters)
    slower = replace(landscape, times={**landscape.times, key: tuple(t * 1.1 for t in landscape.times[key])})
    failed = gating.run(options, HarnessTiming(ReplayMeasurer(slower, seed=7)), visible=lambda: True)
    (regressed,) = failed.results
    assert failed.exit_code == 1 and regressed.timing is not None
    assert regressed.timing.vs_recorded is not None and regressed.timing.vs_recorded.verdict is Verdict.SLOWER
    assert [f.rule for f in regressed.findings if f.severity.value == "error"] == ["slower-than-recorded"]
    median = written.objective["confirmed_median"]  # the confirmation's, not the screening run (`best`)
    render.print_report(report)  # the run's summary says the same number the ACF and the gate use
    assert f"over them it ran {median:.6g} ms, the time `gate --device` holds it to" in capsys.readouterr().out
    confirmation = json_views.report_json(report)["confirmation"]  # --json: the ACF's decision, key for key
    assert confirmation["confirmed_median"] == median and confirmation["verdict"] == "FASTER"
    assert all(written.objective[key] == value for key, value in confirmation.items())
    assert regressed.timing.recorded_ms == median and regressed.timing.recorded_is == "objective.confirmed_median"


def test_the_gate_benchmark_never_fails_an_unchanged_build_and_catches_a_slow_one(tmp_path: Path, capsys) -> None:
    """benchmarks/gate_landscapes.py: ACFs made as `tune --objective time` makes them (screening
    medians recorded), then the gate's timed statistic on replayed samples: no false alarm on the
    unchanged build, every 10% regression caught, nothing caught below the gate's 2%."""
    out = tmp_path / "gate.json"
    load_benchmark("gate_landscapes").main(["--landscape", str(CACHE), "--space", str(T1), "--seeds", "3",
                                            "--budget", "16", "--repeats", "2", "--json", str(out)])
    (judged,) = json.loads(out.read_text())["landscapes"]
    situations = judged["readings"]["`confirmed_median`, δ 2% (now)"]["situations"]
    assert all(row["gates"] == 6 for row in situations.values())
    assert situations["unchanged"]["caught"] == 0 and situations["regressed 1%"]["caught"] == 0
    assert situations["regressed 10%"]["caught"] == 6 == situations["regressed 20%"]["caught"]
    assert "regressed 5%" in capsys.readouterr().out


def test_the_landscape_benchmark_compares_search_with_peers(tmp_path: Path, capsys) -> None:
    """benchmarks/runtime_landscapes.py: no kernel, no build; compileiq, random and a Kernel Tuner
    strategy (reading the cache file itself) counted against the table's optimum, the defaults
    first; the product's confirmation judged against the table."""
    module = load_benchmark("runtime_landscapes")
    out = tmp_path / "found.json"
    module.main(["--landscape", str(CACHE), "--space", str(T1), "--seeds", "1", "--cap", "41", "--budget", "16",
                 "--confirmations", "1", "--strategies", "compileiq,random,kt-random_sample", "--json", str(out)])
    found = json.loads(out.read_text())
    rows = {row["strategy"]: row for row in found["rows"]}
    assert set(rows) == {"compileiq", "random", "kt-random_sample"}
    for name, row in rows.items():
        for target in ("1pct", "5pct"):
            assert 1 < row[f"median_evaluations_to_{target}"] <= 41 + 1, name  # a run short of it counts cap + 1
            assert row[f"median_seconds_to_{target}"] > 0
    covered = found["coverage"]["convolution_A4000.json.gz"]
    assert covered["intervals"] >= 1 and covered["best_possible_speedup"] > 1
    assert "4,362 of 10,240 configurations allowed, 4,201 of them with times" in capsys.readouterr().out


def test_the_landscape_benchmark_takes_a_cache_alone(tmp_path: Path, capsys) -> None:
    """No tuning space file: the cache's own tune_params are the space (their first values the
    defaults); a cache with one time per configuration is searched, its intervals are not judged."""
    values = {"bx": [32, 64, 128, 256], "ty": [1, 2, 4, 8], "m": [0, 1]}
    entries = {f"{bx},{ty},{m}": {"time": 1.0 + abs(bx - 128) / 64 + abs(ty - 4) / 2 + m}
               for bx in values["bx"] for ty in values["ty"] for m in values["m"]}
    entries["32,1,0"] = {"time": 9.0}
    entries["256,8,1"] = {"time": "RuntimeFailedConfig"}
    del entries["64,2,1"]  # missing: a failed launch for every strategy (Kernel Tuner's simulation too)
    cache = tmp_path / "made_up.json"
    cache.write_text(json.dumps({"device_name": "test", "kernel_name": "k", "problem_size": [1],
                                 "tune_params_keys": list(values), "tune_params": values, "cache": entries}))
    out = tmp_path / "found.json"
    load_benchmark("runtime_landscapes").main(
        ["--landscape", str(cache), "--seeds", "2", "--cap", "24", "--budget", "8", "--confirmations", "1",
         "--strategies", "compileiq,random,kt-random_sample", "--json", str(out)])
    found = json.loads(out.read_text())
    rows = {row["strategy"]: row for row in found["rows"]}
    assert set(rows) == {"compileiq", "random", "kt-random_sample"}
    assert all(1 < row["median_evaluations_to_1pct"] <= 24 + 7 for row in rows.values())
    covered = found["coverage"]["made_up.json"]
    assert not any(key.startswith("coverage_") for key in covered)
    assert covered["best_possible_speedup"] == pytest.approx(9.0)  # the defaults: each first value
    printed = capsys.readouterr().out
    assert "32 of 32 configurations allowed, 30 of them with times" in printed and "intervals not judged" in printed
