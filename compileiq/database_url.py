"""Which database a command opens: --db, else $COMPILEIQ_DB, else the SQLite file under store/."""

from __future__ import annotations

import os

DEFAULT_DB = "sqlite:///store/compileiq.db"


def database_url(option: str | None) -> str:
    return option or os.environ.get("COMPILEIQ_DB") or DEFAULT_DB
