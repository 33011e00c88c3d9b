"""Every kernel of a build at the threads per block its own __launch_bounds__ declares (PTX .maxntid):
a launch there must still start.

A -Xptxas flag (a register cap, --override-directive-values) builds every kernel of the file, scored
or not, and the occupancy the rules read is taken at the launch tune.toml gives (its block_size caps
what an unscored kernel is scored at): a cap of 255 registers passes that launch while a launch of a
kernel at its own __launch_bounds__(1024) then asks for more registers than an SM has, and fails
("too many resources requested for launch"). Every static result records each bounded kernel's
bound, registers and static shared memory (`metrics.bound_facts`, the `bounds` metric), and a build that
cannot launch a kernel at the bound the baseline's build of it could is refused (`bound_refusal`:
tune, every objective) and failed by the gate (`launch-bound`).

ptxas's --maxntid with --override-directive-values replaces a kernel's own bound in the cubin (its max
threads per block, EIATTR_MAX_THREADS: __launch_bounds__(1024) built at 256) while PTX .maxntid still
says 1024 and the registers may not move: a launch at 1024 then fails. A build that lowers a bound the
baseline's build keeps is refused and failed alike (`lowered`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from compileiq.core import metric_ranges
from compileiq.core.errors import UsageError
from compileiq.evaluate.metrics import occupancy
from compileiq.evaluate.unscored import NAMED_CHANGES, shown
from compileiq.source.launch import overriding_maxntid


@dataclass(frozen=True)
class Bound:
    """One kernel with a declared bound: its label (`unscored.labelled`), threads, registers, static
    shared memory."""

    kernel: str
    threads: int
    registers: int
    shared_bytes: int


@dataclass(frozen=True)
class Bounds:
    """A build's bounded kernels (the `bounds` metric) and the architecture it was built for."""

    arch: str
    kernels: tuple[Bound, ...]

    @classmethod
    def of(cls, metrics: Mapping[str, Any]) -> Bounds | None:
        """None where the metrics record none (a result recorded before they were) or a damaged one."""
        table = metrics.get("bounds")
        if table is None or metric_ranges.bounds_problem(table) is not None:
            return None
        return cls(str(table["arch"]), tuple(Bound(name, *facts) for name, facts in sorted(table["kernels"].items())))

    def fits(self, threads: int, registers: int, shared_bytes: int) -> bool:
        """A block of `threads` with these registers and static shared memory can start on an SM."""
        try:
            return occupancy(self.arch, threads, registers, shared_bytes) > 0
        except UsageError:  # an architecture without an occupancy table: nothing to tell
            return True


@dataclass(frozen=True)
class Unlaunchable:
    """A kernel the baseline's build can launch at the bound it declares there and this build cannot
    launch at the bound it declares here (a tuned macro may change it: `__launch_bounds__(BLOCK)`)."""

    kernel: str
    threads: int
    registers_was: int
    registers: int
    shared_bytes: int
    threads_was: int

    def text(self) -> str:
        """"ov (_Z2ovPKdS0_Pdi) at its __launch_bounds__ of 1024 threads: 255 registers per thread
        (baseline 64)", the baseline's bound named where it declares another."""
        smem = f", {self.shared_bytes:,} bytes of static shared memory" if self.shared_bytes else ""
        was = f" at its bound of {self.threads_was} threads" if self.threads_was != self.threads else ""
        return (f"{shown(self.kernel)} at its __launch_bounds__ of {self.threads} threads: {self.registers} "
                f"registers per thread (baseline {self.registers_was}{was}){smem}")


def unlaunchable(now: Bounds, before: Bounds) -> tuple[Unlaunchable, ...]:
    """The kernels `before` (the baseline's build) can launch at the bound its build declares and `now`
    cannot launch at the bound its own build declares: each build is launched at its own bound, never
    at the other's (a bound a tuned macro changed is the one this build's launches use)."""
    was = {b.kernel: b for b in before.kernels}
    return tuple(Unlaunchable(b.kernel, b.threads, w.registers, b.registers, b.shared_bytes, w.threads)
                 for b in now.kernels if (w := was.get(b.kernel)) is not None
                 and before.fits(w.threads, w.registers, w.shared_bytes)
                 and not now.fits(b.threads, b.registers, b.shared_bytes))


def unlaunchable_text(found: tuple[Unlaunchable, ...]) -> str:
    """A few named, then "and N more"."""
    more = f"; and {len(found) - NAMED_CHANGES} more" if len(found) > NAMED_CHANGES else ""
    return "; ".join(u.text() for u in found[:NAMED_CHANGES]) + more


@dataclass(frozen=True)
class Lowered:
    """A kernel whose __launch_bounds__ a config's ptxas --maxntid (with --override-directive-values)
    lowers in the cubin: a launch at the bound it declares fails."""

    kernel: str
    threads: int  # its declared bound (PTX .maxntid)
    maxntid: int  # the cubin's max threads per block

    def text(self) -> str:
        return (f"ptxas --maxntid={self.maxntid} with --override-directive-values lowers {shown(self.kernel)}'s "
                f"__launch_bounds__ of {self.threads} threads")


def lowered(now: Bounds | None, config: Mapping[str, Any], baseline: Mapping[str, Any]) -> tuple[Lowered, ...]:
    """The kernels of `now` (a build of `config`) whose declared bound its --maxntid lowers, where the
    baseline's config (`baseline`) keeps it: read from the settings, as ptxas applies them."""
    cap, was = overriding_maxntid(config), overriding_maxntid(baseline)
    if now is None or not cap:
        return ()
    return tuple(Lowered(b.kernel, b.threads, cap) for b in now.kernels
                 if b.threads > cap and not (was and b.threads > was))


def lowered_text(found: tuple[Lowered, ...]) -> str:
    """A few named, then "and N more", and what a launch at the bound then does."""
    more = f"; and {len(found) - NAMED_CHANGES} more" if len(found) > NAMED_CHANGES else ""
    return ("; ".join(f.text() for f in found[:NAMED_CHANGES]) + more
            + f": every launch above {found[0].maxntid} threads per block fails")


def bound_refusal(metrics: Mapping[str, Any], before: Bounds | None, config: Mapping[str, Any] | None = None,
                  baseline: Mapping[str, Any] | None = None) -> str | None:
    """Why a result may not win: a kernel of its build (scored or not) can no longer launch at the
    threads its __launch_bounds__ declares, where the baseline's build of it could (its `config`
    lowers the bound, or it needs more than an SM gives); None where it can, or the baseline records
    no bounds (recorded before they were)."""
    if below := lowered(Bounds.of(metrics), config or {}, baseline or {}):
        return lowered_text(below)
    if before is None or not before.kernels:
        return None
    if (now := Bounds.of(metrics)) is None:
        return "no launch-bound facts for its kernels, to check it by"
    if not (found := unlaunchable(now, before)):
        return None
    return (f"cannot launch {unlaunchable_text(found)}: more registers or shared memory than an SM gives one block "
            "(every launch at that bound fails: too many resources requested for launch)")
