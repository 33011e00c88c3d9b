"""Hostile and broken input on the database side, through the real `compileiq` command:
credentials in URLs, damaged or in-memory SQLite databases, unreachable servers, hostile export
files (deep JSON, gzip bombs), forged rows in a shared database or an export file, and the
PostgreSQL store holding default-space studies.

Each bad input: a non-zero exit with one error line (no traceback) and no secret in the output,
and what the database held before is still there; a forged row is skipped or rejected, never a
crash.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import sqlite3
import tomllib
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import sqlalchemy as sa
from helpers import TINY_KERNEL, CliResult, database_at, run_cli

from compileiq.core.records import StudyKey, TrialState
from compileiq.store import Store, exchange

REPO = Path(__file__).resolve().parent.parent
SECRET = "Hush7Secret"
TABLES = ("studies", "trials", "builds", "measurements")
ONLY = "ptxas.opt_level,ptxas.register_usage_level"
TINY_TUNE = ["tune", "scale.cu", "--workers", "local", "--json", "--budget", "4", "--batch-size", "4",
             "--no-simplify", "--study", "scale", "--only", ONLY]  # fmt: skip


def one_line_error(result: CliResult, code: int | None = None) -> str:
    """The single error line of a failed command (no traceback, no secret)."""
    context = result.describe()
    assert "Traceback" not in result.output, context
    assert result.returncode != 0 if code is None else result.returncode == code, context
    assert len(result.stderr_lines) == 1 and result.stderr_lines[0].startswith("error: "), context
    assert SECRET not in result.output, context
    return result.stderr_lines[0]


def counts(url: str) -> dict[str, int]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return {t: conn.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar_one() for t in TABLES}
    finally:
        engine.dispose()


def in_parallel(jobs: dict[str, Callable[[], CliResult]]) -> dict[str, CliResult]:
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with a tiny kernel tuned into `tuned.db` (study "scale") and its export."""
    ws = tmp_path_factory.mktemp("hostile-store")
    (ws / "scale.cu").write_text(TINY_KERNEL)
    done = run_cli([*TINY_TUNE, "--db", f"sqlite:///{ws}/tuned.db"], cwd=ws)
    assert done.returncode == 0, done.describe()
    exported = run_cli(["db", "export", "scale", "-o", "scale.json", "--db", f"sqlite:///{ws}/tuned.db"], cwd=ws)
    assert exported.returncode == 0, exported.describe()
    return ws


# -- 1. credentials in a URL are never shown nor written --------------------------------------

URLS = {
    "user-password": f"postgresql+psycopg://team:{SECRET}@127.0.0.1:1/tuning",
    "query-password": f"postgresql+psycopg://team@127.0.0.1:1/tuning?password={SECRET}",
    "query-and-user-password": f"postgresql+psycopg://team:{SECRET}x@127.0.0.1:1/t?password={SECRET}&application_name=ci",
    "query-sslmode-echoed": f"postgresql+psycopg://team@127.0.0.1:1/tuning?sslmode={SECRET}",
    "query-token": f"postgresql+psycopg://team@127.0.0.1:1/tuning?options=-c%20token%3D{SECRET}",
    "unparsable-port": f"postgresql+psycopg://team:{SECRET}@127.0.0.1:bad/t?password={SECRET}",
    "unknown-driver": f"nosuchdb://team:{SECRET}@127.0.0.1/t?token={SECRET}",
    "at-in-password": f"postgresql+psycopg://team:{SECRET}@x@127.0.0.1:1/tuning",
}
URL_COMMANDS = {
    "show": ["show"],
    "upgrade": ["db", "upgrade"],
    "import": ["db", "import", "scale.json"],
    "export": ["db", "export", "scale", "-o", "out.json"],
    "tune": TINY_TUNE,
}


def _url_command(index: int) -> list[str]:
    return list(URL_COMMANDS.values())[index % len(URL_COMMANDS)]


@pytest.fixture(scope="module")
def url_results(tuned: Path) -> dict[str, CliResult]:
    jobs = {name: lambda u=url, i=index: run_cli([*_url_command(i), "--db", u], cwd=tuned)
            for index, (name, url) in enumerate(URLS.items())}  # fmt: skip
    return in_parallel(jobs)


@pytest.mark.parametrize("name", list(URLS))
def test_a_url_credential_never_shows_in_an_error(url_results: dict[str, CliResult], name: str) -> None:
    line = one_line_error(url_results[name])
    assert "127.0.0.1" in line or "nosuchdb" in line or "not a database URL" in line


