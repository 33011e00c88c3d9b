"""The notes a tune run prints under its table, and `show`'s spread lines: what the run traded
(more instructions), what it never built (untried macro values), how its trials divide (search,
simplification, screened) and where they ran (Ray nodes, GPUs, data sent to workers)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compileiq.cli.console import safe
from compileiq.core.records import NODE_KEY, SCREEN, Trial, TrialState, first_line
from compileiq.core.text import shortened

if TYPE_CHECKING:
    from compileiq.core.space import SearchSpace


def more_instructions(baseline: Trial, chosen: Trial, objective: str) -> str | None:
    """A note when a static choice made for spills or occupancy has more static instructions than
    the baseline: what it traded, which only a GPU can judge (the objective did not weigh it)."""
    before, after = baseline.metrics.get("instructions"), chosen.metrics.get("instructions")
    if "instructions" in objective.split(",") or "time" in objective.split(","):
        return None
    if not isinstance(before, int) or not isinstance(after, int) or after <= before:
        return None
    return (f"note: the choice has {after - before} more static instructions than the baseline ({before} -> {after}), "
            f"traded for its {objective} gain: only a GPU can say whether it is faster")


SHOWN_UNTRIED = 8  # values the "never built" note names; the rest are counted


@dataclass(frozen=True)
class Untried:
    """The values of searched macros no trial of the study built."""

    values: tuple[str, ...]  # "NAME=value", sorted
    known_allowed: bool  # each is allowed by some combination the restrictions allow

    def note(self) -> str:
        """The note under a run's table: the first few values and how many more (a macro of a
        million values made a 9.9 MB line); a larger budget is suggested only where the values
        are known to be buildable."""
        shown = ", ".join(self.values[:SHOWN_UNTRIED])
        if len(self.values) > SHOWN_UNTRIED:
            shown += f" and {len(self.values) - SHOWN_UNTRIED:,} more"
        why = ("a larger --budget builds more" if self.known_allowed else
               "tune.toml's restrictions may forbid some of them: too many combinations to tell")
        return (f"note: never built in this study: {safe(shown)} ({why}; "
                "--only define.NAME --strategy exhaustive builds every value of one macro)")


def untried_macro_values(trials: Any, space: SearchSpace) -> Untried | None:
    """The values of a searched macro that no trial of the study built (a user who lists four
    block sizes expects to hear that one was never compiled), leaving out those no combination
    the restrictions allow could build; None when there are none."""
    built = {(key, value) for t in trials if t.state is not TrialState.RUNNING
             for key, value in t.config.items() if key.startswith("define.")}
    allowed, known = space.allowed_macro_values()
    untried = allowed - built
    if not untried:
        return None
    return Untried(tuple(f"{name.removeprefix('define.')}={value}" for name, value in sorted(untried, key=str)), known)


def trials_summary(result: Any) -> str:
    """"N search trials (budget B) + M for simplification/ablation": the budget counts the first."""
    screened = sum(1 for t in result.trials if t.purpose == SCREEN and t.state is not TrialState.RUNNING)
    text = (f"{result.search_trials} search trials (budget {result.budget}) + {result.extra_trials - screened} "
            "for simplification/ablation")
    shrunk = getattr(result, "shrink_builds", 0)
    if shrunk:  # the candidates to time, shrunk to what their code needs: at most half the budget
        text += f" ({shrunk} of those asked to shrink the candidates to time, at most half the budget)"
    return text + (f" + {screened} screened out before measuring" if screened else "")


def node_spread(nodes: dict[str, int]) -> str:
    """"compiled on 2 Ray nodes: 127.0.0.1/1a2b3c4d 5, ..." (most first)."""
    return _spread("compiled on", "Ray node", nodes)


def gpu_spread(gpus: dict[str, int]) -> str:
    """"measured on 2 GPUs: 127.0.0.3/1a2b3c4d GPU 0 5, ..." (most first)."""
    return _spread("measured on", "GPU", gpus)


def _spread(verb: str, noun: str, counts: dict[str, int]) -> str:
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    plural = "s" if len(counts) > 1 else ""
    return f"{verb} {len(counts)} {noun}{plural}: " + ", ".join(f"{safe(name)} {count}" for name, count in ranked)


def trials_per_node(trials: list[Trial], key: str = NODE_KEY) -> dict[str, int]:
    """How many of the study's trials each Ray node compiled (as recorded in their metrics);
    key=MEASURED_ON_KEY: how many each GPU measured."""
    nodes: dict[str, int] = {}
    for trial in trials:
        node = trial.metrics.get(key)
        if isinstance(node, str) and node:
            nodes[node] = nodes.get(node, 0) + 1
    return nodes


def transfers_line(t: Any, trials: int) -> str:
    per_trial = (t.put_bytes + t.task_bytes) / max(trials, 1)
    return (f"data to workers: {t.put_bytes / 1024:.1f} KiB put once (source bundle {t.bundle_puts}x, "
            f"PTX {t.ptx_puts}x) + {t.task_bytes / 1024:.1f} KiB in {t.tasks} task arguments; "
            f"{per_trial / 1024:.2f} KiB per trial" + _resubmitted(t.resubmitted))


def _resubmitted(count: int) -> str:
    if not count:
        return ""
    return (f"; {count} compile task{'s' if count > 1 else ''} run again (lost with a worker or node, "
            "or the compiler crashed or timed out)")


def failed_line(trials: Sequence[Trial]) -> str | None:
    """"N failed trial(s), e.g. #K: <its reason's first line>" when any of `trials` failed: a run
    whose variants fail (a [launch] name that only some macro values build, a compile error) must
    say so under its table, as `show` does."""
    failed = [t for t in trials if t.state is TrialState.FAILED and not t.to_retry]  # handed back: never built
    if not failed:
        return None
    return f"{len(failed)} failed trial(s), e.g. #{failed[0].number}: {safe(shortened(first_line(failed[0].reason, None), 200))}"


class RunningFront:
    """The progress line's "best" of a trade-off: how many results that may win no other dominates
    so far (one trade-off has no single best; the choice on the front is made at the end)."""

    def __init__(self) -> None:
        self._points: list[tuple[float, ...]] = []

    def add(self, trial: Trial, objective: str) -> str:
        from compileiq.results.pareto import dominates, values_of

        values = values_of(trial, objective.split(","))
        if values is not None and not any(dominates(p, values) or p == values for p in self._points):
            self._points = [p for p in self._points if not dominates(values, p)] + [values]
        return self.text()

    def text(self) -> str:
        count = len(self._points)
        return f"front: {count} point{'s' if count > 1 else ''}" if count else "front: -"
