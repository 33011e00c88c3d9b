"""Several objectives: the front search, the choice on the front, the ACF's front, show and report.

Real nvcc/ptxas on the bundled spill_heavy kernel (narrowed with --only), a real SQLite store;
the runtime objective with a fake measurer at the process boundary, as in test_timing."""

from __future__ import annotations

import json
import math
import re
import shutil
import tomllib
from pathlib import Path

import pytest
from helpers import run_cli

from compileiq import app
from compileiq.core.errors import UsageError
from compileiq.core.records import Trial, TrialState
from compileiq.core.space import SearchSpace
from compileiq.evaluate import eligibility
from compileiq.results import acf, multi_objective
from compileiq.results.pareto import values_of
from compileiq.search.front_search import FrontSearcher, chebyshev
from compileiq.search.searcher import Observation, SearchSettings
from compileiq.store import Store
from compileiq.tuning.progress import SilentProgress

ROOT = Path(__file__).resolve().parents[1]
SPILL_HEAVY = ROOT / "kernels" / "spill_heavy" / "spill_heavy.cu"
ONLY = ("ptxas.maxrregcount", "ptxas.override_directive_values")
NW = ROOT / "tests" / "corpus" / "rodinia_nw"  # Rodinia's nw: a front whose pick is not the defaults
OBJECTIVES = ("registers", "instructions")


def _tune(tmp_path: Path, **overrides: object) -> app.TuneReport:
    options = {"kernel": SPILL_HEAVY, "objective": "registers,instructions", "budget": 18, "batch_size": 4,
               "workers": "local", "db": f"sqlite:///{tmp_path}/t.db", "out": tmp_path / "k.acf.toml", "only": ONLY}
    return app.tune(app.TuneOptions(**{**options, **overrides}), SilentProgress())  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> app.TuneReport:
    return _tune(tmp_path_factory.mktemp("front"))


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b


def _may_win(report: app.TuneReport) -> list[Trial]:
    reference = eligibility.Reference.of(report.result.baseline, report.result.study.key.objective)
    assert reference is not None
    return [t for t in report.result.trials if t.state is TrialState.COMPLETE
            and eligibility.refusal(t.config, t.metrics, reference) is None]


def test_the_front_is_non_dominated_and_covers_the_extremes_found(tuned: app.TuneReport) -> None:
    result = tuned.result
    assert result.study.key.objective == "registers,instructions"  # the tuple is the study's identity
    front = result.front
    assert front is not None and len(front.points) >= 2
    points = [p.values for p in front.points]
    assert not any(_dominates(a, b) for a in points for b in points)
    allowed = [v for t in _may_win(tuned) if (v := values_of(t, OBJECTIVES)) is not None]
    assert all(any(p == v or _dominates(p, v) for p in points) for v in allowed)  # nothing allowed beats it
    for axis in range(2):  # both ends: the best value found on each objective is on the front
        assert min(v[axis] for v in allowed) == min(p[axis] for p in points)
    refused = [t for t in result.trials if t.state is TrialState.COMPLETE and t not in _may_win(tuned)]
    assert refused, "the narrowed space has register caps that spill: the no-harm rules must leave some out"
    assert all(values_of(t, OBJECTIVES) not in points or t.metrics["spill_bytes"] <= result.baseline.metrics[
        "spill_bytes"] for t in refused)


def _scaled(points: list[tuple[float, ...]]) -> list[list[float]]:
    low = [min(c) for c in zip(*points, strict=True)]
    span = [(max(c) - min(c)) or 1.0 for c in zip(*points, strict=True)]
    return [[(v - lo) / s for v, lo, s in zip(p, low, span, strict=True)] for p in points]


