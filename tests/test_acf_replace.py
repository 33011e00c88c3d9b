"""No silent rewrites (issue 25, item 5): an ACF is not replaced by one that holds less evidence
(another study, fewer search trials, no simplification where it had one, no confirmation where it
had one), from the command line or from Python, unless forced; the same command run again may
replace it, and then keeps what its simplification dropped.

One real tune of the bundled spill_heavy kernel on a narrowed space (its winner carries settings
that simplification drops); each test works on a copy of its database and ACF.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tomllib
from pathlib import Path

import pytest
from helpers import CliResult, run_cli

import compileiq
from compileiq.core.errors import UsageError
from compileiq.results import acf_replace

REPO = Path(__file__).resolve().parent.parent
KERNEL = REPO / "kernels" / "spill_heavy" / "spill_heavy.cu"
ONLY = "ptxas.override_directive_values,ptxas.maxrregcount,ptxas.def_load_cache,ptxas.register_usage_level,ptxas.minnctapersm"


def _args(*extra: str, db: str = "t.db") -> list[str]:
    return ["tune", str(KERNEL), "--objective", "spills", "--budget", "8", "--workers", "local", "--only", ONLY,
            "--db", f"sqlite:///{db}", "--out", "k.acf.toml", *extra]  # run in the workspace


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    workspace = tmp_path_factory.mktemp("replace")
    done = run_cli(_args(), cwd=workspace)
    assert done.returncode == 0, done.describe()
    assert _acf(workspace)["evidence"]["simplified"]["dropped"], "the fixture needs a simplification that drops settings"
    return workspace


@pytest.fixture()
def workspace(tuned, tmp_path) -> Path:
    copy = tmp_path / "ws"
    copy.mkdir()
    for name in ("t.db", "k.acf.toml"):
        shutil.copy(tuned / name, copy / name)
    return copy


def _acf(workspace: Path) -> dict:
    return tomllib.loads((workspace / "k.acf.toml").read_text())


def _refused(done: CliResult, *says: str) -> None:
    assert done.returncode == 2, done.describe()
    errors = [line for line in done.stderr_lines if line.startswith("error")]  # after a run: its progress first
    assert len(errors) == 1 and done.stderr_lines[-1] == errors[0] and "Traceback" not in done.output, done.describe()
    line = errors[0]
    assert line.startswith("error: not replacing ") and "without --force (force=True in Python)" in line, line
    assert "elsewhere with --out" in line, line
    for text in says:
        assert text in line, line


def _trials(database: Path) -> int:
    if not database.exists():
        return 0
    with sqlite3.connect(database) as conn:
        tables = {row[0] for row in conn.execute("select name from sqlite_master where type = 'table'")}
        return conn.execute("select count(*) from trials").fetchone()[0] if "trials" in tables else 0


def test_the_same_command_again_replaces_the_acf_and_keeps_its_simplification(workspace):
    """A rerun chose the simplified trial itself as the search's winner, with nothing left to drop:
    the ACF lost what its simplification dropped. The winner is now a search trial."""
    before = _acf(workspace)
    done = run_cli(_args(), cwd=workspace)
    assert done.returncode == 0, done.describe()
    after = _acf(workspace)
    assert after["evidence"]["simplified"] == before["evidence"]["simplified"]
    assert after["provenance"]["study"] == before["provenance"]["study"]
    assert after["controls"] == before["controls"]


def test_another_study_is_refused_before_the_run(workspace):
    before = (workspace / "k.acf.toml").read_bytes()
    study = _acf(workspace)["provenance"]["study"]
    done = run_cli(_args("--study", "other", db="other.db"), cwd=workspace)
    _refused(done, f"it records study {study}, this run study other",
             "it holds 8 search trials, a simplification that dropped 3 settings")
    assert (workspace / "k.acf.toml").read_bytes() == before
    assert _trials(workspace / "other.db") == 0  # refused before anything was built


def test_another_kernels_acf_is_refused_before_the_run(workspace):
    """Two `k.cu` in different folders share the default store/k.static.acf.toml: the second run
    replaced the first's ACF without a word (its source hash differed, which read as the same
    kernel changed). An ACF that describes another kernel, still there, is kept."""
    text = (workspace / "k.acf.toml").read_text()  # copied: its kernel's path as seen from the copy
    recorded = tomllib.loads(text)["kernel"]["path"]
    (workspace / "k.acf.toml").write_text(text.replace(f'path = "{recorded}"', f'path = "{os.path.relpath(KERNEL, workspace)}"', 1))
    before = (workspace / "k.acf.toml").read_bytes()
    (workspace / "other").mkdir()
    (workspace / "other" / "k.cu").write_text("__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n")
    done = run_cli(["tune", "other/k.cu", "--budget", "2", "--workers", "local", "--db", "sqlite:///other.db",
                    "--out", "k.acf.toml"], cwd=workspace)
    _refused(done, f"it describes another kernel, {KERNEL.resolve()}")
    assert (workspace / "k.acf.toml").read_bytes() == before
    assert _trials(workspace / "other.db") == 0  # refused before anything was built


def test_fewer_search_trials_are_refused_when_the_acf_is_written(workspace):
    """The same study in a fresh database with a smaller budget: known only after the run; its
    trials stay in that database."""
    before = (workspace / "k.acf.toml").read_bytes()
    done = run_cli([*_args(db="other.db"), "--budget", "4"], cwd=workspace)
    _refused(done, "it holds more search trials (this run: 4)", "this run's trials stay in the database")
    assert (workspace / "k.acf.toml").read_bytes() == before
    assert _trials(workspace / "other.db") > 0


def test_force_replaces_it(workspace):
    done = run_cli(_args("--force", "--study", "other", db="other.db"), cwd=workspace)
    assert done.returncode == 0, done.describe()
    assert _acf(workspace)["provenance"]["study"] == "other"
    assert _acf(workspace)["provenance"]["database"] == "sqlite:///other.db"


def test_the_same_study_moved_to_another_database_may_replace_it(workspace):
    """db export/import moves a study; the same command on the new database, with as many
    search trials, replaces the ACF (it cites the new database)."""
    done = run_cli(_args(db="moved.db"), cwd=workspace)
    assert done.returncode == 0, done.describe()
    assert _acf(workspace)["provenance"]["database"] == "sqlite:///moved.db"


def test_a_run_without_simplification_is_refused(workspace):
    before = (workspace / "k.acf.toml").read_bytes()
    _refused(run_cli(_args("--no-simplify"), cwd=workspace), "its simplification would be lost")
    assert (workspace / "k.acf.toml").read_bytes() == before


def test_a_file_that_is_not_an_acf_is_not_replaced(workspace):
    (workspace / "k.acf.toml").write_text("notes = 'mine'\n")
    _refused(run_cli(_args(), cwd=workspace), "it is not an ACF written by compileiq tune")
    assert (workspace / "k.acf.toml").read_text() == "notes = 'mine'\n"


def test_the_python_api_refuses_too_and_takes_force(workspace):
    before = (workspace / "k.acf.toml").read_bytes()
    options: dict = {"objective": "spills", "budget": 8, "workers": "local", "only": ONLY, "study": "api",
                     "out": workspace / "k.acf.toml", "db": f"sqlite:///{workspace / 'api.db'}"}
    with pytest.raises(UsageError, match=r"not replacing the ACF .* without --force \(force=True in Python\).*: "
                                         r"it records study .*, this run study api; it holds 8 search trials"):
        compileiq.tune(KERNEL, **options)
    assert (workspace / "k.acf.toml").read_bytes() == before
    assert _trials(workspace / "api.db") == 0
    result = compileiq.tune(KERNEL, force=True, **options)
    assert _acf(workspace)["provenance"]["study"] == result.study
    assert _acf(workspace)["provenance"]["database"] == f"sqlite:///{workspace / 'api.db'}"


def test_what_counts_as_less_evidence(workspace):
    """The rule on documents: same study with fewer search trials, a lost confirmation; more
    trials or the same evidence replace it."""
    document = _acf(workspace)
    existing = acf_replace.held(document)
    assert existing.search_trials == 8 and existing.dropped and existing.confirmed is False

    def new(**provenance) -> acf_replace.Held:
        return acf_replace.held({**document, "provenance": {**document["provenance"], **provenance}})

    assert acf_replace.less_evidence(existing, new()) is None
    assert acf_replace.less_evidence(existing, new(search_trials=20)) is None
    elsewhere = new(search_trials=5, database="sqlite:///elsewhere.db")  # the study moved: may hold fewer there
    assert "more search trials" in (acf_replace.less_evidence(existing, elsewhere) or "")
    # the same study in the same database, which holds all of its trials: the file's count is false
    assert existing.database is not None and acf_replace.less_evidence(existing, new(search_trials=5)) is None
    assert "a false count" in (acf_replace.false_count(existing, new(search_trials=5)) or "")
    assert acf_replace.false_count(existing, elsewhere) is None
    confirmed = acf_replace.Held(study=existing.study, search_trials=8, confirmed=True)
    assert "runtime confirmation would be lost" in (acf_replace.less_evidence(confirmed, existing) or "")
    forged = acf_replace.held({"format": 1, "provenance": {"study": ["x"], "search_trials": -3}})
    assert forged == acf_replace.Held(dropped=0, simplified=False, confirmed=False)  # wrong types: not recorded


def test_an_acf_of_the_kernel_as_it_no_longer_is_may_be_replaced() -> None:
    """Its sources or tune.toml changed (the gate would call it stale): it holds no evidence about
    the kernel as it is, whatever its study or trials."""
    from compileiq.results.acf_replace import Held, less_evidence

    old = Held(study="fir-static-1", search_trials=40, dropped=3, kernel=(("a" * 64, "b" * 64),))
    assert less_evidence(old, Held(study="fir-static-2", search_trials=2, dropped=0, kernel=(("a" * 64, "c" * 64),))) is None
    assert less_evidence(old, Held(study="fir-static-2", search_trials=2, dropped=0, kernel=(("a" * 64, "b" * 64),)))
    # a run's kernel under each identity (this release's, the older one): an ACF under either is its
    both = (("a" * 64, "c" * 64), ("a" * 64, "b" * 64))
    assert less_evidence(old, Held(study="fir-static-2", search_trials=2, dropped=0, kernel=both))


def test_a_rerun_whose_winner_needs_nothing_dropped_replaces_it(workspace):
    """docs55 finding 1: a larger-budget rerun of the same study whose new winner already held only
    the settings it needs (its simplification ran and dropped none) was refused as "its
    simplification would be lost" (exit 2); only a run with no simplification at all loses one."""
    document = _acf(workspace)
    existing = acf_replace.held(document)
    assert existing.dropped
    evidence = {**document["evidence"], "simplified": {**document["evidence"]["simplified"], "dropped": []}}
    ran = acf_replace.held({**document, "evidence": evidence,
                            "provenance": {**document["provenance"], "search_trials": 20}})
    assert ran.dropped == 0 and acf_replace.less_evidence(existing, ran) is None
    none = {k: v for k, v in document["evidence"].items() if k != "simplified"}
    skipped = acf_replace.held({**document, "evidence": none, "provenance": {**document["provenance"], "search_trials": 20}})
    assert "simplification would be lost" in (acf_replace.less_evidence(existing, skipped) or "")


def test_a_rerun_that_keeps_the_baseline_lost_no_simplification(workspace):
    """review55 finding 3: a rerun whose choice is the baseline writes no simplification table (there
    is nothing to simplify), and was refused as "its simplification would be lost"."""
    document = _acf(workspace)
    existing = acf_replace.held(document)
    evidence = {k: v for k, v in document["evidence"].items() if k != "simplified"}
    evidence["best"] = {**evidence["best"], "trial": evidence["baseline"]["trial"]}
    kept = acf_replace.held({**document, "evidence": evidence,
                             "provenance": {**document["provenance"], "search_trials": 20}})
    assert kept.simplified is None and acf_replace.less_evidence(existing, kept) is None
