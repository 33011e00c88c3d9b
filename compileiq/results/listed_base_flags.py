"""Which base flags a list of studies shows beside each one's baseline, so that studies of one file
built with other fixed flags are told apart.

Two studies of one kernel tuned from compile commands that differ only in a base flag (nvcc's
``-maxrregcount=64``, a ``-std=``, a ``-D``) both have "your build (compile_commands.json)" as their
baseline: the shipped settings the list shows (``ptxas.opt_level=2``) are searched settings, and a
base flag is none. The list adds, as each study's latest run recorded them
(`recorded_sources.decided_flags`), the base flags not every other listed study of the same sources
builds with (the same files, `recorded_sources.decided_files`, wherever they lie: a copy of the
project in another folder too; a study that recorded no files hash: those of the same kernel as
the list names it), and nvcc's register cap always: it fixes the register count the search's
``ptxas.maxrregcount`` would set, which is then not searched. A study whose run recorded no flags
(before they were recorded, an import, a damaged row) adds none and is not counted in what the
others share.
"""

from __future__ import annotations

from collections.abc import Sequence

from compileiq.results.recorded_sources import fixed_cap

Sources = tuple[str | None, str]  # (the recorded files hash or None, the kernel as the list names it)


def sources_of(files: str | None, kernel: str) -> Sources:
    """Which studies' flags are compared: those of the same files, else of the same listed kernel."""
    return (files, "") if files is not None else (None, kernel)


def shown_flags(studies: Sequence[tuple[Sources, tuple[str, ...] | None]]) -> list[tuple[str, ...]]:
    """For each (its sources, `sources_of`; its recorded base flags or None): the base flags the list
    shows beside its baseline (see the module), in the study's own order."""
    shared: dict[Sources, set[str]] = {}
    for sources, flags in studies:
        if flags is not None:
            shared[sources] = shared[sources] & set(flags) if sources in shared else set(flags)
    return [() if flags is None else
            tuple(f for f in dict.fromkeys(flags) if f not in shared[sources] or f == fixed_cap(flags))
            for sources, flags in studies]


def flags_label(flags: Sequence[str]) -> str:
    """"base flag -maxrregcount=64", "base flags -std=c++14 -DX=1": the words the list appends."""
    return f"base flag{'s' if len(flags) > 1 else ''} {' '.join(flags)}"
