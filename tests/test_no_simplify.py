"""`tune --no-simplify` ends on the search's winner as searched, with real nvcc/ptxas and SQLite.

user52 F2: a HeCBench kernel whose compile_commands.json ships several settings (-Xptxas=-O2,
--use_fast_math, -maxrregcount=40), tuned with --budget 4 --no-simplify, built 27 "[ablation]"
variants after its 4 search trials (the greedy path over the winner's 7 changed settings), and
the ACF, `show` and the summary then cited one of those ablation trials, whose config was the
simplified one: the replay every view makes simplified the winner over the recorded ablation
rows. The bundled sgemm, built the same way, did the same. Now the choice is the search's winner,
nothing is built after the search, and every view (ACF, show, show --why, report, --json, the
study list) names it.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from helpers import choice_notes, run_cli

from compileiq.core.records import SEARCH
from compileiq.results import acf
from compileiq.store import Store

ROOT = Path(__file__).resolve().parents[1]
SGEMM = ROOT / "kernels" / "sgemm" / "sgemm.cu"
SHIPPED = "nvcc -O3 -arch=sm_90 --use_fast_math -Xptxas=-O2 -maxrregcount=40 -lineinfo -c k.cu -o k.o"


@pytest.fixture(scope="module")
def unsimplified(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict]:
    folder = tmp_path_factory.mktemp("nosimplify")
    shutil.copy(SGEMM, folder / "k.cu")  # without its tune.toml: the build's settings alone
    (folder / "compile_commands.json").write_text(
        json.dumps([{"directory": str(folder), "command": SHIPPED, "file": "k.cu"}]))
    result = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--budget", "4", "--seed", "0",
                      "--workers", "local", "--no-simplify", "--db", f"sqlite:///{folder}/t.db", "--out", "k.acf.toml",
                      "--json"], cwd=folder)
    assert result.returncode == 0, result.describe()
    return folder, result.stderr, json.loads(result.stdout)


def _cli(folder: Path, *args: str) -> str:
    result = run_cli([*args, "--db", f"sqlite:///{folder}/t.db"], cwd=folder)
    assert result.returncode == 0, result.describe()
    return result.stdout


def _trials(folder: Path) -> list:
    store = Store.open(f"sqlite:///{folder}/t.db")
    try:
        (study,) = [s.study for s in store.study_summaries()]
        return store.trials(study.id)
    finally:
        store.close()


def test_nothing_is_built_after_the_search_and_the_acf_keeps_the_winner_as_searched(unsimplified) -> None:
    folder, stderr, tuned = unsimplified
    trials = _trials(folder)
    assert [t.purpose for t in trials] == [SEARCH] * 4, [(t.number, t.purpose) for t in trials]
    assert "[ablation]" not in stderr and "[simplify]" not in stderr, stderr
    assert (tuned["search_trials"], tuned["extra_trials"]) == (4, 0), tuned
    found = acf.read(folder / "k.acf.toml")
    chosen = found.evidence["best"]["trial"]
    assert chosen == tuned["best"]["number"] and chosen != 0, tuned["best"]
    assert "simplified" not in found.evidence  # nothing was dropped
    baseline, winner = trials[0], next(t for t in trials if t.number == chosen)
    assert winner.value == min(t.value for t in trials if t.value is not None)
    changed = {k: v for k, v in winner.config.items() if baseline.config.get(k) != v}
    assert len(changed) > 1, changed  # a winner with settings simplification would have dropped
    assert found.evidence["vs_defaults"]["changed_settings"] == len(changed)
    # every searched setting the winner sets is in the ACF as it was searched
    assert {k: v for k, v in changed.items() if k in found.controls} == {k: found.controls[k] for k in changed
                                                                         if k in found.controls}


def test_every_view_names_the_search_winner(unsimplified) -> None:
    folder, _, tuned = unsimplified
    chosen = acf.read(folder / "k.acf.toml").evidence["best"]["trial"]
    assert tuned["study"]["chosen"] == chosen
    assert next(t for t in _trials(folder) if t.number == chosen).purpose == SEARCH
    shown = json.loads(_cli(folder, "show", "1", "--json"))
    assert shown["trials"][0]["number"] == chosen and shown["trials"][0]["status"] == "chosen"
    assert choice_notes(shown["notes"]) == [], shown["notes"]  # no "the rows now give #N" against the run's choice
    why = json.loads(_cli(folder, "show", "1", "--why", "--json"))
    assert why["chosen"] == chosen and choice_notes(why["notes"]) == [], why
    assert f"chosen #{chosen} " in _cli(folder, "show", "1", "--why")
    assert [s["chosen"] for s in json.loads(_cli(folder, "show", "--json"))] == [chosen]
    _cli(folder, "report", "1", "--format", "md", "-o", "r.md")
    report = (folder / "r.md").read_text()
    assert f"chosen (trial #{chosen})" in report
    assert re.search(rf"^\| {chosen} \| [^|]+ \| chosen \|", report, re.MULTILINE), report


def test_a_no_simplify_run_after_a_simplified_one_keeps_the_winner_in_every_view(tmp_path: Path) -> None:
    """The rows a simplifying run built stay in the study: a later --no-simplify run still chooses
    the search's winner, and the views replay it without simplification (the run records so), with
    no "the rows now give #N" note against its choice."""
    shutil.copy(SGEMM, tmp_path / "k.cu")
    (tmp_path / "compile_commands.json").write_text(
        json.dumps([{"directory": str(tmp_path), "command": SHIPPED, "file": "k.cu"}]))
    args = ["tune", "k.cu", "--compile-commands", "compile_commands.json", "--budget", "4", "--seed", "0",
            "--workers", "local", "--db", f"sqlite:///{tmp_path}/t.db", "--json"]
    first = run_cli([*args, "--out", "a.acf.toml"], cwd=tmp_path)
    assert first.returncode == 0, first.describe()
    simplified = json.loads(first.stdout)["best"]["number"]
    second = run_cli([*args, "--no-simplify", "--out", "b.acf.toml"], cwd=tmp_path)
    assert second.returncode == 0, second.describe()
    chosen = json.loads(second.stdout)["best"]["number"]
    trials = {t.number: t for t in _trials(tmp_path)}
    assert trials[chosen].purpose == SEARCH and chosen != simplified, (chosen, simplified)
    assert acf.read(tmp_path / "b.acf.toml").evidence["best"]["trial"] == chosen
    shown = json.loads(_cli(tmp_path, "show", "1", "--json"))
    assert shown["trials"][0]["number"] == chosen and choice_notes(shown["notes"]) == [], shown["notes"]
    why = json.loads(_cli(tmp_path, "show", "1", "--why", "--json"))
    assert why["chosen"] == chosen and choice_notes(why["notes"]) == [], why
