"""A searcher that records its calls, and their replay: what `tune --resume` rebuilds a seeded
search from, so that it goes on with the proposals the uninterrupted run would have made.

The searcher's state is the sequence of calls it was given (its initial design and its random
draws go on from one ask to the next; each tell adds results; the front-end cost weighs a new
front end). `JournaledSearcher` keeps each call as JSON until the tuner stores it with its next
claim (`take_journal`); `replay` gives a fresh searcher of the same space and settings the same
calls and checks that every ask proposes what was recorded (anything else: `ReplayMismatch`).
A tell keeps only the results the searcher did not know (the others change nothing), an ask's
exclusions only keys it was not told (it skips those anyway), so the record grows with the study.

A record is a shared row, as untrusted as any (`ReplayRules`): a replay tells only the results
the study's own finished trials give, avoids and discourages only what this run would itself, asks
no more than this run could, excludes only configurations the study holds; anything else is a
`ReplayMismatch`, never a steer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from compileiq.core.space import Config, SearchSpace
from compileiq.search.searcher import Searcher
from compileiq.search.settings import Observation, SearchSettings


class ReplayMismatch(ValueError):
    """The recorded calls cannot be replayed: unreadable, or a proposal other than the recorded one."""


Setting = tuple[str, Any]  # (parameter, value), as `avoid` and `discourage` take them


@dataclass(frozen=True)
class ReplayRules:
    """What this run would itself tell, avoid, discourage and ask: a record that says otherwise
    (a forged or foreign row) does not replay."""

    observed: Callable[[str], Sequence[Observation]]  # config key -> what this run may tell of it: its
    # study's finished trial as this run judges it, an earlier study's (the warm start's); none: nothing
    most_asked: int  # the most configurations one ask of this run takes
    held: frozenset[str] = frozenset()  # config keys an ask may exclude: the study's trials and its baseline
    avoid: frozenset[Setting] | None = None  # the settings this run avoids (None: it calls no `avoid`)
    discourage: frozenset[Setting] | None = None  # those its warm start discourages (None: none)


class JournaledSearcher(Searcher):
    """A `Searcher` (one objective) that records each call that changes its state."""

    def __init__(self, space: SearchSpace, settings: SearchSettings) -> None:
        super().__init__(space, settings)
        self._calls: list[list[Any]] = []
        self._told: set[str] = set()  # config keys of every observation told
        self.asks = 0  # asks made (replayed ones included)

    def take_journal(self) -> list[list[Any]]:
        """The calls since the previous take, oldest first (JSON)."""
        calls, self._calls = self._calls, []
        return calls

    @property
    def told(self) -> frozenset[str]:
        return frozenset(self._told)

    def tell(self, observations: Sequence[Observation], fit: bool = True) -> None:
        fresh: list[list[Any]] = []
        for observation in observations:
            if (key := observation.config.key) not in self._told:
                self._told.add(key)
                fresh.append(_observation_json(observation))
        if fresh:  # else the searcher learns nothing and does not refit
            self._calls.append(["tell", fresh, fit])
        super().tell(observations, fit)

    def fit(self) -> None:
        self._calls.append(["fit"])
        super().fit()

    def refit(self, values: Sequence[float | None]) -> None:
        self._calls.append(["refit", [_number_json(v) for v in values]])
        super().refit(values)

    def ask(self, count: int, exclude: Sequence[str] = ()) -> list[Config]:
        configs = super().ask(count, exclude)
        self.asks += 1
        self._calls.append(["ask", count, sorted(set(exclude) - self._told), [c.key for c in configs]])
        return configs

    def set_frontend_cost(self, ratio: float) -> None:
        if math.isfinite(ratio) and ratio > 0:  # else nothing changes
            self._calls.append(["cost", ratio])
        super().set_frontend_cost(ratio)

    def discourage(self, settings: Iterable[tuple[str, Any]]) -> None:
        listed = [(name, value) for name, value in settings]
        self._calls.append(["discourage", [list(pair) for pair in listed]])
        super().discourage(listed)

    def avoid(self, settings: Iterable[tuple[str, Any]]) -> None:
        listed = [(name, value) for name, value in settings]
        self._calls.append(["avoid", [list(pair) for pair in listed]])
        super().avoid(listed)


def replay(searcher: JournaledSearcher, calls: Iterable[Any], rules: ReplayRules) -> None:
    """Give `searcher` (fresh) the recorded `calls`; raises ReplayMismatch where an ask proposes
    other configurations than recorded, a call is unreadable, or one is not what this run would
    make (`rules`). Nothing replayed is recorded again."""
    for call in calls:
        try:
            _apply(searcher, call, rules)
        except ReplayMismatch:
            raise
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as error:  # int(1e999)
            raise ReplayMismatch(f"an unreadable record ({type(error).__name__}: {error})") from None
    searcher.take_journal()


def _apply(searcher: JournaledSearcher, call: Any, rules: ReplayRules) -> None:
    name, args = call[0], call[1:]
    if name == "tell":
        searcher.tell([_checked(_observation_of(item), rules) for item in args[0]], bool(args[1]))
    elif name == "ask":
        count, exclude, recorded = int(args[0]), [str(k) for k in args[1]], [str(k) for k in args[2]]
        if not 0 < count <= rules.most_asked:
            raise ReplayMismatch(f"an ask of {count} configurations (this run asks {rules.most_asked} at most)")
        if any(key not in rules.held for key in exclude):
            raise ReplayMismatch("an ask that excludes a configuration the study does not hold")
        proposed = [c.key for c in searcher.ask(count, exclude)]
        if proposed != recorded:
            raise ReplayMismatch(f"its batch {searcher.asks} proposed other configurations than the ones recorded")
    elif name == "cost":
        searcher.set_frontend_cost(float(args[0]))
    elif name == "fit":
        searcher.fit()
    elif name in ("avoid", "discourage"):
        settings = [(str(n), v) for n, v in args[0]]
        if set(settings) != getattr(rules, name):  # None: this run makes no such call
            raise ReplayMismatch(f"{'an' if name == 'avoid' else 'a'} {name} call this run would not make")
        getattr(searcher, name)(settings)
    else:  # a refit is a multi-objective search's: never journaled
        raise ReplayMismatch(f"an unknown call {name!r}")


def _checked(observation: Observation, rules: ReplayRules) -> Observation:
    """The told `observation`, where it is the one the study's own finished trial of its config gives."""
    found = rules.observed(observation.config.key)
    if not found:
        raise ReplayMismatch("it tells a result that is no finished trial of the study")
    told = _observation_json(observation)
    if (same := next((o for o in found if _observation_json(o) == told), None)) is None:
        raise ReplayMismatch("it tells a result other than the study's trial of that configuration")
    return same


def _observation_json(observation: Observation) -> list[Any]:
    return [observation.config.as_dict(), _number_json(observation.value),
            [_number_json(v) for v in observation.values], _number_json(observation.refused)]


def _observation_of(item: Any) -> Observation:
    config, value, values, refused = item
    if not isinstance(config, dict):
        raise TypeError("a configuration is not a table")
    return Observation(Config.of(config), _number_of(value), tuple(_float_of(v) for v in values), _number_of(refused))


def _number_json(value: float | None) -> float | str | None:
    """A float as JSON holds it everywhere (PostgreSQL's json refuses NaN and infinities: text)."""
    if value is None or math.isfinite(value):
        return value
    return repr(float(value))  # 'inf', '-inf', 'nan'


def _float_of(value: Any) -> float:
    if (number := _number_of(value)) is None:
        raise TypeError("a missing value")
    return number


def _number_of(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(f"{value!r} is not a number")
    return float(value)
