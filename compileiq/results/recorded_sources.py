"""Which source bundle and base flags a study's run tuned, as the run recorded them.

The study key's ``source_sha256`` is no hash of the sources alone (`core.key_labels`): a run
records the source bundle's hash (what its ACF's ``[kernel] source_sha256`` holds: the files and
the base flags together), a hash of its files and their paths alone, and the kernel's base flags
(the fixed nvcc flags every variant is built with: tune.toml's ``nvcc_flags``, or a compile
command's, canonical spelling, include folders aside) in its decision (`decision_entry`). The
report shows the bundle's hash from the study's latest deciding run (`recorded_bundle`) as
"source bundle sha256", and `report --compare` says whether the files differ (`recorded_files`)
and names the flags that do (`recorded_flags`). A run row is untrusted: anything but a sha256 in
hex, or a short list of short printable flags, is not shown.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from compileiq.core.records import RunRecord
from compileiq.results.recorded_decision import latest_decision
from compileiq.source.spec import KernelSpec, SourceBundle

KEY = "source_bundle_sha256"  # the decision's key
FILES_KEY = "source_files_sha256"  # the bundle's files and paths, without its flags
FLAGS_KEY = "base_flags"  # the decision's key for the base flags
MAX_FLAGS = 256  # more recorded flags than this: not shown
_SHA256 = re.compile(r"[0-9a-f]{64}")
_FLAG = re.compile(r"[!-~]{1,200}")  # printable ASCII, no space: what a canonical base flag is


def decision_entry(bundle: SourceBundle, kernel: KernelSpec) -> dict[str, Any]:
    """What a run adds to its recorded decision: the hash of the source bundle it tuned, and the
    base flags it built every variant with."""
    return {KEY: bundle.sha256, FILES_KEY: files_sha256(bundle), FLAGS_KEY: list(kernel.nvcc_flags.flags)}


def files_sha256(bundle: SourceBundle) -> str:
    """The hash of the bundle's files, their paths and include layout, without its base flags (which
    the bundle's own hash holds too): two builds of the same files with other flags have the same."""
    digest = hashlib.sha256(json.dumps([bundle.main, bundle.include_args]).encode())
    for rel, content in bundle.files:
        digest.update(f"{rel}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


def recorded_bundle(runs: Sequence[RunRecord]) -> str | None:
    """The source bundle's hash the study's latest deciding run recorded; None for a run that recorded
    none (before this was recorded, an imported study) or no valid one."""
    return _sha256(_recorded(runs, KEY))


def recorded_files(runs: Sequence[RunRecord]) -> str | None:
    """The hash of the source files alone (`files_sha256`) the study's latest deciding run recorded;
    None as `recorded_bundle`."""
    return _sha256(_recorded(runs, FILES_KEY))


def recorded_flags(runs: Sequence[RunRecord]) -> tuple[str, ...] | None:
    """The base flags the study's latest deciding run recorded, in its order; None for a run that
    recorded none (before they were recorded, an imported study) or a damaged list: anything but a
    list of at most MAX_FLAGS printable flags without spaces, each at most 200 characters."""
    found = _recorded(runs, FLAGS_KEY)
    if not isinstance(found, list) or len(found) > MAX_FLAGS:
        return None
    if not all(isinstance(f, str) and _FLAG.fullmatch(f) for f in found):
        return None
    return tuple(found)


def _sha256(found: object) -> str | None:
    return found if isinstance(found, str) and _SHA256.fullmatch(found) else None


def _recorded(runs: Sequence[RunRecord], key: str) -> object:
    latest = latest_decision(runs)
    return latest.decision.get(key) if latest is not None and latest.decision is not None else None
