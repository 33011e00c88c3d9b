"""What a search says when its searcher proposes nothing new: the space exhausted only where every
configuration it allows was tried; else that no further valid one was found (tune.toml's
restrictions can allow a handful of a trillion combinations, which a sampling searcher misses)."""

from __future__ import annotations

from compileiq.core import implied
from compileiq.core.space import SearchSpace

EXHAUSTED = "search space exhausted"


def stop_reason(space: SearchSpace, tried: int) -> str:
    """`tried`: the distinct configurations the study holds."""
    allowed, total = space.macro_combinations()
    size = implied.distinct_size(space)  # `--use_fast_math --ftz=true` and `--use_fast_math` counted once
    others = size // max(total, 1)  # the compiler settings' combinations, per macro combination
    if allowed is not None and tried >= allowed * others:
        return EXHAUSTED
    if space.restriction is None:
        return f"no further untried configuration found ({tried:,} of {size:,} tried)"
    count = f"{allowed:,}" if allowed is not None else "an uncounted number"
    return (f"no further valid configuration found (tune.toml's restrictions allow {count} of {total:,} "
            f"macro combinations; {tried:,} tried)")
