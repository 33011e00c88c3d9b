"""What other kernels' studies teach a new study of the same toolchain space: which option
settings to try first, which to propose later. A prior on the order of proposals only: nothing
here becomes an observation (another kernel's values are on another scale), and every proposal is
compiled and measured for real, so a shared row can change what is tried first, never a result.

Each other study is reduced to a `Lesson` (by the tuning stage, which replays its choice): the
option settings its choice changed from its baseline and how much that gained, and the settings
its no-harm rules refused in most of its trials. Macros (``define.*``) are the kernel's own and
never transfer.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from compileiq.core import warm_note
from compileiq.core.space import Config, SearchSpace, SpaceError, Value

MACRO_PREFIX = "define."

MIN_TRIED = 2  # a setting tried fewer times in a study says nothing of it
BLAME_MARGIN = 0.25  # refused this much more often with the setting than without it

Setting = tuple[str, str]  # (parameter name, its value as JSON text: True and 1 stay apart)


def setting(name: str, value: object) -> Setting | None:
    """A transferable setting: an option (no macro) with a plain JSON value; None otherwise."""
    if name.startswith(MACRO_PREFIX) or not isinstance(value, bool | int | str):
        return None
    return name, json.dumps(value)


@dataclass(frozen=True)
class Lesson:
    """One other kernel's study, as option settings (see the module docstring)."""

    chosen: frozenset[Setting]  # what its choice changed from its baseline (empty: the baseline won)
    gain: float  # the choice's relative gain over its baseline, in [0, 1]
    tried: frozenset[Setting]  # settings its trials changed from its baseline
    refused: frozenset[Setting]  # of those, settings its no-harm rules refused (`_blamed`)


@dataclass(frozen=True)
class Prior:
    """What a new study takes from the lessons: proposals to try first, settings to try later."""

    first: tuple[Config, ...]  # this space's configs, best-ranked first
    discouraged: frozenset[tuple[str, Value]]  # (parameter, value) pairs, proposed later
    studies: int  # lessons it was drawn from

    @property
    def empty(self) -> bool:
        return not self.first and not self.discouraged

    @property
    def note(self) -> str:
        return warm_note.written(len(self.first), self.studies, len(self.discouraged))


def lesson(
    baseline: Mapping[str, object],
    chosen: Mapping[str, object] | None,
    gain: float,
    trials: Iterable[tuple[Mapping[str, object], bool]],
) -> Lesson:
    """A study's lesson from its baseline's and chosen trial's configs, the chosen one's gain,
    and each trial's config with whether its rules refused it."""
    base = {s for name, value in baseline.items() if (s := setting(name, value))}
    tried: Counter[Setting] = Counter()
    refused: Counter[Setting] = Counter()
    total = total_refused = 0
    for config, was_refused in trials:
        total += 1
        total_refused += was_refused
        for found in _changed(config, base):
            tried[found] += 1
            refused[found] += was_refused
    return Lesson(
        chosen=frozenset(_changed(chosen, base)) if chosen is not None else frozenset(),
        gain=min(max(gain, 0.0), 1.0) if math.isfinite(gain) else 0.0,
        tried=frozenset(tried),
        refused=frozenset(s for s in tried if _blamed(refused[s], tried[s], total_refused, total)),
    )


def _blamed(refused: int, tried: int, total_refused: int, total: int) -> bool:
    """Whether trials with a setting were refused mostly, and clearly more often than those
    without it: a random trial changes many settings at once, and one of them (-O0, a tight
    register cap) is enough to refuse it, so a refusal is blamed on a setting by contrast only."""
    if tried < MIN_TRIED or 2 * refused <= tried:
        return False
    without = (total_refused - refused) / (total - tried) if total > tried else 0.0
    return refused / tried - without >= BLAME_MARGIN


def _changed(config: Mapping[str, object], base: set[Setting]) -> set[Setting]:
    return {s for name, value in config.items() if (s := setting(name, value)) and s not in base}


def prior(lessons: Sequence[Lesson], space: SearchSpace, baseline: Config, limit: int) -> Prior:
    """Up to `limit` configs of `space`: each distinct choice of the lessons applied to this
    study's `baseline` (its macros kept), ranked by how many studies chose it, then by their summed
    gain; and the settings refused in most of the studies that tried them. A choice that does not
    fit this space (unknown option, value or restriction) is skipped."""
    wins: dict[frozenset[Setting], list[float]] = defaultdict(list)
    for found in lessons:
        if found.chosen:
            wins[found.chosen].append(found.gain)
    ranked = sorted(wins.items(), key=lambda item: (-len(item[1]), -sum(item[1]), sorted(item[0])))
    first: dict[str, Config] = {}
    for settings, _ in ranked:
        if len(first) >= limit:
            break
        config = _projected(settings, space, baseline)
        if config is not None and config.key != baseline.key:
            first.setdefault(config.key, config)
    tried = Counter(s for found in lessons for s in found.tried)
    refused = Counter(s for found in lessons for s in found.refused)
    discouraged = {pair for s, count in refused.items() if 2 * count > tried[s] and (pair := _in_space(s, space))}
    return Prior(tuple(first.values()), frozenset(discouraged), len(lessons))


def _projected(settings: frozenset[Setting], space: SearchSpace, baseline: Config) -> Config | None:
    values = baseline.as_dict()
    for name, text in settings:
        values[name] = json.loads(text)
    try:
        config = Config.of(values)
        space.validate(config)  # an option this space lacks, a value it does not list, its restrictions
    except (SpaceError, TypeError, ValueError):
        return None
    return config


def _in_space(found: Setting, space: SearchSpace) -> tuple[str, Value] | None:
    name, text = found
    try:
        parameter = space.parameter(name)
    except SpaceError:
        return None
    value = json.loads(text)
    return (name, value) if parameter.allows(value) else None