def test_the_pick_rules_choose_as_documented(tuned: app.TuneReport) -> None:
    result = tuned.result
    refuse = eligibility.study_refusal(result.baseline, "registers,instructions", True)
    points = [p.values for p in result.front.points]  # type: ignore[union-attr]
    scaled = dict(zip(points, _scaled(points), strict=True))

    def pick(rule: str) -> tuple[float, ...]:
        chosen = multi_objective.choose(result.trials, result.baseline, OBJECTIVES, rule, refuse, False).chosen
        assert refuse(chosen) is None
        values = values_of(chosen, OBJECTIVES)
        assert values is not None
        return values

    assert pick("first") == min(points)
    assert pick("knee") == min(points, key=lambda p: sum(x * x for x in scaled[p]))
    assert pick("weights=registers:0,instructions:1") == min(points, key=lambda p: (p[1], p[0]))
    weighted = min(points, key=lambda p: 0.7 * scaled[p][0] + 0.3 * scaled[p][1])
    assert pick("weights=registers:0.7,instructions:0.3") == weighted == pick("weights=0.7,0.3")
    assert values_of(result.chosen, OBJECTIVES) == pick("knee")  # the tuner's default rule


@pytest.mark.slow
def test_the_acf_records_the_front_and_the_choice_and_round_trips(tuned: app.TuneReport) -> None:
    written = acf.read(tuned.acf_path)
    result = tuned.result
    assert written.objective["objectives"] == list(OBJECTIVES) and written.objective["pick"] == "knee"
    assert written.evidence["pick"] == {"rule": "knee", "trial": result.chosen.number}
    recorded = {tuple(p["values"][o] for o in OBJECTIVES) for p in written.evidence["front"]}
    assert recorded == {p.values for p in result.front.points}  # type: ignore[union-attr]
    chosen = tuple(written.objective["best"][o] for o in OBJECTIVES)
    assert chosen in recorded and written.evidence["best"]["code_hash"] == result.chosen.code_hash
    base = result.baseline.config
    for point in written.evidence["front"]:
        trial = next(t for t in result.trials if t.number == point["trial"])
        assert point["settings"] == {k: v for k, v in trial.config.items() if base.get(k) != v}
    again = acf.parse(tuned.acf_path, tuned.acf_path.read_text())
    assert again.evidence == written.evidence and again.argv == written.argv
    flags = run_cli(["flags", str(tuned.acf_path)], tuned.acf_path.parent)
    assert flags.returncode == 0 and "-arch=sm_90" in flags.stdout
    gate = run_cli(["gate", str(tuned.acf_path), "--static", "--json"], tuned.acf_path.parent)
    assert gate.returncode == 0, gate.describe()
    verdict = json.loads(gate.stdout)
    assert verdict["acfs"][0]["verdict"] == "PASS" and verdict["rules"]["instructions"] == "warn"


@pytest.mark.slow
def test_no_view_offers_a_dominated_trial_as_one_that_may_be_chosen(tmp_path: Path) -> None:
    """`show --json` and the report called a dominated trial (40 registers, 1280 instructions, beside
    32 and 1280) "may be chosen" while the front's table counted it dominated (a user's nw): no pick
    rule chooses it, and each view now says which front point dominates it."""
    shutil.copytree(NW, tmp_path / "nw")
    tuned = _tune(tmp_path, kernel=tmp_path / "nw" / "needle.cu", budget=24, batch_size=8, only=())
    shown = run_cli(["show", tuned.result.study.name, "--db", tuned.database, "--json", "--top", "100"], tmp_path)
    assert shown.returncode == 0, shown.describe()
    front = {p.trial.number: p.values for p in tuned.result.front.points}  # type: ignore[union-attr]
    statuses = {t["number"]: t["status"] for t in json.loads(shown.stdout)["trials"]}
    trials = {t.number: t for t in tuned.result.trials}
    dominated = [n for n, status in statuses.items() if status.startswith("dominated by #")]
    assert dominated, statuses  # the fixture's study has dominated results that may win
    for number in dominated:
        over = int(statuses[number].removeprefix("dominated by #"))
        values = values_of(trials[number], OBJECTIVES)
        assert over in front and values is not None and _dominates(front[over], values)
    for number, status in statuses.items():
        values = values_of(trials[number], OBJECTIVES)
        if status == "may be chosen":  # a front point: no other dominates it nor has its values
            assert values is not None and number in front, (number, statuses)
        if status.startswith("same values as #"):  # the front keeps one of equal values (a red team's)
            assert front[int(status.split("#")[1].split()[0])] == values
    report = run_cli(["report", tuned.result.study.name, "--db", tuned.database, "--format", "md", "-o", "r.md"], tmp_path)
    assert report.returncode == 0 and "dominated by #" in (tmp_path / "r.md").read_text(), report.describe()


