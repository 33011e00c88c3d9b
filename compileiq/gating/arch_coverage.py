"""`stale-settings` for a compile command that now builds for an arch the ACF's settings were never
checked on: a CMake CUDA_ARCHITECTURES "90" grown to "80;90" adds `-gencode arch=compute_80,code=sm_80`
beside the arch tuned. `tune` chooses the settings on one arch (`shipped.other_archs`) and its
[baseline] records the command's other archs as left out; the newest arch, the one tuned, is
unchanged, so no base flag, setting or arch the other stale checks compare moves. An arch the
[baseline] already records as left out was known at tuning time: no new finding."""

from __future__ import annotations

import re
from collections.abc import Iterable

from compileiq.gating.rules import Hit
from compileiq.results import acf as acf_file
from compileiq.source import shipped
from compileiq.source.arch_code import ptx_only_archs
from compileiq.source.compile_db import CompileCommand
from compileiq.source.shipped import arch_flag_archs, building
from compileiq.source.spec import FixedFlag

RULE = "stale-settings"


_EVERY = ("all", "all-major", "native")  # -arch words that name no arch: `command.archs` holds the word


def left_out(acf: acf_file.Acf) -> tuple[str, ...]:
    """The archs the ACF's [baseline] records its command building beside the one tuned (an
    `-arch=all` as the word `all`, as the command's archs name it): those the flags `set_aside` build
    machine code for, read from the flags, never from their `why` (an ACF whose overridden -arch says
    "builds for sm_80" would hide from the gate that the command now builds sm_80)."""
    if acf.shipped is None:
        return ()
    ptx = set(ptx_only_archs(f.flag for f in acf.shipped.fixed if arch_flag_archs(f.flag) is not None))
    return tuple(dict.fromkeys(arch for fixed in set_aside(acf.shipped.fixed) for arch in _named(fixed.flag)
                               if arch not in ptx))


def set_aside(fixed: Iterable[FixedFlag]) -> tuple[FixedFlag, ...]:
    """The [[baseline.fixed]] arch flags the tuning set aside (`shipped.other_archs`): not applied, and
    building machine code for some arch (an -arch a later -arch overrides builds nothing; one that
    embeds PTX alone no ptxas setting reaches), or an arch word (`-arch=all`)."""
    fixed = tuple(fixed)
    arch_flags = [f.flag for f in fixed if arch_flag_archs(f.flag) is not None]
    ptx = set(ptx_only_archs(arch_flags))
    built = {id(f) for f in building(fixed)}  # by position: a repeated -arch's earlier one builds nothing
    return tuple(f for f in fixed if not f.applied and id(f) in built
                 and any(arch not in ptx for arch in _named(f.flag)))


def _named(flag: str) -> tuple[str, ...]:
    if archs := arch_flag_archs(flag):
        return archs
    word = re.split(r"[= ]", flag.strip(), maxsplit=1)[-1].strip()
    return (word,) if word in _EVERY else ()


def dropped(acf: acf_file.Acf, command: CompileCommand) -> bool:
    """The command that built the ACF's arch when it was tuned (among others: `--generate-code` for
    compute_80 and compute_90, sm_90 tuned) builds it no longer (narrowed to `-arch=sm_80`): its
    settings were chosen and checked on an arch that does not ship. An `-arch=all`/`native` builds
    archs the gate cannot name: not said to drop it."""
    if acf.shipped is None or any(arch in _EVERY for arch in command.archs):
        return False
    tuned = any(acf.arch in (arch_flag_archs(f.flag) or ()) for f in building(acf.shipped.fixed))
    return tuned and acf.arch not in command.archs


def unchecked_archs(acf: acf_file.Acf, command: CompileCommand) -> tuple[str, ...]:
    """The archs `command` builds machine code for that are neither the ACF's arch nor recorded as left
    out when it was tuned (PTX alone: no ptxas setting reaches it)."""
    known = {acf.arch, *left_out(acf)}
    ptx = set(ptx_only_archs(given for given, _ in command.arch_flags))
    return tuple(arch for arch in command.archs if arch not in known and arch not in ptx)


def new_arch_hits(acf: acf_file.Acf, command: CompileCommand, database: object, retune: str) -> list[Hit]:
    """A hit naming the archs the command in `database` now builds that the ACF's settings were not
    checked on; none where it builds no new one."""
    if not (new := unchecked_archs(acf, command)):
        return []
    was = ", ".join((acf.arch, *left_out(acf)))
    recorded = (f"tuned for {acf.arch} only; its [baseline] left out {', '.join(left_out(acf))}" if left_out(acf)
                else f"tuned for {acf.arch} only")
    return [Hit(RULE, was, ", ".join(command.archs),
                f"the compile command in {database} now also builds for {', '.join(new)}, which the ACF's settings "
                f"were never checked on ({recorded}): they ship there unchecked; {_check_there(new)}, or re-tune to "
                f"record {', '.join(new)} as left out", retune)]


def _check_there(new: tuple[str, ...]) -> str:
    """How to check the settings on the new archs: `tune --arch` takes one arch like sm_90, never
    a word (`--arch all` is refused), so a word is said as the archs it stands for."""
    named = [arch for arch in new if arch not in _EVERY]
    if named:
        return f"re-tune with --arch {shipped.newest(named) or named[0]} to check them there"
    word = new[0]
    which = ("the GPUs of the machine that builds it (`nvidia-smi --query-gpu=compute_cap --format=csv` names them)"
             if word == "native" else f"every {'major ' if word == 'all-major' else ''}arch nvcc supports "
             "(`nvcc --list-gpu-code` names them)")
    return f"-arch={word} builds for {which}: re-tune with --arch sm_XY, one of them, to check them there"
