"""What a GPU-free objective may recommend: never worse than the compiler's defaults (or, with
--compile-commands, the build that ships: "the defaults" below is the study's baseline).

A static number is a guide, not a verdict: fewer registers bought with spills, or fewer static
instructions bought with a lower optimisation level, is usually slower. An ACF chosen without a
GPU must be safe to apply blind, so every static objective is bound by these rules:

- no more spill bytes than the defaults: a constraint, not a weight. A trial that adds spills is
  recorded with its metrics but may not win; the searcher is told it is worse than any trial that
  may;
- never a lower optimisation level (a lower -O, expensive optimisations or the optimiser's constant
  bank turned off), whatever its static gain: only a measured runtime can justify it;
- `static` (the default) changes a setting only when no static metric gets worse: no lower
  occupancy either. `spills`, `registers`, `occupancy` and `instructions` may trade occupancy for
  fewer spill bytes (that trade is what they are asked for), never for anything else;
- the kernels tune.toml's `entries` leave unscored are held to the same spill and occupancy rules
  (`unscored`): -Xptxas flags build every kernel of the file, whatever the objective scores;
- every kernel of the build, scored or not, that the defaults' build can launch at the threads its
  __launch_bounds__ declares must still launch there (`launch_bound`), whatever the objective;
- a candidate replaces the defaults only if it is strictly better on the objective; among equals
  the one with the fewest changed settings wins, the defaults first.

A trial refused only for a trade-off that a GPU could justify (a lower level with a spill or
occupancy gain; under `static`, occupancy given for fewer spills) and better on the objective than
the choice is a *candidate to time*: the ACF and the report list it with the command that times
it. With `--objective time` the same rules screen candidates before they are measured, except
that a lower level with a spill or occupancy gain is measured. The gate holds ACFs to these rules.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from compileiq.core.records import SCREEN, SEARCH, Trial, TrialState
from compileiq.core.space import Config, SearchSpace
from compileiq.evaluate.launch_bound import Bounds, bound_refusal
from compileiq.evaluate.unscored import Unscored, unscored_refusal
from compileiq.source.spec import SHIPPED, ShippedBuild

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
    "ptxas.allow_expensive_optimizations": lambda value, default: value is False and default is not False,
    "ptxas.disable_optimizer_constants": lambda value, default: value is True,
}
EXPENSIVE = "ptxas.allow_expensive_optimizations"


def _in_effect(name: str, values: Mapping[str, Any]) -> Any:
    """A setting's value as ptxas applies it: expensive optimisations left at "default" are on at
    -O2 and above, off below (so going back to "default" at -O1 turns off what a shipped
    `--allow-expensive-optimizations=true` had on)."""
    value = values[name]
    if name != EXPENSIVE or value in (True, False):
        return value
    try:
        return int(values.get("ptxas.opt_level", 3)) >= 2
    except (TypeError, ValueError):
        return value  # a level that is no level (a row from elsewhere): judged as given


def lowered_optimisation(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> tuple[str, ...]:
    """The settings of `config` that lower ptxas's optimisation below the defaults', as NAME=VALUE
    (each read as it applies beside the other settings of `config`, else of the defaults)."""
    found = []
    merged = {**defaults, **config}
    for name, lowers in LOWERING.items():
        known = name in config and name in defaults
        if known and config[name] != defaults[name] and lowers(_in_effect(name, merged), _in_effect(name, defaults)):
            found.append(f"{name}={config[name]}")
    return tuple(found)


def lowering_settings(space: SearchSpace, defaults: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Each (parameter, value) of `space` that lowers optimisation below `defaults`: what no static
    objective can choose, so its search proposes none while others are left (`Searcher.avoid`)."""
    return [(p.name, value) for p in space.parameters for value in p.values
            if lowered_optimisation({p.name: value}, defaults)]


DEFAULTS = "the compiler defaults"  # the baseline's name without a shipped build


def against(shipped: ShippedBuild | bool | None) -> str:
    """What refusals and the ACF's evidence call the baseline: the compiler defaults, else the
    project's build as shipped, named by its compilation database where it is known (`shipped`:
    that build; True: a study whose baseline row sets the project's values, the file unknown)."""
    if isinstance(shipped, ShippedBuild):
        return shipped.name
    return SHIPPED if shipped else DEFAULTS