def test_show_lists_the_front_in_full_precision_and_the_report_plots_it(tuned: app.TuneReport, tmp_path: Path
                                                                         ) -> None:
    db = tuned.database
    name = tuned.result.study.name
    shown = run_cli(["show", name, "--db", db, "--pareto", "registers,instructions", "--json"], tmp_path)
    assert shown.returncode == 0, shown.describe()
    data = json.loads(shown.stdout)
    assert [tuple(p["values"]) for p in data["front"]] == [p.values for p in tuned.result.front.points]  # type: ignore[union-attr]
    assert data["pick"] == tuned.result.chosen.number and data["pick_rule"] == "knee"
    plain = run_cli(["show", name, "--db", db], tmp_path)  # a study of several objectives shows its front
    assert "Pareto front of registers, instructions" in plain.output and "<- knee" in plain.output
    first = run_cli(["show", name, "--db", db, "--pareto", "registers,instructions", "--pick", "first", "--json"], tmp_path)
    assert json.loads(first.stdout)["pick_values"] == list(min(p.values for p in tuned.result.front.points))  # type: ignore[union-attr]
    written = run_cli(["report", name, "--db", db, "--format", "md", "-o", str(tmp_path / "r.md")], tmp_path)
    assert written.returncode == 0, written.describe()
    svg = (tmp_path / "r-pareto.svg").read_text()
    assert "Pareto front" in svg and "pick (knee)" in svg and "registers" in svg
    assert "the search aimed at their front" in (tmp_path / "r.md").read_text()


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.replace("[evidence.front.values]\nregisters = ", "[evidence.front.values]\nregisters = nan #", 1),
     "must give a finite number"),
    (lambda t: t.replace("[objective.best]\nregisters = ", "[objective.best]\nregisters = inf #", 1),
     "objective.best must give a finite number"),
    (lambda t: t.replace("[objective.best]\nregisters = ", "[objective.best]\nregisters = 1.0 #", 1),
     "objective.best.registers = 1.0 is not what evidence.best gives"),
    (lambda t: t.replace('objectives = [\n    "registers",', 'objectives = [\n    "speed",', 1), "objective.objectives"),
    (lambda t: t.replace('rule = "knee"', 'rule = "weights=9"', 1), "evidence.pick: --pick must be"),
    (lambda t: t.replace("[evidence.front.settings]", '[evidence.front.settings]\n"-Xcompiler" = "-fplugin=x.so"', 1),
     "is not in the search space"),
])
def test_a_hostile_front_is_a_one_line_error(tuned: app.TuneReport, tmp_path: Path, edit, message) -> None:
    text = tuned.acf_path.read_text()
    hostile = edit(text)
    assert hostile != text
    path = tmp_path / "hostile.acf.toml"
    path.write_text(hostile)
    result = run_cli(["flags", str(path)], tmp_path)
    assert result.returncode == 2 and len(result.stderr_lines) == 1, result.describe()
    assert message in result.stderr


@pytest.mark.parametrize(("overrides", "message"), [
    ({"objective": "registers,registers"}, "2-3 distinct ones"),
    ({"objective": "registers,speed"}, "2-3 distinct ones"),
    ({"objective": "spills,registers,occupancy,instructions"}, "2-3 distinct ones"),
    ({"pick": "first"}, "--pick applies to several objectives"),  # with the default, single objective
    ({"objective": "registers,instructions", "pick": "weights=1"}, "--pick must be knee, first or weights=W1,W2"),
    ({"objective": "registers,instructions", "pick": "weights=registers:1,spills:1"}, "--pick must be"),
])
def test_bad_objectives_or_pick_fail_before_anything_is_built(tmp_path: Path, overrides, message) -> None:
    options = {"objective": "static", **overrides}
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        _tune(tmp_path, **options)
    assert not (tmp_path / "t.db").exists()


