"""What a GPU-free objective may recommend: never worse than the compiler's defaults.

A static number is a guide, not a verdict: fewer registers bought with spills, or fewer static
instructions bought with a lower optimisation level, is usually slower. So every static
objective is bound by three rules:

- no more spill bytes than the defaults: a constraint, not a weight. A trial that adds spills is
  recorded with its metrics but may not win; the searcher is told it is worse than any trial that
  may. Lower occupancy than the defaults is allowed only in exchange for fewer spill bytes;
- a configuration that lowers ptxas's optimisation (a lower -O, expensive optimisations or the
  optimiser's constant bank turned off) may win only with a strict spill or occupancy gain over
  the defaults: fewer static instructions or registers alone do not justify it;
- a candidate replaces the defaults only if it is strictly better on the objective; among equals
  the one with the fewest changed settings wins, the defaults first.

Only `--objective time` decides what is faster; the gate holds ACFs to the same rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compileiq.core.records import Trial, TrialState

Refusal = Callable[[Trial], str | None]  # why a trial may not win, or None when it may


def _lower_level(value: Any, default: Any) -> bool:
    """True when an optimisation level is below the default's; a value that is no level (a row
    from elsewhere, "default") lowers nothing."""
    try:
        return int(value) < int(default)
    except (TypeError, ValueError):
        return False


# Settings whose only effect is to switch optimisations off (the -O0 / --dont-merge-basicblocks
# kind): the predicate says when a value lowers optimisation below the default.
LOWERING: dict[str, Callable[[Any, Any], bool]] = {
    "ptxas.opt_level": _lower_level,
    "ptxas.allow_expensive_optimizations": lambda value, default: value is False,
    "ptxas.disable_optimizer_constants": lambda value, default: value is True,
}


def lowered_optimisation(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> tuple[str, ...]:
    """The settings of `config` that lower ptxas's optimisation below the defaults', as NAME=VALUE."""
    found = []
    for name, lowers in LOWERING.items():
        known = name in config and name in defaults
        if known and config[name] != defaults[name] and lowers(config[name], defaults[name]):
            found.append(f"{name}={config[name]}")
    return tuple(found)


@dataclass(frozen=True)
class Reference:
    """The compiler defaults' build: what every candidate of a static objective is held to."""

    spill_bytes: int
    occupancy: float
    config: Mapping[str, Any]

    @classmethod
    def of(cls, baseline: Trial) -> Reference | None:
        """The baseline trial's facts, or None when it has none (it failed)."""
        metrics = baseline.metrics
        if baseline.state is not TrialState.COMPLETE or "spill_bytes" not in metrics:
            return None
        return cls(int(metrics["spill_bytes"]), float(metrics["occupancy"]), dict(baseline.config))


def static_gain(spill_bytes: int, occupancy: float, reference: Reference) -> str | None:
    """The spill or occupancy gain over the defaults, described; None when there is none."""
    if spill_bytes < reference.spill_bytes:
        also = "" if occupancy == reference.occupancy else f" (occupancy {reference.occupancy:.1%} -> {occupancy:.1%})"
        return f"spill bytes {reference.spill_bytes} -> {spill_bytes}{also}"
    if occupancy > reference.occupancy + 1e-9:
        return f"occupancy {reference.occupancy:.1%} -> {occupancy:.1%} with no more spill bytes"
    return None


def refusal(config: Mapping[str, Any], metrics: Mapping[str, Any], reference: Reference) -> str | None:
    """Why a result of a static objective may not win, or None when it may."""
    spills = int(metrics.get("spill_bytes", 0))
    if spills > reference.spill_bytes:
        return f"adds spill bytes over the compiler defaults ({reference.spill_bytes} -> {spills})"
    occupancy = float(metrics.get("occupancy", 0.0))
    if occupancy < reference.occupancy - 1e-9 and spills >= reference.spill_bytes:
        return f"lowers occupancy ({reference.occupancy:.1%} -> {occupancy:.1%}) with no fewer spill bytes"
    lowered = lowered_optimisation(config, reference.config)
    if lowered and static_gain(spills, occupancy, reference) is None:
        return f"lowers optimisation ({', '.join(lowered)}) with no spill or occupancy gain"
    return None


def changed_settings(trial: Trial, baseline: Trial) -> int:
    return sum(1 for k, v in trial.config.items() if baseline.config.get(k) != v)


def choose(trials: Sequence[Trial], baseline: Trial, refuse: Refusal) -> Trial:
    """The winner: the best trial that may win, if strictly better than the baseline; among
    equals the one with the fewest changed settings (then the earliest); else the baseline."""
    allowed = [t for t in trials if t.state is TrialState.COMPLETE and t.value is not None and refuse(t) is None]
    best = min((t.value for t in allowed if t.value is not None), default=None)
    if best is None or (baseline.value is not None and baseline.value <= best):
        return baseline
    equal = [t for t in allowed if t.value == best]
    return min(equal, key=lambda t: (changed_settings(t, baseline), t.number))


def recorded_runtime_gain(objective: Mapping[str, Any]) -> str | None:
    """An ACF objective table's confirmed runtime speedup over the defaults, described; else None."""
    speedup = objective.get("speedup")
    if objective.get("name") != "time" or objective.get("improved") is not True:
        return None
    if not isinstance(speedup, int | float) or speedup <= 1.0:
        return None
    return f"confirmed runtime speedup {speedup:.3f}x over the defaults"


def justification(chosen: Trial, baseline: Trial, defaults: Mapping[str, Any], objective: Mapping[str, Any]
                  ) -> dict[str, Any]:
    """What the ACF records against the compiler defaults: what changed and what justifies it."""
    spills = {"defaults": baseline.metrics.get("spill_bytes"), "chosen": chosen.metrics.get("spill_bytes")}
    table: dict[str, Any] = {
        "changed_settings": changed_settings(chosen, baseline),
        "lowered_optimisation": list(lowered_optimisation(chosen.config, defaults)),
        "spill_bytes": {k: v for k, v in spills.items() if v is not None},
        "occupancy": {k: v for k, v in {"defaults": baseline.metrics.get("occupancy"),
                                         "chosen": chosen.metrics.get("occupancy")}.items() if v is not None},
    }
    reference = Reference.of(baseline)
    gain = recorded_runtime_gain(objective)
    if gain is None and reference is not None and chosen.metrics.get("spill_bytes") is not None:
        gain = static_gain(int(chosen.metrics["spill_bytes"]), float(chosen.metrics.get("occupancy", 0.0)), reference)
    if gain is None and chosen.value is not None and baseline.value is not None and chosen.value < baseline.value:
        gain = f"{objective.get('name')} {baseline.value:g} -> {chosen.value:g} (static estimate)"
    if chosen.config == baseline.config:
        gain = "none needed: the compiler defaults"
    table["gain"] = gain or "none recorded"
    return table
