"""benchmarks/runtime_landscapes.py on a tiny hand-made landscape: whole batches charged, repeats
free, simulated seconds summed, the peers driven for real (Optuna, Kernel Tuner's simulation
mode on the cache file), and the product's confirmation judged against the table's truth."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.helpers import load_benchmark


def _module():
    return load_benchmark("runtime_landscapes")


# A in 1..4, B in 0..1; A=4 with B=1 breaks the restriction (never built); (3, 1) failed when recorded.
MEANS = {(1, 0): 2.0, (2, 0): 1.6, (3, 0): 1.3, (4, 0): 1.2, (1, 1): 1.9, (2, 1): 1.0, (3, 1): None}


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    folder = tmp_path_factory.mktemp("landscape")
    (found,) = _module().problems(*_write_landscape(folder))
    return found


def _write_landscape(folder):
    """The tiny landscape's cache file and T1 space in `folder`: ([cache], [space])."""
    cache = {"device_name": "hand-made", "kernel_name": "k", "problem_size": [64], "objective": "time",
             "tune_params_keys": ["A", "B"], "tune_params": {"A": [1, 2, 3, 4], "B": [0, 1]}, "cache": {}}
    for (a, b), mean in MEANS.items():
        entry = {"A": a, "B": b, "compile_time": 1000.0 * a, "benchmark_time": 500.0}
        if mean is None:
            entry["time"] = "RuntimeFailedConfig"
        else:  # 32 timings around the mean (+-1%), their mean exactly it
            entry["times"] = [mean * (1 + 0.01 * (i % 2 * 2 - 1)) for i in range(32)]
            entry["time"] = sum(entry["times"]) / 32
        cache["cache"][f"{a},{b}"] = entry
    (folder / "k.json").write_text(json.dumps(cache))
    t1 = {"General": {"BenchmarkName": "tiny"}, "ConfigurationSpace": {
        "TuningParameters": [{"Name": "A", "Type": "int", "Values": "[1, 2, 3, 4]", "Default": 1},
                             {"Name": "B", "Type": "int", "Values": "[0, 1]", "Default": 0}],
        "Conditions": [{"Expression": "A * B <= 3", "Parameters": ["A", "B"]}]}}
    (folder / "t1.json").write_text(json.dumps(t1))
    return [folder / "k.json"], [folder / "t1.json"]


def test_whole_batches_are_charged_and_repeats_are_free(problem) -> None:
    module = _module()
    batches = [[(1, 0)], [(1, 1), (3, 1), (4, 0)], [(4, 0), (2, 1), (3, 0)]]
    charged = module.charge(problem, batches, cap=100)
    # 5% of 1.0: only (2, 1), in the third batch; its repeat of (4, 0) is free: 1 + 3 + 2
    assert charged[0.01].evaluations == charged[0.05].evaluations == 6 and charged[0.01].reached
    assert charged[0.01].seconds == pytest.approx((1500 + 1500 + 3500 + 4500 + 2500 + 3500) / 1000)
    short = module.charge(problem, batches[:2], cap=100)
    assert short[0.05].evaluations == 101 and not short[0.05].reached  # never there: one past the cap
    assert short[0.05].seconds == pytest.approx(11.0)  # what it spent
    late = module.charge(problem, batches, cap=5)  # there, but in a batch that ran past the cap
    assert late[0.05].evaluations == 6 and not late[0.05].reached


def test_runs_that_fall_short_count_alike_whatever_their_last_batch_spent(problem) -> None:
    """A batch strategy that fell short spent 513 evaluations where a sequential one stops at 512:
    counted as spent, two strategies that both failed every seed looked different to the rank test
    (p = 5e-10 on a landscape where neither got there once)."""
    module = _module()
    batched = module.charge(problem, [[(1, 0)], [(1, 1), (3, 1), (4, 0)]], cap=3)  # 4 spent, short
    sequential = module.charge(problem, [[(1, 0)], [(1, 1)], [(3, 1)]], cap=3)  # 3 spent, short
    assert batched[0.05].evaluations == sequential[0.05].evaluations == 4
    ours = {"strategy": "compileiq", "evaluations_to_5pct": [batched[0.05].evaluations] * 5}
    theirs = {"strategy": "peer", "evaluations_to_5pct": [sequential[0.05].evaluations] * 5}
    assert module.versus(ours, theirs, "5pct") == "1"


