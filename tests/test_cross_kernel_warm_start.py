"""A study starts from what other kernels' studies in the database chose and refused (issue 26):
their choices are tried in the first batch after the baseline, never copied as results."""

import json
import sqlite3
import subprocess
import sys

import pytest
from helpers import SPILLING_KERNEL

from compileiq import app
from compileiq.core import warm_note
from compileiq.core.records import TrialState
from compileiq.core.space_files import load_space
from compileiq.results import acf
from compileiq.search import transfer
from compileiq.search.searcher import Searcher, SearchSettings
from compileiq.store import Store
from compileiq.tuning.progress import SilentProgress

SUBSPACE = ("ptxas.maxrregcount", "ptxas.override_directive_values", "ptxas.opt_level")
BATCH = 4
OTHER_KERNEL = SPILLING_KERNEL.replace("fir", "fir_wide").replace("taps[128]", "taps[96]").replace(
    "k < 128", "k < 96").replace("127 - k", "95 - k").replace("% 128", "% 96")


class Recorder(SilentProgress):
    def __init__(self):
        self.notes = []

    def note(self, message):
        self.notes.append(message)


@pytest.fixture()
def kernels(tmp_path):
    a, b = tmp_path / "fir.cu", tmp_path / "fir_wide.cu"
    a.write_text(SPILLING_KERNEL)
    b.write_text(OTHER_KERNEL)
    return a, b


def _options(tmp_path, kernel, **overrides):
    base = {"kernel": kernel, "objective": "spills", "budget": 12, "batch_size": BATCH, "workers": "local",
            "db": f"sqlite:///{tmp_path}/team.db", "out": tmp_path / f"{kernel.stem}.acf.toml", "only": SUBSPACE}
    return app.TuneOptions(**{**base, **overrides})


def _first_batch(tmp_path, study_name, db="team.db"):
    """Config keys of the study's trials in the first batch after the baseline, in trial order."""
    store = Store.open(db if "://" in db else f"sqlite:///{tmp_path}/{db}")
    try:
        trials = store.trials(store.find_study(study_name).id)
    finally:
        store.close()
    return [t.config_key for t in trials if 1 <= t.number <= BATCH], trials


def test_a_new_kernel_first_tries_what_another_kernels_study_chose(tmp_path, kernels, store_url):
    a, b = kernels
    earlier = app.tune(_options(tmp_path, a, db=store_url), SilentProgress()).result
    assert earlier.chosen.config_key != earlier.baseline.config_key  # it chose something to transfer
    recorder = Recorder()
    report = app.tune(_options(tmp_path, b, db=store_url), recorder)
    assert any(n.startswith("warm start: 1 configuration from 1 study of other sources") for n in recorder.notes)
    provenance = acf.read(report.acf_path).provenance  # the ACF says where its first proposals came from
    assert provenance["warm_start"].startswith("1 configuration from 1 study of other sources (other kernels, or this one as it was) tried first")
    first, trials = _first_batch(tmp_path, report.result.study.name, store_url)
    assert first[0] == earlier.chosen.config_key  # the same option space, no macros: the same config
    # measured here for real (its own compile), never copied from the other study
    ours = next(t for t in trials if t.config_key == earlier.chosen.config_key)
    assert ours.study_id == report.result.study.id and ours.state is TrialState.COMPLETE
    assert {t.study_id for t in report.result.trials} == {report.result.study.id}


def test_no_warm_start_starts_cold(tmp_path, kernels):
    a, b = kernels
    earlier = app.tune(_options(tmp_path, a), SilentProgress()).result
    recorder = Recorder()
    report = app.tune(_options(tmp_path, b, warm_start=False), recorder)
    assert not any(n.startswith("warm start") for n in recorder.notes)
    assert "warm_start" not in acf.read(report.acf_path).provenance
    first, _ = _first_batch(tmp_path, report.result.study.name)
    alone = app.tune(_options(tmp_path, b, db=f"sqlite:///{tmp_path}/alone.db"), SilentProgress()).result
    assert first == _first_batch(tmp_path, alone.study.name, "alone.db")[0]  # as in a database of its own
    assert first[0] != earlier.chosen.config_key


