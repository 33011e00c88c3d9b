"""The wordings an ACF's evidence `source` is written in, and the strict matcher for them.

`evidence.source` writes them; `acf_rerun` masks an older file's `source` only where it is one of
them, word for word (its database the one the new file names, its worker a `host:pid`): an edited
claim ("timed on an H100 by CI") is no wording of this module's, so a rerun rewrites it. Both use
the templates below, so the writer and the matcher cannot drift apart.
"""

from __future__ import annotations

import re

COMPILED = "compiled by this run"
VERIFIED = "recorded in {database} by {worker}; compiled again by this run, which gave the same result"
REPLACED = ("compiled again by this run: the row recorded in {database} by {worker} disagreed with "
            "this rebuild, was quarantined and replaced by it")
CACHED = "evaluated by this run from the build cache (not recompiled)"
RECORDED = ("recorded in {database} by {worker} (an earlier, shared or imported result; "
            "not rebuilt by this run: compileiq gate rebuilds it)")
WORDINGS = (COMPILED, VERIFIED, REPLACED, CACHED, RECORDED)

_WORKER = r"[A-Za-z0-9][A-Za-z0-9._-]*:[0-9]+"  # `claims.worker_name()`: host:pid


def written(template: str, database: str = "", worker: str = "") -> str:
    """`template` (one of WORDINGS) as `evidence.source` writes it."""
    return template.format(database=database, worker=worker)


def is_written(text: str, database: str) -> bool:
    """Whether `text` is, word for word, one of WORDINGS naming `database` (and a host:pid worker)."""
    return any(re.fullmatch(_pattern(template, database), text) for template in WORDINGS)


def _pattern(template: str, database: str) -> str:
    parts = re.split(r"(\{database\}|\{worker\})", template)
    held = {"{database}": re.escape(database), "{worker}": _WORKER}
    return "".join(held.get(part, re.escape(part)) for part in parts)
