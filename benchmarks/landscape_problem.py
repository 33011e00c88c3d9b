"""One landscape with its space (`Problem`), read and checked, and how a run on it is charged.

The space is the T1 file's parameters (as tuned macros, defaults first) with its `Conditions` as
restrictions (`t1_file` reads it, Kernel Tuner's `Values` forms included, running nothing);
without a T1 file, the cache's own `tune_params`, every combination, the first value of each the
defaults (or the first recorded configuration, when those have no time). The optimum and its
targets are those of the configurations the space allows, not of the whole cache. Bad input is
an `InputError` (or the product's `LandscapeError`): one line. A configuration's value is the
mean of its recorded `times` (`Landscape.mean`). The charging rules are `charge`'s.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import t1_file
from t1_file import InputError

from compileiq.core.space import Config, SearchSpace
from compileiq.evaluate.replay import Field, Landscape, field_of, load_landscape
from compileiq.source import restrictions

TARGETS = (0.01, 0.05)
Key = tuple[Field, ...]  # a configuration's values in the landscape's parameter order (replay.field_of)


@dataclass(frozen=True)
class Problem:
    """One landscape with its space: what every strategy is run on."""

    landscape: Landscape
    space: SearchSpace
    t1: dict
    cache: Path  # the Kernel Tuner cache file (.json or .json.gz)
    t1_path: Path | None = None  # the T1 file (None: the cache's own tune_params)

    @property
    def default(self) -> Key:
        return key_of(self.landscape, self.space.default_config())

    @cached_property
    def allowed(self) -> tuple[Key, ...]:
        """The recorded configurations with times that the space holds (its values, its
        restrictions): the only ones any strategy can reach, so the only ones judged on."""
        parameters = [self.space.parameter(f"define.{p}") for p in self.landscape.parameters]
        return tuple(k for k, times in self.landscape.times.items() if times
                     and all(q.allows(v) for q, v in zip(parameters, k)) and self.space.allows(config_of(self, k)))

    @cached_property
    def best(self) -> float:
        """The optimum: the lowest mean of the configurations the space allows."""
        return min(v for k in self.allowed if (v := self.value(k)) is not None)

    @cached_property
    def optimum(self) -> Key:
        return min(self.allowed, key=lambda k: (self.value(k), k != self.default))

    @cached_property
    def steady_best(self) -> Key:
        """The allowed configuration fastest once warm (mean of its times less the cold first launch)."""
        return min(self.allowed, key=lambda k: (self.landscape.steady_mean(k), k != self.optimum))

    def target(self, fraction: float) -> float:
        return self.best * (1 + fraction)

    def value(self, key: Key) -> float | None:
        return self.landscape.mean(key)


@dataclass(frozen=True)
class Reached:
    """What a run was charged for one target."""

    evaluations: int
    seconds: float
    reached: bool


def t1_space(t1: dict, where: object = "T1 file") -> SearchSpace:
    """The T1 tuning space as compileiq's: tuned macros (default first; a value that is no integer
    as its cache key spells it, `field_of`) under its Conditions; InputError when it has none."""
    values, default = t1_file.parameters(t1, where), t1_file.defaults(t1)
    tuned: dict[str, tuple[Field, ...]] = {
        name: tuple(dict.fromkeys(field_of(v) for v in (default[name], *found))) for name, found in values.items()}
    try:
        texts = restrictions.parse(t1_file.conditions(t1, where), {}, tuned, known_as="a TuningParameter of the T1 file")
    except ValueError as error:
        raise InputError(f"{where}: Conditions{error}") from None
    name = t1.get("General", {}).get("BenchmarkName", "space") if isinstance(t1.get("General"), dict) else "space"
    base = SearchSpace(f"t1:{name}", "", ()).with_defines(tuned)
    return base.restricted(restrictions.restrictions_of(texts, {}, tuned))


def key_of(landscape: Landscape, config: Config | dict) -> Key:
    values = config.as_dict() if isinstance(config, Config) else config
    return tuple(field_of(values[f"define.{p}"]) for p in landscape.parameters)


def config_of(problem: Problem, key: Key) -> dict:
    return {f"define.{p}": v for p, v in zip(problem.landscape.parameters, key)}


def charge(problem: Problem, batches: Sequence[Sequence[Key]], cap: int) -> dict[float, Reached]:
    """Per target: evaluations and simulated seconds until a batch holds a configuration within
    it (the whole batch charged). A run that does not get there within `cap` evaluations counts
    `cap + 1`, whatever it spent: a batch strategy's last batch can run past the cap (1 + 64 x 8 =
    513), and counting that against a sequential strategy's 512 made two runs that both failed
    look different to the rank test. Repeats within or across batches are free."""
    seen: set[Key] = set()
    count, seconds, found = 0, 0.0, {}
    for batch in batches:
        fresh = [k for k in dict.fromkeys(batch) if k not in seen]
        seen.update(fresh)
        count += len(fresh)
        seconds += sum(problem.landscape.costs_ms.get(k, 0.0) for k in fresh) / 1000
        for target in TARGETS:
            if target not in found and any((v := problem.value(k)) is not None and v <= problem.target(target)
                                           for k in fresh):
                found[target] = Reached(count, seconds, True)
    short = Reached(cap + 1, seconds, False)
    return {t: found[t] if t in found and found[t].evaluations <= cap else short for t in TARGETS}


def finished(problem: Problem, batches: Sequence[Sequence[Key]], cap: int) -> bool:
    """Whether a run ends here: it holds a configuration within the 1% target, or `cap` evaluations."""
    evaluated = {k for b in batches for k in b}
    best = min((v for k in evaluated if (v := problem.value(k)) is not None), default=math.inf)
    return best <= problem.target(TARGETS[0]) or len(evaluated) >= cap


def cache_t1(landscape: Landscape) -> dict:
    """A T1 tuning space made of the cache's own `tune_params` when no space file is given: every
    combination of their values, no restrictions (one the cache lacks is a failed launch for every
    strategy), the first value of each parameter as the defaults; where that configuration has no
    recorded time (Kernel Tuner's test caches record a sample), the first recorded one that has."""
    if not landscape.values:
        raise InputError(f"{landscape.name}: no usable tune_params in the cache: give its tuning space with --space")
    first = tuple(values[0] for values in landscape.values.values())
    timed = [k for k, t in landscape.times.items() if t and all(v in landscape.values[p] for p, v in
                                                                   zip(landscape.parameters, k))]
    default = first if landscape.mean(first) is not None or not timed else timed[0]
    parameters = [{"Name": name, "Type": "int", "Values": list(values), "Default": value}
                  for (name, values), value in zip(landscape.values.items(), default)]
    return {"General": {"BenchmarkName": landscape.name.split(".")[0]},
            "ConfigurationSpace": {"TuningParameters": parameters, "Conditions": []}}


def problems(landscapes: Sequence[Path], spaces: Sequence[Path]) -> list[Problem]:
    """Each cache with its space, checked: InputError (one line) for one no strategy can be judged on."""
    if len(spaces) not in (0, 1, len(landscapes)):
        raise InputError("give one --space, one per --landscape, or none (each cache's own tune_params)")
    found = []
    for index, cache in enumerate(landscapes):
        landscape = load_landscape(cache)
        t1_path = spaces[0] if len(spaces) == 1 else spaces[index] if spaces else None
        t1 = t1_file.read_t1(t1_path) if t1_path else cache_t1(landscape)
        space = t1_space(t1, t1_path or cache)
        names = [p.removeprefix("define.") for p in (q.name for q in space.parameters)]
        if sorted(names) != sorted(landscape.parameters):
            raise InputError(f"{t1_path} names {', '.join(names)}; {cache} has {', '.join(landscape.parameters)}")
        problem = Problem(landscape, space, t1, cache, t1_path)
        if not problem.allowed:
            raise InputError(f"{cache}: no configuration of the space has a recorded time (every one failed, "
                             f"missing, or without `time`: the objective judged is time)")
        if problem.value(problem.default) is None:
            shown = ",".join(map(str, problem.default))
            raise InputError(f"{cache}: the defaults ({shown}) have no recorded time (missing or failed): every "
                             "strategy starts from them and every speedup is against them")
        found.append(problem)
    return found


def landscape_parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's parser with the landscapes it runs on (--landscape, --space), read by `problems`."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--landscape", type=Path, action="append", required=True,
                        help="Kernel Tuner cache file (.json or .json.gz); repeat for several")
    parser.add_argument("--space", type=Path, action="append", default=[],
                        help="the tuning space in the T1 format (JSON): one, or one per --landscape; without "
                             "it, each cache's own tune_params, unrestricted, their first values the defaults")
    return parser