@pytest.mark.skipif(__import__("compileiq.evaluate.measure").evaluate.measure.gpu_visible(), reason="a GPU is visible here")
def test_time_among_several_objectives_needs_a_gpu(tmp_path: Path) -> None:
    result = run_cli(["tune", str(SPILL_HEAVY), "--objective", "time,registers", "--db", f"sqlite:///{tmp_path}/t.db",
                      "--workers", "local"], tmp_path)
    assert result.returncode == 2 and len(result.stderr_lines) == 1, result.describe()
    assert "time needs a GPU" in result.stderr and not (tmp_path / "t.db").exists()


def test_the_front_search_spreads_a_batch_over_the_front() -> None:
    """After the initial design every batch has one member leaning on each objective in turn and
    random Chebyshev weights for the rest; the scalarisation ranks the front's ends first."""
    space = SearchSpace("s", "", ())
    # scaled: (0, 1), (1, 0), (0.5, 0.5); f = max(w * z) + 0.05 * sum(w * z)
    assert chebyshev([(0.0, 10.0), (10.0, 0.0), (5.0, 5.0), None], (0.98, 0.02)) == pytest.approx(
        [0.02 + 0.05 * 0.02, 0.98 + 0.05 * 0.98, 0.49 + 0.05 * 0.5, None])
    searcher = FrontSearcher(space, SearchSettings(seed=3), 2)
    assert searcher.weights(0) == pytest.approx((0.98, 0.02))
    weights = searcher.weights(1)
    assert math.isclose(sum(weights), 1.0) and all(w >= 0 for w in weights)


@pytest.mark.slow
def test_time_and_registers_with_a_fake_gpu(tmp_path: Path) -> None:
    """`--objective time,registers`: the runtime evaluator's time and the static registers of each
    variant make the front; the ACF says runtime, in ms (fake measurer at the process boundary)."""
    from test_timing import KERNEL, _fake_gpu

    from compileiq.build.workers import LocalWorkers
    from compileiq.core.toolchain import find_toolchain
    from compileiq.evaluate.measure import FakeMeasurer
    from compileiq.evaluate.metrics import StaticEvaluator
    from compileiq.evaluate.timing import TimeEvaluator, TimingTarget
    from compileiq.results import evidence
    from compileiq.source.kernel import bundle_sources, load_spec
    from compileiq.tuning.request import TuneRequest
    from compileiq.tuning.tuner import Tuner

    folder = tmp_path / "scale"
    folder.mkdir()
    (folder / "scale.cu").write_text(KERNEL)
    (folder / "tune.toml").write_text("[tune.defines]\nUNROLL = [1, 2, 4]\n")
    spec, tools = load_spec(folder / "scale.cu"), find_toolchain()
    space = app.tuning_space(spec, tools, app.TuneOptions(kernel=spec.source, only=("ptxas.maxrregcount",)))
    workers = app.SharedWorkers(LocalWorkers)
    target = TimingTarget(tools.nvcc, bundle_sources(spec), spec.arch, space, spec.fixed_define_args(),
                          120, spec.run_args, spec.rtol, spec.atol, None, False, StaticEvaluator("static", spec))
    store = Store.open(f"sqlite:///{tmp_path}/t.db")
    evaluator = TimeEvaluator(target, store, workers, FakeMeasurer(_fake_gpu))
    request = TuneRequest(spec, space, "time,registers", budget=6, search=SearchSettings("exhaustive"),
                          batch_size=6, pick="first")
    result = Tuner(request, store, tools, workers, SilentProgress(), evaluator).run()
    assert result.study.key.objective == "time,registers" and result.front is not None
    points = [p.values for p in result.front.points]
    assert not any(_dominates(a, b) for a in points for b in points)
    assert result.chosen.config["define.UNROLL"] == 2  # first = fastest; UNROLL=4 computes a wrong result
    assert values_of(result.chosen, ("time", "registers")) == min(points)
    table = evidence.objective_table(result)
    assert table["kind"] == evidence.RUNTIME_KIND and table["unit"] == "ms"
    assert table["objectives"] == ["time", "registers"] and set(table["best"]) == {"time", "registers"}
    store.close()


