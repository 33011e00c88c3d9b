"""Every view tells the ACF's story (issue 25, items 1 and 3), with real nvcc/ptxas.

A `--objective registers` study of spill_heavy refuses many of its lowest-register trials (they
add spill bytes over the defaults, or lower ptxas's level). The ACF, `show`, `show --why`, the
study list, the report, `tune --json` and the progress line must name one chosen trial, never rank
a refused trial above one that may be chosen, and say why each refused trial is refused. Values
read as people read them: occupancy as occupancy, higher is better.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import run_cli

from compileiq.core.records import RUNTIME_KIND, StudyKey, TrialState
from compileiq.core.space_files import load_space
from compileiq.results import acf
from compileiq.store import Store

ROOT = Path(__file__).resolve().parents[1]
SPILL_HEAVY = ROOT / "kernels" / "spill_heavy" / "spill_heavy.cu"


@pytest.fixture(scope="module")
def registers_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict]:
    folder = tmp_path_factory.mktemp("truth")
    result = run_cli(["tune", str(SPILL_HEAVY), "--objective", "registers", "--budget", "40", "--seed", "0",
                      "--workers", "local", "--db", f"sqlite:///{folder}/t.db", "--out", "k.acf.toml", "--json"],
                     cwd=folder)
    assert result.returncode == 0, result.describe()
    return folder, result.stderr, json.loads(result.stdout)


def _cli(folder: Path, *args: str) -> str:
    return _cli_at(folder, f"sqlite:///{folder}/t.db", *args)


def test_the_acf_show_why_report_and_json_name_the_same_chosen_trial(registers_study) -> None:
    folder, _, tuned = registers_study
    chosen = acf.read(folder / "k.acf.toml").evidence["best"]["trial"]
    assert tuned["best"]["number"] == chosen
    why = json.loads(_cli(folder, "show", "1", "--why", "--json"))
    assert why["chosen"] == chosen
    assert tuned["study"]["chosen"] == chosen
    shown = json.loads(_cli(folder, "show", "1", "--json"))
    assert shown["study"]["chosen"] == chosen
    assert shown["trials"][0]["number"] == chosen and shown["trials"][0]["status"] == "chosen"
    listed = json.loads(_cli(folder, "show", "--json"))
    assert [s["chosen"] for s in listed] == [chosen]
    assert listed[0]["best"] == tuned["best"]["value"]
    _cli(folder, "report", "1", "--format", "md", "-o", "r.md")
    report = (folder / "r.md").read_text()
    assert f"chosen (trial #{chosen})" in report
    assert re.search(rf"^\| {chosen} \| [^|]+ \| chosen \|", report, re.MULTILINE), report


def test_show_never_ranks_a_refused_trial_above_one_that_may_be_chosen(registers_study) -> None:
    folder, _, _ = registers_study
    trials = json.loads(_cli(folder, "show", "1", "--json", "--top", "200"))["trials"]
    refused = [t["refused"] is not None for t in trials]
    assert any(refused), "the study should refuse some trials (more spill bytes than the defaults)"
    assert refused == sorted(refused), [(t["number"], t["status"]) for t in trials]
    for trial in trials:
        if trial["refused"]:
            assert trial["status"] == f"refused: {trial['refused']}"
            assert "spill bytes" in trial["refused"] or "lowers" in trial["refused"], trial["refused"]
    table = _cli(folder, "show", "1", "--top", "200")
    assert "refused: adds spill bytes over the compiler defaults" in table.replace("\n", " ") or "refused:" in table


def test_the_progress_line_names_the_choice_and_says_why_a_trial_is_refused(registers_study) -> None:
    _, stderr, tuned = registers_study
    lines = [line for line in stderr.splitlines() if re.match(r"\[\d+/40\] #\d+ ", line)]
    assert any("(refused: " in line for line in lines), stderr
    for line in lines:
        value = re.match(r"\[\d+/40\] #\d+ (\S+)", line).group(1)
        best = re.search(r"best (\S+) \(#(\d+)\)", line)
        refused = "(refused: " in line
        assert best is not None, line
        if not refused and value != "FAILED":  # a trial that may win never shows a best worse than itself
            assert float(best.group(1)) <= float(value), line
    final = re.search(r"best (\S+) \(#(\d+)\)", lines[-1])
    assert float(final.group(1)) == tuned["best"]["value"] or final.group(2) == str(tuned["study"]["chosen"])


def test_occupancy_reads_as_occupancy_higher_is_better(tmp_path: Path) -> None:
    result = run_cli(["tune", str(SPILL_HEAVY), "--objective", "occupancy", "--budget", "8", "--seed", "0",
                      "--workers", "local", "--db", f"sqlite:///{tmp_path}/t.db", "--out", "k.acf.toml", "--json"],
                     cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    tuned = json.loads(result.stdout)
    assert tuned["objective"]["better"] == "higher"
    assert tuned["best"]["value_shown"] == pytest.approx(tuned["best"]["metrics"]["occupancy"])
    objective = acf.read(tmp_path / "k.acf.toml").objective
    assert objective["better"] == "higher" and objective["value_is"].startswith("1 - occupancy")
    assert objective["best_shown"] == pytest.approx(tuned["best"]["metrics"]["occupancy"])
    table = _cli(tmp_path, "show", "1")
    assert "theoretical occupancy, higher is better" in table
    occupancy = tuned["best"]["metrics"]["occupancy"]
    assert re.search(rf"│ {tuned['study']['chosen']} +│ {occupancy:.1%}", table), table


RUNTIME_KEY = StudyKey(kernel="saxpy", source_sha256="a" * 64, space_id="nvcc-13.0+ptxas-13.0", space_sha256="b" * 64,
                       toolchain="13.0.48", arch="sm_90", evaluator="H200", objective="time")


def _runtime_study(url: str, decisions: list[dict | None]) -> None:
    """Baseline 1.0 ms, #1 0.8 ms (screening's fastest), #2 0.9 ms; one run per decision."""
    store = Store.open(url)
    try:
        study = store.get_or_create_study(RUNTIME_KEY, name="timed")
        for number, (level, ms) in enumerate(((3, 1.0), (2, 0.8), (1, 0.9))):
            trial = store.claim_trial(study.id, f"k{number}", {"ptxas.opt_level": level}, "w1")
            store.finish_trial(trial.id, state=TrialState.COMPLETE, value=ms, reason=None,
                               metrics={"spill_bytes": 0, "occupancy": 1.0, "kind": RUNTIME_KIND, "median_ms": ms},
                               code_hash=str(number) * 64,
                               compile_seconds=0.1)
        for decision in decisions:
            run = store.start_run(study.id, "w1", {"budget": 3})
            store.finish_run(run, "budget 3", 3, 0, decision)
    finally:
        store.close()


