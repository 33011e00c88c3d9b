"""The end of a run (`tuning.decide`) against a fake compiler: the choice the ACF records is the one
every view replays from the recorded trials (`results.explain`), whatever the decision's own builds
add to the study. The compiler is faked (a rule from settings to machine code); the logic is real."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from compileiq.core.records import SEARCH, Study, StudyKey, Trial, TrialState
from compileiq.core.space import Config
from compileiq.evaluate import eligibility
from compileiq.results import acf
from compileiq.results.explain import explain
from compileiq.results.simplify import baseline_space
from compileiq.tuning.decide import Decider
from tests.helpers import run_cli

BASE = {"define.W": 6, "nvcc.a": False, "ptxas.b": False, "ptxas.c": False, "ptxas.opt_level": 3}


class FakeStudy:
    """Trials recorded in order; a config built twice is the same trial. The machine code depends on
    the macro and the three flags, not on `ptxas.opt_level` (a lower level that changed nothing);
    W=4 removes the baseline's occupancy shortfall (value 62 -> 0)."""

    def __init__(self, objective: str = "static") -> None:
        self.trials: list[Trial] = []
        self.study = Study(1, "fake", StudyKey("k", "0", "nvcc-13.0", "0", "nvcc 13.0", "sm_90", "static", objective),
                           datetime.now(UTC))

    def build(self, configs: Sequence[Config], purpose: str) -> list[Trial]:
        return [self._trial(config.as_dict(), purpose) for config in configs]

    def _trial(self, config: dict[str, Any], purpose: str) -> Trial:
        key = Config.of(config).key
        if (found := next((t for t in self.trials if t.config_key == key), None)) is not None:
            return found
        code = repr(sorted((k, v) for k, v in config.items() if k != "ptxas.opt_level"))
        occupancy = 1.0 if config["define.W"] == 4 else 0.938
        trial = Trial(len(self.trials) + 1, 1, len(self.trials), key, dict(config), TrialState.COMPLETE,
                      0.0 if occupancy == 1.0 else 62.0, None, False,
                      {"spill_bytes": 0, "occupancy": occupancy, "registers": 24, "instructions": 300, "stack_bytes": 0}, code, 0.1,
                      datetime.now(UTC), datetime.now(UTC), "w", purpose)
        self.trials.append(trial)
        return trial


def _decider(fake: FakeStudy, baseline: Trial) -> Decider:
    return Decider(fake.study, "static", ("static",), "knee", True, True, True, 0, False, baseline_space(BASE),
                   fake.build, lambda: tuple(fake.trials), eligibility.study_refusal(baseline, "static", True),
                   None, lambda line: None, None)


def test_a_stand_in_made_by_the_simplification_does_not_split_the_acf_from_the_views() -> None:
    """The search's winner sets W=4 and three flags that change nothing; a search result with the
    same macro and two of the flags is refused for its lower -O alone. Simplifying the winner builds
    that result's code without the lower -O: a stand-in with fewer settings, which every view then
    takes as the winner. The ACF used to hold the stand-in unsimplified (three no-gain flags) while
    the run printed that they went back to the default, and the views chose yet another trial."""
    fake = FakeStudy()
    baseline = fake.build([Config.of(BASE)], SEARCH)[0]
    fake.build([Config.of(BASE | {"define.W": 4, "nvcc.a": True, "ptxas.b": True, "ptxas.c": True}),
                Config.of(BASE | {"define.W": 4, "nvcc.a": True, "ptxas.c": True, "ptxas.opt_level": 2})], SEARCH)

    decision = _decider(fake, baseline).decide(baseline, tuple(fake.trials))

    replayed = explain(fake.study, decision.trials)
    assert replayed.chosen is not None and replayed.chosen.number == decision.chosen.number
    assert {k: v for k, v in decision.chosen.config.items() if BASE[k] != v} == {"define.W": 4}
    assert decision.simplification is not None and decision.simplification.chosen.number == decision.chosen.number
    assert decision.ablation is not None and decision.ablation.steps[-1].trial == decision.chosen.number


