"""Which source bundle a study's run tuned, and from which file, as the run recorded it.

The study key's ``source_sha256`` is no hash of the sources alone (`core.key_labels`): a run
records the source bundle's hash (what its ACF's ``[kernel] source_sha256`` holds) in its decision
(`decision_entry`), and the report shows it from the study's latest deciding run (`recorded_bundle`)
as "source bundle sha256". A run row is untrusted: anything but a sha256 in hex is not shown.

The study key's ``kernel`` is the file's name alone (``main`` for HeCBench's every
``src/<name>-cuda/main.cu``), so a run also records the kernel's path (`kernel_path`): relative to
the working directory, never less than its folder and its name. The views read it back
(`decided_path`, `recorded_path`) only where it is a short printable relative path with no ``.``
or ``..`` part; a study whose runs recorded none (before 2026-12-07, or imported) has none.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compileiq.core.records import RunRecord
from compileiq.results.recorded_decision import latest_decision
from compileiq.source.spec import SourceBundle

KEY = "source_bundle_sha256"  # the decision's key
PATH_KEY = "kernel_path"  # the decision's key: the kernel's path (`kernel_path`)
MAX_PATH = 1024
_SHA256 = re.compile(r"[0-9a-f]{64}")


def decision_entry(bundle: SourceBundle, source: Path | None = None) -> dict[str, Any]:
    """What a run adds to its recorded decision: the hash of the source bundle it tuned, and the
    path of the kernel file `source` (`kernel_path`) where one can be recorded."""
    path = kernel_path(source) if source is not None else None
    return {KEY: bundle.sha256} | ({PATH_KEY: path} if path is not None else {})


def kernel_path(source: Path, cwd: Path | None = None) -> str | None:
    """The path a run records for its kernel file `source` (absolute): relative to `cwd` (default:
    the working directory) where the file lies under it, never less than its folder and its name
    (run in ``a-cuda/`` itself: ``a-cuda/main.cu``); elsewhere its folder and name. None where
    that is no path the views would show (`path_problem`)."""
    try:
        relative = source.relative_to((cwd or Path.cwd()).resolve()).parts
    except (OSError, ValueError):  # outside it, or a working directory removed
        relative = ()
    named = source.parts[1:] if source.is_absolute() else source.parts
    text = "/".join(named[-max(len(relative), 2):])
    return text if path_problem(text) is None else None


def path_problem(path: Any) -> str | None:
    """Why a recorded kernel path is not shown (a run row is untrusted), or None."""
    if not isinstance(path, str) or not 0 < len(path) <= MAX_PATH or not path.isprintable():
        return f"not printable text of 1 to {MAX_PATH} characters"
    if path.startswith("/") or any(part in ("", ".", "..") for part in path.split("/")):
        return "not a relative path of named parts"
    return None


def decided_path(decision: Any) -> str | None:
    """The kernel path a recorded decision names (the study list reads the latest run's decision
    alone), None where it names none usable."""
    found = decision.get(PATH_KEY) if isinstance(decision, dict) else None
    return found if path_problem(found) is None else None


def recorded_path(runs: Sequence[RunRecord]) -> str | None:
    """The kernel path the study's latest deciding run recorded; None for a run that recorded none
    (before this was recorded, an imported study) or no valid one."""
    latest = latest_decision(runs)
    return decided_path(latest.decision if latest is not None else None)


def recorded_bundle(runs: Sequence[RunRecord]) -> str | None:
    """The source bundle's hash the study's latest deciding run recorded; None for a run that recorded
    none (before this was recorded, an imported study) or no valid one."""
    latest = latest_decision(runs)
    found = latest.decision.get(KEY) if latest is not None and latest.decision is not None else None
    return found if isinstance(found, str) and _SHA256.fullmatch(found) else None
