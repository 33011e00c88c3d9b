"""A rerun that decides what the ACF already holds leaves it as it is, byte for byte.

`compileiq tune` run again with nothing new to search (a CI job that re-tunes and checks
`git diff --exit-code`) would otherwise rewrite the committed ACF only for its `written_at` and
for the wording of where its evidence came from ("compiled by this run" the first time, "recorded
in DB by WORKER; compiled again by this run, ..." after), and, where the rerun had no warm start of
its own (its budget spent), for the first run's `warm_start` line. Those are all it may differ in: any
other difference (kernel and source hashes, toolchain and space, controls, args, objective,
evidence numbers, code hashes and workers, [baseline], the rest of [provenance]) rewrites it.
And those two are kept only as this release writes them (`written_at_now`, `evidence_wording`): an
edited timestamp or evidence claim is no wording of compileiq's, and a rerun rewrites it.

Wording alone proves nothing (a forger writes compileiq's words), so what is kept must also agree
with the database (`StudyFacts`, never the `runs` row, which is as easily forged): a `written_at` only
where it is not before the study's first trial nor in the future (a back-dated file claims a review it
never had), a `warm_start` line only where the study could have had it: no more configurations tried
first than it holds search trials, drawn from no more studies of other kernels on its toolchain space
than the database held before it. Else the file is rewritten, without the line.
"""

from __future__ import annotations

import copy
import os
import re
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import tomli_w

from compileiq.core import warm_note
from compileiq.results import evidence_wording

MAX_BYTES = 1 << 20  # as `acf.MAX_BYTES`: a larger file is no ACF this writes
WARM_START = "warm_start"  # [provenance]: what other kernels' studies proposed (`evidence.acf_content`)
EVIDENCE_SOURCES = ("baseline", "best")  # the evidence tables whose `source` says where they came from
_WRITTEN_AT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\+00:00")  # as `written_at_now` writes it


@dataclass(frozen=True)
class StudyFacts:
    """What the database says of the study an ACF is written for: what a kept line must agree with."""

    first_trial_at: datetime | None  # when its first trial started (None: it has none)
    search_trials: int  # its search trials, the baseline among them
    other_studies: int  # static studies of other kernels on its toolchain, arch and space (`Store.other_kernels_studies`)


_NUMBERS = re.compile(r"[0-9]+")
CLOCK_SKEW = timedelta(minutes=10)  # between the database's clock and the ACF writer's


def written_at_now() -> str:
    """`provenance.written_at` for an ACF written now: ISO-8601 UTC, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def _is_written_at(text: str) -> bool:
    """Whether `text` is a real timestamp as `written_at_now` writes it."""
    if not _WRITTEN_AT.fullmatch(text):
        return False
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def held(path: Path) -> bytes | None:
    """The bytes of the regular file `path` (never through a symbolic link: the writer refuses
    one), or None where there is none to keep."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
            return None
        with open(path, "rb") as stream:
            return stream.read(MAX_BYTES + 1)
    except (OSError, ValueError):
        return None


def unchanged(path: Path, document: Mapping[str, Any], text: str, facts: StudyFacts | None = None) -> bool:
    """Whether the ACF at `path` is `text` (the rendering of `document`) but for its
    `provenance.written_at` and its evidence's `source` wording: then it already holds this choice.
    `facts`: what the database says of the study (None: nothing known, so no `warm_start` line is kept
    that this run did not write)."""
    found = held(path)
    if found is None:
        return False
    try:
        old = found.decode("utf-8")
        recorded = tomllib.loads(old)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    header = text.removesuffix(tomli_w.dumps(dict(document)))
    kept = _with_recorded_wording(document, recorded, facts)
    return kept is not None and header + tomli_w.dumps(kept) == old


def _with_recorded_wording(document: Mapping[str, Any], recorded: Mapping[str, Any],
                           facts: StudyFacts | None) -> dict[str, Any] | None:
    """`document` with the recorded file's `written_at` and evidence `source` strings; None where
    the file lacks one of them or holds one in no wording this release writes (then it is not this
    choice as this release writes it: an edited timestamp, a forged evidence claim)."""
    kept = copy.deepcopy(dict(document))
    try:
        written = recorded["provenance"]["written_at"]
        database = kept["provenance"].get("database")
        if not isinstance(written, str) or not _is_written_at(written) or "written_at" not in kept["provenance"] \
                or not _written_in_time(written, facts):
            return None
        kept["provenance"]["written_at"] = written
        _keep_warm_start(kept["provenance"], recorded["provenance"], facts)
        for name in EVIDENCE_SOURCES:
            table = kept.get("evidence", {}).get(name)
            if isinstance(table, dict) and "source" in table:
                old = recorded["evidence"][name]
                said = old.get("source") if isinstance(old, dict) else None
                if not isinstance(said, str):
                    return None
                worker = table.get("worker")
                if not (isinstance(database, str) and isinstance(worker, str)
                        and evidence_wording.stands_for(said, table["source"], database, worker)):
                    return None
                table["source"] = said
    except (KeyError, TypeError):
        return None
    return kept


def _written_in_time(written: str, facts: StudyFacts | None) -> bool:
    """Whether `written` (a `_is_written_at` timestamp) is not in the future, nor before the study's
    first trial, give or take CLOCK_SKEW: the trial's time is the database's clock (a PostgreSQL
    server's), `written_at` the clock of the machine that wrote the file. A sanity bound against a
    hand-edited date, not a proof: a trial's time is a row like any other."""
    at = datetime.fromisoformat(written)
    if at > datetime.now(UTC) + CLOCK_SKEW:
        return False
    first = facts.first_trial_at if facts is not None else None
    if first is None:
        return True
    first = first if first.tzinfo is not None else first.replace(tzinfo=UTC)
    return at >= first.replace(microsecond=0) - CLOCK_SKEW


def _could_have(note: str, facts: StudyFacts | None) -> bool:
    """Whether the study `facts` describes could have had the warm start `note` tells of: no more
    configurations tried first than its search trials, drawn from no more of other kernels' studies than
    the database holds (a warm start draws from one at least)."""
    if facts is None:
        return False
    first, studies, _ = (int(n) for n in _NUMBERS.findall(note))
    return first <= facts.search_trials and 1 <= studies <= facts.other_studies


def _keep_warm_start(provenance: dict[str, Any], recorded: Mapping[str, Any], facts: StudyFacts | None) -> None:
    """The recorded file's `warm_start` line where this run had none: a rerun of a study whose budget
    is spent tries nothing first, yet the study's trials came from the warm start the file names.
    Only in the words a warm start is told in (`warm_note`), only where the study could have had it
    (`_could_have`), and in the file's own key order."""
    note = recorded.get(WARM_START)
    if WARM_START in provenance or not warm_note.is_note(note) or not _could_have(str(note), facts):
        return
    provenance[WARM_START] = note
    order = [key for key in recorded if key in provenance]
    if set(order) == set(provenance):
        ordered = {key: provenance[key] for key in order}
        provenance.clear()
        provenance.update(ordered)
