"""--time-budget and --patience: which limit ends a run, recorded with the run and said at the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import TINY_KERNEL, clean_env, run_cli, slow_toolchain

import compileiq
from compileiq.core.errors import UsageError
from compileiq.core.records import TrialState
from compileiq.store import Store
from compileiq.tuning.limits import RunClock, RunLimits, format_duration, parse_duration

ONLY = "ptxas.opt_level,ptxas.register_usage_level"


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("10m", 600), ("1h", 3600), ("1h30m", 5400),
                                               ("2.5h", 9000), ("0.5s", 0.5), (" 10M ", 600)])  # fmt: skip
def test_durations_read_as_people_write_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["10", "ten", "-5m", "0s", "10x", "", "m", "1h 30m", "8d", "9999h", "nan", "1e3s"])
def test_a_bad_duration_is_a_one_line_usage_error(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_duration(text)
    assert "--time-budget" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("seconds", "text"), [(90, "1m30s"), (600, "10m"), (3600, "1h"), (5400, "1h30m"), (1, "1s")])
def test_durations_print_short(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_patience_counts_batches_in_a_row_without_a_better_best() -> None:
    clock = RunClock(RunLimits(budget=100, patience=2))
    for best, stop in [(5.0, None), (5.0, None), (4.0, None), (4.0, None), (4.0, "no improvement in 2 batches")]:
        clock.batch_done(best)
        assert clock.stop_reason(searched=10) == stop
    assert RunClock(RunLimits(budget=10)).stop_reason(searched=10) == "budget 10"


def test_a_time_budget_stops_starting_trials_and_still_writes_the_acf(tmp_path: Path) -> None:
    """ptxas takes 2 s per call here: the baseline alone outlasts a 1 s budget, so the run ends
    after it, with its ACF, and says so."""
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    env = clean_env(slow_toolchain(tmp_path / "slow", 2))
    result = run_cli(["tune", "k.cu", "--workers", "local", "--budget", "40", "--time-budget", "1s", "--only", ONLY,
                      "--db", "sqlite:///t.db", "--study", "S", "--arch", "sm_90"], cwd=tmp_path, env=env)  # fmt: skip
    assert result.returncode == 0, result.describe()
    assert "stopped: time budget 1s" in result.stdout and "stopped: time budget 1s" in result.stderr, result.describe()
    assert "limits: budget 40 search trials, time budget 1s" in result.stderr, result.describe()
    provenance = compileiq.load_acf(tmp_path / "store" / "k.static.acf.toml").provenance
    assert provenance["stopped"] == "time budget 1s" and provenance["search_trials"] == 1
    store = Store.open(f"sqlite:///{tmp_path / 't.db'}")
    try:
        study = store.find_study("S")
        trials = store.trials(study.id)
        (run,) = store.runs(study.id)
    finally:
        store.close()
    assert len(trials) == 1 and trials[0].state is TrialState.COMPLETE  # nothing left running
    assert run.limits == {"budget": 40, "time_budget_s": 1.0, "patience": None}
    assert run.stopped == "time budget 1s" and run.search_trials == 1 and run.finished_at is not None


def test_patience_ends_a_run_that_cannot_improve(tmp_path: Path) -> None:
    """The tiny kernel never spills: no variant can beat the baseline's 0 spill bytes, so with
    --patience 2 the run ends after the baseline and two batches (of 2), whatever the search picks."""
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    result = run_cli(["tune", "k.cu", "--workers", "local", "--objective", "spills", "--budget", "40", "--patience",
                      "2", "--batch-size", "2", "--only", ONLY, "--db", "sqlite:///t.db", "--arch", "sm_90", "--json"],
                     cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.describe()
    document = json.loads(result.stdout)
    assert document["stopped"] == "no improvement in 2 batches" and document["search_trials"] == 5, document


def test_the_python_api_takes_both_limits(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    result = compileiq.tune(tmp_path / "k.cu", objective="spills", budget=40, patience=1, time_budget=600,
                            batch_size=2, workers="local", only=ONLY, arch="sm_90", db=f"sqlite:///{tmp_path}/t.db",
                            out=tmp_path / "k.acf.toml")  # fmt: skip
    assert result.stopped == "no improvement in 1 batch" and result.search_trials == 3
    store = Store.open(f"sqlite:///{tmp_path / 't.db'}")
    try:
        (run,) = store.runs(store.find_study(result.study).id)
    finally:
        store.close()
    assert run.limits == {"budget": 40, "time_budget_s": 600.0, "patience": 1}


@pytest.mark.parametrize(("args", "says"), [(["--time-budget", "soon"], "--time-budget"),
                                            (["--patience", "0"], "--patience")])  # fmt: skip
def test_bad_limits_are_one_line_before_anything_runs(tmp_path: Path, args: list[str], says: str) -> None:
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    result = run_cli(["tune", "k.cu", "--workers", "local", "--db", "sqlite:///t.db", *args], cwd=tmp_path)
    assert result.returncode == 2 and len(result.stderr_lines) == 1, result.describe()
    assert result.stderr_lines[0].startswith("error: ") and says in result.stderr_lines[0]
    assert not (tmp_path / "t.db").exists()
