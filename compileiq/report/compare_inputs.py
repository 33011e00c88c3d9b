"""What the study key's hash conflates, named for `report --compare`: the base flags and the
source files each study's latest deciding run recorded (`results.recorded_sources`).

Two studies of one kernel whose keys differ only in "study key (sources + flags + tune.toml +
shipped settings)" showed two hashes and no reason. This says which base flags only one study
builds with (order aside: nvcc reads most of them alike in any order, so an order alone is said
as such), and whether the sources are the same; "not recorded" for a study whose run recorded
none (before this was recorded, an import) or a damaged record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compileiq.core.records import RunRecord
from compileiq.results.recorded_sources import recorded_files, recorded_flags

NOT_RECORDED = "not recorded"
NONE = "(none)"
BASE_FLAG = "(base flag)"  # after a setting's value that a base flag fixes: "-maxrregcount=64 (base flag)"


@dataclass(frozen=True)
class KeyInputs:
    """The base flags and the hash of the source files each study recorded (None: not recorded)."""

    flags_a: tuple[str, ...] | None
    flags_b: tuple[str, ...] | None
    files_a: str | None
    files_b: str | None
    shipped: tuple[str, ...] = ()  # the searched settings the two shipped builds set differently (the baseline rows)

    @classmethod
    def of(cls, runs_a: Sequence[RunRecord], runs_b: Sequence[RunRecord], shipped: Sequence[str] = ()) -> KeyInputs:
        return cls(recorded_flags(runs_a), recorded_flags(runs_b), recorded_files(runs_a), recorded_files(runs_b),
                   tuple(shipped))

    @property
    def only_a(self) -> tuple[str, ...]:
        """The base flags A builds with and B does not, in A's order ("()": either not recorded)."""
        if self.flags_a is None or self.flags_b is None:
            return ()
        return tuple(f for f in self.flags_a if f not in self.flags_b)

    @property
    def only_b(self) -> tuple[str, ...]:
        if self.flags_a is None or self.flags_b is None:
            return ()
        return tuple(f for f in self.flags_b if f not in self.flags_a)

    @property
    def reordered(self) -> bool:
        """The same base flags, in another order."""
        return (self.flags_a is not None and self.flags_b is not None and self.flags_a != self.flags_b
                and not self.only_a and not self.only_b)

    def flags_text(self) -> str:
        """"base flags: only in A: -O3; only in B: -O2", "the same base flags", ... (one sentence part)."""
        if self.flags_a is None or self.flags_b is None:
            return "base flags: " + "; ".join(f"{side} {NOT_RECORDED}" for side, flags in
                                              (("A", self.flags_a), ("B", self.flags_b)) if flags is None)
        if self.reordered:
            return f"the same base flags in another order: A {_words(self.flags_a)}; B {_words(self.flags_b)}"
        if self.flags_a == self.flags_b:
            return "the same base flags"
        return f"base flags: only in A: {_words(self.only_a)}; only in B: {_words(self.only_b)}"

    def sources_text(self) -> str:
        """"same sources", "sources differ" or which study recorded no sources."""
        if self.files_a is None or self.files_b is None:
            return "sources: " + "; ".join(f"{side} {NOT_RECORDED}" for side, found in
                                           (("A", self.files_a), ("B", self.files_b)) if found is None)
        return "same sources" if self.files_a == self.files_b else "sources differ"

    def rows(self) -> tuple[tuple[str, str, str], ...]:
        """The rows of the comparison's key table: the flags only each study builds with (or each
        study's flags, where only their order differs or one is not recorded), and the sources."""
        if self.flags_a is None or self.flags_b is None or self.reordered:
            flags = ("base flags", _shown(self.flags_a), _shown(self.flags_b))
        elif self.flags_a == self.flags_b:
            flags = ("base flags", "the same", "the same")
        else:
            flags = ("base flags only in this study", _words(self.only_a), _words(self.only_b))
        label = "sources (files and paths, flags aside)"
        if self.files_a is not None and self.files_a == self.files_b:
            return flags, (label, "the same", "the same")
        differ = "differ: " if self.files_a is not None and self.files_b is not None else ""
        return flags, (label, _hash(self.files_a, differ), _hash(self.files_b, differ))

    def note(self) -> str:
        """One sentence of what the study key's hash holds that differs: it says what a base flag is
        (fixed in every build) and what a shipped setting is (a searched setting's value in the
        shipped build, the search's start), so that neither is read as the other."""
        shipped = f"shipped settings differ: {', '.join(self.shipped)}; " if self.shipped else ""
        return ("The study key's hash covers the sources, base flags (fixed: every build gets them, never searched), "
                "tune.toml and shipped settings (the baseline's values of searched settings): "
                f"{self.flags_text()}; {shipped}{self.sources_text()}.")


def _words(flags: Sequence[str]) -> str:
    return " ".join(flags) if flags else NONE


def _hash(found: str | None, differ: str) -> str:
    return NOT_RECORDED if found is None else f"{differ}sha256 {found[:12]}…"


def _shown(found: Sequence[str] | None) -> str:
    return NOT_RECORDED if found is None else _words(found)
