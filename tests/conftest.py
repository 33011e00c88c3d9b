"""Shared fixtures. The store suite runs against SQLite and a real PostgreSQL.

PostgreSQL: run ``scripts/start-postgres.sh`` and export the URL it prints as
COMPILEIQ_TEST_POSTGRES_URL. Without it the postgres cases skip, except under CI=true,
where they fail so that CI can never skip them silently.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from helpers import TINY_KERNEL, in_session

POSTGRES_ENV = "COMPILEIQ_TEST_POSTGRES_URL"

# Under pytest-xdist each worker's Ray keeps a temp folder of its own: a `ray.init()` without an
# address joins the newest cluster recorded under RAY_TMPDIR (default /tmp/ray), which could be
# another worker's `ray start --head`.
if _worker := os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("RAY_TMPDIR", f"/tmp/ciq-ray-{_worker}")


@pytest.fixture
def postgres_admin_url() -> str:
    """The URL of a role that may CREATE DATABASE (from COMPILEIQ_TEST_POSTGRES_URL)."""
    url = os.environ.get(POSTGRES_ENV)
    if url:
        return url
    message = f"{POSTGRES_ENV} is not set (run scripts/start-postgres.sh and export its URL)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test; dropped afterwards."""
    admin = sa.make_url(postgres_admin_url)
    name = f"ciq_test_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield admin.set(database=name).render_as_string(hide_password=False)
        _drop(engine, name)
    finally:
        engine.dispose()


def _drop(engine: sa.Engine, name: str, attempts: int = 40) -> None:
    """DROP ... WITH (FORCE), again while it fails: the test role may not end an autovacuum worker
    (a superuser's backend) that is on the database for a moment, which failed a CI teardown once."""
    for attempt in range(attempts):
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return
        except (sa.exc.OperationalError, sa.exc.ProgrammingError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.25)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of an empty database, once per backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store' / 'compileiq.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    """TINY_KERNEL as tmp_path/scale.cu."""
    (tmp_path / "scale.cu").write_text(TINY_KERNEL)
    return tmp_path / "scale.cu"


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """The `compileiq` processes a test starts: killed, with what their session left, if a test
    fails with them still running."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)
        for pid, _ in in_session(process.pid):  # nothing a failed test left behind outlives it
            os.kill(pid, signal.SIGKILL)

