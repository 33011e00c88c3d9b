"""The gate's timing (GPU) rules: the ACF's build timed against its baseline and against the
median it records (`slower-than-default`, `slower-than-recorded`).

Pure functions of the samplers they are handed: the runs themselves are `evaluate.timing`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from compileiq.evaluate.stats import (
    MIN_DELTA,
    Comparison,
    Sampler,
    TimingSamplers,
    Verdict,
    interleaved,
)
from compileiq.gating.rules import Hit


@dataclass(frozen=True)
class Timing:
    vs_default: Comparison  # ratio = ACF / the baseline tune started from (Defaults)
    vs_recorded: Comparison | None  # ratio = ACF / recorded median
    against: str = "the compiler defaults"  # that baseline's name (Defaults.name)
    recorded_ms: float | None = None  # the recorded median vs_recorded divides by
    recorded_is: str = ""  # where it was read (the ACF's key)

    @property
    def recorded(self) -> str:
        """The recorded median as people read it: '1.0086 ms (objective.confirmed_median)'."""
        if self.recorded_ms is None:
            return ""
        return f"{self.recorded_ms:.6g} ms" + (f" ({self.recorded_is})" if self.recorded_is else "")


def compare_timing(samplers: TimingSamplers, *, delta: float = MIN_DELTA, samples: int | None = None,
                   seed: int = 0, against: str = "the compiler defaults") -> Timing:
    """The A/B statistic twice: ACF vs the baseline (`against` names it), and ACF vs the recorded
    median (if recorded). The second reads the ACF's blocks of the first again before it runs
    more: each block is a run of the measuring program, seconds on some GPU machines."""
    samples = samples or samplers.samples
    acf = _Reused(samplers.acf)
    vs_default = interleaved(samplers.default, acf.fresh, delta=delta, samples=samples, seed=seed)
    recorded = samplers.recorded_median
    if recorded is None:
        return Timing(vs_default, None, against)
    constant: Sampler = lambda k: [recorded] * k
    return Timing(vs_default, interleaved(constant, acf.again, delta=delta, samples=samples, seed=seed), against,
                  recorded, samplers.recorded_is)


class _Reused:
    """One arm's sampler whose blocks can be read a second time, in order, then sampled afresh."""

    def __init__(self, sampler: Sampler) -> None:
        self._sampler = sampler
        self._blocks: list[list[float]] = []
        self._read = 0

    def fresh(self, k: int) -> list[float]:
        block = self._sampler(k)
        self._blocks.append(block)
        return block

    def again(self, k: int) -> list[float]:
        if self._read < len(self._blocks) and len(self._blocks[self._read]) == k:
            self._read += 1
            return self._blocks[self._read - 1]
        return self._sampler(k)


def timing_hits(timing: Timing) -> list[Hit]:
    """SLOWER against the defaults or against the recorded value is a regression."""
    found: list[Hit] = []
    for rule, against, comparison in (("slower-than-default", timing.against, timing.vs_default),
                                      ("slower-than-recorded", f"the recorded {timing.recorded}", timing.vs_recorded)):
        if comparison is not None and comparison.verdict is Verdict.SLOWER:
            found.append(Hit(rule, f"<= {1 + comparison.delta:.3f}x {against}", describe(comparison),
                             f"the ACF build is SLOWER than {against}: {describe(comparison)}"))
    return found


def describe(comparison: Comparison) -> str:
    c = comparison
    return f"{c.verdict.value} {c.estimate:.3f}x [{c.low:.3f}, {c.high:.3f}] over {c.rounds} rounds"
