"""Bad input in team use, through the real command: one line on stderr, a non-zero exit, no
password echoed, and nothing in the database changed (row counts before == after).

Covered here (tests/test_cli_errors.py covers the single-user cases): `db export`/`db import`
against an unreachable server, a wrong PostgreSQL password for tune/show/db import, a database
with a newer schema for tune/show/db import, damaged export files, a study-name clash on import.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa
from helpers import CliResult, run_cli

from compileiq.core.records import BuildRecord, StudyKey, TrialState
from compileiq.store import Store, exchange

REPO = Path(__file__).resolve().parent.parent
REDUCTION = REPO / "kernels" / "reduction" / "reduction.cu"
SECRET = "t3amS3cret"
UNREACHABLE = f"postgresql+psycopg://team:{SECRET}@127.0.0.1:1/tuning"
KEY = StudyKey("saxpy", "a" * 64, "nvcc-13.0+ptxas-13.0", "b" * 64, "13.0.88", "sm_90", "static", "spills")
TABLES = ("studies", "trials", "builds", "measurements")
METRICS = {"spill_bytes": 1, "registers": 32, "occupancy": 1.0, "instructions": 100}  # value 1.0 for spills


def _populate(url: str, name: str = "s", key: StudyKey = KEY) -> None:
    store = Store.open(url)
    study = store.get_or_create_study(key, name)
    trial = store.claim_trial(study.id, '{"ptxas.opt_level":3}', {"ptxas.opt_level": 3}, "w")
    assert trial is not None
    store.finish_trial(trial.id, state=TrialState.COMPLETE, value=1.0, reason=None, metrics=METRICS,
                       code_hash="c" * 64, compile_seconds=0.1)  # fmt: skip
    store.put_build(BuildRecord("k" * 64, True, "", {}, "c" * 64, 0.1))
    store.close()


def _counts(url: str) -> dict[str, int]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            counts = {t: conn.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar_one() for t in TABLES}
            counts["schema"] = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar_one()
            return counts
    finally:
        engine.dispose()


def assert_one_line_error(result: CliResult, code: int) -> str:
    context = result.describe()
    assert "Traceback" not in result.output, context
    assert result.returncode == code, context
    assert len(result.stderr_lines) == 1 and result.stderr_lines[0].startswith("error: "), context
    assert SECRET not in result.output and "wrong-pw-" not in result.output, context
    return result.stderr_lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace: a populated target database, a good export of another study, damaged copies."""
    ws = tmp_path_factory.mktemp("team-errors")
    _populate(f"sqlite:///{ws}/source.db", "laptop")
    exchange.export_to_file(f"sqlite:///{ws}/source.db", "laptop", ws / "good.json")
    _populate(f"sqlite:///{ws}/clash-source.db", "s", replace(KEY, arch="sm_80"))
    exchange.export_to_file(f"sqlite:///{ws}/clash-source.db", "s", ws / "clash.json")
    good = (ws / "good.json").read_text()
    document = json.loads(good)
    (ws / "truncated.json").write_text(good[: len(good) // 3])
    document["payload"]["trials"][0]["value"] = 0.5
    (ws / "tampered.json").write_text(json.dumps(document))
    (ws / "future.json").write_text(re.sub(r'"version": \d+', '"version": 7', good, count=1))
    (ws / "random.json.gz").write_bytes(b"\x1f\x8b" + bytes(range(200)))
    return ws


def _target(ws: Path, name: str) -> str:
    url = f"sqlite:///{ws}/{name}.db"
    _populate(url)
    return url


# (command, expected exit code, words the error line must contain)
FILE_CASES = {
    "truncated": (["db", "import", "{ws}/truncated.json"], 2, ("truncated.json", "not json")),
    "tampered": (["db", "import", "{ws}/tampered.json"], 2, ("checksum mismatch",)),
    "future-version": (["db", "import", "{ws}/future.json"], 2, ("export version 7",)),
    "random-gzip": (["db", "import", "{ws}/random.json.gz"], 2, ("gzip",)),
    "missing-file": (["db", "import", "{ws}/nope.json"], 2, ("cannot read", "nope.json")),
    "name-clash": (["db", "import", "{ws}/clash.json"], 1, ("study 's' was made for another architecture",)),
    "export-unknown-study": (["db", "export", "nosuch", "-o", "{ws}/x.json"], 2, ("no study named 'nosuch'",)),
}


@pytest.fixture(scope="module")
def file_results(files: Path) -> Iterator[dict[str, tuple[CliResult, dict[str, int], dict[str, int]]]]:
    urls = {name: _target(files, f"target-{name}") for name in FILE_CASES}  # Alembic: one thread
    before = {name: _counts(url) for name, url in urls.items()}

    def run(name: str) -> tuple[CliResult, dict[str, int], dict[str, int]]:
        args = [a.replace("{ws}", str(files)) for a in FILE_CASES[name][0]]
        return run_cli([*args, "--db", urls[name]], cwd=files), before[name], {}

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = dict(zip(FILE_CASES, pool.map(run, FILE_CASES), strict=True))
    yield {name: (result, was, _counts(urls[name])) for name, (result, was, _) in results.items()}


@pytest.mark.parametrize("name", list(FILE_CASES))
def test_a_bad_export_file_or_clash_changes_nothing(file_results: dict, name: str) -> None:
    result, before, after = file_results[name]
    line = assert_one_line_error(result, FILE_CASES[name][1]).lower()
    for word in FILE_CASES[name][2]:
        assert word.lower() in line, result.describe()
    assert after == before


@pytest.mark.parametrize(
    "args", [["db", "import", "{ws}/good.json"], ["db", "export", "s", "-o", "{ws}/x.json"]], ids=["import", "export"]
)
def test_an_unreachable_database(files: Path, args: list[str]) -> None:
    result = run_cli([*(a.replace("{ws}", str(files)) for a in args), "--db", UNREACHABLE], cwd=files)
    assert "127.0.0.1" in assert_one_line_error(result, 1)
    assert not (files / "x.json").exists()


COMMANDS = {
    "tune": ["tune", str(REDUCTION), "--workers", "local", "--json", "--budget", "2"],
    "show": ["show"],
    "show-study": ["show", "s"],
    "db-import": ["db", "import", "{ws}/good.json"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_newer_schema_is_refused_untouched(files: Path, command: str) -> None:
    url = _target(files, f"future-{command}")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999_future'")
    engine.dispose()
    before = _counts(url)
    args = [a.replace("{ws}", str(files)) for a in COMMANDS[command]]
    result = run_cli([*args, "--db", url], cwd=files)
    assert "newer than this compileiq knows" in assert_one_line_error(result, 1)
    assert _counts(url) == before


@pytest.mark.postgres
def test_a_wrong_password_is_one_line_and_never_echoed(postgres_url: str, files: Path) -> None:
    _populate(postgres_url)
    before = _counts(postgres_url)
    wrong = sa.make_url(postgres_url).set(password="wrong-pw-4412").render_as_string(hide_password=False)
    commands = [[a.replace("{ws}", str(files)) for a in c] for c in COMMANDS.values()]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda args: run_cli([*args, "--db", wrong], cwd=files), commands))
    for result in results:
        assert "password authentication failed" in assert_one_line_error(result, 1)
    assert _counts(postgres_url) == before
    shutil.rmtree(files / "store", ignore_errors=True)
