"""Each setting's share of the gain: a greedy ablation path from the baseline to the chosen config.

Starting at the baseline, every setting in which the chosen config differs is flipped to its
chosen value one at a time; each step takes the flip with the best (lowest) objective. The path
ends at the chosen config, so the steps' contributions telescope: they sum to the total gain.
A step whose build failed has no value of its own; the gain across it is credited to the next
step that lands on a value, which keeps the sum exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from compileiq.core.records import Trial, TrialState
from compileiq.core.space import Config

Evaluate = Callable[[Sequence[Config]], list[Trial]]
RULE = ("greedy path from the baseline to the chosen config: each step flips the one remaining setting "
        "whose change gives the lowest objective; a step's contribution is the objective before minus after")


def missing_note(missing: int) -> str:
    """What the views say of configurations on the path with no result: a rerun builds them, unless
    tune.toml's [tune] restrictions forbid them (those are never built; a rerun cannot help)."""
    return (f"{missing} configuration(s) on the path have no recorded result: a rerun of compileiq tune builds "
            "them, except those [tune] restrictions forbid, which are never built")


@dataclass(frozen=True)
class Step:
    setting: str
    value: Any  # the chosen config's value for the setting
    before: float | None  # the objective before this step (None: the previous step failed to build)
    after: float | None  # the objective after this step (None: this config failed to build)
    contribution: float | None  # gain credited to this step (lower objective is better)
    trial: int | None  # the trial number that recorded the config after this step


@dataclass(frozen=True)
class Ablation:
    baseline_value: float
    chosen_value: float
    steps: tuple[Step, ...]
    missing: int  # configs on the path with no recorded result (0: the path is complete)

    @property
    def complete(self) -> bool:
        return self.missing == 0

    @property
    def total_gain(self) -> float:
        return self.baseline_value - self.chosen_value


def differing(baseline: dict[str, Any], chosen: dict[str, Any]) -> list[str]:
    return sorted(name for name, value in chosen.items() if baseline.get(name) != value)


def ablation_path(baseline: Trial, chosen: Trial, evaluate: Evaluate) -> Ablation | None:
    """The path, or None when either end has no value (a failed baseline or chosen trial)."""
    if _value(baseline) is None or _value(chosen) is None:
        return None
    assert baseline.value is not None and chosen.value is not None
    target = Config.of(chosen.config)
    current = Config.of(baseline.config)
    remaining = differing(baseline.config, chosen.config)
    steps: list[Step] = []
    last_known, missing = baseline.value, 0
    before: float | None = baseline.value
    while remaining:
        options = {name: current.with_values({name: target[name]}) for name in remaining}
        found = {t.config_key: t for t in evaluate(list(options.values()))}
        missing += sum(1 for c in options.values() if c.key not in found)
        name = min(remaining, key=lambda n: (_rank(found.get(options[n].key)), n))
        trial = found.get(options[name].key)
        after = _value(trial) if trial is not None else None
        if len(remaining) == 1 and after is None:  # the last step lands on the chosen config itself
            after, trial = chosen.value, chosen
        gain = last_known - after if after is not None else None
        steps.append(Step(name, target[name], before, after, gain, trial.number if trial else None))
        if after is not None:
            last_known = after
        before = after
        current = options[name]
        remaining.remove(name)
    return Ablation(baseline.value, chosen.value, tuple(steps), missing)


def recorded(trials: Sequence[Trial]) -> Evaluate:
    """An evaluate that only looks results up among recorded trials (builds nothing)."""
    by_key = {t.config_key: t for t in trials if t.state is not TrialState.RUNNING}

    def lookup(configs: Sequence[Config]) -> list[Trial]:
        return [by_key[c.key] for c in configs if c.key in by_key]

    return lookup


def evidence_rows(ablation: Ablation) -> list[dict[str, Any]]:
    """`[[evidence.contribution]]` tables for the ACF (TOML has no null: unknown values are left out)."""
    rows = []
    for step in ablation.steps:
        row: dict[str, Any] = {"setting": step.setting, "value": step.value}
        for key, number in (("metric_before", step.before), ("metric_after", step.after),
                            ("contribution", step.contribution)):
            if number is not None:
                row[key] = number
        rows.append(row)
    return rows


def _value(trial: Trial | None) -> float | None:
    if trial is None or trial.state is not TrialState.COMPLETE:
        return None
    return trial.value


def _rank(trial: Trial | None) -> tuple[int, float]:
    value = _value(trial)
    return (1, 0.0) if value is None else (0, value)
