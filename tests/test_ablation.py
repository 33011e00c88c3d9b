"""Each setting's contribution: the ablation path sums to the total gain, on a real kernel (real
nvcc/ptxas, SQLite) through tune, the ACF, `show --why` and the report, and on recorded trials."""

import itertools
import json
import re
import tomllib
from pathlib import Path

import pytest
from helpers import run_cli

from compileiq.core.readings import exact
from compileiq.core.records import StudyKey, TrialState
from compileiq.report.contributions import contribution_note, contribution_rows
from compileiq.results.ablation import ablation_path, evidence_rows, recorded
from compileiq.results.explain import explain
from compileiq.store import Store

SPILL_HEAVY = Path(__file__).resolve().parents[1] / "kernels" / "spill_heavy" / "spill_heavy.cu"
ONLY = "ptxas.maxrregcount,ptxas.override_directive_values,ptxas.opt_level,ptxas.register_usage_level"


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """spill_heavy tuned for spills with a small budget; its database and ACF."""
    where = tmp_path_factory.mktemp("spill_heavy")
    db = f"sqlite:///{where}/t.db"
    acf_path = where / "spill_heavy.acf.toml"
    result = run_cli(["tune", str(SPILL_HEAVY), "--objective", "spills", "--budget", "12", "--workers", "local",
                      "--only", ONLY, "--db", db, "--out", str(acf_path), "--study", "sh"], where)
    assert result.returncode == 0, result.describe()
    return where, db, tomllib.loads(acf_path.read_text())


@pytest.mark.slow
def test_contributions_in_the_acf_sum_to_the_total_gain(tuned):
    _, _, acf = tuned
    rows = acf["evidence"]["contribution"]
    baseline, best = acf["objective"]["baseline"], acf["objective"]["best"]
    assert baseline > best  # spill_heavy spills at its defaults; the tuned config spills less
    assert sum(r.get("contribution", 0) for r in rows) == pytest.approx(baseline - best)
    assert {r["setting"] for r in rows} == set(acf["controls"])  # every chosen setting is credited
    assert rows[0]["metric_before"] == baseline and rows[-1]["metric_after"] == best
    for before, after in itertools.pairwise(rows):
        assert after.get("metric_before") == before.get("metric_after")


@pytest.mark.slow
def test_show_why_prints_each_contribution(tuned):
    where, db, acf = tuned
    result = run_cli(["show", "sh", "--why", "--db", db], where)
    assert result.returncode == 0, result.describe()
    for row in acf["evidence"]["contribution"]:
        line = next(line for line in result.stdout.splitlines() if row["setting"] in line)
        assert re.search(rf"\b{row['contribution']:g}\b", line), line
    assert "the contributions sum to it" in result.stdout and "static estimate" in result.stdout
    assert f"chosen #{acf['provenance']['trial']} " in result.stdout  # the same choice as the tuner's
    data = run_cli(["show", "sh", "--why", "--json", "--db", db], where)
    rows = json.loads(data.stdout)["contribution"]
    assert [r["setting"] for r in rows] == [r["setting"] for r in acf["evidence"]["contribution"]]


@pytest.mark.slow
def test_the_report_shows_the_contributions(tuned):
    where, db, acf = tuned
    out = where / "report.html"
    result = run_cli(["report", "sh", "--db", db, "-o", str(out)], where)
    assert result.returncode == 0, result.describe()
    section = out.read_text().split('<section id="contributions">')[1].split("</section>")[0]
    for row in acf["evidence"]["contribution"]:
        assert f"<td>{row['setting']}</td>" in section
    total = acf["objective"]["baseline"] - acf["objective"]["best"]
    # the total as `show --why` prints it (one formatter: `core.readings`), never 1.552e+06
    assert "<td>total</td>" in section and f"<td>{exact(total)}</td>" in section, section


