"""The shipped command's host optimisation level, checked against the device code instead of guessed.

nvcc preprocesses the device pass with the host compiler and its options, so a host optimisation
level (`nvcc -O3`, `-Xcompiler -O3`) defines __OPTIMIZE__ there: a kernel (or a header's inline
code) that reads it compiles to other device code in the shipped build than in one without it.
Reading the command cannot tell (`compile_db` sets the level aside as "may change"); compiling the
kernel's front end as compileiq builds it and as the shipped command builds it can. The level is
the one the build has (`source.host_levels`: nvcc's last -O1..-O3, else the last -Xcompiler -O
item of all, which may be none: -Os; the others said overridden), given as nvcc's own -O1..-O3.
Where the PTX is the same it stays set aside,
said as checked (the study keeps its identity); where it differs, or where the base flags give that
level already, it is applied as a base flag of every build (the baseline, each variant, the ACF's
`[base]`), recorded as the canonical -O level. Where the space tunes macros, it is checked at
each of their values (beyond MAX_TUNED_VALUES, applied without a check, and said so). The front
ends of one check run at once, one per CPU, and are read in a fixed order: the verdict and its
words are those of a check run one front end after another, only sooner. A kernel that does not
compile with the level (and does without it) is an error: the shipped command builds nothing.
No other host compiler option is ever handed to a check: a compile database is untrusted, and a
host compiler option can run a program (gcc's `-wrapper,PROG`, `-fplugin=`, `-B`). `tune` and the
gate check alike, so they read one command as the same base flags.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from compileiq.build.linkage import stable_ptx
from compileiq.core.errors import UsageError
from compileiq.core.processes import COMPILER_MEMORY, Runs, run_tool, scratch_dir
from compileiq.core.records import first_line
from compileiq.core.text import printable
from compileiq.source.host_levels import CommandLevel, HostLevel, command_level, relabelled
from compileiq.source.kernel import preprocessor_args, with_base_flags
from compileiq.source.shipped import APPLIED_HOST
from compileiq.source.spec import FixedFlag, KernelSpec

CHECK_TIMEOUT_S = 120.0
SAME = "the device code is the same without it (checked)"
DIFFERS = "changes {source}'s device code ({macro}): its PTX differs without it"
COMPILES_ONLY_WITH = "{source} compiles only with it ({macro})"
IN_BASE = "the base flags (tune.toml's nvcc_flags) give it too"
UNCHECKED_TUNED = "not checked: the tuned macros ({names}) may change what reads __OPTIMIZE__"
MAX_TUNED_VALUES = 8  # tuned macros' other values a check compiles both ways (each one at a time)
SAME_TUNED = "the device code is the same without it at each tuned macro value (checked)"
DIFFERS_AT = "changes {source}'s device code at {macro} (__OPTIMIZE__): its PTX differs without it"
TIMED_OUT = "not checked: its front end ran past {seconds:.0f} s; compileiq builds without it"
NEITHER = "not checked: {source} compiles neither with nor without it; compileiq builds without it"
OVERRIDDEN = "overridden by {flag}: the host compiler gets nvcc's last -O1..-O3, else -Xcompiler's last"
NO_ZERO = "nvcc hands the host compiler no -O0, so no level to apply: compileiq builds without one too"
NO_LEVEL = "overridden: no -O1..-O3 reaches the host compiler (nvcc takes its last -O and hands on no -O0)"


class HostLevelError(UsageError):
    """The shipped command's host -O level makes its kernel fail to compile."""


@dataclass(frozen=True)
class _Front:
    """One front end of the kernel: its PTX (comment lines left out), or why there is none."""

    ptx: bytes | None
    timed_out: bool = False
    error: str = ""


def _front(spec: KernelSpec, nvcc: str, extra: tuple[str, ...], macros: Mapping[str, int | str] | None = None) -> _Front:
    """The kernel's default build's PTX with `extra` and `macros` (tuned macros' values other than
    their first; comment lines name the command and files)."""
    cuh = ("-x", "cu") if spec.source.suffix == ".cuh" else ()
    timeout = max(spec.compile_timeout_s, CHECK_TIMEOUT_S)
    with scratch_dir("host-check") as workdir:
        out = Path(workdir) / "k.ptx"
        argv = [nvcc, "-ptx", *preprocessor_args(spec, macros), *cuh, *extra, spec.source.name, "-o", str(out)]
        run = run_tool(argv, timeout, cwd=str(spec.source.parent), memory_bytes=COMPILER_MEMORY)
        if run.timed_out:
            return _Front(None, timed_out=True)
        if run.returncode != 0 or not out.is_file():
            error = next((line for line in run.output.splitlines() if "error" in line), run.output)
            return _Front(None, error=first_line(printable(error), 200))
        lines = stable_ptx(out.read_bytes()).splitlines()
    return _Front(b"\n".join(line for line in lines if not line.lstrip().startswith(b"//")))


def _what(level: HostLevel) -> str:
    """How the why of a level's flag starts: which option gives it, as given where not canonical."""
    given = printable(level.flag.flag)[:30]
    if level.host:
        return f"host optimisation level ({given}, as nvcc's {level.canonical})"
    return "host optimisation level (nvcc -O)" + (f", given as {given}" if given != level.canonical else "")


