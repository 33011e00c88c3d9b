"""Which database a command opens: --db, else $COMPILEIQ_DB, else the SQLite file under store/."""

from __future__ import annotations

import os
from pathlib import Path

from compileiq.core.errors import UsageError

DEFAULT_DB = "sqlite:///store/compileiq.db"


def database_url(option: str | None) -> str:
    if option is not None and not option.strip():  # `--db "$UNSET_VAR"`: never the default, silently
        raise UsageError(f"--db is empty: give a database URL, e.g. {DEFAULT_DB}")
    return option or os.environ.get("COMPILEIQ_DB") or DEFAULT_DB


def sqlite_file(url: str) -> Path | None:
    """The file a sqlite:/// URL names (`~` expanded, a file: URI's query dropped); None for another
    database or a URL that does not parse (opening it says why)."""
    import sqlalchemy as sa

    try:
        parsed = sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        return None
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    return Path(parsed.database.removeprefix("file:").split("?")[0]).expanduser()
