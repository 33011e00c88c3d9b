"""Which database a command opens: --db, else $COMPILEIQ_DB, else the SQLite file under store/."""

from __future__ import annotations

import os

from compileiq.core.errors import UsageError

DEFAULT_DB = "sqlite:///store/compileiq.db"


def database_url(option: str | None) -> str:
    if option is not None and not option.strip():  # `--db "$UNSET_VAR"`: never the default, silently
        raise UsageError(f"--db is empty: give a database URL, e.g. {DEFAULT_DB}")
    return option or os.environ.get("COMPILEIQ_DB") or DEFAULT_DB