@dataclass(frozen=True)
class Reference:
    """The baseline's build (the compiler defaults, or the shipped build): what every candidate
    of an objective is held to."""

    spill_bytes: int
    occupancy: float
    config: Mapping[str, Any]
    objective: str = "static"  # the study's objective(s), comma-separated
    against: str = DEFAULTS  # what the baseline is, for refusals: "your build as shipped (...)" where it is
    unscored: Unscored | None = None  # the kernels tune.toml's `entries` leave unscored (None: it names none)
    bounds: Bounds | None = None  # every kernel's __launch_bounds__ as built (None: a row recorded before them)

    @classmethod
    def of(cls, baseline: Trial, objective: str = "static", against: str = DEFAULTS) -> Reference | None:
        """The baseline trial's facts, or None when it has none (it failed)."""
        metrics = baseline.metrics
        if baseline.state is not TrialState.COMPLETE or missing_metrics(metrics) is not None:
            return None
        return cls(int(metrics["spill_bytes"]), float(metrics["occupancy"]), dict(baseline.config), objective,
                   against, Unscored.of(metrics), Bounds.of(metrics))

    @property
    def measured(self) -> bool:
        """A runtime objective: a GPU measures what passes, so a lower level with a static gain may."""
        return "time" in self.objective.split(",")

    @property
    def pareto_safe(self) -> bool:
        """`static`: no static metric may get worse than the defaults', occupancy included."""
        return self.objective == "static"

    def screening(self) -> Reference:
        """The rules `--objective time` screens by: what a GPU could justify passes."""
        return replace(self, objective="time")


def static_gain(spill_bytes: int, occupancy: float, reference: Reference) -> str | None:
    """The spill or occupancy gain over the defaults, described; None when there is none."""
    if spill_bytes < reference.spill_bytes:
        also = "" if occupancy == reference.occupancy else f" (occupancy {reference.occupancy:.1%} -> {occupancy:.1%})"
        return f"spill bytes {reference.spill_bytes} -> {spill_bytes}{also}"
    if occupancy > reference.occupancy + 1e-9:
        return f"occupancy {reference.occupancy:.1%} -> {occupancy:.1%} with no more spill bytes"
    return None


JUDGED = ("spill_bytes", "occupancy")  # the static metrics the rules read: a result without one is refused


def missing_metrics(metrics: Mapping[str, Any]) -> str | None:
    """Why the rules cannot judge these metrics (one they read is missing), or None when they can."""
    missing = [name for name in JUDGED if name not in metrics]
    return f"no static metrics to check it by ({', '.join(missing)} missing)" if missing else None


def refusal(config: Mapping[str, Any], metrics: Mapping[str, Any], reference: Reference) -> str | None:
    """Why a result may not win (for `time`: may not be measured), or None when it may; a result
    whose static metrics are missing (lost, stripped) is refused: it cannot show it does no harm."""
    if missing := missing_metrics(metrics):
        return missing
    spills = int(metrics["spill_bytes"])
    if spills > reference.spill_bytes:
        return f"adds spill bytes over {reference.against} ({reference.spill_bytes} -> {spills})"
    occupancy = float(metrics["occupancy"])
    if occupancy == 0.0 < reference.occupancy:
        return ("cannot launch (occupancy 0%: its threads, registers or shared memory per block exceed what an SM "
                "gives one block)")
    if unlaunchable := bound_refusal(metrics, reference.bounds, config, reference.config):
        return unlaunchable
    if occupancy < reference.occupancy - 1e-9:
        lower = f"lowers occupancy ({reference.occupancy:.1%} -> {occupancy:.1%})"
        if spills >= reference.spill_bytes:
            return f"{lower} with no fewer spill bytes"
        if reference.pareto_safe:
            return f"{lower} for fewer spill bytes: a trade-off `static` never makes without a GPU"
    if unscored := unscored_refusal(metrics, reference.unscored, reference.against, reference.pareto_safe):
        return unscored
    lowered = lowered_optimisation(config, reference.config)
    if lowered and not reference.measured:
        return f"lowers optimisation ({', '.join(lowered)}): only a measured runtime can justify it"
    if lowered and static_gain(spills, occupancy, reference) is None:
        return f"lowers optimisation ({', '.join(lowered)}) with no spill or occupancy gain"
    return None