def test_a_failed_step_keeps_the_sum_exact(tmp_path):
    """Recorded trials: baseline 100; a alone 90, b alone fails, c alone 95; a+b and a+c fail; the
    chosen a+b+c is 40. The gain across the failed step is credited to the next step with a value."""
    store = Store.open(f"sqlite:///{tmp_path}/t.db")
    key = StudyKey("k", "0" * 64, "s", "0" * 64, "t", "sm_90", "static", "spills")
    study = store.get_or_create_study(key, "unit")
    base = {"a": 0, "b": 0, "c": 0}
    results = [(base, 100.0), ({"a": 1, "b": 0, "c": 0}, 90.0), ({"a": 0, "b": 1, "c": 0}, None),
               ({"a": 0, "b": 0, "c": 1}, 95.0), ({"a": 1, "b": 1, "c": 0}, None), ({"a": 1, "b": 0, "c": 1}, None),
               ({"a": 1, "b": 1, "c": 1}, 40.0)]
    for config, value in results:
        trial = store.claim_trials(study.id, [(json.dumps(config, sort_keys=True, separators=(",", ":")), config)], "t")[0]
        state = TrialState.COMPLETE if value is not None else TrialState.FAILED
        store.finish_trial(trial.id, state=state, value=value, reason=None if value else "ptxas error", metrics={},
                           code_hash=None, compile_seconds=0.0)
    trials = store.trials(study.id)
    store.close()
    ablation = ablation_path(trials[0], trials[-1], recorded(trials))
    assert ablation is not None and ablation.complete
    assert [s.setting for s in ablation.steps] == ["a", "b", "c"]
    assert [(s.before, s.after, s.contribution) for s in ablation.steps] == [
        (100.0, 90.0, 10.0), (90.0, None, None), (None, 40.0, 50.0)]
    assert sum(s.contribution or 0 for s in ablation.steps) == ablation.total_gain == 60.0
    assert explain(study, trials).ablation == ablation


def test_a_tuned_macro_that_changes_nothing_goes_back_to_its_first_value_as_a_flag_does():
    # Simplification reset only compiler settings: a winner with -DBLOCK=64 kept it although
    # -DBLOCK=128 gave the same result, and `show --why` (whose ablation flips macros) then named
    # another trial than the ACF. Logic only: results by config from a table.
    from datetime import UTC, datetime

    from compileiq.core.space import Config
    from compileiq.core.space_files import load_space
    from compileiq.results.simplify import simplify

    space = load_space("13.0").select(only=["ptxas.opt_level"]).with_defines({"BLOCK": [128, 64], "HALF": [8, 16]})
    code = {(1, 128, 16): "a", (1, 64, 16): "a", (3, 64, 16): "b", (1, 64, 8): "c", (1, 128, 8): "c", (3, 128, 16): "b"}
    value = {"a": 250.0, "b": 625.0, "c": 812.0}

    def trial(config: Config, number: int):
        from compileiq.core.records import Trial

        key = (config["ptxas.opt_level"], config["define.BLOCK"], config["define.HALF"])
        return Trial(number, 1, number, config.key, config.as_dict(), TrialState.COMPLETE, value[code[key]], None,
                     False, {}, code[key], 0.1, datetime.now(UTC), datetime.now(UTC), "host:1")  # fmt: skip

    winner = trial(Config.of({"ptxas.opt_level": 1, "define.BLOCK": 64, "define.HALF": 16}), 1)
    result = simplify(winner, space, lambda configs: [trial(c, 2 + i) for i, c in enumerate(configs)])
    assert result.dropped == ("define.BLOCK",) and set(result.kept) == {"ptxas.opt_level", "define.HALF"}
    assert result.chosen.config == {"ptxas.opt_level": 1, "define.BLOCK": 128, "define.HALF": 16}


def test_an_incomplete_path_names_what_a_rerun_cannot_build(tmp_path):
    """Configurations on the path that [tune] restrictions forbid are never built, yet `show --why`
    told the user to rerun tune to complete it (a rerun built nothing; a user's SGEMM_CUDA)."""
    store = Store.open(f"sqlite:///{tmp_path}/t.db")
    key = StudyKey("k", "0" * 64, "s", "0" * 64, "t", "sm_90", "static", "spills")
    study = store.get_or_create_study(key, "unit")
    for config, value in (({"a": 0, "b": 0}, 100.0), ({"a": 1, "b": 1}, 40.0)):  # a or b alone: forbidden
        trial = store.claim_trials(study.id, [(json.dumps(config, sort_keys=True, separators=(",", ":")), config)], "t")[0]
        store.finish_trial(trial.id, state=TrialState.COMPLETE, value=value, reason=None, metrics={},
                           code_hash=None, compile_seconds=0.0)
    store.close()
    shown = run_cli(["show", "unit", "--db", f"sqlite:///{tmp_path}/t.db", "--why"], cwd=tmp_path)
    assert shown.returncode == 0, shown.describe()
    # no run recorded which are forbidden: the step moves a and b together, and the note says what a rerun does
    assert re.search(r"│ 1 +│ a \+ b +│ 1, 1 +│ 100 +│ 40 +│ 60", shown.stdout), shown.stdout
    assert ("2 configuration(s) the path tried have no recorded result: a rerun of compileiq tune builds those "
            "tune.toml's [tune] restrictions allow, and records the others as forbidden") in shown.stdout, shown.describe()


