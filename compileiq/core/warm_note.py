"""How a warm start from other kernels' studies is told (`search.transfer.Prior.note`), and the
strict reader of those words: an ACF's `[provenance] warm_start` line is kept on a rerun
(`results.acf_rerun`) only where it reads exactly so, and where the database says the study could have
had it."""

from __future__ import annotations

import re

_NOTE = re.compile(r"[0-9]{1,9} configurations? from [0-9]{1,9} stud(y|ies) of other sources \(other kernels, or "
                   r"this one as it was\) tried first, [0-9]{1,9} settings? they refused proposed later")


def written(first: int, studies: int, refused: int) -> str:
    """The note: `first` configurations tried first, drawn from `studies`, `refused` settings later."""
    return (f"{_count(first, 'configuration')} from {_count(studies, 'study', 'studies')} of "
            "other sources (other kernels, or this one as it was) tried first, "
            f"{_count(refused, 'setting')} they refused proposed later")


def is_note(text: object) -> bool:
    """Whether `text` is such a note, word for word."""
    return isinstance(text, str) and _NOTE.fullmatch(text) is not None


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"