def test_the_searcher_learns_vectors_in_the_order_told() -> None:
    space = app.tuning_space(*_spec_and_tools(), app.TuneOptions(kernel=SPILL_HEAVY, only=ONLY))
    searcher = FrontSearcher(space, SearchSettings(seed=1, initial_points=4), 2)
    configs = searcher.ask(6)
    searcher.tell([Observation(c, float(i), (float(i), float(-i))) for i, c in enumerate(configs)])
    searcher.tell([Observation(configs[0], 0.0, (0.0, 0.0))])  # told twice: learnt once
    batch = searcher.ask(4)
    assert len(batch) == 4 and not {c.key for c in batch} & {c.key for c in configs}


def _spec_and_tools() -> tuple[object, object]:
    from compileiq.core.toolchain import find_toolchain
    from compileiq.source.kernel import load_spec

    return load_spec(SPILL_HEAVY), find_toolchain()


def test_every_view_names_the_trial_the_acf_cites_and_a_rerun_keeps_it(tmp_path: Path) -> None:
    """Rodinia's nw tuned with --pick first, twice: `show` (list, front, --json) and the report name the trial
    the ACF cites (they picked by the knee), the front's marked row is that trial, and a rerun
    simplifies the same search winner again ([evidence.simplified] named an earlier run's
    simplified trial as the search winner, with nothing dropped), its `kept` the ACF's controls."""
    shutil.copytree(NW, tmp_path / "nw")
    nw = {"kernel": tmp_path / "nw" / "needle.cu", "pick": "first", "budget": 24, "batch_size": 8, "only": ()}
    first = _tune(tmp_path, **nw)
    assert first.result.chosen.number != first.result.baseline.number and first.result.simplification is not None
    again = _tune(tmp_path, **nw)
    assert again.result.chosen.number == first.result.chosen.number
    db, name = first.database, first.result.study.name
    document = acf.read(tmp_path / "k.acf.toml")
    cited = document.provenance["trial"]
    simplified = document.evidence.get("simplified")
    if simplified is not None:
        winner = next(t for t in again.result.trials if t.number == simplified["search_winner_trial"])
        assert winner.purpose == eligibility.SEARCH, winner
        baseline = again.result.baseline.config
        assert sorted(simplified["kept"]) == sorted(k for k, v in document.controls.items() if baseline.get(k) != v)
    listed = json.loads(run_cli(["show", "--db", db, "--json"], tmp_path).stdout)
    assert [s["chosen"] for s in listed if s["name"] == name] == [cited]
    shown = json.loads(run_cli(["show", name, "--db", db, "--json"], tmp_path).stdout)
    assert shown["pick"] == cited and shown["pick_rule"] == "first"
    plain = run_cli(["show", name, "--db", db], tmp_path).output
    assert f"chosen (first): trial #{cited};" in plain
    marked = [line for line in plain.splitlines() if "<- first" in line]
    assert len(marked) == 1 and marked[0].split("│")[1].strip() == str(cited), plain
    written = run_cli(["report", name, "--db", db, "--format", "md", "-o", str(tmp_path / "r.md")], tmp_path)
    assert written.returncode == 0 and f"chosen (trial #{cited})" in (tmp_path / "r.md").read_text(), written.describe()
    page = (tmp_path / "r.md").read_text()  # quotes as quotes: markdown shows an HTML entity as it is
    assert "The study's objectives" in page and "&#x27;" not in page
    chosen = next(t for t in again.result.trials if t.number == cited)  # every objective's value, by name
    registers, instructions = values_of(chosen, OBJECTIVES)  # type: ignore[misc]
    assert f"chosen (trial #{cited}) registers {registers:g}, instructions {instructions:g}." in page