def test_a_runtime_studys_views_name_the_trial_its_confirmation_chose(store_url: str, tmp_path: Path) -> None:
    """The confirmation (A/B rounds no trial row holds) chose #2 over the screening's fastest #1:
    `show`, `show --why` and the report say #2, as the ACF does; a run row naming no complete
    trial (forged, or from a damaged database) is ignored, never followed."""
    _runtime_study(store_url, [{"chosen": 2, "value": 0.9, "by": "confirmation"}])
    shown = json.loads(_cli_at(tmp_path, store_url, "show", "timed", "--json"))
    assert shown["study"]["chosen"] == 2 and shown["trials"][0]["number"] == 2
    why = json.loads(_cli_at(tmp_path, store_url, "show", "timed", "--why", "--json"))
    assert why["chosen"] == 2 and why["decided_by"].startswith("the confirmation of run ")
    _cli_at(tmp_path, store_url, "report", "timed", "--format", "md", "-o", "r.md")
    assert "chosen (trial #2)" in (tmp_path / "r.md").read_text()


def test_a_run_row_that_names_no_complete_trial_is_not_followed(store_url: str, tmp_path: Path) -> None:
    _runtime_study(store_url, [{"chosen": 2, "by": "confirmation"}, {"chosen": 99, "by": "confirmation"},
                               {"chosen": "1; rm -rf ~", "by": "confirmation"}])
    why = json.loads(_cli_at(tmp_path, store_url, "show", "timed", "--why", "--json"))
    assert why["chosen"] == 1 and why["decided_by"] == "the study's rules, replayed over its trials"