def test_every_strategy_starts_from_the_defaults_and_builds_only_allowed_configurations(problem) -> None:
    module = _module()
    for name in ("compileiq", "random", "optuna-tpe", "kt-random_sample", "kt-genetic_algorithm"):
        batches = module.strategies()[name](problem, 0, 100)
        assert batches[0] == [(1, 0)], name
        evaluated = {k for b in batches for k in b}
        assert (4, 1) not in evaluated and evaluated <= set(MEANS), name
        assert (2, 1) in evaluated, name  # each found the optimum in this tiny space
        if not name.startswith("kt-"):
            assert all(len(b) <= module.BATCH for b in batches), name


def test_the_products_confirmation_is_judged_against_the_tables_truth(problem) -> None:
    module = _module()
    evaluated = [(1, 0), (2, 0), (3, 0), (4, 0), (1, 1), (2, 1), (3, 1)]
    choice = module.confirmed_choice(problem, evaluated, seed=1)
    chosen, intervals, confirmed = choice.key, choice.intervals, choice.confirmed_median
    assert chosen == (2, 1)  # the fastest, confirmed FASTER
    assert confirmed is not None and min(problem.landscape.timed(chosen)) <= confirmed <= max(problem.landscape.timed(chosen))
    assert choice.delta >= 0.02  # the A/A threshold the ACF records
    assert len(intervals) == 4  # FINALISTS, the defaults and the failed one left out
    best = next(i for i in intervals if i.means_ratio == pytest.approx(0.5))
    assert best.low <= 0.5 <= best.high and all(best.covers(truth) for truth in module.Interval.TRUTHS)
    # medians' ratio, steady means' ratio, all means' ratio, estimand
    summary = module.summarize_coverage(
        [best, module.Interval(0.9, 0.95, 0.93, 0.96, 0.8, 0.92)], [2.0, 1.0, 0.9], best=2.0, budget=6)
    assert summary["coverage_of_means_ratio"] == 0.5 and summary["coverage_of_estimand"] == 1.0
    assert summary["coverage_of_medians_ratio"] == 1.0 and summary["coverage_of_steady_ratio"] == 0.5
    assert summary["choices_slower_than_defaults"] == 1 and summary["choices_keeping_defaults"] == 1
    assert summary["median_true_speedup_of_choice"] == 1.0


def test_each_peer_is_tested_against_compileiqs_per_seed_counts(problem) -> None:
    """The table's p column: a two-sided Mann-Whitney U test of a strategy's per-seed evaluations
    against compileiq's, written per seed to the JSON rows."""
    module = _module()
    rows, _ = module.compare(problem, ["compileiq", "random"], seeds=3, cap=100)
    assert all(len(row["evaluations_to_1pct"]) == 3 for row in rows)
    ours = {"evaluations_to_1pct": [8, 9, 10, 11, 12, 13, 14, 15]}
    worse = {"evaluations_to_1pct": [90, 95, 99, 100, 100, 100, 100, 100]}
    same = {"evaluations_to_1pct": [8, 9, 10, 11, 12, 13, 14, 15]}
    assert float(module.versus(ours, worse, "1pct")) < 0.01
    assert float(module.versus(ours, same, "1pct")) == pytest.approx(1.0)
    assert module.versus(ours, ours, "1pct") == "-"  # compileiq against itself: no test
    lines = module.render(problem, rows, None, 100)
    assert "p 1%" in lines[1] and any(line.startswith("p: two-sided Mann-Whitney") for line in lines)


def test_single_timing_runs_merge_into_one_landscape_with_their_times(tmp_path) -> None:
    """benchmarks/merge_runs.py: runs k of one landscape become each configuration's `times`, their
    mean its `time`; one that failed or is missing in any run is failed; the replay reads the merge."""
    from compileiq.evaluate.replay import load_landscape

    def run(times: dict[str, object]) -> dict:
        return {"device_name": "A100", "kernel_name": "k", "tune_params_keys": ["A", "B"],
                "tune_params": {"A": [1, 2], "B": [0, 1]}, "cache": {k: {"time": t} for k, t in times.items()}}

    (tmp_path / "run2.json").write_text(json.dumps(run({"1,0": 2.0, "2,0": 1.0, "1,1": 3.0, "2,1": 5.0})))
    (tmp_path / "run3.json").write_text(json.dumps(run({"1,0": 4.0, "2,0": 1.5, "1,1": "RuntimeFailedConfig"})))
    out = tmp_path / "merged.json.gz"
    load_benchmark("merge_runs").main([str(tmp_path / "run2.json"), str(tmp_path / "run3.json"), "--out", str(out)])
    landscape = load_landscape(out)
    assert landscape.times[(1, 0)] == (2.0, 4.0) and landscape.mean((1, 0)) == 3.0
    assert landscape.times[(2, 0)] == (1.0, 1.5)
    assert landscape.times[(1, 1)] == () and landscape.times[(2, 1)] == ()  # failed in run 3; missing there
    assert landscape.best == 1.25 and landscape.timed((2, 0)) == (1.5,)  # the replay leaves the first out (WARMUP)


