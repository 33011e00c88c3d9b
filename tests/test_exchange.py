"""`compileiq db export` / `db import`: a study moves between databases, merged idempotently,
in one transaction (a bad file or a clash changes nothing). Run on SQLite and PostgreSQL."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa
from helpers import TINY_KERNEL, clean_env, compileiq_command, resealed, run_cli

from compileiq.core.errors import UsageError
from compileiq.core.records import BuildRecord, Measurement, StudyKey, TrialState
from compileiq.core.space_files import load_space
from compileiq.store import Store, StoreError, exchange

SPACE = load_space("13.0").select(only=["ptxas.opt_level"])  # an import checks configs against it
KEY = StudyKey("saxpy", "a" * 64, SPACE.id, SPACE.sha256, "13.0.88", "sm_90", "static", "spills")
TABLES = ("studies", "trials", "builds", "measurements")


def _config(level: int) -> dict[str, int]:
    return {"ptxas.opt_level": level}


def _key(level: int) -> str:
    return json.dumps(_config(level), separators=(",", ":"))


def _record(store: Store, study_id: int, level: int, state: TrialState, value: float | None = None,
            retryable: bool = False) -> None:  # fmt: skip
    trial = store.claim_trial(study_id, _key(level), _config(level), "laptop:1")
    assert trial is not None
    if state is not TrialState.RUNNING:
        store.finish_trial(trial.id, state=state, value=value, reason=None if value is not None else "ptxas error",
                           metrics=_metrics(value), code_hash=f"{level}" * 64 if value is not None else None,
                           compile_seconds=0.1, retryable=retryable)  # fmt: skip


def _metrics(value: float | None) -> dict[str, object]:
    """What the static evaluator records for a result of `value` under objective spills (an import
    holds a static trial's value to its metrics)."""
    if value is None:
        return {"spill_bytes": 4}
    return {"spill_bytes": int(value), "registers": 32, "occupancy": 1.0, "instructions": 100}


def _laptop(url: str) -> Store:
    """A study: 2 complete, 1 failed for good, 1 running; builds (2 referenced, 1 not), 1 measurement."""
    store = Store.open(url)
    study = store.get_or_create_study(KEY, "fir-laptop")
    _record(store, study.id, 3, TrialState.COMPLETE, 8.0)
    _record(store, study.id, 2, TrialState.COMPLETE, 4.0)
    _record(store, study.id, 1, TrialState.FAILED)
    _record(store, study.id, 0, TrialState.RUNNING)
    for level in (3, 2, 7):
        store.put_build(BuildRecord(f"{level}" * 64, True, "", {"status": "ok"}, f"{level}" * 64, 0.2))
    store.put_measurement(Measurement("3" * 64, "H200", "580.1", "e" * 64, (1e-5, 2e-5), 1.5e-5, 5e-6, 1e-5, (1980.0,), "ok"))
    return store


@pytest.fixture
def laptop(tmp_path: Path) -> Iterator[Store]:
    store = _laptop(f"sqlite:///{tmp_path / 'laptop.db'}")
    yield store
    store.close()


@pytest.fixture
def team(store_url: str) -> Iterator[Store]:
    store = Store.open(store_url)
    yield store
    store.close()


def _counts(url: str) -> dict[str, int]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return {name: conn.exec_driver_sql(f"SELECT count(*) FROM {name}").scalar_one() for name in TABLES}
    finally:
        engine.dispose()


def _url(store: Store) -> str:
    return store._engine.url.render_as_string(hide_password=False)  # test access to the URL with its password


@pytest.mark.parametrize("name", ["study.json", "study.json.gz"])
def test_export_then_import_twice_changes_nothing_the_second_time(laptop: Store, team: Store, tmp_path: Path,
                                                                  name: str) -> None:  # fmt: skip
    path = tmp_path / name
    exported = exchange.export_to_file(_url(laptop), "fir-laptop", path)
    assert (exported.trials, exported.builds, exported.measurements) == (4, 2, 1)  # build 7 is not referenced
    assert path.read_bytes().startswith(b"\x1f\x8b") == name.endswith(".gz")

    first = exchange.import_from_file(_url(team), path)
    assert (first.created, first.trials_added, first.trials_skipped) == (True, 3, 1)  # running: not a result
    assert (first.builds_added, first.measurements_added) == (2, 1)
    before = _counts(_url(team))
    again = exchange.import_from_file(_url(team), path)
    assert not again.changed and again.trials_kept == 3
    assert _counts(_url(team)) == before == {"studies": 1, "trials": 3, "builds": 2, "measurements": 1}

    study = team.find_study("fir-laptop")
    assert study.key == KEY
    mine = {t.config_key: t for t in team.trials(study.id)}
    theirs = {t.config_key: t for t in laptop.trials(laptop.find_study("fir-laptop").id)}
    for key, trial in mine.items():
        fields = ("state", "value", "reason", "metrics", "code_hash", "config", "worker", "finished_at")
        assert [getattr(trial, f) for f in fields] == [getattr(theirs[key], f) for f in fields]
    assert team.get_build("3" * 64) == laptop.get_build("3" * 64)
    assert team.get_measurement("3" * 64, "H200", "580.1", "e" * 64) == laptop.get_measurement(
        "3" * 64, "H200", "580.1", "e" * 64
    )


def test_merge_keeps_finished_rows_and_numbers_new_ones(laptop: Store, team: Store, tmp_path: Path) -> None:
    study = team.get_or_create_study(KEY, "fir-laptop")
    _record(team, study.id, 3, TrialState.COMPLETE, 9.0)  # finished here with another value: kept
    _record(team, study.id, 2, TrialState.FAILED, retryable=True)  # waiting for a retry: replaced
    _record(team, study.id, 5, TrialState.RUNNING)  # someone is on it
    exchange.export_to_file(_url(laptop), "fir-laptop", tmp_path / "s.json")
    summary = exchange.import_from_file(_url(team), tmp_path / "s.json")
    assert (summary.created, summary.trials_added, summary.trials_kept, summary.trials_skipped) == (False, 2, 1, 1)
    trials = {t.config_key: t for t in team.trials(study.id)}
    assert trials[_key(3)].value == 9.0
    assert (trials[_key(2)].state, trials[_key(2)].value, trials[_key(2)].number) == (TrialState.COMPLETE, 4.0, 1)
    assert trials[_key(5)].state is TrialState.RUNNING
    assert trials[_key(1)].number == 3  # a fresh number after the existing 0..2
    assert team.claim_trial(study.id, "next", {}, "w").number == 4  # type: ignore[union-attr]


def test_a_name_clash_with_another_key_changes_nothing(laptop: Store, team: Store, tmp_path: Path) -> None:
    team.get_or_create_study(replace(KEY, arch="sm_80"), "fir-laptop")
    exchange.export_to_file(_url(laptop), "fir-laptop", tmp_path / "s.json")
    before = _counts(_url(team))
    with pytest.raises(StoreError, match="study 'fir-laptop' was made for another architecture") as caught:
        exchange.import_from_file(_url(team), tmp_path / "s.json")
    assert "\n" not in str(caught.value)
    assert _counts(_url(team)) == before


def _damaged(path: Path, how: str) -> None:
    data = path.read_bytes()
    document = json.loads(data) if how in ("tampered", "version") else {}
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "gz-truncated":
        path.with_suffix(".gz").write_bytes(gzip.compress(data)[:-40])
    elif how == "tampered":
        document["payload"]["trials"][0]["value"] = 0.0
        path.write_text(json.dumps(document))
    elif how == "version":
        path.write_text(json.dumps({**document, "version": 99}))
    elif how == "foreign":
        path.write_text(json.dumps({"hello": "world"}))
    elif how == "binary":
        path.write_bytes(bytes(range(256)))


@pytest.mark.parametrize("how", ["truncated", "gz-truncated", "tampered", "version", "foreign", "binary"])
def test_a_bad_file_is_refused_and_nothing_changes(laptop: Store, team: Store, tmp_path: Path, how: str) -> None:
    path = tmp_path / "s.json"
    exchange.export_to_file(_url(laptop), "fir-laptop", path)
    exchange.import_from_file(_url(team), path)  # a populated target
    exchange.export_to_file(_url(laptop), "fir-laptop", path)
    _damaged(path, how)
    before = _counts(_url(team))
    with pytest.raises(UsageError) as caught:
        exchange.import_from_file(_url(team), path.with_suffix(".gz") if how == "gz-truncated" else path)
    assert "\n" not in str(caught.value)
    assert _counts(_url(team)) == before


def test_a_failing_import_rolls_back_everything(laptop: Store, team: Store, tmp_path: Path) -> None:
    """A trial that cannot be written (its config key collides inside the file) aborts the
    whole import: the study, the trials before it, the builds are all rolled back."""
    export = laptop.export_study("fir-laptop")
    clash = replace(export, name="new-study", trials=(*export.trials, replace(export.trials[1], number=9)))
    before = _counts(_url(team))
    with pytest.raises(StoreError, match="nothing was imported"):
        team.import_study(clash)
    assert _counts(_url(team)) == before


@pytest.mark.slow
@pytest.mark.postgres
def test_a_laptop_sqlite_study_merges_into_the_team_postgres(postgres_url: str, tmp_path: Path) -> None:
    """The CLI end to end: tune on a laptop (SQLite), export, import into the team's PostgreSQL,
    import again (nothing changes), then a tuner on the team database compiles nothing new."""
    (tmp_path / "scale.cu").write_text(TINY_KERNEL)
    tune = ["tune", "scale.cu", "--workers", "local", "--json", "--budget", "8", "--batch-size", "4",
            "--study", "scale-team", "--only", "ptxas.opt_level,ptxas.register_usage_level"]  # fmt: skip
    laptop = run_cli([*tune, "--db", f"sqlite:///{tmp_path}/laptop.db"], cwd=tmp_path)
    assert laptop.returncode == 0, laptop.describe()
    exported = run_cli(["db", "export", "scale-team", "-o", "scale.json.gz", "--db", f"sqlite:///{tmp_path}/laptop.db"],
                       cwd=tmp_path)  # fmt: skip
    assert exported.returncode == 0 and "exported study scale-team" in exported.stdout, exported.describe()
    imported = run_cli(["db", "import", "scale.json.gz", "--db", postgres_url], cwd=tmp_path)
    assert imported.returncode == 0 and "created study scale-team" in imported.stdout, imported.describe()
    counts = _counts(postgres_url)
    again = run_cli(["db", "import", "scale.json.gz", "--db", postgres_url], cwd=tmp_path)
    assert again.returncode == 0 and "(nothing new)" in again.stdout, again.describe()
    assert _counts(postgres_url) == counts
    team = run_cli([*tune, "--db", postgres_url], cwd=tmp_path)
    assert team.returncode == 0, team.describe()
    report = json.loads(team.stdout)
    counters = report["counters"]  # imported rows are not built again, except what the ACF cites (checked)
    assert counters["compiler_calls"] == counters["verify_calls"] <= 4 and counters["new_trials"] == 0
    assert report["best"]["config"] == json.loads(laptop.stdout)["best"]["config"]


def test_an_export_piped_to_an_import_moves_the_study(laptop: Store, team: Store, tmp_path: Path) -> None:
    """`db export -o -` writes standard output, and `db import -` reads standard input, so a study
    moves in one pipe (import took `-` for a file name: "cannot read -")."""
    def cli(*args: str, given: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([compileiq_command(), *args], input=given, capture_output=True, cwd=tmp_path,
                              env=clean_env(), timeout=120, check=False)

    exported = cli("db", "export", "fir-laptop", "-o", "-", "--db", _url(laptop))
    assert exported.returncode == 0, exported.stderr
    imported = cli("db", "import", "-", "--db", _url(team), given=exported.stdout)
    assert imported.returncode == 0 and b"created study fir-laptop: 3 trials added" in imported.stdout, imported
    assert len(team.trials(team.find_study("fir-laptop").id)) == 3
    empty = cli("db", "import", "-", "--db", _url(team))
    assert empty.returncode == 2 and empty.stderr.decode().startswith("error: -: not a compileiq study export")


def test_a_trade_offs_pick_rule_moves_with_its_study(tmp_path: Path) -> None:
    """The pick rule lived only in the runs, which an export leaves out: after `db import`, `show`,
    `--json` and the report chose the knee (#0) where the ACF held the weighted pick (#3), with no
    word (a red team's). The rule travels with the study now; a forged one is not used."""
    kernel = Path(__file__).resolve().parent.parent / "kernels" / "spill_heavy" / "spill_heavy.cu"
    laptop, team = f"sqlite:///{tmp_path / 'laptop.db'}", f"sqlite:///{tmp_path / 'team.db'}"
    tuned = run_cli(["tune", str(kernel), "--objective", "registers,instructions", "--pick",
                     "weights=registers:0.1,instructions:0.9", "--only", "ptxas.maxrregcount,ptxas.override_directive_values",
                     "--budget", "16", "--workers", "local", "--db", laptop, "--out", "k.acf.toml"], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    pick = tomllib.loads((tmp_path / "k.acf.toml").read_text())["evidence"]["pick"]
    exported = tmp_path / "study.json"
    assert run_cli(["db", "export", "1", "--db", laptop, "-o", str(exported)], cwd=tmp_path).returncode == 0
    assert run_cli(["db", "import", str(exported), "--db", team], cwd=tmp_path).returncode == 0
    shown = run_cli(["show", "1", "--db", team, "--json"], cwd=tmp_path)
    assert shown.returncode == 0, shown.describe()
    data = json.loads(shown.stdout)
    assert (data["pick_rule"], data["pick"]) == (pick["rule"], pick["trial"]), data
    listed = run_cli(["show", "--db", team], cwd=tmp_path)  # no "lowest" of a first objective: no trade-off's measure
    listed_row = " ".join(listed.stdout.split())
    assert f"#{pick['trial']} on the front (show 1, replayed: pick rule from" in listed_row, listed_row  # as show 1 picks
    assert "lowest" not in listed.stdout, listed.describe()
    forged = json.loads(exported.read_text())  # a forger recomputes the checksum: it is no signature
    forged["payload"]["study"]["pick"] = "weights=" + "9," * 50
    payload = json.dumps(forged["payload"], sort_keys=True, separators=(",", ":"))
    forged["sha256"] = hashlib.sha256(payload.encode()).hexdigest()
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert run_cli(["db", "import", str(tmp_path / "forged.json"), "--db", other], cwd=tmp_path).returncode == 0
    assert json.loads(run_cli(["show", "1", "--db", other, "--json"], cwd=tmp_path).stdout)["pick_rule"] == "knee"


@pytest.fixture(scope="module")
def two_flag_studies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two static studies of a-cuda/scale.cu in one SQLite database: `plain`, and `defined`, built
    with the base flag -DSCALE=2 (tune.toml's nvcc_flags), and their exports."""
    folder = tmp_path_factory.mktemp("carried")
    (folder / "a-cuda").mkdir()
    (folder / "a-cuda" / "scale.cu").write_text(TINY_KERNEL)
    source = f"sqlite:///{folder}/source.db"
    tune = ["tune", "a-cuda/scale.cu", "--objective", "static", "--budget", "3", "--workers", "local",
            "--only", "ptxas.opt_level", "--db", source]
    assert run_cli([*tune, "--study", "plain", "--out", "p.acf.toml"], cwd=folder).returncode == 0
    (folder / "a-cuda" / "tune.toml").write_text('nvcc_flags = ["-DSCALE=2"]\n')
    defined = run_cli([*tune, "--study", "defined", "--out", "d.acf.toml"], cwd=folder)
    assert defined.returncode == 0, defined.describe()
    (folder / "a-cuda" / "tune.toml").unlink()
    for name in ("plain", "defined"):
        exported = run_cli(["db", "export", name, "-o", f"{name}.json", "--db", source], cwd=folder)
        assert exported.returncode == 0, exported.describe()
    return folder


def _seen(folder: Path, url: str) -> dict[str, object]:
    """What show's list, `show STUDY --json` and `report --compare` say of the two studies."""
    def out(*args: str) -> str:
        result = run_cli([*args, "--db", url], cwd=folder)
        assert result.returncode == 0 and "Traceback" not in result.output, result.describe()
        return result.stdout

    listed = {s["name"]: (s["kernel_path"], s["kernel_shown"], s["chosen"], s["baseline"])
              for s in json.loads(out("show", "--json"))}
    shown = {name: {k: v for k, v in json.loads(out("show", name, "--json"))["study"].items() if k not in ("id", "created_at")}
             for name in ("plain", "defined")}
    compared = out("report", "plain", "defined", "--compare", "--format", "md", "-o", "-")
    return {"listed": listed, "shown": shown,
            "compared": [line for line in compared.splitlines() if "SCALE" in line or "sha256" in line or "a-cuda" in line]}


def test_a_moved_study_shows_reports_and_compares_as_in_its_source(two_flag_studies: Path, store_url: str) -> None:
    """An export carried the trials and the pick rule alone: an imported study had no kernel path
    (the list named it "scale", not "a-cuda/scale.cu"), no base flags (`report --compare` could not
    say that -DSCALE=2 tells the two apart) and no sources' hashes. What the study's latest deciding
    run recorded of what it started from travels with it now, SQLite to SQLite and to PostgreSQL."""
    folder = two_flag_studies
    for name in ("plain", "defined"):
        imported = run_cli(["db", "import", f"{name}.json", "--db", store_url], cwd=folder)
        assert imported.returncode == 0, imported.describe()
    source, moved = _seen(folder, f"sqlite:///{folder}/source.db"), _seen(folder, store_url)
    assert source["listed"]["plain"][0] == "a-cuda/scale.cu"
    assert any("-DSCALE=2" in line for line in source["compared"]), source["compared"]
    assert moved == source
    listed = json.loads(run_cli(["show", "--json", "--db", store_url], cwd=folder).stdout)
    assert all(s["best_is"].endswith("no run here chose)") for s in listed), listed  # not "does not match the rows"


def test_a_forged_kernel_path_in_an_export_is_never_shown(two_flag_studies: Path, tmp_path: Path) -> None:
    """An export is untrusted: a kernel path that is not a relative path to a file of the study's
    kernel name is not shown by the list, show or the report, and an oversized one is not imported."""
    document = json.loads((two_flag_studies / "plain.json").read_text())
    for number, forged in enumerate(("../../etc/scale.cu", "a-cuda/passwd", "/etc/scale.cu", "a\x1b[2J/scale.cu",
                                     "a/" * 3000 + "scale.cu")):
        document["payload"]["study"]["decision"]["kernel_path"] = forged
        (tmp_path / "forged.json").write_text(resealed(document))
        url = f"sqlite:///{tmp_path}/forged{number}.db"
        imported = run_cli(["db", "import", str(tmp_path / "forged.json"), "--db", url], cwd=tmp_path)
        assert imported.returncode == 0, imported.describe()
        listed = run_cli(["show", "--json", "--db", url], cwd=tmp_path)
        assert json.loads(listed.stdout)[0]["kernel_path"] is None, listed.describe()
        shown = run_cli(["show", "plain", "--db", url], cwd=tmp_path)
        report = run_cli(["report", "plain", "--format", "md", "-o", "-", "--db", url], cwd=tmp_path)
        for result in (shown, report):
            assert result.returncode == 0 and forged not in result.output and "passwd" not in result.output, \
                result.describe()
