"""The order a study's search space was hashed in, found again from its parameters' names.

A study's space hash (`StudyKey.space_sha256`) is taken over its parameters in order: the bundled
space's, except that a setting the shipped build sets (`tune --compile-commands`) of a risk class
the search leaves out by default (--use_fast_math: numerics) is added after all the others, in the
order the build's command gives them (`tuning/space_choice._with_shipped`). Studies recorded so
keep that identity; an export names only each trial's parameters, so the importer tries the
bundled order, then the orders that setting-appending gives (`study_space`)."""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import replace

from compileiq.core.space import Parameter, SearchSpace

MOST_PERMUTED = 6  # appended settings tried in every order up to this many risky ones; beyond, in bundled order


def study_space(cut: SearchSpace, sha256: str) -> SearchSpace:
    """``cut`` (the bundled space cut to a study's parameters, in bundled order) in the order whose
    hash is ``sha256``; ``cut`` itself when no order the tuner makes has it."""
    found = _order(cut.parameters, sha256)
    return replace(cut, parameters=found) if found is not None else cut


@functools.lru_cache(maxsize=16)
def _order(parameters: tuple[Parameter, ...], sha256: str) -> tuple[Parameter, ...] | None:
    """Once per study (every trial of an export has the same parameters)."""
    canonical = {p.name: p.canonical() for p in parameters}
    for order in _orders(parameters):
        text = json.dumps([canonical[p.name] for p in order], sort_keys=True)
        if hashlib.sha256(text.encode()).hexdigest() == sha256:
            return order
    return None


def _orders(parameters: tuple[Parameter, ...]) -> Iterator[tuple[Parameter, ...]]:
    """The bundled order, then each with some of the settings not searched by default moved to
    the end (fewest first)."""
    yield parameters
    risky = [p for p in parameters if p.risk != "safe"]
    tails: Iterator[Sequence[Parameter]] = (
        (tail for size in range(1, len(risky) + 1) for tail in itertools.permutations(risky, size))
        if len(risky) <= MOST_PERMUTED else
        (tail for size in range(1, len(risky) + 1) for tail in itertools.combinations(risky, size)))
    for tail in tails:
        moved = {p.name for p in tail}
        yield (*(p for p in parameters if p.name not in moved), *tail)