def test_why_gives_each_objectives_importance(capsys: pytest.CaptureFixture[str]) -> None:
    """spills,instructions with no spill anywhere: a trial's recorded value (the first objective) is 0
    everywhere, and `show --why` used to say that no objective value varies while instructions did."""
    from datetime import UTC, datetime

    from compileiq.cli.why import print_why
    from compileiq.core.records import Study, StudyKey

    study = Study(1, "s", StudyKey("k", "0", "nvcc-13.0", "0", "t", "sm_90", "static", "spills,instructions"),
                  datetime.now(UTC))
    trials = [Trial(n + 1, 1, n, f"k{n}", {"ptxas.opt_level": n % 4, "define.B": n % 3}, TrialState.COMPLETE, 0.0,
                    None, False, {"spill_bytes": 0, "registers": 32, "occupancy": 1.0, "stack_bytes": 0,
                                  "instructions": 300 + 40 * (n % 4)}, f"c{n}", 0.1, datetime.now(UTC),
                    datetime.now(UTC), "w") for n in range(12)]
    print_why(study, trials, as_json=True)
    data = json.loads(capsys.readouterr().out)
    by_objective = data["importance_by_objective"]
    assert by_objective["spills"] == []  # the same in every trial
    assert by_objective["instructions"][0]["setting"] == "ptxas.opt_level"
    print_why(study, trials, as_json=False)
    text = capsys.readouterr().out
    assert "surrogate importance for spills: not computed (every trial has the same spills)" in text
    assert "surrogate importance for instructions (" in text


