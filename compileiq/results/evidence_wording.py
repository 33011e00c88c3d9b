"""The wordings an ACF's evidence `source` is written in, and which older claim may stand for a new one.

`evidence.source` writes them; `acf_rerun` masks an older file's `source` only where it is the
claim this run makes of that row, or the first run's "compiled by this run" of the row this run
read back and verified (`stands_for`): an edited claim ("timed on an H100 by CI", or one of these
wordings naming another worker or a quarantine) is rewritten. Both use the templates below, so the
writer and the matcher cannot drift apart.
"""

from __future__ import annotations

COMPILED = "compiled by this run"
VERIFIED = "recorded in {database} by {worker}; compiled again by this run, which gave the same result"
REPLACED = ("compiled again by this run: the row recorded in {database} by {worker} disagreed with "
            "this rebuild, was quarantined and replaced by it")
CACHED = "evaluated by this run from the build cache (not recompiled)"
RECORDED = ("recorded in {database} by {worker} (an earlier, shared or imported result; "
            "not rebuilt by this run: compileiq gate rebuilds it)")


def written(template: str, database: str = "", worker: str = "") -> str:
    """`template` (one of the wordings above) as `evidence.source` writes it."""
    return template.format(database=database, worker=worker)


def stands_for(old: str, new: str, database: str, worker: str) -> bool:
    """Whether an older file's `old` claim may stand in for this run's `new` one: the same words,
    or the first run's "compiled by this run" where this run read that row back from `database`
    (recorded by `worker`, as the table says) and verified it by a rebuild (a runtime row this run
    did not rebuild: no rebuild says the older claim still holds). Any other wording, even one of WORDINGS (a quarantine that never happened, a verifier
    that never ran, a cache hit), is a claim this run cannot make: the file is rewritten."""
    if old == new:
        return True
    return old == COMPILED and new == written(VERIFIED, database, worker)