def test_a_static_trade_off_drops_a_setting_that_changes_the_code_but_no_objective() -> None:
    """Several static objectives: a flag that changes the machine code (a cache hint) but none of
    the objectives' values goes back to its default, as one objective's would; it used to stay
    because the front's simplification kept only drops with identical code."""
    fake = FakeStudy("spills,occupancy")
    baseline = fake.build([Config.of(BASE)], SEARCH)[0]
    fake.build([Config.of(BASE | {"define.W": 4, "ptxas.b": True})], SEARCH)
    decider = Decider(fake.study, "spills,occupancy", ("spills", "occupancy"), "knee", True, True, False, 0, False,
                      baseline_space(BASE), fake.build, lambda: tuple(fake.trials),
                      eligibility.study_refusal(baseline, "spills,occupancy", True), None, lambda line: None, None)

    decision = decider.decide(baseline, tuple(fake.trials))

    assert {k: v for k, v in decision.chosen.config.items() if BASE[k] != v} == {"define.W": 4}
    replayed = explain(fake.study, decision.trials)
    assert replayed.chosen is not None and replayed.chosen.number == decision.chosen.number


def test_a_better_build_made_to_decide_is_chosen_not_left_as_may_be_chosen() -> None:
    """A step of a candidate's shrinking (other code, no refused setting, fewer spills) was shown as
    "may be chosen" beside a choice it beat, and the ACF kept the defaults (a red team's spill_heavy:
    624 spill bytes at the same occupancy against 672). It is chosen now, simplified, and a rerun
    starts from the same trial."""
    fake = FakeStudy()
    baseline = fake.build([Config.of(BASE)], SEARCH)[0]
    fake.build([Config.of(BASE | {"ptxas.b": True})], SEARCH)
    made = fake.build([Config.of(BASE | {"define.W": 4, "nvcc.a": True, "ptxas.c": True})], "simplify")[0]

    decision = _decider(fake, baseline).decide(baseline, tuple(fake.trials))

    assert decision.winner.number == made.number
    assert {k: v for k, v in decision.chosen.config.items() if BASE[k] != v} == {"define.W": 4}
    replayed = explain(fake.study, decision.trials)
    assert replayed.chosen is not None and replayed.chosen.number == decision.chosen.number
    again = _decider(fake, baseline).decide(baseline, tuple(fake.trials))  # a rerun: the same start and end
    assert (again.winner.number, again.chosen.number) == (decision.winner.number, decision.chosen.number)


class CostlyFlagStudy(FakeStudy):
    """`ptxas.b` adds 50 static instructions: simplifying a pick that sets it changes its values."""

    def _trial(self, config: dict[str, Any], purpose: str) -> Trial:
        trial = super()._trial(config, purpose)
        if config.get("ptxas.b") and trial.metrics["instructions"] == 300:
            trial.metrics["instructions"] = 350
        return trial


def test_the_acfs_front_lists_the_chosen_trial_for_the_picked_point() -> None:
    """[[evidence.front]] listed the search's unsimplified trial for the picked point (a user's
    FDTD3d: front #17 and #0, pick #30); then the chosen number with the unsimplified trial's values
    (a reviewer's conv2d: 1784 instructions on the front, 1416 in [evidence.best])."""
    from types import SimpleNamespace

    from compileiq.results.evidence import front_rows

    fake = CostlyFlagStudy("occupancy,instructions")
    baseline = fake.build([Config.of(BASE)], SEARCH)[0]
    fake.build([Config.of(BASE | {"define.W": 4, "ptxas.b": True})], SEARCH)
    decider = Decider(fake.study, "occupancy,instructions", ("occupancy", "instructions"), "first", True, True, False,
                      0, False, baseline_space(BASE), fake.build, lambda: tuple(fake.trials),
                      eligibility.study_refusal(baseline, "occupancy,instructions", True), None, lambda line: None, None)
    decision = decider.decide(baseline, tuple(fake.trials))
    assert decision.winner.metrics["instructions"] == 350 and decision.chosen.metrics["instructions"] == 300

    rows = front_rows(SimpleNamespace(front=decision.front, baseline=baseline, chosen=decision.chosen))

    picked = next(row for row in rows if row["trial"] == decision.chosen.number)
    assert picked["settings"] == {"define.W": 4} and picked["values"]["instructions"] == 300, rows
    assert decision.winner.number not in [row["trial"] for row in rows]
    replayed = explain(fake.study, decision.trials, "first")
    assert replayed.front is not None and replayed.front.pick is not None
    assert (replayed.front.pick.trial.number, replayed.front.pick.values) == (decision.chosen.number, (0.0, 300.0))