@pytest.mark.postgres
def test_db_upgrade_output_hides_a_password_in_the_query(postgres_url: str, tmp_path: Path) -> None:
    url = sa.make_url(postgres_url)
    password = str(url.password)
    in_query = url.set(password=None, query={"password": password, "application_name": SECRET})
    result = run_cli(["db", "upgrade", "--db", in_query.render_as_string(hide_password=False)], cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    assert "schema at revision 0009" in result.stdout
    assert password not in result.output and SECRET not in result.output, result.describe()


def test_the_acf_records_no_query_parameter(tuned: Path, tmp_path: Path) -> None:
    (tmp_path / "scale.cu").write_text(TINY_KERNEL)
    url = f"sqlite:///{tmp_path}/q.db?secret_token={SECRET}&password={SECRET}"
    result = run_cli([*TINY_TUNE, "--db", url, "--out", "scale.acf.toml"], cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    acf = (tmp_path / "scale.acf.toml").read_text()
    assert SECRET not in acf and SECRET not in result.stdout, acf
    assert f'database = "sqlite:///{tmp_path}/q.db?' in acf


# -- 2. a database that cannot hold a study -----------------------------------------------------

def _damaged_databases(ws: Path, good: Path) -> dict[str, Path]:
    data = good.read_bytes()
    files = {
        "random-bytes": bytes(range(256)) * 40,
        "text-file": b"just some notes, not a database\n" * 50,
        "truncated-half": data[: len(data) // 2],
        "header-only": data[:100],
        "zeroed-pages": data[:100] + b"\0" * (len(data) - 100),
        "gzip-of-a-db": gzip.compress(data),
    }
    paths = {}
    for name, content in files.items():
        paths[name] = ws / f"damaged-{name}.db"
        paths[name].write_bytes(content)
    return paths


DAMAGED = {  # each damaged file, and the command that meets it
    "random-bytes": ["tune", *TINY_TUNE[1:]],
    "text-file": ["show"],
    "truncated-half": ["db", "import", "scale.json"],
    "header-only": ["show", "scale"],
    "zeroed-pages": ["db", "upgrade"],
    "gzip-of-a-db": ["db", "export", "scale", "-o", "never.json"],
}


@pytest.fixture(scope="module")
def damaged_results(tuned: Path) -> dict[str, tuple[CliResult, bytes, bytes]]:
    paths = _damaged_databases(tuned, tuned / "tuned.db")
    before = {name: paths[name].read_bytes() for name in DAMAGED}
    jobs = {name: lambda n=name: run_cli([*DAMAGED[n], "--db", f"sqlite:///{paths[n]}"], cwd=tuned) for name in DAMAGED}
    results = in_parallel(jobs)
    return {name: (results[name], before[name], paths[name].read_bytes()) for name in DAMAGED}


@pytest.mark.parametrize("name", list(DAMAGED))
def test_a_damaged_sqlite_file_is_one_line_and_left_as_it_was(damaged_results: dict, tuned: Path, name: str) -> None:
    result, before, after = damaged_results[name]
    line = one_line_error(result, 1)
    assert "database" in line, result.describe()
    assert after == before
    assert not (tuned / "never.json").exists()


@pytest.mark.parametrize("args", [["show"], ["db", "upgrade"], ["report", "scale", "-o", "never.html"],
                                  TINY_TUNE], ids=["show", "upgrade", "report", "tune"])  # fmt: skip
def test_a_version_table_with_two_revisions_is_one_line_and_changes_nothing(tuned: Path, tmp_path: Path,
                                                                           args: list[str]) -> None:  # fmt: skip
    """Two rows in alembic_version (a half-applied branch, a forged row): Alembic's own error was a
    traceback from every command; the table and both revisions are named, nothing is written."""
    db = tmp_path / "two-heads.db"
    shutil.copy(tuned / "tuned.db", db)
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO alembic_version VALUES ('0010')")
    conn.close()
    url = f"sqlite:///{db}"
    before = counts(url)
    shutil.copy(tuned / "scale.cu", tmp_path / "scale.cu")
    line = one_line_error(run_cli([*args, "--db", url], cwd=tmp_path), 1)
    assert "alembic_version" in line and "'0009', '0010'" in line and str(db) in line
    assert counts(url) == before
    with sqlite3.connect(db) as conn:
        assert sorted(conn.execute("SELECT version_num FROM alembic_version")) == [("0009",), ("0010",)]
    conn.close()
    assert not (tmp_path / "never.html").exists()


NOT_IDS = {"superscript-two": "\u00b2", "arabic-indic-one": "\u0661", "past-int64": "9223372036854775808",
           "past-int64-long": "9" * 30}  # fmt: skip
NOT_ID_COMMANDS = [(study, args) for study in NOT_IDS for args in (["show", "{}"],)] + [
    (study, args) for study in ("superscript-two", "past-int64") for args in (
        ["show", "{}", "--json"], ["report", "{}", "-o", "never.html"],
        ["report", "1", "{}", "--compare", "-o", "never.html"], ["db", "export", "{}", "-o", "never.json"])]


@pytest.mark.parametrize(("name", "args"), NOT_ID_COMMANDS, ids=[f"{n}-{'-'.join(a[:2])}" for n, a in NOT_ID_COMMANDS])
def test_a_study_id_that_only_looks_numeric_is_no_study(tuned: Path, name: str, args: list[str]) -> None:
    """`str.isdigit` holds for '²' (which int() refuses) and for ids past SQLite's INTEGER: each
    was a traceback; '١' opened study id 1. Only ASCII digits within 2**63 are an id."""
    study = NOT_IDS[name]
    result = run_cli([arg.replace("{}", study) for arg in args] + ["--db", f"sqlite:///{tuned}/tuned.db"], cwd=tuned)
    assert one_line_error(result, 2).startswith(f"error: no study named '{study}'")
    assert not (tuned / "never.html").exists() and not (tuned / "never.json").exists()


def test_a_study_named_like_another_studys_id_is_refused_as_ambiguous(tuned: Path, tmp_path: Path) -> None:
    """A study *named* "1" (anyone who can write to a team database can make one) hid study id 1
    from `show 1`; now neither is opened, and the error names how to reach each."""
    shutil.copy(tuned / "tuned.db", tmp_path / "team.db")
    shutil.copy(tuned / "scale.cu", tmp_path / "scale.cu")
    url = f"sqlite:///{tmp_path}/team.db"
    tuned_again = run_cli([*TINY_TUNE[:-4], "--study", "1", *TINY_TUNE[-2:], "--db", url], cwd=tmp_path)
    assert tuned_again.returncode == 0, tuned_again.describe()
    for args in (["show", "1", "--json"], ["report", "1", "-o", "never.html"], ["db", "export", "1", "-o", "-"]):
        line = one_line_error(run_cli([*args, "--db", url], cwd=tmp_path), 2)
        assert "both study id 1 (named 'scale') and the name of study id 2" in line and "'scale' or 2" in line
    for given, study in (("scale", {"id": 1, "name": "scale"}), ("2", {"id": 2, "name": "1"})):
        shown = run_cli(["show", given, "--json", "--db", url], cwd=tmp_path)
        assert shown.returncode == 0, shown.describe()
        assert {k: json.loads(shown.stdout)["study"][k] for k in ("id", "name")} == study


@pytest.mark.parametrize(("url", "args"), [
    ("sqlite://", TINY_TUNE),
    ("sqlite:///:memory:", ["db", "import", "scale.json"]),
    ("sqlite:///file:x?mode=memory&uri=true", ["show"]),
], ids=["empty-tune", "memory-import", "uri-memory-show"])  # fmt: skip
def test_an_in_memory_database_is_refused(tuned: Path, url: str, args: list[str]) -> None:
    line = one_line_error(run_cli([*args, "--db", url], cwd=tuned), 2)  # a bad --db is bad input
    assert "in-memory" in line


def test_db_import_of_a_named_pipe_is_refused_without_opening_it(tmp_path: Path) -> None:
    """`db import FIFO` blocked in open() until a writer came (a CI job hung); like every other
    path, a file that is not regular is refused from stat alone, and no database is created."""
    os.mkfifo(tmp_path / "pipe.json")
    (tmp_path / "folder.json").mkdir()
    url = f"sqlite:///{tmp_path}/imported.db"
    piped = run_cli(["db", "import", "pipe.json", "--db", url], cwd=tmp_path, timeout=60)
    assert one_line_error(piped, 2) == ("error: cannot read pipe.json: it is a named pipe, not a regular file "
                                        "(to import from a pipe: ... | compileiq db import -)")  # fmt: skip
    folder = run_cli(["db", "import", "folder.json", "--db", url], cwd=tmp_path, timeout=60)
    assert one_line_error(folder, 2) == "error: cannot read folder.json: it is a directory, not a regular file"
    assert not (tmp_path / "imported.db").exists()


# -- 3. hostile export files --------------------------------------------------------------------

def _gzip_stream(size: int, chunk: bytes = b"\0" * 2**20) -> bytes:
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [deflate.compress(chunk) for _ in range(size // len(chunk))]
    return b"".join([*parts, deflate.flush()])


def _hostile_files(ws: Path, good: bytes) -> dict[str, Path]:
    deep = b"[" * 200_000 + b"]" * 200_000
    deep_payload = json.loads(good)
    nested: object = 1
    for _ in range(900):
        nested = [nested]
    deep_payload["payload"]["trials"][0]["metrics"] = {"x": nested}
    files = {
        "deep-json": deep,
        "deep-json-gz": gzip.compress(deep),
        "deep-object": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        "deep-inside-valid-document": json.dumps(deep_payload).encode(),
        "gzip-bomb": _gzip_stream(exchange.MAX_BYTES + 2**21),
        "gzip-bomb-of-json": _gzip_stream(exchange.MAX_BYTES + 2**21, b"[1," * 2**18),
        "gzip-trailing-garbage": gzip.compress(good) + b"garbage after the stream",
        "gzip-header-only": gzip.compress(good)[:10],
        "empty": b"",
        "json-null": b"null",
        "json-array": b"[]",
        "nul-bytes": b"\0" * 4096,
        # json.loads refuses integers of more than 4300 digits with a ValueError, not a JSONDecodeError
        "integer-of-5000-digits": re.sub(rb'"value": [-0-9.e+]+', b'"value": 1' + b"0" * 5000, good, count=1),
    }
    paths = {}
    for name, content in files.items():
        paths[name] = ws / f"hostile-{name}.json"
        paths[name].write_bytes(content)
    return paths


HOSTILE_FILES = ("deep-json", "deep-json-gz", "deep-object", "deep-inside-valid-document", "gzip-bomb",
                 "gzip-bomb-of-json", "gzip-trailing-garbage", "gzip-header-only", "empty", "json-null",
                 "json-array", "nul-bytes", "integer-of-5000-digits")  # fmt: skip


@pytest.fixture(scope="module")
def hostile_file_results(tuned: Path) -> dict[str, tuple[CliResult, dict[str, int], dict[str, int]]]:
    paths = _hostile_files(tuned, (tuned / "scale.json").read_bytes())
    urls = {}
    for name in HOSTILE_FILES:
        shutil.copyfile(tuned / "tuned.db", tuned / f"target-{name}.db")
        urls[name] = f"sqlite:///{tuned}/target-{name}.db"
    before = {name: counts(url) for name, url in urls.items()}
    results = in_parallel({name: lambda n=name: run_cli(["db", "import", str(paths[n]), "--db", urls[n]], cwd=tuned)
                           for name in HOSTILE_FILES})  # fmt: skip
    return {name: (results[name], before[name], counts(urls[name])) for name in HOSTILE_FILES}


@pytest.mark.parametrize("name", HOSTILE_FILES)
def test_a_hostile_export_file_is_one_line_and_changes_nothing(hostile_file_results: dict, name: str) -> None:
    result, before, after = hostile_file_results[name]
    line = one_line_error(result, 2)
    if name.startswith("gzip-bomb"):
        assert "MiB" in line, line
    if name.startswith("deep"):
        assert "nested too deeply" in line or "checksum" in line, line
    if name == "integer-of-5000-digits":
        assert "not a compileiq study export (a number of more than 4300 digits)" in line, line
    assert after == before


# -- 4. forged rows: in an export file, and in a shared database --------------------------------

def _resealed(document: dict) -> str:
    payload = document["payload"]
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return json.dumps({**document, "sha256": hashlib.sha256(text.encode()).hexdigest()})


def _key(config: dict) -> str:
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def _forge_trial(trial: dict, how: str) -> dict:
    config = dict(trial["config"])
    forged = dict(trial, value=-1.0, state="complete")
    if how == "unknown-parameter":
        config["ptxas.bogus"] = 1
    elif how == "value-outside-space":
        config["ptxas.opt_level"] = 99
    elif how == "wrong-value-type":
        config["ptxas.opt_level"] = "3"
    elif how == "define-with-shell-text":
        config["define.X"] = "1;touch${IFS}/tmp/pwned"
    elif how == "nested-config-value":
        config["ptxas.opt_level"] = {"deep": [1]}
    elif how == "missing-parameter":
        config.pop("ptxas.opt_level")
    elif how == "extra-parameter-of-the-space":
        config["nvcc.use_fast_math"] = True
    forged["config"] = config
    forged["config_key"] = _key(config) if isinstance(config, dict) else "x"
    if how == "key-does-not-match":
        forged["config_key"] = _key({**config, "ptxas.opt_level": (config["ptxas.opt_level"] + 1) % 4})
    elif how == "value-not-a-number":
        forged["value"] = "fast"
    elif how == "value-infinite":
        forged["value"] = float("-inf")
    elif how == "metrics-a-list":
        forged["metrics"] = [1, 2]
    elif how == "metrics-out-of-range":  # the evidence an ACF would carry
        forged["metrics"] = {**trial["metrics"], "occupancy": 7.0}
    elif how == "state-unknown":
        forged["state"] = "winner"
    elif how == "time-not-a-time":
        forged["started_at"] = "yesterday"
    elif how == "code-hash-huge":
        forged["code_hash"] = "a" * 100_000
    elif how == "duplicate-of-a-good-row":
        forged = dict(trial, value=-1.0)
    elif how == "value-past-a-float":  # valid JSON; math.isfinite(10**400) raised OverflowError
        forged.update(value=10**400, compile_seconds=10**400)  # (the CLI lists the first 20 rejected rows)
    elif how == "occupancy-past-a-float":
        forged["metrics"] = {**trial["metrics"], "occupancy": 10**400}
    elif how == "value-not-its-metrics":  # a static value is what its metrics give: -1 with these is forged
        forged["config"] = {**config, "ptxas.opt_level": (config["ptxas.opt_level"] + 1) % 4}
        forged["config_key"] = _key(forged["config"])
    elif how == "count-past-a-float":  # passed `10**400 <= inf`, then crashed scoring (float(spill_bytes))
        forged["metrics"] = {**trial["metrics"], "spill_bytes": 10**400}
    return forged


FORGED_IN_FILE = ("unknown-parameter", "value-outside-space", "wrong-value-type", "define-with-shell-text",
                  "nested-config-value", "missing-parameter", "extra-parameter-of-the-space",
                  "key-does-not-match", "value-not-a-number", "value-infinite", "metrics-a-list", "metrics-out-of-range",
                  "state-unknown", "time-not-a-time", "code-hash-huge", "duplicate-of-a-good-row",
                  "value-past-a-float", "occupancy-past-a-float",
                  "count-past-a-float", "value-not-its-metrics")  # fmt: skip


WHY_IN_FILE = {"metrics-out-of-range": "its metrics: occupancy = '7.0' must be a number from 0 to 1",
               "value-past-a-float": "a complete trial with value 'an integer of about 400 digits'",
               "occupancy-past-a-float": "its metrics: occupancy = 'an integer of about 400 digits' must be a number",
               "count-past-a-float": "its metrics: spill_bytes = 'an integer of about 400 digits' must be an integer "
                                     "from 0 to 1.09951e+12",
               "value-not-its-metrics": "its value -1.0 is not what its metrics give for static ("}


@pytest.fixture(scope="module")
def forged_import(tuned: Path) -> tuple[CliResult, Path, int]:
    """Import one export holding the good trials and one forged trial per FORGED_IN_FILE."""
    document = json.loads((tuned / "scale.json").read_text())
    good = document["payload"]["trials"]
    forged = [_forge_trial(good[-1], how) for how in FORGED_IN_FILE]
    document["payload"]["trials"] = [*good, *forged]
    (tuned / "forged.json").write_text(_resealed(document))
    result = run_cli(["db", "import", "forged.json", "--db", f"sqlite:///{tuned}/forged.db"], cwd=tuned)
    return result, tuned / "forged.db", len(good)


def test_forged_rows_in_an_export_are_counted_and_the_rest_imported(forged_import: tuple, tuned: Path) -> None:
    result, db, _ = forged_import
    assert result.returncode == 0 and "Traceback" not in result.output, result.describe()
    assert f"{len(FORGED_IN_FILE)} rows of the file rejected" in result.stdout, result.describe()
    trials = json.loads((tuned / "scale.json").read_text())["payload"]["trials"]
    finished = [t for t in trials if t["state"] == "complete" or (t["state"] == "failed" and not t["retryable"])]
    with sqlite3.connect(db) as conn:
        values = [row[0] for row in conn.execute("SELECT value FROM trials")]
    assert len(values) == len(finished) and -1.0 not in values


@pytest.mark.parametrize("how", FORGED_IN_FILE)
def test_each_forged_row_of_an_export_is_named(forged_import: tuple, how: str) -> None:
    result, _, good = forged_import
    row = good + FORGED_IN_FILE.index(how) + 1  # the trial's own number where it has one, and its row
    assert re.search(rf"  trial (#\d+ \(row {row} of the file\)|at row {row} of the file): "
                     rf"{re.escape(WHY_IN_FILE.get(how, ''))}", result.stdout), result.describe()


@pytest.mark.parametrize(("objective", "evaluator", "says"), [
    ("time", None, "its objective 'time' is a GPU runtime, but its evaluator is static (no GPU ran it)"),
    ("time,spills", None, "its objective 'time,spills' is a GPU runtime, but its evaluator is static"),
    (None, "NVIDIA H100 80GB HBM3", "is a static one, but its evaluator is 'NVIDIA H100 80GB HBM3'"),
    ("speed", None, "its objective 'speed' is not one or several of static, spills, registers"),
])
def test_an_export_whose_objective_and_evaluator_disagree_is_refused(
        tuned: Path, tmp_path: Path, objective: str | None, evaluator: str | None, says: str) -> None:
    """A red team relabelled a static study's objective "time" (checksum recomputed): its static
    scores were imported, shown and reported as GPU runtimes. Nothing of it is imported now."""
    document = json.loads((tuned / "scale.json").read_text())
    key = document["payload"]["study"]["key"]
    assert key["evaluator"] == "static" and "time" not in key["objective"].split(",")
    key.update({"objective": objective or key["objective"], "evaluator": evaluator or key["evaluator"]})
    (tmp_path / "relabelled.json").write_text(_resealed(document))
    url = f"sqlite:///{tmp_path / 'r.db'}"
    result = run_cli(["db", "import", "relabelled.json", "--db", url], cwd=tmp_path)
    line = one_line_error(result, 2)
    assert "relabelled.json: refused: study 'scale': " in line and says in line, line
    assert not (tmp_path / "r.db").exists() or counts(url)["trials"] == 0  # nothing imported


def test_a_static_study_relabelled_as_a_gpu_runtime_is_refused(tuned: Path, tmp_path: Path) -> None:
    """Red team 48b: `objective = "time"` with any evaluator but the word "static" (a device's name)
    imported a static study whose scores every view then showed as milliseconds on that GPU. A
    runtime study's trials must be timings, as the GPU evaluator records them (kind runtime,
    median_ms): none of these is, so nothing is imported."""
    document = json.loads((tuned / "scale.json").read_text())
    document["payload"]["study"]["key"].update(objective="time", evaluator="harness-v2 NVIDIA H100 80GB HBM3")
    assert all(t["state"] == "complete" for t in document["payload"]["trials"])
    (tmp_path / "relabelled.json").write_text(_resealed(document))
    url = f"sqlite:///{tmp_path / 'r.db'}"
    line = one_line_error(run_cli(["db", "import", "relabelled.json", "--db", url], cwd=tmp_path), 2)
    assert "trials of study scale in the file were rejected, so nothing was imported" in line, line
    assert "a trial of a GPU runtime study that is no timing" in line, line
    assert not (tmp_path / "r.db").exists() or counts(url)["trials"] == 0


def _forged_row(how: str, index: int) -> dict[str, object]:
    valid = {"ptxas.opt_level": 1, "ptxas.register_usage_level": index}  # distinct keys
    values: dict[str, object] = {"config": json.dumps(valid), "config_key": _key(valid), "state": "complete",
                                 "value": -1.0, "metrics": "{}", "started_at": "2026-11-30 10:00:00.000"}  # fmt: skip
    if how == "config-outside-space":
        values.update(config=json.dumps({**valid, "ptxas.opt_level": 42}), config_key=_key({**valid, "ptxas.opt_level": 42}))
    elif how == "config-unknown-parameter":
        values.update(config=json.dumps({"ptxas.nope": 1}), config_key=_key({"ptxas.nope": 1}))
    elif how == "config-key-mismatch":
        values.update(config=json.dumps({**valid, "ptxas.opt_level": 0}))
    elif how == "config-not-json":
        values["config"] = "{not json"
    elif how == "config-a-list":
        values["config"] = "[1, 2]"
    elif how == "config-deeply-nested":
        values["config"] = "[" * 5000 + "]" * 5000
    elif how == "metrics-not-json":
        values["metrics"] = '{"spill_bytes": '
    elif how == "metrics-out-of-range":
        values["metrics"] = '{"spill_bytes": 0, "registers": 999, "occupancy": "NaN"}'
    elif how == "state-unknown":
        values["state"] = "winner"
    elif how == "value-text":
        values["value"] = "fast"
    elif how == "value-missing":
        values["value"] = None
    elif how == "time-garbage":
        values["started_at"] = "last tuesday"
    elif how == "value-not-its-metrics":  # every metric in range, a value they do not give: `show` listed it
        values["metrics"] = '{"spill_bytes": 3052, "registers": 64, "occupancy": 0.5, "instructions": 900}'
    elif how == "baseline-damaged":  # the default config's row, unreadable: it is evaluated again
        default = {"ptxas.opt_level": 3, "ptxas.register_usage_level": 5}
        values.update(config=json.dumps(default), config_key=_key(default), metrics="{oops")
    return values


def _insert_forged(db: Path, hows: tuple[str, ...]) -> dict[str, int]:
    """Write forged rows straight into the shared database, as another client could; their numbers."""
    numbers = {}
    with sqlite3.connect(db) as conn:
        study_id, number = conn.execute("SELECT id, next_number FROM studies WHERE name = 'scale'").fetchone()
        for index, how in enumerate(hows):
            values = _forged_row(how, index)
            conn.execute("DELETE FROM trials WHERE study_id = ? AND config_key = ?", (study_id, values["config_key"]))
            conn.execute(
                "INSERT INTO trials (study_id, number, config_key, config, state, value, reason, retryable, metrics,"
                " code_hash, compile_seconds, worker, started_at, heartbeat_at, finished_at) VALUES (:study_id,"
                " :number, :config_key, :config, :state, :value, NULL, 0, :metrics, NULL, 0.1, 'mallory:1',"
                " :started_at, :started_at, :started_at)",
                {**values, "study_id": study_id, "number": number + index},
            )
            numbers[how] = number + index
        conn.execute("UPDATE studies SET next_number = ? WHERE id = ?", (number + len(hows), study_id))
    return numbers


FORGED_IN_DB = ("config-outside-space", "config-unknown-parameter", "config-key-mismatch", "config-not-json",
                "config-a-list", "config-deeply-nested", "metrics-not-json", "metrics-out-of-range", "state-unknown", "value-text",
                "value-missing", "time-garbage", "value-not-its-metrics")  # fmt: skip
SPACE_LEVEL = ("config-outside-space", "config-unknown-parameter", "config-key-mismatch")
SHARED = {"many": FORGED_IN_DB, "baseline": ("baseline-damaged",)}


@pytest.fixture(scope="module")
def forged_runs(tuned: Path) -> dict[str, tuple[CliResult, CliResult, int, int, dict[str, int]]]:
    jobs: dict[str, Callable[[], CliResult]] = {}
    numbers, before = {}, {}
    for name, hows in SHARED.items():
        db = tuned / f"shared-{name}.db"
        shutil.copyfile(tuned / "tuned.db", db)
        numbers[name] = _insert_forged(db, hows)
        before[name] = _rows(db)
        budget = [a if a != "4" else "8" for a in TINY_TUNE]
        jobs[f"{name}-tune"] = lambda d=db, b=budget, n=name: run_cli(
            [*b, "--db", f"sqlite:///{d}", "--out", f"{n}.acf.toml"], cwd=tuned)
    # `show` reads the forged rows before any tune rebuilds them (a tune re-records a damaged baseline
    # within seconds of its start: run side by side, the two raced)
    shows = {f"{name}-show": run_cli(["show", "scale", "--json", "--db", f"sqlite:///{tuned / f'shared-{name}.db'}"],
                                     cwd=tuned) for name in SHARED}
    results = {**in_parallel(jobs), **shows}
    return {name: (results[f"{name}-tune"], results[f"{name}-show"], before[name], _rows(tuned / f"shared-{name}.db"),
                   numbers[name]) for name in SHARED}  # fmt: skip


def _rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM trials").fetchone()[0])


@pytest.mark.parametrize("name", list(SHARED))
def test_forged_rows_in_a_shared_database_are_skipped_not_a_crash(forged_runs: dict, tuned: Path, name: str) -> None:
    tune, show, before, after, _ = forged_runs[name]
    for result in (tune, show):
        assert result.returncode == 0 and "Traceback" not in result.output, result.describe()
        assert "warning: skipped trial" in result.stderr, result.describe()
    best = json.loads(tune.stdout)["best"]
    assert best["value"] != -1.0, tune.stdout  # the forged "winner" is not believed
    assert sorted(best["config"]) == sorted(ONLY.split(",")) and best["config"]["ptxas.opt_level"] in range(4)
    assert "mallory" not in (tuned / f"{name}.acf.toml").read_text()
    assert after >= before  # the forged rows stay (or are evaluated afresh); nothing is lost


@pytest.mark.parametrize("how", [*FORGED_IN_DB, "baseline-damaged"])
def test_each_forged_row_in_a_shared_database_is_reported(forged_runs: dict, how: str) -> None:
    name = "many" if how in FORGED_IN_DB else "baseline"
    tune, show, *_, numbers = forged_runs[name]
    assert f"skipped trial #{numbers[how]} of study" in tune.stderr, tune.describe()
    if how not in SPACE_LEVEL:  # `show` knows no search space: it skips only what it cannot read
        assert f"skipped trial #{numbers[how]} of study" in show.stderr, show.describe()


DAMAGED_IN_DB = {  # SQL a client of the shared database could run, and what the views then say
    "trial-number-text": ("UPDATE trials SET number = 'x' WHERE id = (SELECT max(id) FROM trials)",
                          "skipped trial #x of study 1: its number 'x' is not a trial number"),
    "heartbeat-garbage": (("UPDATE trials SET state = 'running', heartbeat_at = 'garbage', worker = 'otherhost:1' "
                           "WHERE id = (SELECT max(id) FROM trials)"), ""),
    "run-times-garbage": ("UPDATE runs SET started_at = 'garbage', finished_at = 'garbage'",
                          "skipped run 1 of study 1: unreadable: "),
    "next-number-largest": ("UPDATE studies SET next_number = 9223372036854775807", ""),
    "next-number-text": ("UPDATE studies SET next_number = 'x'", ""),
    "next-number-behind": ("UPDATE studies SET next_number = 0", ""),
    # numbers past a float's range (valid JSON): OverflowError in the very check meant to set the row
    # aside (show, report, tune); a count passed `<= inf` and crashed scoring
    "occupancy-past-a-float": ((f"UPDATE trials SET metrics = '{{\"occupancy\": 1{'0' * 400}}}' "
                                "WHERE id = (SELECT max(id) FROM trials)"),
                               "its metrics: occupancy = 'an integer of about 400 digits' must be a number"),
    "spills-past-a-float": ((f"UPDATE trials SET metrics = '{{\"spill_bytes\": 1{'0' * 400}, \"registers\": 8, "
                             "\"occupancy\": 1.0}' WHERE id = (SELECT max(id) FROM trials)"),
                            "its metrics: spill_bytes = 'an integer of about 400 digits' must be an integer"),
}


@pytest.mark.parametrize("how", list(DAMAGED_IN_DB))
def test_a_damaged_number_time_or_counter_in_a_shared_database_is_no_traceback(tuned: Path, how: str) -> None:
    """Forged rows of a red team: a text trial number (TypeError in show, report and tune), a running
    trial's heartbeat that is not a time (tune), a run's times that are not times (show, report), a
    study's trial counter at the largest integer or text (tune: IntegrityError). Each is set aside
    with a note, or the counter repaired; nothing recorded is lost."""
    db = tuned / f"damaged-{how}.db"
    shutil.copyfile(tuned / "tuned.db", db)
    sql, says = DAMAGED_IN_DB[how]
    with sqlite3.connect(db) as conn:
        conn.execute(sql)
    before, url = _rows(db), f"sqlite:///{db}"
    budget = [*TINY_TUNE, "--budget", "8", "--batch-size", "2"]  # two claims: the second takes numbers too
    views = in_parallel({"show": lambda: run_cli(["show", "scale", "--db", url], cwd=tuned),
                         "report": lambda: run_cli(["report", "scale", "-o", f"{how}.html", "--db", url], cwd=tuned)})
    tune = run_cli([*budget, "--db", url, "--out", f"{how}.acf.toml"], cwd=tuned)
    for result in (*views.values(), tune):
        assert result.returncode == 0 and "Traceback" not in result.output, result.describe()
    assert says in views["show"].stderr and says in tune.stderr + views["report"].stderr, views["show"].describe()
    assert json.loads(tune.stdout)["best"]["value"] is not None
    assert _rows(db) > before  # the tune added its trials; none was lost


def test_a_number_past_a_float_in_a_shared_row_stops_no_export_nor_other_study(tuned: Path, tmp_path: Path) -> None:
    """A red team's rows (valid JSON, an integer of 401 digits) in a trial's metrics and a measurement's
    samples: `db export` of the study and a new study's tune (warm-started from it) raised
    OverflowError. The rows are set aside with a warning; the rest exports and tunes."""
    db, big = tmp_path / "big.db", "1" + "0" * 400
    shutil.copyfile(tuned / "tuned.db", db)
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE trials SET metrics = '{{\"occupancy\": {big}}}' WHERE id = (SELECT max(id) FROM trials)")
        (code_hash,) = conn.execute("SELECT code_hash FROM trials WHERE code_hash IS NOT NULL ORDER BY id").fetchone()
        conn.execute("INSERT INTO measurements (code_hash, device, driver, harness_args_hash, samples, median, iqr, min,"
                     " clocks, status) VALUES (?, 'H100', '550', 'abc', ?, 1.0, 0.1, 1.0, '[]', 'ok')",
                     (code_hash, f"[{big}]"))
    url = f"sqlite:///{db}"
    export = run_cli(["db", "export", "scale", "-o", str(tmp_path / "out.json"), "--db", url], cwd=tuned)
    other = run_cli([*TINY_TUNE[:-4], "--study", "other", "--only", ONLY, "--db", url,
                     "--out", str(tmp_path / "other.acf.toml")], cwd=tuned)  # fmt: skip
    for result in (export, other):
        assert result.returncode == 0 and "Traceback" not in result.output, result.describe()
        assert "its metrics: occupancy = 'an integer of about 400 digits'" in result.stderr, result.describe()
    payload = json.loads((tmp_path / "out.json").read_text())["payload"]
    assert len(payload["trials"]) > 1 and payload["measurements"] == []  # the forged measurement left out


FORGED_BUILDS = {
    "registers-negative": lambda e: e.update(registers=-5),
    "registers-past-255": lambda e: e.update(registers=4096),
    "spills-as-text": lambda e: e.update(spill_store_bytes="none"),
    "unknown-field": lambda e: e.update(evil=1),
    "max-threads-past-1024": lambda e: e.update(max_threads=4096),  # a block no launch can have
    "status-unknown": None,
    "spills-past-a-float": lambda e: e.update(spill_store_bytes=10**400),  # passed `<= inf`, crashed scoring
}


@pytest.mark.parametrize("how", list(FORGED_BUILDS))
def test_a_forged_cached_build_in_a_shared_database_is_compiled_again(tuned: Path, how: str) -> None:
    # A cached build is scored as it says, without recompiling: forged counts were that score.
    db = tuned / f"builds-{how}.db"
    shutil.copyfile(tuned / "tuned.db", db)
    with sqlite3.connect(db) as conn:
        for key, text in conn.execute("SELECT key, metrics FROM builds").fetchall():
            metrics = json.loads(text)
            if FORGED_BUILDS[how] is None:
                metrics["status"] = "winner"
            for entry in metrics["entries"]:
                FORGED_BUILDS[how](entry) if FORGED_BUILDS[how] else None
            conn.execute("UPDATE builds SET metrics = ? WHERE key = ?", (json.dumps(metrics), key))
    result = run_cli([*TINY_TUNE[:-4], "--study", f"again-{how}", "--only", ONLY, "--db", f"sqlite:///{db}",
                      "--out", f"again-{how}.acf.toml"], cwd=tuned)  # fmt: skip
    assert result.returncode == 0 and "Traceback" not in result.output, result.describe()
    assert "skipped cached build" in result.stderr, result.describe()
    best = json.loads(result.stdout)["best"]
    assert 0 < best["metrics"]["registers"] <= 255, result.stdout
    assert tomllib.loads((tuned / f"again-{how}.acf.toml").read_text())["evidence"]["best"]["registers"] > 0


# -- 5. PostgreSQL holds default-space studies -------------------------------------------------

SPILL_HEAVY = REPO / "kernels" / "spill_heavy" / "spill_heavy.cu"


@pytest.mark.slow
@pytest.mark.postgres
def test_postgres_tunes_the_default_space_and_imports_a_sqlite_export(postgres_url: str, tmp_path: Path) -> None:
    """No --only: configs of the whole default space (keys of ~400 characters) in PostgreSQL,
    by a real tune and by importing a SQLite study of the same space."""
    tune = ["tune", str(SPILL_HEAVY), "--objective", "spills", "--workers", "local", "--json", "--budget", "8",
            "--no-simplify"]  # fmt: skip
    team = run_cli([*tune, "--db", postgres_url], cwd=tmp_path)
    assert team.returncode == 0, team.describe()
    laptop_db = f"sqlite:///{tmp_path}/laptop.db"
    laptop = run_cli([*tune, "--seed", "7", "--study", "laptop", "--db", laptop_db, "--out", "laptop.acf.toml"],
                     cwd=tmp_path)
    assert laptop.returncode == 0, laptop.describe()
    exported = run_cli(["db", "export", "laptop", "-o", "laptop.json.gz", "--db", laptop_db], cwd=tmp_path)
    assert exported.returncode == 0, exported.describe()
    imported = run_cli(["db", "import", "laptop.json.gz", "--db", postgres_url], cwd=tmp_path)
    recorded = json.loads(laptop.stdout)["study"]["trials"]  # the budget's trials plus simplification and ablation
    assert imported.returncode == 0, imported.describe()
    assert f"created study laptop: {recorded} trials added" in imported.stdout, imported.describe()
    assert "rejected" not in imported.stdout
    store = Store.open(postgres_url)
    try:
        keys = [t.config_key for s in store.list_studies() for t in store.trials(s.id)]
    finally:
        store.close()
    assert len(keys) >= 16 and max(len(k) for k in keys) > 200


@pytest.mark.slow
@pytest.mark.postgres
def test_every_bundled_kernel_tunes_its_default_space_in_postgres(postgres_url: str, tmp_path: Path) -> None:
    kernels = sorted(REPO.glob("kernels/*/*.cu"))
    assert len(kernels) >= 5

    def tune(kernel: Path) -> CliResult:
        return run_cli(["tune", str(kernel), "--workers", "local", "--json", "--budget", "3", "--batch-size", "3",
                        "--no-simplify", "--out", f"{kernel.stem}.acf.toml", "--db", postgres_url], cwd=tmp_path)  # fmt: skip

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(tune, kernels))
    for kernel, result in zip(kernels, results, strict=True):
        assert result.returncode == 0, f"{kernel.name}: {result.describe()}"
        assert json.loads(result.stdout)["counters"]["new_trials"] >= 1


KEY = StudyKey("saxpy", "a" * 64, "nvcc-13.0+ptxas-13.0", "b" * 64, "13.0.88", "sm_90", "static", "spills")


def _at_previous_head(url: str) -> None:
    database_at(url, "0002", {"config_key": "k", "config": '{"a": 1}', "state": "failed", "retryable": False, "metrics": "{}"})


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_database_at_the_previous_head_upgrades_in_place(backend: str, request: pytest.FixtureRequest,
                                                           tmp_path: Path) -> None:  # fmt: skip
    url = f"sqlite:///{tmp_path}/old.db" if backend == "sqlite" else str(request.getfixturevalue("postgres_url"))
    _at_previous_head(url)
    result = run_cli(["db", "upgrade", "--db", url], cwd=tmp_path)
    assert result.returncode == 0 and "schema at revision 0009" in result.stdout, result.describe()
    store = Store.open(url)
    try:
        old = store.find_study("old")
        assert [t.config_key for t in store.trials(old.id)] == ["k"]
        long_name = "n" * 300
        study = store.get_or_create_study(KEY, long_name)
        config = {f"nvcc.option_{i:03d}": "value" for i in range(40)}
        trial = store.claim_trial(study.id, _key(config), config, "w" * 300)
        assert trial is not None and len(trial.config_key) > 200
        assert store.find_study(long_name).name == long_name
        assert store.trials(study.id)[0].state is TrialState.RUNNING
    finally:
        store.close()


def test_a_database_url_naming_a_folder_is_refused(tmp_path: Path) -> None:
    """`sqlite:////dir/` (a trailing slash, meant as a folder) silently made a database file named dir."""
    url = f"sqlite:///{tmp_path}/dir/"
    line = one_line_error(run_cli(["db", "upgrade", "--db", url], cwd=tmp_path), 2)
    assert line == (f"error: {url} names a folder (it ends in /), not a database file; give a file in it, "
                    f"e.g. {url}compileiq.db")
    assert not (tmp_path / "dir").exists()
