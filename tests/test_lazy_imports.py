"""`compileiq show` loads only what it uses: no searcher (skopt, scikit-learn), no Ray, no numpy, no pydantic,
and no Alembic once the schema is current (its version is read in one query). Checked in a fresh
process through its sys.modules, not by timing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers import clean_env

from compileiq.store.connect import MIGRATIONS, SCHEMA_HEAD

HEAVY = ("skopt", "sklearn", "scipy", "ray", "numpy", "alembic", "pydantic")  # pydantic: typer 0.29 loads it

LOADED_AFTER = """
import json, sys
from compileiq.cli import main
try:
    main(sys.argv[2:])
except SystemExit:
    pass
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1].split(",")))), file=sys.stderr)
"""

OPEN_STORE = """
import json, sys
from compileiq.store import Store
Store.open(sys.argv[1]).close()
print(json.dumps("alembic" in sys.modules))
"""


def _loaded(args: list[str], cwd: Path) -> list[str]:
    """The heavy packages a `compileiq ARGS` process has imported when it ends."""
    done = subprocess.run([sys.executable, "-c", LOADED_AFTER, ",".join(HEAVY), *args], cwd=cwd, env=clean_env(),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return loaded


def _opens_with_alembic(url: str, cwd: Path) -> bool:
    done = subprocess.run([sys.executable, "-c", OPEN_STORE, url], cwd=cwd, env=clean_env(), capture_output=True,
                          text=True, timeout=120, check=True)
    return bool(json.loads(done.stdout))


def test_show_on_an_empty_and_a_current_database_imports_nothing_heavy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ciq.db'}"
    assert _loaded(["db", "upgrade", "--db", url], tmp_path) == ["alembic"]  # a new database: the migrations create it
    assert _loaded(["show", "--db", url], tmp_path) == []  # current: its version is read, nothing else


def test_a_current_schema_is_opened_without_alembic_and_an_older_one_is_upgraded(tmp_path: Path) -> None:
    from helpers import database_at

    from compileiq.store import Store

    url = f"sqlite:///{tmp_path / 'old.db'}"
    database_at(url, "0004", {"config_key": '{"a":1}', "config": '{"a": 1}', "state": "complete", "retryable": False,
                              "metrics": "{}", "value": 3.0})
    assert _opens_with_alembic(url, tmp_path)  # 0004 -> head, by the migrations
    assert not _opens_with_alembic(url, tmp_path)
    store = Store.open(url)
    try:
        assert store.upgrade() == SCHEMA_HEAD
        assert len(store.trials(store.find_study("old").id)) == 1
    finally:
        store.close()


def test_the_schema_head_is_alembics_head() -> None:
    from alembic.script import ScriptDirectory

    assert ScriptDirectory(str(MIGRATIONS)).get_current_head() == SCHEMA_HEAD
