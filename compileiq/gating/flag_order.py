"""Whether two orders of the same base flags build the same device code.

A compile command that only moves its base flags (CMake puts `-std=c++17` before the arch flags
after a re-configure, or `compileiq_apply` appends the ACF's flags) builds the same code: the gate
calls that no change. Order is kept where it can matter: two flags of one option where nvcc takes
the last (`-std`, `-rdc`, `-O`, `-maxrregcount`, `--default-stream`), a `-D`/`-U` of the same macro
(the last wins), the include folders (`-I`, and `-isystem` apart: the first folder holding a header
is the one read), and any flag this module does not know to be order-free (kept in its order
among the others it does not know).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from compileiq.source.flag_groups import order_group


def _ordered(flags: Sequence[str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for flag in flags:
        groups.setdefault(order_group(flag), []).append(flag)
    return groups


def same_code_order(before: Sequence[str], after: Sequence[str]) -> bool:
    """Whether `after` is `before` in an order that cannot change the device code (the same flags,
    each group of order-sensitive flags in the same order)."""
    return sorted(before) == sorted(after) and _ordered(before) == _ordered(after)


def reordered(before: Sequence[str], after: Sequence[str]) -> list[str]:
    """The groups of the same flags that `after` gives in another order, as people read them
    (`-DN=1 -DN=2` moved is macro N's), for the finding; empty where the order is no change."""
    if sorted(before) != sorted(after):
        return []
    old, new = _ordered(before), _ordered(after)
    return [" ".join(new[g]) for g in new if old.get(g) != new[g]]


def same_folder_order(before: Sequence[Path], after: Sequence[Path]) -> bool:
    """Include folders: the same folders searched in the same order (a header in two of them is
    read from the first)."""
    return list(before) == list(after)