def test_a_runtimes_noise_in_a_build_made_to_decide_never_becomes_its_winner() -> None:
    """A better build made to decide is chosen for static values (exact), not for a runtime's single
    screening run of an ablation step (noise: the confirmation decides)."""
    fake = FakeStudy()
    baseline = fake.build([Config.of(BASE)], SEARCH)[0]
    fake.build([Config.of(BASE | {"ptxas.b": True})], SEARCH)
    made = fake.build([Config.of(BASE | {"define.W": 4})], "ablation")[0]  # value 0: better than both
    refuse = eligibility.study_refusal(baseline, "static", True)
    assert eligibility.search_winner(fake.trials, baseline, refuse).number == made.number
    assert eligibility.search_winner(fake.trials, baseline, lambda t: None, static=False).number != made.number


def test_a_macro_that_only_sets_the_launch_keeps_the_occupancy_it_was_chosen_for(tmp_path: Path) -> None:
    """Rodinia's gaussian: its block-size macros reach only the launch ([launch.NAME]), so every value
    builds the same machine code. Simplification took "same code" for "as good", put the macro back
    to its default and wrote an ACF at the baseline's occupancy (50%) after finding 100%. (Its host
    code launches with the macro: one that no code reads is refused, `test_macro_effect`.)"""
    (tmp_path / "k.cu").write_text("__global__ void k(float* x) { x[blockIdx.x * blockDim.x + threadIdx.x] *= 2.0f; }\n"
                                   "void launch(float* x, int n) { k<<<n / BS, BS>>>(x); }\n")
    (tmp_path / "tune.toml").write_text('arch = "sm_90"\n[tune.defines]\nBS = [32, 64, 128]\n[launch.k]\nblock_size = "BS"\n')
    done = run_cli(["tune", "k.cu", "--objective", "occupancy", "--only", "define.BS", "--strategy", "exhaustive",
                    "--budget", "3", "--workers", "local", "--db", f"sqlite:///{tmp_path}/t.db", "--out", "k.acf.toml"],
                   cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    found = acf.read(tmp_path / "k.acf.toml")
    assert found.controls["define.BS"] in (64, 128) and found.evidence["best"]["occupancy"] == 1.0, found.controls
    assert found.evidence["baseline"]["occupancy"] == 0.5 and found.objective["improved"] is True
    # --why and the report read occupancy as occupancy (they gave its shortfall, 0.5 -> 0, "lower is better")
    why = run_cli(["show", found.provenance["study"], "--why", "--db", f"sqlite:///{tmp_path}/t.db"], cwd=tmp_path)
    assert "higher is better" in why.stdout and "lower is better" not in why.stdout, why.describe()
    assert "total gain +50.0%: baseline 50.0%, chosen #" in why.stdout and "100.0%" in why.stdout
    report = run_cli(["report", found.provenance["study"], "--format", "md", "-o", "r.md", "--db",
                      f"sqlite:///{tmp_path}/t.db"], cwd=tmp_path)
    assert report.returncode == 0 and "| +50.0% |" in (tmp_path / "r.md").read_text(), report.describe()
