"""`stale-settings` for the build that ships: an ACF tuned from a compile command (its [baseline]
names the compilation database) holds a baseline that is that command's build. When the command
changes (`-Xptxas -O1` or a `-D` added, another arch), `tune` makes a new study of it; the gate says
so too, with the re-tune command, instead of passing an ACF whose baseline no longer ships.

Only what changes the study is compared (the base flags that reach nvcc, the searched settings'
shipped values, the arch): a linker or report option added changes neither. The database is read
as `tune --compile-commands` reads it (never run); a database that is gone or can no longer be read
is said as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from compileiq.core.errors import UsageError
from compileiq.core.output_file import not_regular
from compileiq.core.records import first_line
from compileiq.core.space_files import load_space
from compileiq.gating.retune import path_from_here
from compileiq.gating.rules import Hit
from compileiq.results import acf as acf_file
from compileiq.source.compile_db import read_command
from compileiq.source.kernel import load_spec, with_base_flags
from compileiq.source.shipped import under_register_cap
from compileiq.source.spec import FixedFlag, KernelSpec

RULE = "stale-settings"


class Target(Protocol):
    """What the check reads of a gated ACF (`check.Target`)."""

    @property
    def acf(self) -> acf_file.Acf: ...
    @property
    def kernel_label(self) -> str: ...
    @property
    def spec(self) -> KernelSpec: ...


def shipped_command_hits(target: Target, retune: str) -> list[Hit]:
    """A hit when the compile command the ACF was tuned from is gone, unreadable, or no longer
    the build the ACF's baseline records; none for an ACF tuned without one."""
    acf = target.acf
    if acf.shipped is None:
        return []
    recorded = target.spec.settings_sha256()[:12]
    if not acf.shipped.path:  # the ACF's word alone for the build its baseline is
        return [Hit(RULE, recorded, "not checked", "the ACF's [baseline] names no compilation database: the gate "
                    f"cannot tell whether its baseline ({acf.shipped.origin}) is the build that ships")]
    database = Path(path_from_here(str(acf.path.parent / acf.shipped.path)))  # as the re-tune line names it
    if kind := not_regular(database):
        return [_unchecked(recorded, f"is {kind}, not a compilation database", database)]
    if not database.is_file():
        return [_unchecked(recorded, "is gone", database)]
    kernel = Path(target.kernel_label)
    space = load_space(acf.nvcc_version)
    try:
        command = read_command(database, kernel, space)
        spec = with_base_flags(load_spec(kernel, arch=acf.arch), command.base_flags,
                               f"{database}: the command for {kernel.name}")
    except UsageError as error:
        return [Hit(RULE, recorded, "unreadable", f"the compile command the ACF was tuned from cannot be read now "
                    f"({first_line(str(error))}): the gate cannot tell whether its baseline is still the build "
                    "that ships")]
    shipped = under_register_cap(command.shipped, spec.nvcc_flags)
    now = replace(spec, shipped=shipped, mode=target.spec.mode, metric_regex=target.spec.metric_regex)  # timed as gated
    # the arch `tune` takes from the command, where the ACF's was the command's own (no arch flag of it set aside)
    moved = command.arch if command.arch != acf.arch and not any(_other_arch(f) for f in acf.shipped.fixed) else None
    changes = _changes(target.spec, now, space.default_config().as_dict(), acf.arch, moved)
    if not changes:
        return []
    return [Hit(RULE, recorded, now.settings_sha256()[:12],
                f"the compile command in {database} changed since the ACF was tuned ({'; '.join(changes)}): "
                "the ACF's baseline is no longer the build that ships", retune)]


def _unchecked(recorded: str, what: str, database: Path) -> Hit:
    return Hit(RULE, recorded, "not checked", f"the compile command the ACF was tuned from, {database}, {what}: "
               "the gate cannot tell whether the ACF's baseline is still the build that ships")


def _other_arch(flag: FixedFlag) -> bool:
    """An arch flag of the command that the tuning set aside (`shipped.other_archs`): --arch chose
    another, or the command builds for several."""
    return not flag.applied and flag.why.startswith("builds for ")


def _changes(tuned: KernelSpec, now: KernelSpec, defaults: Mapping[str, object], arch: str,
             moved: str | None) -> list[str]:
    """What of the study's identity the command changes, as people read it."""
    changes: list[str] = []
    before, after = tuned.nvcc_flags.flags, now.nvcc_flags.flags
    if added := [f for f in after if f not in before]:
        changes.append(f"adds {' '.join(added)}")
    if dropped := [f for f in before if f not in after]:
        changes.append(f"drops {' '.join(dropped)}")
    if not added and not dropped and before != after:
        changes.append("gives its flags in another order")
    old = tuned.shipped.values() if tuned.shipped is not None else {}
    new = now.shipped.values() if now.shipped is not None else {}
    for name in dict.fromkeys([*old, *new]):
        if old.get(name) != new.get(name):
            changes.append(f"{name} {_value(old, defaults, name)} -> {_value(new, defaults, name)}")
    if moved is not None:
        changes.append(f"builds for {moved}, not the ACF's {arch}")
    return changes


def _value(values: Mapping[str, object], defaults: Mapping[str, object], name: str) -> str:
    value = values.get(name, defaults.get(name))
    shown = str(value).lower() if isinstance(value, bool) else str(value)
    return shown if name in values else f"{shown} (the default)"