def _cli_at(folder: Path, url: str, *args: str) -> str:
    result = run_cli([*args, "--db", url], cwd=folder)
    assert result.returncode == 0, result.describe()
    return result.stdout


def test_show_says_which_rows_this_database_verified(registers_study, tmp_path: Path) -> None:
    """The rows the ACF cites were built (or rebuilt and checked) by the run that wrote it; the same
    rows brought in by `db import` were recorded by no run of the importing database."""
    folder, _, _ = registers_study
    shown = json.loads(_cli(folder, "show", "1", "--json"))["trials"][0]
    assert shown["status"] == "chosen" and shown["provenance"] == "verified by run 1", shown
    _cli(folder, "db", "export", "1", "-o", str(tmp_path / "study.json.gz"))
    imported = f"sqlite:///{tmp_path}/other.db"
    _cli_at(tmp_path, imported, "db", "import", str(tmp_path / "study.json.gz"))
    there = json.loads(_cli_at(tmp_path, imported, "show", "1", "--json"))["trials"][0]
    assert there["number"] == shown["number"]
    assert there["provenance"] == "not recorded by a run of this database", there
    table = _cli_at(tmp_path, imported, "show", "1", "--top", "1")
    assert "(not recorded" in table, table
    # the study list names the choice `show 1` replays, said so: it named the lowest value, "lowest
    # 24", a trial the rules refuse for its spills, beside the 58 registers show 1 chose (doc51)
    (listed,) = json.loads(_cli_at(tmp_path, imported, "show", "--json"))
    assert (listed["chosen"], listed["best"]) == (there["number"], there["value"]), listed
    assert listed["best_is"] == "the chosen trial, replayed from its trials (no run here chose)", listed
    every = json.loads(_cli_at(tmp_path, imported, "show", "1", "--json", "--top", "200"))["trials"]
    lowest = min(every, key=lambda t: t["value"])
    assert lowest["value"] < there["value"] and lowest["status"].startswith("refused"), lowest  # what it named
    row = " ".join(_cli_at(tmp_path, imported, "show").split())
    assert f"{there['value']:g} (#{there['number']}, replayed: no run here chose)" in row, row
    assert "lowest" not in row, row


def test_show_says_when_it_lists_only_the_top_trials(registers_study) -> None:
    """Ten rows of many: the table says how many it left out and how to see them (it cut silently,
    hiding the only trial with another block size from a user who did not know about --top)."""
    folder, _, _ = registers_study
    every = json.loads(_cli(folder, "show", "1", "--json", "--top", "200"))
    complete = len(every["trials"])
    assert complete > 3 and every["complete_trials"] == complete
    cut = _cli(folder, "show", "1", "--top", "3")
    assert f"showing 3 of {complete} complete trials: --top {complete} shows all" in " ".join(cut.split())
    assert "showing" not in _cli(folder, "show", "1", "--top", str(complete))


def test_a_pareto_view_of_a_single_objective_study_never_picks_a_refused_trial(registers_study) -> None:
    """`show --pareto registers,instructions` on a registers study: its front was made of every
    recorded trial, and its knee was a register cap that adds spills (refused by the study)."""
    folder, _, _ = registers_study
    shown = json.loads(_cli(folder, "show", "1", "--json", "--top", "1000"))
    refused = {t["number"] for t in shown["trials"] if t["status"].startswith("refused")}
    assert refused, "the fixture needs refused trials"
    for pick in ("knee", "first"):
        front = json.loads(_cli(folder, "show", "1", "--pareto", "registers,instructions", "--pick", pick, "--json"))
        assert front["pick"] not in refused and not refused & {p["trial"] for p in front["front"]}, front
    _cli(folder, "report", "1", "--format", "md", "--pareto", "registers,instructions", "-o", "p.md")
    assert all(f"| {n} |" not in (folder / "p.md").read_text().split("Pareto front")[-1] for n in refused)