def _verdict(spec: KernelSpec, nvcc: str, level: HostLevel, workers: int | None) -> tuple[bool, str]:
    """Whether the level is applied, and why (the text after APPLIED_HOST where applied). Where
    macros are tuned, at their first values and at each other value in turn (MAX_TUNED_VALUES at
    most; beyond, applied unchecked): a kernel may read __OPTIMIZE__ under one value only. The
    front ends run at once (`workers` at a time, one per CPU by default), in that order; the
    verdict reads them in that order, so it and its words are those of one after another."""
    if level.canonical in spec.nvcc_flags.flags:
        return True, IN_BASE
    others = [{name: value} for name, values in spec.tuned_defines for value in values[1:]]
    if len(others) > MAX_TUNED_VALUES:
        names = ", ".join(n for n, _ in spec.tuned_defines)
        return True, UNCHECKED_TUNED.format(names=names if len(names) <= 40 else names[:37] + "...")
    points: list[Mapping[str, int | str] | None] = [None, *others]
    runs = Runs()  # the front ends still running once the verdict is known (or on an error): killed
    with ThreadPoolExecutor(_workers(2 * len(points), workers), thread_name_prefix="compileiq-host-check") as pool:
        pairs = [tuple(pool.submit(runs.within, _front, spec, nvcc, extra, macros)
                       for extra in ((), (level.canonical,))) for macros in points]
        try:
            return _in_order(spec, level, others, [(without.result, with_level.result)
                                                   for without, with_level in pairs])
        finally:
            for pair in pairs:
                for future in pair:
                    future.cancel()
            runs.stop()


def _workers(jobs: int, workers: int | None) -> int:
    """How many front ends of one check run at once: `workers`, else one per CPU (each is one
    nvcc); at most `jobs`."""
    return max(1, min(jobs, workers or os.cpu_count() or 1))


def _in_order(spec: KernelSpec, level: HostLevel, others: list[dict[str, int | str]],
              pairs: list[tuple[Callable[[], _Front], Callable[[], _Front]]]) -> tuple[bool, str]:
    """The verdict from each point's front ends (the first values', then each other value's),
    read in that order as a serial check reads them, so that the first difference decides."""
    first = _compare(spec, level, pairs[0][0](), pairs[0][1]())
    if first != (False, SAME):
        return first
    for macros, (without, with_level) in zip(others, pairs[1:]):  # each tuned macro's other values, the
        try:  # rest at their first (as a search starts)
            same = _compare(spec, level, without(), with_level()) == (False, SAME)
        except HostLevelError:  # that value does not compile with the level: not the same code
            same = False
        if not same:
            (name, value), = macros.items()
            return True, DIFFERS_AT.format(source=spec.source.name, macro=f"{name}={value}"[:30])
    return False, SAME if not others else SAME_TUNED


def _compare(spec: KernelSpec, level: HostLevel, without: _Front, with_level: _Front) -> tuple[bool, str]:
    """The verdict of one front end without and with the level (at one point's macros)."""
    name = spec.source.name
    if without.timed_out or with_level.timed_out:
        return False, TIMED_OUT.format(seconds=max(spec.compile_timeout_s, CHECK_TIMEOUT_S))
    if with_level.ptx is None and without.ptx is not None:  # the shipped command builds nothing
        where = spec.shipped.origin if spec.shipped is not None else "the compile command"
        raise HostLevelError(f"{where}: {name} does not compile with the command's {printable(level.flag.flag)[:40]} "
                             f"(it defines __OPTIMIZE__ in the device pass, and the kernel reads it): {with_level.error}")
    if with_level.ptx is None or without.ptx is None:
        return (True, COMPILES_ONLY_WITH.format(source=name, macro="__OPTIMIZE__")) if with_level.ptx is not None \
            else (False, NEITHER.format(source=name))
    if with_level.ptx != without.ptx:
        return True, DIFFERS.format(source=name, macro="__OPTIMIZE__")
    return False, SAME


def checked(spec: KernelSpec, nvcc: str, *, workers: int | None = None) -> KernelSpec:
    """`spec` (with its shipped build) with the command's host -O level checked against the device
    code as compileiq builds it: applied as a base flag where it changes it (or the base flags or
    tuned macros say so), else set aside with why; its overridden level flags said so. `workers`:
    how many front ends run at once (one per CPU when None; 1 runs them one after another)."""
    shipped = spec.shipped
    if shipped is None:
        return spec
    found = command_level(shipped.fixed)
    new = {level.flag: _overridden(level, found) for level in found.overridden if level.level or not level.host}
    level = found.effective
    applied = False
    if level is not None:
        applied, why = _verdict(spec, nvcc, level, workers)
        new[level.flag] = (FixedFlag(level.canonical, True, f"{_what(level)}{APPLIED_HOST}{why}") if applied
                                  else replace(level.flag, why=f"{_what(level)}: {why}"))
    if not new:
        return spec
    fixed = relabelled(shipped.fixed, new)
    spec = replace(spec, shipped=replace(shipped, fixed=fixed))
    if not applied or level is None:
        return spec
    return with_base_flags(spec, (level.canonical,), f"{shipped.origin}: the command for {spec.source.name}")


def _overridden(level: HostLevel, found: CommandLevel) -> FixedFlag:
    """An overridden level flag's record: the flag whose -O the host compiler takes instead, named
    (a later `-Xcompiler -Os` too, which leaves the build no level), else why none reaches it."""
    deciding = found.decided_by
    if not level.level:
        return replace(level.flag, why=f"{_what(level)}: {NO_ZERO}")
    why = NO_LEVEL if deciding is None else OVERRIDDEN.format(flag=printable(deciding.flag.flag)[:30])
    return replace(level.flag, why=f"{_what(level)}: {why}")