def test_merging_runs_of_different_landscapes_is_refused(tmp_path) -> None:
    first = {"tune_params_keys": ["A"], "cache": {"1": {"time": 1.0}}}
    second = {"tune_params_keys": ["B"], "cache": {"1": {"time": 1.0}}}
    (tmp_path / "a.json").write_text(json.dumps(first))
    (tmp_path / "b.json").write_text(json.dumps(second))
    with pytest.raises(SystemExit, match="different parameters"):
        load_benchmark("merge_runs").main([str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out", str(tmp_path / "m.json")])


def test_a_kernel_tuner_strategy_whose_first_result_is_the_target_ends_with_it(tmp_path) -> None:
    """Simulated annealing evaluates its start before its loop catches Kernel Tuner's stop: on a
    landscape where that start is within 1%, the run must end there, not raise."""
    module = _module()
    cache = {"device_name": "hand-made", "kernel_name": "k", "problem_size": [64],
             "tune_params_keys": ["A"], "tune_params": {"A": [1, 2, 3]},
             "cache": {f"{a}": {"A": a, "time": 1.0 + 0.001 * a} for a in (1, 2, 3)}}  # all within 1%
    (tmp_path / "flat.json").write_text(json.dumps(cache))
    (problem,) = module.problems([tmp_path / "flat.json"], [])
    batches = module.strategies()["kt-simulated_annealing"](problem, 0, 100)
    assert batches[0] == [(1,)] and len(batches) == 2 and batches[1][0] in {(1,), (2,), (3,)}
    assert module.charge(problem, batches, 100)[0.01].reached


def test_batch_sets_the_batch_each_search_is_asked_for_and_charged(tmp_path, monkeypatch) -> None:
    """`--batch N` (benchmarks.md (h7)): compileiq asked for N at a time, whole batches of N charged."""
    module = _module()
    monkeypatch.setattr(module, "BATCH", module.BATCH)  # main sets it for its run: restored after this test
    (landscape,), (space,) = _write_landscape(tmp_path)
    out = tmp_path / "out.json"
    module.main(["--landscape", str(landscape), "--space", str(space), "--seeds", "6", "--strategies",
                 "compileiq", "--confirmations", "0", "--batch", "2", "--json", str(out)])
    (row,) = json.loads(out.read_text())["rows"]
    assert row["batch"] == 2
    assert all(count % 2 == 1 for count in row["evaluations_to_1pct"]), row  # the defaults, then pairs
    assert module.BATCH == 2
    with pytest.raises(SystemExit):
        module.main(["--landscape", str(landscape), "--batch", "0"])


# --- unseen caches and T1 files (a first-time user's report) ---

KT = Path(__file__).resolve().parent / "landscapes"  # Kernel Tuner's own test caches (see its README.md)


def _t1(folder, conditions, values=None, name="t1.json", order=("A", "B")):
    """A T1 file over the tiny landscape: `values` per parameter (default: the cache's), defaults 1 and 0."""
    values = {"A": "[1, 2, 3, 4]", "B": [0, 1], **(values or {})}
    defaults = {"A": 1, "B": 0}
    t1 = {"General": {"BenchmarkName": "tiny"}, "ConfigurationSpace": {
        "TuningParameters": [{"Name": p, "Type": "int", "Values": values[p], "Default": defaults[p]} for p in order],
        "Conditions": conditions}}
    (folder / name).write_text(json.dumps(t1))
    return folder / name


def _main(module, *args):
    module.main([str(a) for a in args])


def test_the_optimum_and_targets_are_those_of_the_space_the_t1_file_allows(tmp_path) -> None:
    """The cache's fastest (2, 1) breaks `B == 0`: the optimum is (4, 0) at 1.2 ms, every target
    and `best possible` are taken from it, and every strategy reaches it."""
    module = _module()
    (cache,), _ = _write_landscape(tmp_path)
    space = _t1(tmp_path, [{"Expression": "B == 0"}])
    out = tmp_path / "out.json"
    _main(module, "--landscape", cache, "--space", space, "--seeds", 2, "--cap", 20, "--strategies",
          "compileiq,random,optuna-tpe,kt-random_sample", "--confirmations", 1, "--json", out)
    report = json.loads(out.read_text())
    assert all(row["reached_1pct"] == 2 for row in report["rows"]), report["rows"]
    told = report["landscapes"]["k.json"]
    assert told["optimum_ms"] == pytest.approx(1.2) and told["optimum"] == "4,0"
    assert (told["allowed"], told["combinations"], told["allowed_with_times"], told["within_1pct"]) == (4, 8, 4, 1)
    assert report["coverage"]["k.json"]["best_possible_speedup"] == pytest.approx(2.0 / 1.2)


def test_optuna_is_given_the_t1_files_values_not_the_caches(tmp_path) -> None:
    """A T1 file that tunes A over 1 and 2 only: Optuna never proposes A = 3 or 4 (the cache has them)."""
    module = _module()
    (cache,), _ = _write_landscape(tmp_path)
    (problem,) = module.problems([cache], [_t1(tmp_path, [], {"A": "[1, 2]"})])
    assert problem.best == pytest.approx(1.0)
    for seed in range(3):
        evaluated = {k for b in module.strategies()["optuna-tpe"](problem, seed, 50) for k in b}
        assert {a for a, _ in evaluated} <= {1, 2}, evaluated


@pytest.mark.parametrize("case", [
    "corrupt", "missing", "plain text .gz", "empty", "all failed", "GFLOP/s only", "T1 missing", "T1 corrupt",
    "T1 without ConfigurationSpace", "T1 unsafe", "T1 unknown name", "T1 conditions unsafe values",
    "defaults failed", "seeds 0", "budget 0", "cap 0", "cap -5"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, case) -> None:
    module = _module()
    (cache,), (space,) = _write_landscape(tmp_path)
    data = json.loads(cache.read_text())
    bad, args = tmp_path / "bad.json", []
    if case == "corrupt":
        bad.write_text(cache.read_text()[:100])
    elif case == "plain text .gz":
        bad = tmp_path / "bad.json.gz"
        bad.write_text(cache.read_text())
    elif case in ("empty", "all failed", "GFLOP/s only", "defaults failed"):
        for key, entry in list(data["cache"].items()):
            if case == "empty":
                del data["cache"][key]
            elif case == "all failed" or case == "defaults failed" and key == "1,0":
                entry["time"] = "CompilationFailedConfig"
            else:
                entry.pop("time"), entry.pop("times", None)
                entry["GFLOP/s"] = 100.0
        bad.write_text(json.dumps(data))
    elif case != "missing":
        bad = cache
        texts = {"T1 corrupt": "{", "T1 without ConfigurationSpace": '{"General": {}}',
                 "T1 unsafe": None, "T1 unknown name": None, "T1 conditions unsafe values": None}
        if case.startswith("T1") and case != "T1 missing":
            space = tmp_path / "t1.json"
            if texts[case] is not None:
                space.write_text(texts[case])
            else:
                space = _t1(tmp_path, {"T1 unsafe": ["__import__('os').system('id')"], "T1 unknown name": ["C > 1"],
                                       "T1 conditions unsafe values": []}[case],
                            {"A": "__import__('os').getpid()"} if case == "T1 conditions unsafe values" else None)
        elif case == "T1 missing":
            space = tmp_path / "nope.json"
        else:
            option, value = case.split()
            args = [f"--{option}", value]
    with pytest.raises(SystemExit) as stopped:
        _main(module, "--landscape", bad, "--space", space, "--strategies", "compileiq", *args)
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    said = [line for line in err.splitlines() if not line.startswith(("usage:", " "))]  # argparse's usage
    assert len(said) == 1 and "error: " in said[0] and "Traceback" not in err, err
    if case == "T1 unknown name":
        assert "'C', not a TuningParameter of the T1 file" in err


def test_kernel_tuners_t1_value_forms_are_read_without_running_them() -> None:
    t1_file = load_benchmark("t1_file")
    assert t1_file.t1_values("[128+64*i for i in range(15)]") == [128 + 64 * i for i in range(15)]
    assert t1_file.t1_values("list(range(1, 4))") == [1, 2, 3]
    assert t1_file.t1_values("['alg_1', 'alg_2']") == ["alg_1", "alg_2"]
    assert t1_file.t1_values("[true, false]") == [True, False]
    for unsafe in ("__import__('os').getpid()", "[x for x in ().__class__.__bases__]", "range(10**9)",
                   "[i for i in range(3) if i]"):
        with pytest.raises(t1_file.InputError):
            t1_file.t1_values(unsafe)
    assert t1_file.t1_values("list([i for i in range(100000)])") == list(range(100000))


def test_a_nested_comprehension_is_refused_as_its_values_are_made() -> None:
    """Review: "[[i for i in range(100000)] for j in range(100000)]" made 10**10 values before the
    count of the outer list was checked; every list's values now count against MAX_VALUES as made."""
    t1_file = load_benchmark("t1_file")
    started = time.monotonic()
    for nested in ("[[i for i in range(100000)] for j in range(100000)]",
                   "[list(range(100000)) for j in range(100000)]", "[[1, 2] for j in range(100000)]"):
        with pytest.raises(t1_file.InputError, match="more than 100,000 values"):
            t1_file.t1_values(nested)
    assert time.monotonic() - started < 10


def test_kernel_tuners_own_caches_run_and_a_crashing_peer_is_a_row(tmp_path, capsys) -> None:
    """kt_vector_add_cache.json is too small for Kernel Tuner's bayes_opt and one parameter too
    few for its diff_evo: their rows say they crashed; the others still run and --json has them all.
    Its T1 file's Values is Kernel Tuner's list comprehension; its optimum by mean rests on a cold
    first launch: the header says so."""
    module = _module()
    out = tmp_path / "out.json"
    _main(module, "--landscape", KT / "kt_vector_add_cache.json", "--space", KT / "kt_T1_vector_add.json",
          "--seeds", 1, "--cap", 16, "--confirmations", 0, "--json", out,
          "--strategies", "compileiq,kt-bayes_opt,kt-diff_evo,kt-random_sample")
    shown = capsys.readouterr().out
    report = json.loads(out.read_text())
    rows = {row["strategy"]: row for row in report["rows"]}
    assert rows["kt-bayes_opt"]["crashed"].startswith("ValueError") and "crashed: " in shown
    assert "crashed" not in rows["compileiq"] and "crashed" not in rows["kt-random_sample"]
    assert "(quartiles )" not in shown and "compileiq" in shown
    compileiq_line = next(line for line in shown.splitlines() if line.startswith("compileiq "))
    assert compileiq_line.endswith(" -")  # never checked for determinism: not shown True
    told = report["landscapes"]["kt_vector_add_cache.json"]
    assert told["optimum"] == "768" and told["steady_state_best"] == "832" and not told["optimum_is_steady_state_best"]
    assert "warning: the optimum by mean (768) is not the fastest once warm" in shown


def test_a_one_configuration_cache_gets_its_table_and_json(tmp_path, capsys) -> None:
    """kt_t4_cache.json: nothing to confirm against the defaults, so no interval: the table still prints."""
    module = _module()
    out = tmp_path / "out.json"
    _main(module, "--landscape", KT / "kt_t4_cache.json", "--seeds", 1, "--cap", 8, "--confirmations", 1,
          "--budget", 4, "--strategies", "compileiq,kt-pso", "--json", out)
    assert "no interval to judge" in capsys.readouterr().out
    assert json.loads(out.read_text())["coverage"]["kt_t4_cache.json"]["intervals"] == 0


def test_string_and_bool_parameters_are_tuned(tmp_path) -> None:
    """kt_strategies_cache.json tunes strings, a bool and a mixed list; its first values were never recorded."""
    module = _module()
    (problem,) = module.problems([KT / "kt_strategies_cache.json"], [])
    assert problem.default == (128, "alg_2", 15, "True", "2.45")
    assert module.charge(problem, module.strategies()["compileiq"](problem, 0, 40), 40)[0.05].reached
    for name in ("optuna-tpe", "kt-random_sample"):  # driven over the strings too (no crash)
        batches = module.strategies()[name](problem, 0, 40)
        assert batches[0] == [problem.default] and {k[1] for b in batches for k in b} <= {"alg_1", "alg_2"}, name


def test_kernel_tuner_gets_every_configuration_of_the_t1_space_in_the_caches_order(tmp_path) -> None:
    """A cache without tune_params, a T1 file listing B first and a value (5) the cache lacks:
    Kernel Tuner's simulation finds every configuration (a missing one a failed launch)."""
    module = _module()
    (cache,), _ = _write_landscape(tmp_path)
    data = json.loads(cache.read_text())
    del data["tune_params"]
    cache.write_text(json.dumps(data))
    space = _t1(tmp_path, [{"Expression": "A * B <= 3"}], {"A": "[1, 2, 3, 4, 5]"}, order=("B", "A"))
    (problem,) = module.problems([cache], [space])
    for name in ("kt-random_sample", "kt-genetic_algorithm"):
        batches = module.strategies()[name](problem, 0, 100)
        assert module.charge(problem, batches, 100)[0.01].reached, name
