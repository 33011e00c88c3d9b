"""The launch an ACF's evidence says its occupancy was scored at, and the occupancy the rebuilt
code gives at that launch.

Occupancy is the code's (registers, static shared memory) and the launch's (threads per block,
dynamic shared memory). Where the kernel's settings are the ones the ACF was tuned with (its
`settings_sha256`), the rebuild is scored at the tuned launch; where they are not, tune.toml's
launch may have changed, or the hash was edited to say so. The evidence records the launch it was
scored at (`block_size` and `dynamic_smem` for every scored kernel, or each one's own in
`launch_by_kernel`): the rebuilt code's occupancy there is what an honest ACF records, whatever
tune.toml says now. An ACF written before `dynamic_smem` was recorded gives its block size alone:
its occupancy is one that some amount of dynamic shared memory gives there (`possible_amounts`).
What the gate makes of them is `occupancy_evidence`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from compileiq.core.metric_ranges import RANGES, is_count
from compileiq.evaluate.metrics import arch_limits, occupancy
from compileiq.source.entry_names import compiled_names, kernel_names


@dataclass(frozen=True)
class ScoredKernel:
    """One kernel a rebuild scored: what its occupancy reads of the code."""

    name: str  # as compiled
    registers: int
    shared_bytes: int  # static shared memory per block

    @classmethod
    def all_of(cls, metrics: Mapping[str, Any]) -> tuple[ScoredKernel, ...]:
        """The scored kernels (`entries` that are kernels, not callees) of an evaluation's metrics."""
        entries = metrics.get("entries")
        return tuple(cls(str(e["name"]), int(e["registers"]), int(e["shared_bytes"]))
                     for e in entries if isinstance(e, Mapping) and e.get("entry")) if isinstance(entries, list) else ()


@dataclass(frozen=True)
class RecordedLaunch:
    """Threads per block and dynamic shared memory: every scored kernel's (`by_kernel` empty), or
    each one's, by the name `launch_by_kernel` gives it."""

    threads: int = 0
    dynamic_smem: int | None = 0  # None: an older ACF's, which records none (`possible_amounts`)
    by_kernel: tuple[tuple[str, int, int], ...] = ()

    @property
    def text(self) -> str:
        if not self.by_kernel:
            if self.dynamic_smem is None:
                return f"{self.threads} threads per block, its dynamic shared memory not recorded"
            return _facts(self.threads, self.dynamic_smem)
        return "; ".join(f"{name}: {_facts(threads, smem)}" for name, threads, smem in self.by_kernel)


def recorded_launch(table: Any) -> RecordedLaunch | None:
    """The launch an evidence table records (an older ACF's block size alone, without `dynamic_smem`),
    or None where it records none, or one out of what a launch can ask for."""
    if not isinstance(table, Mapping):
        return None
    by_kernel = table.get("launch_by_kernel")
    if by_kernel is None:
        if "dynamic_smem" not in table and (threads := _launch({**table, "dynamic_smem": 0})) is not None:
            return RecordedLaunch(threads[0], None)
        facts = _launch(table)
        return RecordedLaunch(*facts) if facts is not None else None
    if not isinstance(by_kernel, Mapping) or not by_kernel:
        return None
    found = [(name, _launch(facts)) for name, facts in by_kernel.items()]
    if not all(isinstance(name, str) and facts is not None for name, facts in found):
        return None
    return RecordedLaunch(by_kernel=tuple((name, *facts) for name, facts in found if facts is not None))


def occupancy_at(launch: RecordedLaunch | None, kernels: tuple[ScoredKernel, ...], arch: str) -> float | None:
    """The lowest occupancy of the scored `kernels` launched as `launch` records (as the evaluator
    scores it: `metrics.static_metrics`); None where it records no launch, or its kernels are not
    the ones scored (another scoring, or names edited: nothing to hold it to)."""
    if launch is None or not kernels or not arch:
        return None
    if not launch.by_kernel:
        if launch.dynamic_smem is None:
            return None
        return min(occupancy(arch, launch.threads, k.registers, k.shared_bytes, launch.dynamic_smem) for k in kernels)
    facts = {name: (threads, smem) for name, threads, smem in launch.by_kernel}
    compiled = tuple(k.name for k in kernels)
    names = next((n for n in (kernel_names(compiled), compiled_names(compiled)) if sorted(n) == sorted(facts)), None)
    if names is None:  # an overload keyed by its compiled name alone: an ACF of an earlier release
        return None
    return min(occupancy(arch, facts[name][0], k.registers, k.shared_bytes, facts[name][1])
               for name, k in zip(names, kernels, strict=True))


def possible_amounts(launch: RecordedLaunch | None, kernels: tuple[ScoredKernel, ...], arch: str,
                     figure: str, shown: Callable[[float], str]) -> frozenset[int] | None:
    """The amounts of dynamic shared memory (in the 128-byte steps occupancy rounds to) at which the
    scored `kernels`, launched with the block size an older ACF records, give the occupancy `figure`
    (as `shown` writes one); None where the launch is not such a one (it records its amount, or none)."""
    if launch is None or launch.by_kernel or launch.dynamic_smem is not None or not kernels or not arch:
        return None
    most = arch_limits(arch).smem_per_block_optin - min(k.shared_bytes for k in kernels)
    return frozenset(amount for amount in range(0, max(most, 0) + 1, 128)
                     if shown(min(occupancy(arch, launch.threads, k.registers, k.shared_bytes, amount)
                                  for k in kernels)) == figure)


def _launch(table: Any) -> tuple[int, int] | None:
    if not isinstance(table, Mapping):
        return None
    threads, smem = table.get("block_size"), table.get("dynamic_smem")
    if not (isinstance(threads, int) and isinstance(smem, int) and is_count(threads) and is_count(smem)):
        return None
    (_, fewest, most), (_, _, most_smem) = RANGES["block_size"], RANGES["dynamic_smem"]
    return (threads, smem) if fewest <= threads <= most and smem <= most_smem else None


def _facts(threads: int, smem: int) -> str:
    return f"{threads} threads per block, {smem:,} B dynamic shared memory"