def test_the_simplification_line_says_when_resetting_made_the_choice_better(tmp_path: Path) -> None:
    """Settings whose reset improved an objective (conv2d: BK back to 16, 1,784 -> 1,416
    instructions) were said to have "made no difference"."""
    kernel = Path(__file__).resolve().parent.parent / "kernels" / "conv2d" / "conv2d.cu"
    url = f"sqlite:///{tmp_path / 't.db'}"
    done = run_cli(["tune", str(kernel), "--objective", "registers,instructions", "--pick", "weights=1,3",
                    "--budget", "24", "--workers", "local", "--db", url, "--out", "k.acf.toml"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    line = next(line for line in done.stdout.splitlines() if line.startswith("simplified: search winner #"))
    winner, chosen = (int(n) for n in re.findall(r"#(\d+)", line)[:2])
    trials = {t["number"]: t for t in json.loads(run_cli(["show", "1", "--db", url, "--json", "--top", "1000"],
                                                         cwd=tmp_path).stdout)["trials"]}
    same = trials[winner]["values"] == trials[chosen]["values"]
    assert ("made no difference" in line) == same and ("made the choice better" in line) == (not same), line


def test_a_trade_offs_acf_gives_occupancy_as_it_reads(tmp_path: Path) -> None:
    """A spills,occupancy ACF recorded occupancy 0.8125 -> 0.75 (its shortfall, what the search
    minimises) beside evidence saying 19% -> 25% (a user's sgemm): each such value now comes with
    what it is and the number people read, which reading the ACF holds to the recorded one."""
    kernel = Path(__file__).resolve().parent.parent / "kernels" / "spill_heavy" / "spill_heavy.cu"
    done = run_cli(["tune", str(kernel), "--objective", "spills,occupancy", "--only",
                    "ptxas.maxrregcount,ptxas.override_directive_values", "--budget", "16", "--workers", "local",
                    "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", "k.acf.toml"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    # the run's lines read the same way (a user's nw: the header said "occupancy,instructions, lower
    # is better", each trial showed the first objective's shortfall, and "best" named a dominated trial)
    assert "spill bytes, lower is better; theoretical occupancy, higher is better" in done.output
    progress = [line for line in done.stderr.splitlines() if line.startswith("[") and "] #" in line]
    assert progress and all(re.search(r"\] #\d+ \d+ / \d+\.\d%", line) for line in progress), progress
    assert all("  front: " in line and "  best " not in line for line in progress), progress
    assert int(progress[-1].split("  front: ")[1].split()[0]) >= 1, progress[-1]
    data = tomllib.loads((tmp_path / "k.acf.toml").read_text())
    objective = data["objective"]
    assert objective["values_are"] == {"occupancy": "1 - occupancy (the shortfall)"}
    for table in ("baseline", "best"):
        assert objective[f"{table}_shown"]["occupancy"] == pytest.approx(1 - objective[table]["occupancy"])
        assert objective[f"{table}_shown"]["occupancy"] == data["evidence"][table]["occupancy"]
    for point in data["evidence"]["front"]:
        assert point["values_shown"]["occupancy"] == pytest.approx(1 - point["values"]["occupancy"])
    text = (tmp_path / "k.acf.toml").read_text()
    start = text.index("[objective.best_shown]")
    forged = text[:start] + text[start:].replace("occupancy = ", "occupancy = 0.99 #", 1)
    (tmp_path / "forged.acf.toml").write_text(forged)
    flags = run_cli(["flags", "forged.acf.toml"], cwd=tmp_path)
    assert flags.returncode == 2 and "best_shown must give each objective's recorded value" in flags.stderr, flags.describe()


def test_occupancy_first_reads_as_occupancy_in_every_view_and_the_front_names_the_baseline(tmp_path: Path) -> None:
    """A user's occupancy,registers study: `show --json` gave `best_shown 0.0` and `value_shown 0.0`
    (the shortfall) beside `values_shown {"occupancy": 1.0}` and the ACF's `best_shown` 1.0, and the
    front table read "occupancy shortfall 0" under a summary of "100.0% / 24"; its heading said
    "settings that differ from the defaults" where the baseline is the shipped build (a user's
    --use_fast_math was left out, rightly: the report heads the same list "from the baseline")."""
    (tmp_path / "k.cu").write_text(SPILL_HEAVY.read_text())
    (tmp_path / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(tmp_path), "command": "nvcc --use_fast_math -arch=sm_90 -c k.cu -o k.o", "file": "k.cu"}]))
    db = f"sqlite:///{tmp_path / 't.db'}"
    done = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--objective",
                    "occupancy,registers", "--only", ",".join((*ONLY, "nvcc.use_fast_math")), "--budget", "12",
                    "--workers", "local", "--db", db, "--out", "k.acf.toml"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    objective = tomllib.loads((tmp_path / "k.acf.toml").read_text())["objective"]
    shown = run_cli(["show", "--db", db, "--json"], tmp_path)
    name = json.loads(shown.stdout)[0]["name"]
    data = json.loads(run_cli(["show", name, "--db", db, "--json"], tmp_path).stdout)
    assert data["study"]["best_shown"] == objective["best_shown"]["occupancy"] != data["study"]["best"]
    # no one unit or direction for two objectives (it said "occupancy,registers", "lower"): each its own
    assert "better" not in data["objective"] and "unit" not in data["objective"], data["objective"]
    assert [(o["name"], o["better"]) for o in data["objective"]["objectives"]] == [
        ("occupancy", "higher"), ("registers", "lower")]
    for trial in data["trials"]:
        if trial["values"] is not None:
            assert trial["value_shown"] == trial["values_shown"]["occupancy"] == pytest.approx(1 - trial["value"])
    plain = run_cli(["show", name, "--db", db], tmp_path)
    header = next(line for line in plain.stdout.splitlines() if "chosen" in line and "settings" in line)
    assert "settings that differ from the baseline" in header and "defaults" not in header, plain.output
    assert "shortfall" not in header and "occupancy" in header, plain.output
    occupancy = f"{objective['best_shown']['occupancy']:.1%}"
    chosen_row = next(line for line in plain.stdout.splitlines() if "<- knee" in line)
    assert occupancy in chosen_row and "use_fast_math" not in chosen_row, plain.output
    assert "theoretical occupancy, higher is better" in plain.stdout.split("\n", 1)[0], plain.output
    front_table = next(line for line in done.stdout.splitlines() if "chosen" in line and "settings" in line)
    assert front_table == header, done.output  # tune ends with the same table
    report = run_cli(["report", name, "--db", db, "--format", "md", "-o", "r.md"], tmp_path)
    assert report.returncode == 0, report.describe()
    assert "| # | occupancy | registers | pick | settings that differ from the baseline |" in (tmp_path / "r.md").read_text()