COUPLED_KERNEL = """\
#ifndef BC
#define BC 32
#endif
#ifndef BR
#define BR 32
#endif
__global__ void __launch_bounds__(BR) k(float* y, const float* x, int n) {
  __shared__ float s[BC * BR * 8];
  int i = blockIdx.x * BR + threadIdx.x;
  for (int j = threadIdx.x; j < BC * BR * 8; j += BR) s[j] = x[(i + j) % n];
  __syncthreads();
  float a = 0.f;
  for (int j = 0; j < BC * 8; ++j) a += s[j * BR + threadIdx.x];
  if (i < n) y[i] = a;
}
"""


def test_macros_a_restriction_couples_are_one_step_of_the_path(tmp_path):
    """user51: with `BC == BR`, the path flipped BC alone (forbidden, never built), credited the
    whole gain to BR, and told the user a rerun would build the missing ones; a rerun changed
    nothing. The path steps through allowed configurations: BC and BR move together, as one step,
    in the ACF, `show --why` and its --json alike, and no rerun advice is printed."""
    (tmp_path / "k.cu").write_text(COUPLED_KERNEL)
    (tmp_path / "tune.toml").write_text('entries = ["k"]\nblock_size = "BR"\n\n[tune]\nrestrictions = ["BC == BR"]\n\n'
                                        "[tune.defines]\nBC = [32, 16]\nBR = [32, 16]\n")
    db = f"sqlite:///{tmp_path}/t.db"
    done = run_cli(["tune", "k.cu", "--workers", "local", "--db", db, "--budget", "2", "--only", "define.BC,define.BR",
                    "--out", "k.acf.toml"], tmp_path)
    assert done.returncode == 0, done.describe()
    acf = tomllib.loads((tmp_path / "k.acf.toml").read_text())
    assert acf["controls"]["define.BC"] == acf["controls"]["define.BR"] == 16, acf["controls"]
    rows = acf["evidence"]["contribution"]
    assert [(r["setting"], r["value"]) for r in rows] == [("define.BC + define.BR", [16, 16])], rows

    study = acf["provenance"]["study"]
    why = run_cli(["show", study, "--db", db, "--why", "--json"], tmp_path)
    assert why.returncode == 0, why.describe()
    data = json.loads(why.stdout)
    assert data["contribution"] == rows and data["path_complete"] is True, data
    assert rows[0]["contribution"] == data["total_gain"] > 0, (rows, data)
    shown = run_cli(["show", study, "--db", db, "--why"], tmp_path)
    assert re.search(r"│ 1 +│ define\.BC \+ define\.BR +│ 16, 16 +│", shown.stdout), shown.stdout
    assert "rerun" not in shown.stdout and "no recorded result" not in shown.stdout, shown.stdout


def _record(tmp_path, objective, results):
    """A study of `objective` whose trials hold `results` (config, value, spill bytes), in order."""
    store = Store.open(f"sqlite:///{tmp_path}/t.db")
    study = store.get_or_create_study(StudyKey("k", "0" * 64, "s", "0" * 64, "t", "sm_90", "static", objective), "unit")
    for config, value, spills in results:
        trial = store.claim_trials(study.id, [(json.dumps(config, sort_keys=True, separators=(",", ":")), config)], "t")[0]
        store.finish_trial(trial.id, state=TrialState.COMPLETE, value=value, reason=None,
                           metrics={"spill_bytes": spills, "occupancy": 0.5}, code_hash=None, compile_seconds=0.0)
    trials = store.trials(study.id)
    store.close()
    return study, trials


