"""Static, GPU-free metrics of a build: spills, registers, occupancy, instruction count
(`StaticMetrics`, in `core.static_score` beside the formula that scores them; imported from here too).

These are estimates read from the compiler's output, never runtimes; everything that shows them
labels them "static".
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from compileiq.build.compile import Build, EntryResources
from compileiq.core import metric_ranges, static_score
from compileiq.core.errors import UsageError
from compileiq.core.processes import first_error_line
from compileiq.core.space import Config
from compileiq.core.static_score import StaticMetrics
from compileiq.evaluate.unscored import by_name, labelled
from compileiq.source.entry_names import (
    entry_matches,
    kernel_names,
    linkage_free,
    macro_values,
    readable,
    with_macros,
)
from compileiq.source.launch import ExpressionError, LaunchModel
from compileiq.source.spec import KernelSpec, SourceBundle


@dataclass(frozen=True)
class ArchLimits:
    max_warps_per_sm: int
    max_blocks_per_sm: int
    smem_per_sm: int
    smem_per_block_optin: int


KIB = 1024
# Per compute capability: resident warps per SM (the CUDA programming guide's table: not in
# cuda_occupancy.h, which takes it from the device; 11.0 and 12.x are not checked on hardware),
# blocks per SM and the largest shared-memory carve-out as CUDA 13.0's cuda_occupancy.h has them
# (cudaOccMaxBlocksPerMultiprocessor, cudaOccSMemPerMultiprocessor), and the per-block opt-in.
ARCH_LIMITS = {
    "sm_75": ArchLimits(32, 16, 64 * KIB, 64 * KIB),
    "sm_80": ArchLimits(64, 32, 164 * KIB, 163 * KIB),
    "sm_86": ArchLimits(48, 16, 100 * KIB, 99 * KIB),
    "sm_87": ArchLimits(48, 16, 164 * KIB, 163 * KIB),
    "sm_89": ArchLimits(48, 24, 100 * KIB, 99 * KIB),
    "sm_90": ArchLimits(64, 32, 228 * KIB, 227 * KIB),
    "sm_100": ArchLimits(64, 32, 228 * KIB, 227 * KIB),
    "sm_103": ArchLimits(64, 32, 228 * KIB, 227 * KIB),
    "sm_110": ArchLimits(48, 24, 228 * KIB, 227 * KIB),
    "sm_120": ArchLimits(48, 24, 100 * KIB, 99 * KIB),
    "sm_121": ArchLimits(48, 24, 100 * KIB, 99 * KIB),
}
REGISTERS_PER_SM = 65536
RESERVED_SMEM_PER_BLOCK = KIB


def arch_limits(arch: str) -> ArchLimits:
    base = arch.rstrip("a").rstrip("f")  # sm_90a -> sm_90
    if base not in ARCH_LIMITS:
        known = ", ".join(sorted(ARCH_LIMITS))
        raise UsageError(f"no occupancy table for {arch}; known: {known}")
    return ARCH_LIMITS[base]


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def occupancy(arch: str, threads: int, registers: int, static_smem: int, dynamic_smem: int = 0) -> float:
    """Theoretical occupancy (active warps / max warps), as cuda_occupancy.h computes it."""
    limits = arch_limits(arch)
    warps = math.ceil(threads / 32)
    if threads < 1 or threads > 1024:
        return 0.0
    by_warps = limits.max_warps_per_sm // warps
    regs_per_warp = _round_up(registers * 32, 256)
    if registers > 255 or regs_per_warp * _round_up(warps, 4) > REGISTERS_PER_SM:
        return 0.0
    by_registers = (REGISTERS_PER_SM // 4 // regs_per_warp) * 4 // warps if registers else by_warps
    smem_per_block = _round_up(static_smem + RESERVED_SMEM_PER_BLOCK + dynamic_smem, 128)
    if smem_per_block > limits.smem_per_block_optin + RESERVED_SMEM_PER_BLOCK:
        return 0.0
    by_smem = limits.smem_per_sm // smem_per_block
    blocks = min(by_warps, by_registers, by_smem, limits.max_blocks_per_sm)
    return blocks * warps / limits.max_warps_per_sm


def static_metrics(build: Build, arch: str, threads: int, dynamic_smem: int,
                   launch: Mapping[str, tuple[int, int]] | None = None) -> StaticMetrics:
    """``launch`` gives an entry its own (threads, dynamic smem); others get ``threads``/``dynamic_smem``.
    Spills and instructions count every function ptxas reports (callees too); occupancy and
    registers the kernels (entries) only."""
    functions = build.entries
    entries = [f for f in functions if f.entry]
    facts = launch or {}

    def entry_occupancy(e: EntryResources) -> float:
        entry_threads, entry_smem = facts.get(e.name, (threads, dynamic_smem))
        return _entry_occupancy(e, arch, entry_threads, entry_smem)

    return StaticMetrics(
        spill_bytes=sum(f.spill_bytes for f in functions),
        registers=max((entry.registers for entry in entries), default=0),
        occupancy=min((entry_occupancy(e) for e in entries), default=0.0),
        instructions=sum(f.instructions for f in functions),
        stack_bytes=max((entry.stack_bytes for entry in entries), default=0),
    )


def shared_memory_problem(arch: str, entry: EntryResources, threads: int, dynamic_smem: int) -> str | None:
    """Why no block of `entry` can start (its static and dynamic shared memory past the most one
    block may have on `arch`), or None. Scored, such a launch read as 0% occupancy without a word (a
    user's flash attention asked for 233,000 bytes on sm_90, whose blocks may have 232,448)."""
    limit = arch_limits(arch).smem_per_block_optin
    wanted = entry.shared_bytes + dynamic_smem
    if _round_up(wanted + RESERVED_SMEM_PER_BLOCK, 128) <= limit + RESERVED_SMEM_PER_BLOCK:  # as `occupancy` reads it
        return None
    return (f"{readable(entry.name)} asks for {wanted:,} bytes of shared memory per block ({entry.shared_bytes:,} static + "
            f"{dynamic_smem:,} dynamic), more than the {limit:,} a block may have on {arch}: no block can start")


def _entry_occupancy(entry: EntryResources, arch: str, threads: int, dynamic_smem: int) -> float:
    return occupancy(arch, threads, entry.registers, entry.shared_bytes, dynamic_smem)


STATIC_OBJECTIVES = ("static", "spills", "registers", "occupancy", "instructions")


def objective_value(objective: str, metrics: StaticMetrics) -> float:
    """The value to minimise for a static objective (lower is better for every one).

    `occupancy` is minimised as the shortfall 1 - occupancy. `static` is lexicographic: spill
    bytes first, then occupancy shortfall (per mille, below 1000, so it never outweighs 4 spill
    bytes). Instruction counts do not enter it: fewer static instructions is not faster code
    (unrolled loops are longer and faster), so a change with no spill or occupancy gain is no
    improvement. Every static objective is further bound by `compileiq.evaluate.eligibility`.
    """
    value = static_score.score(objective, metrics)
    if value is not None:
        return value
    raise UsageError(f"unknown objective {objective!r}; choose one of: {', '.join(STATIC_OBJECTIVES)}, time")


NO_KERNEL = "no kernel (__global__ function) in the compiled module"
NO_LAUNCHED_KERNEL = "names no kernel of the build"  # a [launch.NAME] table of tune.toml
NO_ENTRY = "no entry matches"  # tune.toml's entries
# a build that compiled but whose kernels compileiq could not tell apart: how it names and picks
# kernels may change (an upgrade), so such a recorded failure is scored again by the next run
NAMING_FAILURES = (NO_KERNEL, NO_LAUNCHED_KERNEL, NO_ENTRY)
# cub::EmptyKernel<void>: compiled into every file that includes CUB (or Thrust) so that CUB can ask
# the runtime for the PTX version; never launched by the code, so never scored
PLACEHOLDER_KERNEL = re.compile(r"_ZN3cub\w*11EmptyKernel")


@dataclass(frozen=True)
class Evaluation:
    value: float | None  # None: the variant failed; `reason` says why
    reason: str | None
    metrics: dict[str, Any]


class StaticEvaluator:
    """Scores a build from the compiler's own report: no GPU, deterministic, labelled static."""

    kind = "static"

    def __init__(self, objective: str, kernel: KernelSpec, bundle: SourceBundle | None = None) -> None:
        if objective not in STATIC_OBJECTIVES:
            objective_value(objective, StaticMetrics(0, 0, 0.0, 0, 0))  # raises the usage error
        self._objective = objective
        self._kernel = kernel
        self._launch = LaunchModel(kernel, bundle)
        self._enumerators = dict(bundle.enumerators) if bundle is not None else {}

    def evaluate(self, build: Build, config: Config) -> Evaluation:
        if not build.ok:  # the compiler's first error line first, then its whole output
            headline = first_error_line(build.message)
            full = build.message.strip()
            reason = headline if full == headline else f"{headline}\n{full}"
            return Evaluation(None, f"{build.status.value}: {reason}", {})
        kernels = tuple(e for e in build.entries if e.entry and not PLACEHOLDER_KERNEL.match(linkage_free(e.name)))
        if not kernels:
            return Evaluation(None, NO_KERNEL, {})
        values = config.as_dict()
        macros = self._enumerators | macro_values(values, self._kernel.defines)  # an instance named by a macro: this variant's
        wanted = tuple(with_macros(name, macros) for name in self._kernel.entries)
        entries = tuple(e for e in kernels if _wanted(e.name, wanted))
        if not entries:
            return Evaluation(None, f"{NO_ENTRY} {list(wanted)}; found: {_kernels(build)}", {})
        if stray_entry := next((name for name in wanted if not _built(name, build)), None):
            # one typo among several names would leave that kernel unscored, unnoticed
            return Evaluation(None, f"tune.toml entries {stray_entry!r} {NO_LAUNCHED_KERNEL}; found: {_kernels(build)}", {})
        launched = (with_macros(f.entry, macros) for f in self._kernel.launch)
        if stray := next((name for name in launched if not _built(name, build)), None):
            # a typo there would leave its kernel scored at the default launch, unnoticed
            return Evaluation(None, f"tune.toml [launch.{stray}] {NO_LAUNCHED_KERNEL}; found: {_kernels(build)}", {})
        threads = self._kernel.block_size_for(values)
        try:
            launch = {e.name: self._launch.facts(e.name, values, e.max_threads) for e in entries}
        except ExpressionError as error:  # this variant's macros, not the study's defaults
            return Evaluation(None, f"launch: {error}", {})
        if too_much := next((problem for e in entries if (problem := shared_memory_problem(
                self._kernel.arch, e, *launch.get(e.name, (threads, self._kernel.dynamic_smem))))), None):
            return Evaluation(None, f"launch: {too_much}", {})
        functions = tuple(e for e in build.entries if not e.entry)  # callees of any entry: counted
        scored = Build(build.status, build.message, (*entries, *functions), build.code_hash, b"", build.seconds)
        metrics = static_metrics(scored, self._kernel.arch, threads, self._kernel.dynamic_smem, launch)
        # the launch every scored kernel was scored at (each one's own in `launch`, where some differ): what
        # the gate recomputes a recorded occupancy at when tune.toml's settings are no longer the tuned ones
        details = {**metrics.as_dict(), "block_size": threads, "dynamic_smem": self._kernel.dynamic_smem,
                   "entries": [plain_fields(e) for e in scored.entries]}
        if any(facts != (threads, self._kernel.dynamic_smem) for facts in launch.values()):
            details["launch"] = {name: list(facts) for name, facts in launch.items()}
        if wanted:  # recorded whenever entries are given: none unscored is 0 kernels, never "not recorded"
            others = tuple(e for e in kernels if e not in entries)  # their launch facts never fail the variant
            details["unscored"] = unscored_facts(others, self._kernel.arch, {
                e.name: self._launch.unscored_facts(e.name, values, e.max_threads) for e in others})
        details["bounds"] = bound_facts(kernels, self._kernel.arch)  # every kernel's: a -Xptxas flag builds them all
        if problem := metric_ranges.problem(details):  # never a row that reads back as damaged (and is redone)
            return Evaluation(None, f"compiler report out of range: {problem}", {})
        return Evaluation(objective_value(self._objective, metrics), None, details)


def unscored_facts(kernels: tuple[EntryResources, ...], arch: str,
                   launch: Mapping[str, tuple[int, int]]) -> dict[str, Any]:
    """The kernels of the build that tune.toml's `entries` leave unscored: their spill bytes, their
    lowest occupancy (at the launch a [launch] table gives them, else tune.toml's block_size capped at
    their __launch_bounds__: `LaunchModel.unscored_facts`), those that spill, and each one's registers
    (shown, never held to a rule), spill bytes and occupancy (each held to its own baseline's), by
    name (`unscored.by_name`); none: 0 B, 1.0, 0 kernels.
    A -Xptxas flag applies to every kernel of the file, so the no-harm rules hold the choice to
    these too (`eligibility.refusal`), while the objective scores the entries alone."""
    occupancy = [(e.name, _entry_occupancy(e, arch, *launch[e.name])) for e in kernels]
    return {"spill_bytes": sum(e.spill_bytes for e in kernels), "occupancy": min((o for _, o in occupancy), default=1.0),
            "spilling": sorted(readable(e.name) for e in kernels if e.spill_bytes), "kernels": len(kernels),
            "registers": by_name("registers", ((e.name, e.registers) for e in kernels)),
            "kernel_spill_bytes": by_name("kernel_spill_bytes", ((e.name, e.spill_bytes) for e in kernels)),
            "kernel_occupancy": by_name("kernel_occupancy", occupancy)}


def bound_facts(kernels: tuple[EntryResources, ...], arch: str) -> dict[str, Any]:
    """The `bounds` metric (`launch_bound`): each kernel that declares a bound (PTX .maxntid), scored
    or not, by label (`unscored.labelled`), as [threads, registers, static shared bytes]; at most
    MAX_NAMED_KERNELS, the first by name."""
    named = labelled((e.name, [e.max_threads, e.registers, e.shared_bytes]) for e in kernels)  # overloads told apart
    facts = [(name, values) for name, values in named if values[0]]
    return {"arch": arch, "kernels": dict(facts[:metric_ranges.MAX_NAMED_KERNELS])}


def plain_fields(record: Any) -> dict[str, Any]:
    """`dataclasses.asdict` of a dataclass of plain values, at a tenth of its cost (it runs for
    every result; asdict deep-copies each value)."""
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


def _wanted(entry: str, wanted: tuple[str, ...]) -> bool:
    return not wanted or any(entry_matches(entry, name) for name in wanted)


LISTED_CHARS = 240  # a failure's reason lists the build's kernels in about this many characters


def _kernels(build: Build) -> str:
    """The build's kernels, for a failure's reason (not computed for every result): each by the
    name tune.toml can give it; the compiled (mangled) name only where two kernels share that name
    (overloads), which only it tells apart. Whole names in about LISTED_CHARS, then how many more:
    a reason is shown as one line, and a list cut mid-name helps nobody."""
    names = [e.name for e in build.entries if e.entry]
    listed = kernel_names(names)
    kept: list[str] = []
    for name in listed:
        if kept and len(", ".join([*kept, name])) > LISTED_CHARS:
            break
        kept.append(name)
    more = len(listed) - len(kept)
    return ", ".join(kept) + (f" and {more} more" if more else "") if kept else "none"


def _built(name: str, build: Build) -> bool:
    return any(e.entry and entry_matches(e.name, name) for e in build.entries)
