"""Whether a new ACF may replace the file at its path: never one that holds more evidence.

An ACF is what a review and the gate rely on, so a run with a smaller budget, a run of another
study or one without simplification must not quietly overwrite it (the Python API's example once
rewrote the README command's ACF: its simplification gone, "budget 8" beside 40 trials). The
existing file holds *more evidence* than the new one when it describes another kernel (two
`k.cu` in different folders share the default path), records another study, more
search trials, a simplification that dropped settings where the new one did not
simplify, or a runtime confirmation where the new one has none. Anything else (the same command run
again, a larger budget) replaces it; `force` replaces it regardless. An ACF is untrusted: one that
names this run's study in this run's database yet claims more search trials than the database holds
of it (a hand-edited count) claims what is false, and its count blocks nothing (`false_count`: the
run says so). A file at the path that is
not an ACF is never replaced without `force`, and never at all when it is one of the run's inputs,
a database, a source or another input's kind (`check`).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compileiq.core.errors import UsageError
from compileiq.core.metric_ranges import is_count, is_finite
from compileiq.core.output_file import protected_kind, same_file

MAX_BYTES = 1 << 20
HOW = "without --force (force=True in Python), or write this ACF elsewhere with --out"


class ReplaceError(UsageError):
    """Writing the ACF would replace a file that holds more evidence (or is not an ACF)."""


@dataclass(frozen=True)
class Held:
    """What an ACF holds as evidence; None where it is not known (before a run)."""

    study: str | None = None  # a study moved to another database (db export/import) is the same study
    search_trials: int | None = None
    dropped: int | None = None  # settings its simplification dropped
    simplified: bool | None = None  # its simplification ran (and dropped `dropped`, maybe none); None: not known, or its choice is the baseline
    confirmed: bool | None = None  # the winner confirmed against the baseline on a GPU
    # the kernel it describes, (source_sha256, settings_sha256) under each of its identities: an ACF
    # records one; a run's kernel has this release's and the one releases before 2026-12-06 gave it
    # (`KernelSpec.identities`), so that an ACF those releases wrote is this kernel's, not stale
    kernel: tuple[tuple[str, str], ...] = ()
    source: str | None = None  # the kernel's file (absolute, links resolved): which kernel it describes
    database: str | None = None  # where its study is recorded (as `provenance.database` names it)

    def describe(self) -> str:
        """What it holds besides its study: its search trials, simplification and confirmation."""
        parts = [f"{self.search_trials} search trials"] if self.search_trials is not None else []
        if self.dropped:
            parts.append(f"a simplification that dropped {self.dropped} settings")
        if self.confirmed:
            parts.append("a runtime confirmation")
        return ", ".join(parts) or "no other evidence"


def held(document: Mapping[str, Any], path: Path | None = None, settings: Sequence[str] = ()) -> Held:
    """What an ACF document (parsed from a file, or about to be written) holds; a value of the
    wrong type (an edited or foreign file) reads as not recorded. `path`: the ACF's own, from which
    its kernel's recorded path is read; `settings`: every identity of its kernel's settings (one
    about to be written: `KernelSpec.settings_sha256s`), else the one it records."""
    provenance = _table(document, "provenance")
    evidence, objective = _table(document, "evidence"), _table(document, "objective")
    trials = provenance.get("search_trials", provenance.get("trials_in_study"))
    simplification = _table(evidence, "simplified")
    dropped = simplification.get("dropped", [])
    kernel = _table(document, "kernel")
    source, recorded = _text(kernel.get("source_sha256")), _text(kernel.get("settings_sha256"))
    identities = tuple(settings) or ((recorded,) if recorded else ())
    return Held(study=_text(provenance.get("study")), search_trials=trials if is_count(trials) else None,
                dropped=len(dropped) if isinstance(dropped, list) else 0,
                simplified=True if simplification else None if _keeps_baseline(evidence) else False,
                confirmed=is_finite(objective.get("confirmation_delta")),
                kernel=tuple((source, s) for s in identities) if source else (),
                source=_kernel_file(path, kernel.get("path")), database=_text(provenance.get("database")))


def _keeps_baseline(evidence: Mapping[str, Any]) -> bool:
    """Whether the evidence's choice is its baseline: nothing to simplify, so none was lost."""
    best, baseline = _table(evidence, "best").get("trial"), _table(evidence, "baseline").get("trial")
    return is_count(best) and best == baseline