def test_the_path_steps_through_builds_the_rules_allow(tmp_path):
    """A user's SGEMM_CUDA (static): --override-directive-values alone spills (refused), TM+TN
    alone is allowed (#2), both together win (#3). The path flipped the flag first, through the refused
    build: `show --why` read "override_directive_values True: 1234375 -> 2786375 (-1552000)", the
    report printed shares of -126% / 226% and the same number as 1.234e+06 there. The path now takes
    the allowed pair first; show and the report format each number alike, and shares sum to 100%."""
    flag = "ptxas.override_directive_values"
    base = {"define.TM": 8, "define.TN": 8, flag: False}
    study, trials = _record(tmp_path, "static", [
        (base, 1234375.0, 1234), ({**base, flag: True}, 2786375.0, 2786),  # the flag alone: adds spill bytes
        ({**base, "define.TM": 4, "define.TN": 4}, 600250.0, 600), ({"define.TM": 4, "define.TN": 4, flag: True}, 500.0, 0)])
    ablation = explain(study, trials).ablation
    assert ablation is not None and explain(study, trials).chosen.number == trials[-1].number
    assert [(s.setting, s.before, s.after) for s in ablation.steps] == [
        ("define.TM + define.TN", 1234375.0, 600250.0), (flag, 600250.0, 500.0)]
    db = f"sqlite:///{tmp_path}/t.db"
    shown = run_cli(["show", "unit", "--db", db, "--why"], cwd=tmp_path)
    assert shown.returncode == 0, shown.describe()
    assert re.search(r"│ 1 +│ define\.TM \+ define\.TN +│ 4, 4 +│ 1234375 +│ 600250 +│ 634125 ", shown.stdout), shown.stdout
    assert re.search(rf"│ 2 +│ {flag} +│ True +│ 600250 +│ 500 +│ 599750 ", shown.stdout), shown.stdout
    md = run_cli(["report", "unit", "--db", db, "--format", "md", "-o", "-"], cwd=tmp_path)
    assert md.returncode == 0, md.describe()
    section = md.stdout.split("## Each setting's contribution")[1].split("##")[0]
    assert "| 1 | define.TM + define.TN | 4, 4 | 1234375 | 600250 | 634125 | 51% | #2 |" in section, section
    assert f"| 2 | {flag} | True | 600250 | 500 | 599750 | 49% | #3 |" in section, section
    assert "e+0" not in section and "No share" not in section, section
    assert not any(s.refused for s in ablation.steps)
    assert ablation.shares == pytest.approx((634125 / 1233875, 599750 / 1233875))


def test_a_step_through_a_refused_build_says_so_and_gives_no_shares(tmp_path):
    """Where the only step lands on a build the rules refuse, the row says so and no share is
    given: shares past 100% (-620650%) read as nonsense; so too on a path that loses ground."""
    _, trials = _record(tmp_path, "spills", [({"a": 0, "b": 0}, 100.0, 100), ({"a": 1, "b": 0}, 300.0, 300),
                                             ({"a": 1, "b": 1}, 40.0, 40)])
    refused = ablation_path(trials[0], trials[-1], recorded(trials),
                            refusal=lambda t: "adds spill bytes (1 -> 2)" if t.number == trials[-1].number else None)
    assert refused is not None and refused.steps[-1].refused == "adds spill bytes (1 -> 2)"
    assert refused.steps[-1].through == " (through a build the rules refuse: adds spill bytes (1 -> 2))"
    assert refused.shares is None and refused.shares_withheld == f"step {len(refused.steps)} passes through a build the rules refuse"
    # the ACF names the step as show --why and the report do (reviewer: it read as an ordinary step)
    assert evidence_rows(refused)[-1]["refused"] == "adds spill bytes (1 -> 2)"
    ablation = ablation_path(trials[0], trials[-1], recorded(trials))  # no rules: a, then b (300 on the way)
    assert ablation is not None and [s.contribution for s in ablation.steps] == [-200.0, 260.0]
    assert ablation.shares is None and ablation.shares_withheld == "step 1 loses ground (the path is not monotone)"
    header, rows = contribution_rows("spills", ablation)
    assert [r[header.index("share of gain")] for r in rows] == ["-", "-", "-"]
    assert "No share of the gain is given: step 1 loses ground" in contribution_note(ablation)
