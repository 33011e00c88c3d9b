"""A rerun of the same `tune` that decides what the ACF already holds leaves the file byte for byte
(ci54 finding 5: it rewrote `written_at` and the evidence's "compiled by this run" wording, so a CI
job re-tuning and checking `git diff --exit-code` always failed); anything that matters differing
(a better config found with a bigger budget, a hand-edited number) still rewrites it.

Real nvcc/ptxas and SQLite: SPILLING_KERNEL tuned for spills on two ptxas settings, budget 1 (the
defaults, which spill) first; each test works on a copy of that workspace.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest
from helpers import SPILLING_KERNEL, CliResult, run_cli

import compileiq

OPTIONS = ("--objective", "spills", "--only", "ptxas.override_directive_values,ptxas.maxrregcount")
UNCHANGED = "k.acf.toml already holds this choice: unchanged"


def tune_in(folder: Path, *options: str, budget: int) -> CliResult:
    """`tune k.cu` in `folder`, its study in t.db and its ACF k.acf.toml, both named from there: the
    ACF records its database as given, and each test's copy of the workspace is in another folder."""
    return run_cli(["tune", "k.cu", "--budget", str(budget), "--workers", "local", "--db", "sqlite:///t.db",
                    "--out", "k.acf.toml", *options], cwd=folder)