def kernel_file(path: Path) -> str:
    """A kernel source as `Held.source` names it."""
    return os.path.realpath(path)


def _kernel_file(acf_path: Path | None, recorded: Any) -> str | None:
    """The kernel file an ACF at `acf_path` records (its path is relative to the ACF's folder), when
    that file exists; None otherwise (a kernel moved or deleted: the ACF describes nothing here)."""
    if acf_path is None or not isinstance(recorded, str) or not recorded or "\0" in recorded:
        return None
    found = os.path.join(os.path.dirname(os.path.realpath(acf_path)), recorded)
    return kernel_file(Path(found)) if os.path.isfile(found) else None


def less_evidence(existing: Held, new: Held) -> str | None:
    """Why `new` holds less evidence than `existing` (one clause), or None when it may replace it.
    An ACF of the kernel as it no longer is (its sources, headers or tune.toml settings changed:
    the gate calls it stale) holds no evidence about the kernel as it is, so it is replaced."""
    if existing.source is not None and new.source is not None and existing.source != new.source:
        return f"it describes another kernel, {existing.source}"
    if existing.kernel and new.kernel and not set(existing.kernel) & set(new.kernel):
        return None
    if existing.study and new.study and existing.study != new.study:
        return f"it records study {existing.study}, this run study {new.study}"
    if existing.search_trials is not None and new.search_trials is not None and \
            new.search_trials < existing.search_trials and false_count(existing, new) is None:
        return f"it holds more search trials (this run: {new.search_trials})"
    if existing.dropped and new.simplified is False:  # a winner that needed nothing dropped lost nothing
        return "its simplification would be lost (this run did not simplify its winner)"
    if existing.confirmed and new.confirmed is False:
        return "its runtime confirmation would be lost (this run has none)"
    return None


def false_count(existing: Held, new: Held) -> str | None:
    """Why `existing`'s count of search trials is false (one clause), or None: it names `new`'s study
    in `new`'s database, which holds every trial of that study, and claims more than `new` counts."""
    if existing.study is None or existing.study != new.study or existing.database is None or \
            existing.database != new.database or existing.search_trials is None or new.search_trials is None:
        return None
    if new.search_trials >= existing.search_trials:
        return None
    return (f"it claims {existing.search_trials} search trials of study {existing.study}, whose database "
            f"{existing.database} holds {new.search_trials}: a false count, replaced")


def check(path: Path, new: Held, force: bool = False, after_run: bool = False,
          inputs: tuple[tuple[str, Path], ...] = ()) -> str | None:
    """ReplaceError (one line) unless an ACF holding `new` may be written at `path`. `force`
    replaces evidence, never data: not even it writes over one of the run's `inputs` ((what, path):
    its kernel, tune.toml, compile commands, database file), a database, a source or a .toml
    that is no ACF (`output_file.protected_kind`). Returns a note where the existing ACF's claim is
    false (`false_count`), None otherwise."""
    for what, given in inputs:
        if same_file(path, given):
            raise ReplaceError(f"not replacing {path}: it is this run's {what}; write this ACF elsewhere with --out")
    if not path.exists():
        return None
    existing = _existing(path)
    if existing is None:
        kind = protected_kind(Path(os.path.realpath(path)), may_replace=(".acf.toml",))
        if kind is not None:
            raise ReplaceError(f"not replacing {path}: it is {kind}, not an ACF; write this ACF elsewhere with --out")
        if force:
            return None
        raise ReplaceError(f"not replacing {path} {HOW}: it is not an ACF written by compileiq tune")
    false = false_count(existing, new)
    if force:
        return false
    problem = less_evidence(existing, new)
    if problem is None:
        return false
    kept = "; this run's trials stay in the database: the same command with --out NEW writes them" if after_run else ""
    raise ReplaceError(f"not replacing the ACF {path} {HOW}: {problem}; it holds {existing.describe()}{kept}")


def _existing(path: Path) -> Held | None:
    """What the ACF at `path` holds; None when it is no ACF (not TOML, no format key, unreadable)."""
    try:
        if path.stat().st_size > MAX_BYTES:
            return None
        document = tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        return None
    return held(document, path) if "format" in document else None


def _table(document: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = document.get(key, {})
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
