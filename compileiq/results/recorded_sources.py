"""Which source bundle a study's run tuned, as the run recorded it.

The study key's ``source_sha256`` is no hash of the sources alone (`core.key_labels`): a run
records the source bundle's hash (what its ACF's ``[kernel] source_sha256`` holds) in its decision
(`decision_entry`), and the report shows it from the study's latest deciding run (`recorded_bundle`)
as "source bundle sha256". A run row is untrusted: anything but a sha256 in hex is not shown.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from compileiq.core.records import RunRecord
from compileiq.results.recorded_decision import latest_decision
from compileiq.source.spec import SourceBundle

KEY = "source_bundle_sha256"  # the decision's key
_SHA256 = re.compile(r"[0-9a-f]{64}")


def decision_entry(bundle: SourceBundle) -> dict[str, Any]:
    """What a run adds to its recorded decision: the hash of the source bundle it tuned."""
    return {KEY: bundle.sha256}


def recorded_bundle(runs: Sequence[RunRecord]) -> str | None:
    """The source bundle's hash the study's latest deciding run recorded; None for a run that recorded
    none (before this was recorded, an imported study) or no valid one."""
    latest = latest_decision(runs)
    found = latest.decision.get(KEY) if latest is not None and latest.decision is not None else None
    return found if isinstance(found, str) and _SHA256.fullmatch(found) else None