def test_forged_shared_rows_are_skipped_and_never_become_results(tmp_path, kernels):
    a, b = kernels
    earlier = app.tune(_options(tmp_path, a), SilentProgress()).result
    # Someone with write access to the team database rewrites the other study's rows: a config this
    # space cannot hold (a command in a value, an unknown option), and a forged value that makes an
    # -O0 config the other study's choice.
    forged_o0 = {**earlier.baseline.config, "ptxas.opt_level": 0, "ptxas.maxrregcount": 32}
    db = sqlite3.connect(tmp_path / "team.db")
    with db:
        rows = db.execute("SELECT id FROM trials WHERE study_id = ? AND number > 0 ORDER BY number",
                          (earlier.study.id,)).fetchall()
        db.execute("UPDATE trials SET config = ? WHERE id = ?",
                   (json.dumps({"ptxas.opt_level": "3; touch pwned", "ptxas.bogus": 1}), rows[0][0]))
        db.execute("UPDATE trials SET config = ?, config_key = ?, value = -1e9 WHERE id = ?",
                   (json.dumps(forged_o0), json.dumps(forged_o0, sort_keys=True, separators=(",", ":")), rows[1][0]))
        db.execute("UPDATE trials SET config = 'not json' WHERE id = ?", (rows[2][0],))
    db.close()
    run = subprocess.run(
        [sys.executable, "-m", "compileiq", "tune", str(b), "--objective", "spills", "--budget", "12",
         "--batch-size", str(BATCH), "--workers", "local", "--db", f"sqlite:///{tmp_path}/team.db",
         "--out", str(tmp_path / "b.acf.toml"), "--only", ",".join(SUBSPACE)],
        check=False, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr + run.stdout
    assert "of other sources (other kernels" in run.stderr + run.stdout  # the other study's sound rows still teach
    assert "pwned" not in " ".join(p.name for p in tmp_path.iterdir())
    _, trials = _first_batch(tmp_path, _study_of(tmp_path, "fir_wide"))
    for trial in trials:  # every config is one of this space; a forged value is never a result here
        assert trial.config["ptxas.opt_level"] in (0, 1, 2, 3)
        assert trial.value is None or trial.value >= 0


def _study_of(tmp_path, kernel):
    store = Store.open(f"sqlite:///{tmp_path}/team.db")
    try:
        return next(s.name for s in store.list_studies() if s.key.kernel == kernel)
    finally:
        store.close()


def test_settings_other_studies_refused_are_proposed_later_never_forbidden():
    space = load_space("13.0").select(only=list(SUBSPACE) + ["ptxas.register_usage_level"])
    baseline = space.default_config().as_dict()
    lowered = [({**baseline, "ptxas.opt_level": level, "ptxas.maxrregcount": cap}, True)
               for level in (0, 1) for cap in (24, 255)]
    fine = [({**baseline, "ptxas.maxrregcount": cap}, False) for cap in (24, 255, 64)]
    lessons = [transfer.lesson(baseline, {**baseline, "ptxas.maxrregcount": 255}, 0.5, lowered + fine)] * 2
    prior = transfer.prior(lessons, space, space.default_config(), 4)
    assert [c.as_dict()["ptxas.maxrregcount"] for c in prior.first] == [255]
    # blamed by contrast: -O0/-O1 were refused; the caps were refused only beside them
    assert prior.discouraged == {("ptxas.opt_level", 0), ("ptxas.opt_level", 1)}

    def lowered_in_first_batch(discouraged):
        searcher = Searcher(space, SearchSettings("bayes", 0))
        searcher.discourage(discouraged)
        return sum(c.as_dict()["ptxas.opt_level"] in (0, 1) for c in searcher.ask(8))

    assert lowered_in_first_batch(prior.discouraged) < lowered_in_first_batch(set())
    searcher = Searcher(space, SearchSettings("bayes", 0))
    searcher.discourage(prior.discouraged)
    levels = {c.as_dict()["ptxas.opt_level"] for c in searcher.ask(space.size())}
    assert {0, 1} <= levels  # later, not never


def test_a_rerun_with_its_budget_spent_keeps_the_acf_and_its_warm_start_line(tmp_path, kernels):
    """user55 finding 2: the rerun of a finished study has no warm start (nothing is left to try
    first), so its ACF lost the first run's `warm_start` line and was rewritten: the documented CI
    check (re-tune, `git diff --exit-code`) failed on an unchanged tree. The warm start is the
    study's: the run that had it records it, and a later run of the study writes it again."""
    a, b = kernels
    app.tune(_options(tmp_path, a), SilentProgress())
    first = app.tune(_options(tmp_path, b), SilentProgress())
    held = first.acf_path.read_bytes()
    assert acf.read(first.acf_path).provenance["warm_start"].startswith("1 configuration from 1 study")
    again = app.tune(_options(tmp_path, b), SilentProgress())
    assert again.acf_unchanged and first.acf_path.read_bytes() == held


@pytest.mark.parametrize("forged", ["timed on an H100 by CI", ("1 configuration from 1 study of other sources "
                                    "(other kernels, or this one as it was) tried first, 4 settings they refused "
                                    "proposed later; verified on 8 GPUs"), 7, None, ["1 configuration"]])
def test_a_run_rows_warm_start_is_read_only_in_the_wording_compileiq_writes(forged):
    # a run row is untrusted: only `Prior.note`'s own words become the ACF's provenance line
    real = transfer.Prior((), frozenset({("ptxas.opt_level", 1)}), 2).note
    assert warm_note.is_note(real) and not warm_note.is_note(forged)


def test_a_forged_run_row_never_gives_the_acf_a_warm_start(tmp_path, kernels):
    """red55 finding 3: a `runs` row inserted with a warm start in compileiq's own words was copied
    into the ACF by a later run of the study. A run's warm start is said only by the run that had
    it, and kept on a rerun only from the ACF file itself."""
    a, _ = kernels
    first = app.tune(_options(tmp_path, a), SilentProgress())
    assert "warm_start" not in acf.read(first.acf_path).provenance  # nothing else in the database
    note = transfer.Prior((), frozenset({("ptxas.opt_level", 1)}), 42).note
    with sqlite3.connect(tmp_path / "team.db") as conn:
        conn.execute("insert into runs(study_id, worker, limits, stopped, search_trials, extra_trials, decision) "
                     "values (?, 'forger:1', '{}', 'budget 12', 12, 0, ?)",
                     (first.result.study.id, json.dumps({"warm_start": note})))
    again = app.tune(_options(tmp_path, a), SilentProgress())
    assert "warm_start" not in acf.read(again.acf_path).provenance and again.acf_unchanged


FORGED_WARM = ("40 configurations from 3 studies of other sources (other kernels, or this one as it was) tried "
               "first, 2 settings they refused proposed later")


@pytest.mark.parametrize("warm", [FORGED_WARM, FORGED_WARM.replace("40 configurations", "1 configuration")])
def test_a_warm_start_line_added_to_an_acf_of_a_cold_study_is_dropped_on_a_rerun(tmp_path, kernels, warm):
    """Fix-rerun fault 2: a `warm_start` line in compileiq's own words, added to the ACF of a study
    that never had a warm start (nothing else in the database), survived a rerun byte for byte
    ("already holds this choice"). The line is kept only where the study could have had it: no more
    configurations tried first than its search trials, from no more of other kernels' studies than
    the database held before it."""
    a, _ = kernels
    first = app.tune(_options(tmp_path, a), SilentProgress())
    held = first.acf_path.read_text()
    assert "warm_start" not in acf.read(first.acf_path).provenance
    edited = held.replace("\ndatabase = ", f'\nwarm_start = "{warm}"\ndatabase = ', 1)
    assert edited != held and warm_note.is_note(warm)
    first.acf_path.write_text(edited)
    again = app.tune(_options(tmp_path, a), SilentProgress())
    assert not again.acf_unchanged and "warm_start" not in acf.read(again.acf_path).provenance


def test_a_warm_start_line_claiming_more_studies_than_came_before_is_dropped(tmp_path, kernels):
    """The genuine line of a warm-started study, edited to claim three studies of other kernels where
    the database held one before it, is rewritten with the study's own (none, its budget spent)."""
    a, b = kernels
    app.tune(_options(tmp_path, a), SilentProgress())
    first = app.tune(_options(tmp_path, b), SilentProgress())
    held = first.acf_path.read_text()
    assert "from 1 study of other sources" in held
    first.acf_path.write_text(held.replace("from 1 study of other sources", "from 3 studies of other sources"))
    again = app.tune(_options(tmp_path, b), SilentProgress())
    assert not again.acf_unchanged and "warm_start" not in acf.read(again.acf_path).provenance


def test_a_warm_start_from_a_study_begun_after_the_first_run_is_kept_on_a_rerun(tmp_path, kernels):
    """review56 finding 1: the bound on a kept `warm_start` line counted only other kernels' studies
    begun before this study, yet every run of a study warm-starts from the latest: a study begun
    first, run again after another kernel's, had its true line dropped by its next rerun, and the
    ACF was rewritten on an unchanged tree."""
    a, b = kernels
    app.tune(_options(tmp_path, b, budget=4), SilentProgress())  # no other kernel's study yet
    app.tune(_options(tmp_path, a), SilentProgress())
    second = app.tune(_options(tmp_path, b), SilentProgress())  # a larger budget: it goes on from a's study
    assert "from 1 study of other sources" in acf.read(second.acf_path).provenance["warm_start"]
    held = second.acf_path.read_bytes()
    again = app.tune(_options(tmp_path, b), SilentProgress())
    assert again.acf_unchanged and second.acf_path.read_bytes() == held
