"""Candidates to time: trials a static objective refused only for a trade-off that a GPU must judge
(a lower optimisation level with a spill or occupancy gain; under `static`, occupancy given for
fewer spill bytes), listed with their numbers and the command that times them.

Which trials these are is `eligibility.candidates_to_time`; this module only renders them, the same
way for the ACF, the run's output and the report.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compileiq.core.records import Trial
from compileiq.core.space import SearchSpace
from compileiq.core.static_score import StaticMetrics
from compileiq.evaluate import eligibility
from compileiq.source.spec import ShippedBuild

METRICS = StaticMetrics.SCORED  # the static numbers each candidate lists


def changed(trial: Trial, baseline: Trial) -> dict[str, Any]:
    """The candidate's settings that differ from the compiler defaults."""
    return {name: value for name, value in sorted(trial.config.items()) if baseline.config.get(name) != value}


EXHAUSTIVE_LIMIT = 1024  # combinations a command times whole; beyond, a run of ~a thousand timed variants


def command(kernel: str, names: list[str], combinations: int, shipped: tuple[str, ...] = ()) -> str:
    """`compileiq tune` on a GPU over the candidate's changed settings (``names``), timed and
    confirmed against the defaults: every combination of them (the candidate and the defaults
    among them) when they span at most EXHAUSTIVE_LIMIT, else the search over them at its default
    budget (an exhaustive budget past that is no run anyone would start, nor one `tune` accepts).
    ``shipped``: `--compile-commands DB` (and its `--compile-output`) of a study of the build a project ships (`shipped_arguments`)."""
    start = " ".join(shlex.quote(word) for word in (kernel, *shipped))
    searched = f"compileiq tune {start} --objective time --only {','.join(names)}"
    if combinations > EXHAUSTIVE_LIMIT:
        return searched
    return f"{searched} --strategy exhaustive --budget {combinations}"


def shipped_arguments(shipped: ShippedBuild | None) -> tuple[str, ...]:
    """`--compile-commands DB` for a study of the shipped build: its candidates are timed against
    that build, as they were compared with it (without it, against the compiler defaults)."""
    if shipped is None or not shipped.path:
        return ()
    return ("--compile-commands", kernel_argument(Path(shipped.path)), *chosen_output(shipped))


def chosen_output(shipped: ShippedBuild | None) -> tuple[str, ...]:
    """`--compile-output OUTPUT` where the database had several commands for the file: the one tuned."""
    return ("--compile-output", shipped.output) if shipped is not None and shipped.output and shipped.others else ()


def timed_names(names: list[str], shipped: ShippedBuild | None, macros: Sequence[str] = ()) -> list[str]:
    """The settings a candidate's command searches: its own, then each the shipped build sets (a run
    from the shipped build must search them: `--only` may not leave them out), then the run's tuned
    macros (`--only` without one searches them all anyway: named, the exhaustive budget counts them;
    it covered a fraction of the run before, maybe without the candidate)."""
    found = names + [s.name for s in shipped.settings if s.name not in names] if shipped is not None else list(names)
    return found + [name for name in macros if name not in found]


def tuned_macros(space: SearchSpace) -> list[str]:
    """The macros a run searched (more than one value): a candidate's command searches them too."""
    return [p.name for p in space.parameters if p.name.startswith("define.") and len(p.values) > 1]


def kernel_argument(source: Path) -> str:
    """The kernel as a command run here would name it: relative to this folder when below it."""
    relative = os.path.relpath(source)
    return source.as_posix() if relative.startswith("..") else Path(relative).as_posix()


def combinations(names: list[str], space: SearchSpace) -> int:
    """How many configurations the settings ``names`` span (the exhaustive budget that covers them)."""
    return math.prod(len(space.parameter(name).values) for name in names)


def refused_because(trial: Trial, baseline: Trial, objective: str, against: str = eligibility.DEFAULTS) -> str:
    """Why the study's rules refused the candidate (`against`: what the baseline is)."""
    reference = eligibility.Reference.of(baseline, objective, against)
    return (eligibility.refusal(trial.config, trial.metrics, reference) if reference else None) or ""


def entries(trials: tuple[Trial, ...], baseline: Trial, objective: str, kernel: str,
            space: SearchSpace, shipped: ShippedBuild | None = None) -> list[dict[str, Any]]:
    """One table per candidate: the trial, what it changes, its static numbers, why it was refused
    and the command that times it (the ACF's `[[evidence.to_time]]`), from the shipped build when
    the study started from one."""
    found = []
    for trial in trials:
        settings = changed(trial, baseline)
        names = timed_names(list(settings), shipped, tuned_macros(space))
        found.append({
            "trial": trial.number, "settings": settings, "value": trial.value,
            **{name: trial.metrics[name] for name in METRICS if name in trial.metrics},
            "refused": refused_because(trial, baseline, objective, eligibility.against(shipped)),
            "command": command(kernel, names, combinations(names, space), shipped_arguments(shipped)),
        })  # fmt: skip
    return found