def test_a_static_choice_is_never_beaten_by_a_trial_it_lists_as_may_be_chosen(tmp_path: Path) -> None:
    """spill_heavy, spills, budget 8: the run built a refused -O0 result again at -O3 while shrinking
    it (0 spill bytes, allowed) but chose 304 from the search's own results, listed the better one
    as "may be chosen" and sent the user to a GPU for the -O0 ones. Such a repair now counts."""
    done = run_cli(["tune", str(SPILL_HEAVY), "--objective", "spills", "--budget", "8", "--workers", "local",
                    "--db", f"sqlite:///{tmp_path}/t.db", "--out", "k.acf.toml"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    shown = json.loads(_cli(tmp_path, "show", "1", "--json", "--top", "1000"))
    chosen = shown["trials"][0]
    assert chosen["status"] == "chosen"
    better = [t["number"] for t in shown["trials"] if t["status"] == "may be chosen" and t["value"] < chosen["value"]]
    assert not better, (chosen, better)
    assert acf.read(tmp_path / "k.acf.toml").evidence["best"]["spill_bytes"] == 0


REGISTERS_KEY = StudyKey(kernel="sgemm", source_sha256="c" * 64, space_id="nvcc-13.0+ptxas-13.0",
                         space_sha256="d" * 64, toolchain="13.0.48", arch="sm_90", evaluator="static",
                         objective="registers")


def _tied_study(url: str) -> None:
    """rev50 k2: the baseline (#0: 58 registers, 832 instructions), #1 with three settings changed
    and #2 with one, both 48 registers and 848 instructions (a simplification gives such a pair)."""
    store = Store.open(url)
    try:
        study = store.get_or_create_study(REGISTERS_KEY, name="tied")
        base = dict(load_space("13.0").default_config().items)
        many = {"ptxas.maxrregcount": 48, "ptxas.minnctapersm": 2, "nvcc.extra_device_vectorization": True}
        for number, (changed, registers, instructions) in enumerate(
                (({}, 58, 832), (many, 48, 848), ({"ptxas.maxrregcount": 48}, 48, 848))):
            trial = store.claim_trial(study.id, f"k{number}", base | changed, "w1")
            assert trial is not None
            store.finish_trial(trial.id, state=TrialState.COMPLETE, value=registers, reason=None,
                               metrics={"spill_bytes": 0, "registers": registers, "occupancy": 1.0,
                                        "instructions": instructions},
                               code_hash=str(number) * 64, compile_seconds=0.1)
    finally:
        store.close()


def test_an_ad_hoc_front_shows_the_chosen_trial_not_an_equal_one(store_url: str, tmp_path: Path) -> None:
    """rev50 6: `show STUDY --pareto registers,instructions` kept the lowest-numbered trial of each
    value vector, so the study's choice (#2, one setting) gave its place on the front to #1 (three
    settings, the same values) while every other view showed #2. Ties are broken as the pick rules
    say, the fewest changed settings, and the recorded choice stands for its equals."""
    _tied_study(store_url)
    shown = json.loads(_cli_at(tmp_path, store_url, "show", "tied", "--json"))
    assert shown["study"]["chosen"] == 2, shown["study"]
    for pick in ("knee", "first"):
        front = json.loads(_cli_at(tmp_path, store_url, "show", "tied", "--pareto", "registers,instructions",
                                   "--pick", pick, "--json"))
        assert sorted(p["trial"] for p in front["front"]) == [0, 2], front
    table = _cli_at(tmp_path, store_url, "show", "tied", "--pareto", "registers,instructions")
    assert re.search(r"│ 2 +│ 48 +│ 848 ", table) and not re.search(r"│ 1 +│", table), table
    _cli_at(tmp_path, store_url, "report", "tied", "--format", "md", "--pareto", "registers,instructions", "-o", "p.md")
    section = (tmp_path / "p.md").read_text().split("## Pareto front")[-1].split("\n## ")[0]
    assert "| 2 |" in section and "| 1 |" not in section, section
