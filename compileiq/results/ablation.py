"""Each setting's share of the gain: a greedy ablation path from the baseline to the chosen config.

Starting at the baseline, every setting in which the chosen config differs is flipped to its
chosen value one at a time; each step takes the flip with the best (lowest) objective. The path
ends at the chosen config, so the steps' contributions telescope: they sum to the total gain.
A step whose build failed has no value of its own; the gain across it is credited to the next
step that lands on a value, which keeps the sum exact.

The path steps through configurations that may be built: one that tune.toml's `[tune]
restrictions` forbid (`BC == BR`: flipping BC alone) is never tried, nor counted as missing. Where
no single flip has a result (each is forbidden, or unrecorded), the step moves the fewest settings
together that land on one, and is named as one step ("define.BC + define.BR"): the gain belongs
to the group. The tuner knows which configurations are forbidden (its space); it records those
the path met in its run's decision (`forbidden`), which the views read (a study's rows do not
hold its restrictions).

The path steps through builds the study's rules allow (`refusal`, the rules every view holds a
trial to): a flip that lands on a refused result (one that adds spill bytes, say) is passed over
for the fewest settings together that land on an allowed one, the chosen config at the latest. A
refused intermediate would read as a huge loss for a setting that is half of the winning pair.
A step that lands on one anyway carries the rules' reason (`Step.refused`), which the views print;
the shares of the gain are given only where every step is allowed and none loses ground
(`Ablation.shares`): else one step's share reads as -600000%.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from compileiq.core.records import Trial, TrialState
from compileiq.core.space import Config, canonical_key

Evaluate = Callable[[Sequence[Config]], list[Trial]]
Refusal = Callable[[Trial], str | None]  # why the study's rules refuse a result (None: allowed)
RULE = ("greedy path from the baseline to the chosen config: each step flips the one remaining setting "
        "whose change gives the lowest objective among the builds the study's rules allow (the fewest settings "
        "together where no single flip may be built or has such a result); a step's contribution is the "
        "objective before minus after")
MAX_GROUPS = 32  # the configurations one step may try for a group size; past it, the rest in one step
MAX_FORBIDDEN = 64  # the forbidden macro settings a run records for the views


def missing_note(missing: int) -> str:
    """What the views say of configurations the path tried with no result: a rerun builds those
    tune.toml's [tune] restrictions allow. Those a run found forbidden are never counted; a study
    whose runs recorded none (older ones) may count some: a rerun records them. A --no-simplify run
    builds none (its path reads the recorded results alone)."""
    return (f"{missing} configuration(s) the path tried have no recorded result: a rerun of compileiq tune builds "
            "those tune.toml's [tune] restrictions allow, and records the others as forbidden "
            "(not with --no-simplify: it keeps the search's winner and builds no path)")


def never(config: Config) -> bool:
    """No configuration is forbidden (a kernel without restrictions)."""
    return False


def no_refusal(trial: Trial) -> str | None:
    """No result is refused (a caller without the study's rules)."""
    return None


def macro_key(config: Config) -> str:
    """What of a configuration tune.toml's restrictions read: its macros (`define.X`), as JSON text."""
    return canonical_key({k: v for k, v in config.as_dict().items() if k.startswith("define.")})


def forbidden_keys(keys: Collection[str]) -> Callable[[Config], bool]:
    """Forbidden: a configuration whose macros a run recorded as ones its restrictions forbid."""
    found = frozenset(keys)
    return lambda config: bool(found) and macro_key(config) in found


@dataclass(frozen=True)
class Step:
    setting: str
    value: Any  # the chosen config's value for the setting
    before: float | None  # the objective before this step (None: the previous step failed to build)
    after: float | None  # the objective after this step (None: this config failed to build)
    contribution: float | None  # gain credited to this step (lower objective is better)
    trial: int | None  # the trial number that recorded the config after this step
    refused: str | None = None  # why the study's rules refuse the result after this step (None: allowed)

    @property
    def through(self) -> str:
        """What every view adds to the step's `after`: that the rules refuse it, and why (else nothing)."""
        return f" (through a build the rules refuse: {self.refused})" if self.refused else ""

    @property
    def shown(self) -> str:
        """The value as the views print it: a step of several settings, each one's ("16, 16")."""
        return ", ".join(map(str, self.value)) if isinstance(self.value, list) else str(self.value)


@dataclass(frozen=True)
class Ablation:
    baseline_value: float
    chosen_value: float
    steps: tuple[Step, ...]
    missing: int  # configs the path tried with no recorded result (0: the path is complete)
    forbidden: tuple[str, ...] = ()  # the macros (`macro_key`) of the configs it met that the restrictions forbid

    @property
    def complete(self) -> bool:
        return self.missing == 0

    @property
    def total_gain(self) -> float:
        return self.baseline_value - self.chosen_value

    @property
    def shares_withheld(self) -> str | None:
        """Why the steps' shares of the gain are not given (None: they are): a step through a refused
        build, or one that loses ground, makes the others' shares exceed 100% (-620650% and 620750%
        for a spilling intermediate), which reads as nonsense rather than as a share."""
        if self.total_gain <= 0:
            return "there is no gain to share"
        if refused := next((i for i, s in enumerate(self.steps, 1) if s.refused), None):
            return f"step {refused} passes through a build the rules refuse"
        if lost := next((i for i, s in enumerate(self.steps, 1) if (s.contribution or 0) < 0), None):
            return f"step {lost} loses ground (the path is not monotone)"
        return None

    @property
    def shares(self) -> tuple[float | None, ...] | None:
        """Each step's share of the total gain (None: a failed step's, credited to the next), or
        None where they are withheld (`shares_withheld`): every one is then between 0 and 1."""
        if self.shares_withheld is not None:
            return None
        return tuple(None if s.contribution is None else s.contribution / self.total_gain for s in self.steps)


def differing(baseline: dict[str, Any], chosen: dict[str, Any]) -> list[str]:
    return sorted(name for name, value in chosen.items() if baseline.get(name) != value)


def ablation_path(baseline: Trial, chosen: Trial, evaluate: Evaluate,
                  forbidden: Callable[[Config], bool] = never, refusal: Refusal = no_refusal) -> Ablation | None:
    """The path, or None when either end has no value (a failed baseline or chosen trial).
    `forbidden`: the configurations tune.toml's restrictions forbid (never tried); `refusal`: why the
    study's rules refuse a result (the path steps through those they allow where it can)."""
    if _value(baseline) is None or _value(chosen) is None:
        return None
    assert baseline.value is not None and chosen.value is not None
    target = Config.of(chosen.config)
    current = Config.of(baseline.config)
    remaining = differing(baseline.config, chosen.config)
    steps: list[Step] = []
    last_known, missing = baseline.value, 0
    refused: dict[str, None] = {}
    before: float | None = baseline.value
    while remaining:
        group, trial, tried_missing = _step(current, target, remaining, evaluate, forbidden, refused, refusal)
        missing += tried_missing
        after = _value(trial) if trial is not None else None
        if len(group) == len(remaining) and after is None:  # the last step lands on the chosen config itself
            after, trial = chosen.value, chosen
        gain = last_known - after if after is not None else None
        value = target[group[0]] if len(group) == 1 else [target[n] for n in group]
        why = refusal(trial) if trial is not None and after is not None else None
        steps.append(Step(" + ".join(group), value, before, after, gain, trial.number if trial else None, why))
        if after is not None:
            last_known = after
        before = after
        current = current.with_values({n: target[n] for n in group})
        remaining = [n for n in remaining if n not in group]
    return Ablation(baseline.value, chosen.value, tuple(steps), missing, tuple(refused)[:MAX_FORBIDDEN])


def _step(current: Config, target: Config, remaining: list[str], evaluate: Evaluate,
          forbidden: Callable[[Config], bool], refused: dict[str, None],
          refusal: Refusal) -> tuple[tuple[str, ...], Trial | None, int]:
    """One step: the best of the fewest remaining settings flipped together that land on a result
    the rules allow or a failed build (one setting where any single flip does; a size whose results
    the rules all refuse is passed over), the trial it lands on (None: none), and how many
    configurations it tried that have no result. Forbidden ones are noted in `refused`, never tried."""
    missing = 0
    for size in range(1, len(remaining) + 1):
        groups = list(combinations(remaining, size)) if size < len(remaining) else [tuple(remaining)]
        if len(groups) > MAX_GROUPS:
            continue  # too many to try: a larger group (at the end, every remaining setting) takes the step
        options = {g: current.with_values({n: target[n] for n in g}) for g in groups}
        for config in options.values():
            if forbidden(config):
                refused[macro_key(config)] = None
        allowed = {g: c for g, c in options.items() if not forbidden(c)}
        found = {t.config_key: t for t in evaluate(list(allowed.values()))} if allowed else {}
        missing += sum(1 for c in allowed.values() if c.key not in found)
        if any(_rank(found.get(c.key), refusal)[0] < 2 for c in allowed.values()) or size == len(remaining):
            best = min(options, key=lambda g: (_rank(found.get(options[g].key), refusal), g))
            return best, found.get(options[best].key), missing
    raise AssertionError("the last size holds every remaining setting")  # pragma: no cover


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
        if step.refused:  # as `show --why` and the report say it: the ACF names the same step alike
            row["refused"] = step.refused
        rows.append(row)
    return rows


def _value(trial: Trial | None) -> float | None:
    if trial is None or trial.state is not TrialState.COMPLETE:
        return None
    return trial.value


def _rank(trial: Trial | None, refusal: Refusal = no_refusal) -> tuple[int, float]:
    """A step's order: a value the rules allow (lowest first), then a failed build, then a value the
    rules refuse, then no result at all (2 and 3 never end a size's search: `_step`)."""
    if trial is None:
        return (3, 0.0)
    value = _value(trial)
    if value is None:
        return (1, 0.0)
    return (2, value) if refusal(trial) is not None else (0, value)
