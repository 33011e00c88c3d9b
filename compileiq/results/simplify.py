"""Shrink the search's winner to the fewest non-default settings that keep its result.

A random or Bayesian search sets many flags that make no difference; an ACF full of them is
hard to review and fragile across compiler versions. Each non-default setting is reset to its
default in turn (one batch of single drops, then their combination); a drop is kept when the
machine code is identical or the objective is no worse, and the result may still win (a static
objective's constraints: see `eligibility`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from compileiq.core.records import Trial, TrialState
from compileiq.core.space import Config, Parameter, SearchSpace, Stage, Value

Evaluate = Callable[[Sequence[Config]], list[Trial]]
Allowed = Callable[[Trial], bool]
NoWorse = Callable[[Trial, Trial], bool]  # (result, the winner): whether the result's objective is no worse


def lower_or_equal_value(trial: Trial, reference: Trial) -> bool:
    """One objective: the recorded value is no higher (lower is better)."""
    return trial.value is not None and reference.value is not None and trial.value <= reference.value


@dataclass(frozen=True)
class Simplification:
    winner: Trial
    chosen: Trial
    dropped: tuple[str, ...]  # settings reset to their default without losing anything
    kept: tuple[str, ...]  # settings the result depends on


def non_default(config: Config, space: SearchSpace) -> list[str]:
    """Names of the settings that differ from their default: the compiler's, or for a tuned macro
    the first value tune.toml lists (a macro that changes nothing goes back to it, as a flag does)."""
    return [p.name for p in space.parameters if config[p.name] != p.default]


def simplify(winner: Trial, space: SearchSpace, evaluate: Evaluate, exact: bool = False,
             allowed: Allowed = lambda trial: True, no_worse: NoWorse = lower_or_equal_value) -> Simplification:
    """`exact`: keep a drop only for identical machine code (for noisy objectives like runtime);
    `allowed`: whether a result may win at all (a drop to one that may not is never kept);
    `no_worse`: otherwise, whether a result's objective is no worse than the winner's (several
    objectives: each of them)."""
    current = winner
    while changed := non_default(Config.of(current.config), space):
        base = Config.of(current.config)
        singles = {name: _reset(base, space, [name]) for name in changed}
        results = {t.config_key: t for t in evaluate(list(singles.values()))}
        droppable = [n for n, c in singles.items() if _as_good(results.get(c.key), winner, exact, allowed, no_worse)]
        if not droppable:
            break
        combined = _reset(base, space, droppable)
        found = {t.config_key: t for t in evaluate([combined])}
        both = found.get(combined.key)
        current = both if both is not None and _as_good(both, winner, exact, allowed, no_worse) else results[singles[droppable[0]].key]
    kept = tuple(non_default(Config.of(current.config), space))
    dropped = tuple(n for n in non_default(Config.of(winner.config), space) if n not in kept)
    return Simplification(winner, current, dropped, kept)


def baseline_space(baseline: Mapping[str, Value]) -> SearchSpace:
    """A stand-in space whose defaults are the baseline's values (all the simplification reads):
    a setting goes back to the baseline's value (the build that ships), not to the compiler's."""
    params = tuple(_parameter(name, value) for name, value in sorted(baseline.items()))
    return SearchSpace("recorded", "", params)


def _parameter(name: str, default: Value) -> Parameter:
    stage: Stage = "frontend" if name.startswith(("nvcc.", "define.")) else "ptxas"
    return Parameter(name, stage, "choice", (default,), default, "", "safe", "")


def _reset(config: Config, space: SearchSpace, names: Sequence[str]) -> Config:
    return config.with_values({name: space.parameter(name).default for name in names})


def _as_good(trial: Trial | None, reference: Trial, exact: bool, allowed: Allowed, no_worse: NoWorse) -> bool:
    if trial is None or trial.state is not TrialState.COMPLETE or trial.value is None or not allowed(trial):
        return False
    if trial.code_hash is not None and trial.code_hash == reference.code_hash and _same_launch(trial, reference):
        return True
    return not exact and no_worse(trial, reference)


def _same_launch(trial: Trial, reference: Trial) -> bool:
    """Whether both were scored at the same launch: the same machine code launched with other
    threads per block (a tuned macro that only a [launch] table reads) has another occupancy, and
    another runtime (Rodinia's gaussian: its block-size macros went back to their defaults, the
    code unchanged, and the choice lost the occupancy it was chosen for)."""
    return all(trial.metrics.get(key) == reference.metrics.get(key) for key in ("block_size", "launch"))