@pytest.fixture(scope="module")
def first(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("rerun")
    (folder / "k.cu").write_text(SPILLING_KERNEL)
    done = tune_in(folder, *OPTIONS, budget=1)
    assert done.returncode == 0 and "wrote k.acf.toml" in done.stdout, done.describe()
    return folder


@pytest.fixture()
def workspace(first, tmp_path) -> Path:
    copy = tmp_path / "ws"
    shutil.copytree(first, copy)
    return copy


def test_rerun_deciding_the_same_leaves_the_acf_byte_for_byte(workspace):
    before = (workspace / "k.acf.toml").read_bytes()
    done = tune_in(workspace, *OPTIONS, budget=1)
    assert done.returncode == 0, done.describe()
    assert (workspace / "k.acf.toml").read_bytes() == before
    assert UNCHANGED in done.stdout.splitlines() and "wrote" not in done.output, done.describe()
    as_json = tune_in(workspace, *OPTIONS, "--json", budget=1)
    assert as_json.returncode == 0, as_json.describe()
    document = json.loads(as_json.stdout)
    assert document["acf"] == "k.acf.toml" and document["acf_unchanged"] is True
    assert (workspace / "k.acf.toml").read_bytes() == before


def test_python_api_says_unchanged(workspace, monkeypatch):
    before = (workspace / "k.acf.toml").read_bytes()
    monkeypatch.chdir(workspace)
    result = compileiq.tune("k.cu", objective="spills", budget=1, workers="local", only=OPTIONS[3].split(","),
                            db="sqlite:///t.db", out="k.acf.toml")
    assert result.acf_unchanged is True
    assert (workspace / "k.acf.toml").read_bytes() == before


def test_bigger_budget_finding_a_better_config_rewrites_it(workspace):
    before = tomllib.loads((workspace / "k.acf.toml").read_text())
    assert before["controls"] == {} and before["objective"]["best"] > 0, "the fixture's ACF holds the spilling defaults"
    done = tune_in(workspace, *OPTIONS, budget=6)
    assert done.returncode == 0 and "wrote k.acf.toml" in done.stdout.splitlines() and UNCHANGED not in done.output, done.describe()
    after = tomllib.loads((workspace / "k.acf.toml").read_text())
    assert after["controls"] and after["objective"]["best"] < before["objective"]["best"]
    assert after["provenance"]["written_at"] >= before["provenance"]["written_at"]


def test_an_acf_differing_in_a_number_is_rewritten(workspace):
    acf = workspace / "k.acf.toml"
    held = acf.read_text()
    edited = held.replace("registers = 128\n", "registers = 127\n", 1)
    assert edited != held, held
    acf.write_text(edited)
    done = tune_in(workspace, *OPTIONS, budget=1)
    assert done.returncode == 0 and "wrote k.acf.toml" in done.stdout.splitlines(), done.describe()
    assert "registers = 128\n" in acf.read_text() and "registers = 127\n" not in acf.read_text()


FORGED = "timed on an H100 by CI: 1.9x faster, confirmed by 20 A/A runs"


@pytest.mark.parametrize("edit", ["source", "written_at"])
def test_an_edited_evidence_claim_or_timestamp_is_rewritten_not_blessed(workspace, edit):
    """rev54 finding 2: the rerun copied the old file's `source` and `written_at` unchecked, so a
    forged evidence claim survived a re-tune that said "already holds this choice: unchanged"."""
    acf = workspace / "k.acf.toml"
    held = acf.read_text()
    recorded = tomllib.loads(held)
    if edit == "source":
        old = f'source = "{recorded["evidence"]["best"]["source"]}"\n'
        edited = held.replace(old, f'source = "{FORGED}"\n')
    else:
        old = f'written_at = "{recorded["provenance"]["written_at"]}"\n'
        edited = held.replace(old, 'written_at = "reviewed and timed by CI on an H100"\n')
    assert edited != held, held
    acf.write_text(edited)
    done = tune_in(workspace, *OPTIONS, budget=1)
    assert done.returncode == 0 and "wrote k.acf.toml" in done.stdout.splitlines(), done.describe()
    assert UNCHANGED not in done.output, done.describe()
    after = tomllib.loads(acf.read_text())
    assert FORGED not in acf.read_text() and "timed by CI" not in acf.read_text()
    assert after["evidence"]["best"]["source"].endswith("compiled again by this run, which gave the same result")
    again = tune_in(workspace, *OPTIONS, budget=1)  # the rewritten file, as this release writes it, is kept
    assert again.returncode == 0 and UNCHANGED in again.stdout.splitlines(), again.describe()


def _claims(database: str) -> dict[str, str]:
    """compileiq's own evidence wordings, filled in by a forger: a quarantine that never happened,
    a verifying worker that does not exist, a cache hit, a row not rebuilt."""
    return {
        "replaced": (f"compiled again by this run: the row recorded in {database} by alice-workstation:4242 "
                     "disagreed with this rebuild, was quarantined and replaced by it"),
        "other-worker": f"recorded in {database} by ci-h100-trusted:1; compiled again by this run, which gave the same result",
        "cached": "evaluated by this run from the build cache (not recompiled)",
        "recorded": (f"recorded in {database} by ci-h100-trusted:1 (an earlier, shared or imported result; "
                     "not rebuilt by this run: compileiq gate rebuilds it)"),
    }


@pytest.mark.parametrize("claim", ["replaced", "other-worker", "cached", "recorded"])
@pytest.mark.parametrize("table", ["baseline", "best"])
def test_a_forged_claim_in_compileiqs_own_wording_is_rewritten(workspace, claim, table):
    """red55 finding 1: the rerun kept any of compileiq's five wordings with any host:pid, so a
    hand-edited ACF accusing a made-up worker of a quarantined row, or naming a verifier that never
    ran, was called "already holds this choice: unchanged" and kept byte for byte. Only the wording
    this run writes, or the first run's "compiled by this run" for the row this run verified, stands."""
    acf = workspace / "k.acf.toml"
    held = acf.read_text()
    recorded = tomllib.loads(held)
    source = recorded["evidence"][table]["source"]
    forged = _claims(recorded["provenance"]["database"])[claim]
    edited = held.replace(f'source = "{source}"\n', f'source = "{forged}"\n', 1)
    assert edited != held, held
    acf.write_text(edited)
    done = tune_in(workspace, *OPTIONS, budget=1)
    assert done.returncode == 0 and "wrote k.acf.toml" in done.stdout.splitlines(), done.describe()
    assert forged not in acf.read_text() and "alice-workstation" not in acf.read_text()
    written = tomllib.loads(acf.read_text())["evidence"][table]
    assert written["source"].endswith("compiled again by this run, which gave the same result")
    assert f"by {written['worker']};" in written["source"]


def test_only_a_rebuild_lets_the_first_runs_claim_stand():
    """review55 finding 5: "compiled by this run" stood in for "recorded ... not rebuilt by this run"
    too, so a hand-edited claim on a runtime row no run here rebuilt was kept byte for byte."""
    from compileiq.results import evidence_wording as wording

    database, worker = "sqlite:///t.db", "host:1"
    verified = wording.written(wording.VERIFIED, database, worker)
    recorded = wording.written(wording.RECORDED, database, worker)
    assert wording.stands_for(wording.COMPILED, verified, database, worker)
    assert not wording.stands_for(wording.COMPILED, recorded, database, worker)
    assert not wording.stands_for(wording.COMPILED, wording.written(wording.VERIFIED, database, "other:2"),
                                  database, worker)


def test_a_hand_edited_count_of_this_studys_trials_blocks_no_rewrite(workspace):
    """Fix-rerun fault 3: an ACF naming this run's study in this run's database, its counts edited to
    500 search trials, made the rerun refuse ("it holds 500 search trials ... not replacing without
    --force", rc 2) though the database holds one. Its count is false: the run says so and rewrites it.
    The same file beside another database (a copy: the study may hold more trials elsewhere) is still
    refused."""
    acf = workspace / "k.acf.toml"
    held = acf.read_text()
    edited = held
    for key, value in (("search_trials", 500), ("budget", 500), ("trials_in_study", 509)):
        line = next(line for line in held.splitlines() if line.startswith(f"{key} = "))
        edited = edited.replace(f"{line}\n", f"{key} = {value}\n", 1)
    assert edited != held
    acf.write_text(edited)
    shutil.copy(workspace / "t.db", workspace / "copy.db")
    elsewhere = run_cli(["tune", "k.cu", "--budget", "1", "--workers", "local", "--db", "sqlite:///copy.db",
                         "--out", "k.acf.toml", *OPTIONS], cwd=workspace)
    assert elsewhere.returncode == 2 and "holds 500 search trials" in elsewhere.output, elsewhere.describe()
    assert acf.read_text() == edited
    done = tune_in(workspace, *OPTIONS, budget=1)
    assert done.returncode == 0 and "wrote k.acf.toml" in done.stdout.splitlines(), done.describe()
    assert "claims 500 search trials of study" in done.output and "a false count" in done.output, done.describe()
    provenance = tomllib.loads(acf.read_text())["provenance"]
    assert provenance["search_trials"] == 1 and provenance["budget"] == 1, provenance


@pytest.mark.parametrize("when", ["2019-01-01T00:00:00+00:00", "2999-01-01T00:00:00+00:00"])
def test_a_back_dated_or_future_written_at_is_rewritten(workspace, when):
    """Fix-rerun fault 2: a `written_at` in the wording compileiq writes, but before the study's first
    trial (a back-dated file) or in the future, survived a rerun byte for byte."""
    acf = workspace / "k.acf.toml"
    held = acf.read_text()
    old = tomllib.loads(held)["provenance"]["written_at"]
    acf.write_text(held.replace(f'written_at = "{old}"\n', f'written_at = "{when}"\n'))
    done = tune_in(workspace, *OPTIONS, budget=1)
    assert done.returncode == 0 and "wrote k.acf.toml" in done.stdout.splitlines(), done.describe()
    assert when not in acf.read_text()
    again = tune_in(workspace, *OPTIONS, budget=1)  # the rewritten file's own timestamp stands
    assert again.returncode == 0 and UNCHANGED in again.stdout.splitlines(), again.describe()