def study_refusal(baseline: Trial | None, objective: str, static: bool, against: str = DEFAULTS) -> Refusal:
    """The no-harm rules a study's choice is held to: a static objective's against the baseline;
    `time` chooses by measurement (its screening is `Reference.screening`)."""
    reference = Reference.of(baseline, objective, against) if static and baseline is not None else None
    if reference is None:
        return lambda trial: None
    return lambda t: refusal(t.config, t.metrics, reference)


def repairs(trials: Sequence[Trial], reference: Reference, defaults: Mapping[str, Any],
            most: int = 2) -> list[dict[str, Any]]:
    """The best trials refused for a lower optimisation level alone, at the default level: what the
    search tries next (the gain often stays: a register cap with the override spills no more at
    -O3 than at -O0). The search alone found them late: a refused result's region looks forbidden."""
    screening = reference.screening()
    found: dict[str, dict[str, Any]] = {}
    for trial in sorted((t for t in trials if _complete(t)),
                        key=lambda t: (t.value, t.number)):
        if lowered_optimisation(trial.config, defaults) and refusal(trial.config, trial.metrics, screening) is None:
            config = at_default_level(trial.config, defaults)
            found.setdefault(json.dumps(config, sort_keys=True), config)
    return list(found.values())[:most]


def at_default_level(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """`config` with every setting that lowers optimisation below the defaults' set back to the defaults'."""
    names = [setting.partition("=")[0] for setting in lowered_optimisation(config, defaults)]
    return {**config, **{name: defaults[name] for name in names}}


def candidates_to_time(trials: Sequence[Trial], chosen: Trial, baseline: Trial, objective: str,
                       limit: int = 3) -> tuple[Trial, ...]:
    """Trials of a single static objective that its rules refused only for a trade-off a GPU could
    justify, better on the objective than the choice: the best `limit`, one per machine code (its
    trial with the fewest changed settings: the simplified one, once the tuner has simplified it)."""
    reference = Reference.of(baseline, objective)
    if reference is None or reference.measured or "," in objective or chosen.value is None:
        return ()
    screening = reference.screening()
    found: dict[str | None, Trial] = {}
    order = sorted(trials, key=lambda t: (t.value if t.value is not None else math.inf,
                                          changed_settings(t, baseline), t.number))
    for trial in order:
        if trial.state is not TrialState.COMPLETE or trial.value is None or trial.value >= chosen.value:
            continue
        timeable = refusal(trial.config, trial.metrics, screening) is None
        if timeable and refusal(trial.config, trial.metrics, reference) is not None:
            found.setdefault(trial.code_hash or str(trial.number), trial)
    return tuple(found.values())[:limit]


def changed_settings(trial: Trial, baseline: Trial) -> int:
    return sum(1 for k, v in trial.config.items() if baseline.config.get(k) != v)


def rank(trial: Trial, baseline: Mapping[str, Any]) -> tuple[float, int, int]:
    """The order every view ranks complete trials in: value, then the fewest settings changed from
    the baseline's config (the baseline itself first among equals), then the earliest."""
    value = trial.value if trial.value is not None else math.inf
    return value, sum(1 for k, v in trial.config.items() if baseline.get(k) != v), trial.number


def choose(trials: Sequence[Trial], baseline: Trial, refuse: Refusal) -> Trial:
    """The winner: the best trial that may win, if strictly better than the baseline; among
    equals the one with the fewest changed settings (then the earliest); else the baseline."""
    allowed = [t for t in trials if _complete(t) and refuse(t) is None]
    best = min((t.value for t in allowed if t.value is not None), default=None)
    if best is None or (baseline.value is not None and baseline.value <= best):
        return baseline
    equal = [t for t in allowed if t.value == best]
    return min(equal, key=lambda t: rank(t, baseline.config))


def search_winner(trials: Sequence[Trial], baseline: Trial, refuse: Refusal, static: bool = True) -> Trial:
    """`choose` over the trials the search made: a simplified trial is the simplification's result,
    not its start (a rerun then simplifies the same winner again, and its record of what was
    dropped is kept). A search result refused for its settings alone counts through its stand-in
    (`stand_ins`), and a trial built to decide that may win and beats them all counts too
    (`better_byproducts`: the earliest of the best, so that a rerun, which finds that trial's own
    simplification too, starts from the same one; static values only: a runtime's single screening
    run of an ablation step is noise, and its confirmation decides). The tuner and every view
    (`results.explain`) choose by this one rule."""
    results = search_results(trials, refuse, baseline.config)
    if static and (better := better_byproducts(trials, results, refuse)):
        best = min(t.value for t in better if t.value is not None)
        return min((t for t in better if t.value == best), key=lambda t: t.number)
    return choose(results, baseline, refuse)


def better_byproducts(trials: Sequence[Trial], results: Sequence[Trial], refuse: Refusal) -> list[Trial]:
    """Trials built to decide (a step of a simplification, a candidate to time shrunk) that may win
    and are strictly better than every search result that may: the best allowed build the study
    knows. A shrunk candidate's rejected step (other machine code, -O3, fewer spills) was listed
    as "may be chosen" beside a choice it beat, the ACF keeping the defaults (a red team's)."""
    best = min((t.value for t in results if _complete(t) and refuse(t) is None and t.value is not None),
               default=math.inf)
    return [t for t in trials if t.purpose not in (SEARCH, SCREEN) and _complete(t) and refuse(t) is None
            and t.value is not None and t.value < best]


def search_results(trials: Sequence[Trial], refuse: Refusal, defaults: Mapping[str, Any] | None = None) -> list[Trial]:
    """What a choice is made from: the trials the search made, and for a refused one the trial
    that stands in for it (`stand_ins`) and, given the baseline's `defaults`, its repair
    (`repaired`); never an earlier run's simplified trial, so that a rerun starts from the same
    search result, simplifies it the same way and records the same path. One objective
    (`search_winner`) or several (the front's pick) alike."""
    searched = [t for t in trials if t.purpose in (SEARCH, SCREEN)]
    found = [*searched, *stand_ins(trials, searched, refuse)]
    return found + repaired(trials, searched, refuse, defaults) if defaults is not None else found


def repaired(trials: Sequence[Trial], searched: Sequence[Trial], refuse: Refusal,
             defaults: Mapping[str, Any]) -> list[Trial]:
    """For each search result refused for a lower optimisation level, the trial of the same settings
    at the default level where the study built it and it may win (`at_default_level`: built while
    a candidate to time was shrunk, or proposed by `repairs`): its code differs, so it is no
    stand-in, but it is the search's result made safe. A run that built one strictly better than
    its choice used to leave it in the table as "may be chosen" and send the user to a GPU instead."""
    by_key = {t.config_key: t for t in trials if _complete(t)}
    found: dict[int, Trial] = {}
    for trial in searched:
        if not _complete(trial) or refuse(trial) is None or not lowered_optimisation(trial.config, defaults):
            continue
        repair = by_key.get(Config.of(at_default_level(trial.config, defaults)).key)
        if repair is not None and refuse(repair) is None:
            found.setdefault(repair.number, repair)
    return list(found.values())


def stand_ins(trials: Sequence[Trial], searched: Sequence[Trial], refuse: Refusal) -> list[Trial]:
    """For each machine code the search found only with settings the rules refuse (a lower -O that
    turned out to change nothing), the earliest trial of the study that builds the same code and
    may win: the candidates to time are shrunk to what their code needs (`tuning.decide`), and
    where that needs no refused setting the search's result is safe to apply as it is. The
    earliest, so that later simplifications of it never change which trial stands in."""
    refused = {t.code_hash for t in searched if _complete(t) and t.code_hash and refuse(t) is not None}
    found: dict[str, Trial] = {}
    for trial in sorted(trials, key=lambda t: t.number):
        code = trial.code_hash
        if code in refused and code not in found and _complete(trial) and refuse(trial) is None:
            found[code] = trial
    return list(found.values())


def _complete(trial: Trial) -> bool:
    return trial.state is TrialState.COMPLETE and trial.value is not None


def recorded_runtime_gain(objective: Mapping[str, Any]) -> str | None:
    """An ACF objective table's confirmed runtime speedup over the defaults, described; else None."""
    speedup = objective.get("speedup")
    if objective.get("name") != "time" or objective.get("improved") is not True:
        return None
    if not isinstance(speedup, int | float) or speedup <= 1.0:
        return None
    return f"confirmed runtime speedup {speedup:.3f}x over the defaults"


def justification(chosen: Trial, baseline: Trial, defaults: Mapping[str, Any], objective: Mapping[str, Any],
                  baseline_name: str = DEFAULTS) -> dict[str, Any]:
    """What the ACF records against the baseline (the compiler defaults, or the build that ships:
    `defaults` are its settings): what changed and what justifies it."""
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
        gain = f"none needed: {baseline_name}"
    table["gain"] = gain or "none recorded"
    return table
