"""`stale-settings` for the build that ships: an ACF tuned from a compile command (its [baseline]
names the compilation database) holds a baseline that is that command's build. When the command
changes (`-Xptxas -O1` or a `-D` added, another arch), `tune` makes a new study of it; the gate says
so too, with the re-tune command, instead of passing an ACF whose baseline no longer ships.

Only what changes the study is compared (the base flags that reach nvcc, the searched settings'
shipped values, the arch): a linker or report option added changes neither. The database is read
as `tune --compile-commands` reads it (never run); a database that is gone or can no longer be read
is said as it is. Which database: the gate's `--compile-commands` where given, else the one the ACF
names. The commands are compared, not the databases' paths: a CI build folder's database whose command
builds the kernel as the one the ACF names did is no change (the gate's note names both); one that
builds it otherwise, or cannot be read, is said with both names. The command is the one the gate
read when it located the ACF (`shipped_read`), the same reading its baseline was built from. A command that now ships exactly
the ACF's choice (`applies_choice`) is the ACF applied: no change to warn about.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from compileiq.core import implied
from compileiq.core.output_file import same_file
from compileiq.core.space import SearchSpace, Value
from compileiq.core.space_files import load_space
from compileiq.gating import arch_coverage
from compileiq.gating.flag_order import reordered, same_code_order, same_folder_order
from compileiq.gating.retune import path_from_here
from compileiq.gating.rules import Hit
from compileiq.gating.shipped_read import ShippedRead
from compileiq.results import acf as acf_file
from compileiq.source.base_flags import CAPPED, dropped_cap, overridden_cap, replaced_cap
from compileiq.source.shipped import under_register_cap
from compileiq.source.spec import KernelSpec, ShippedBuild

RULE = "stale-settings"


class Target(Protocol):
    """What the check reads of a gated ACF (`check.Target`)."""

    @property
    def acf(self) -> acf_file.Acf: ...
    @property
    def kernel_label(self) -> str: ...
    @property
    def spec(self) -> KernelSpec: ...
    @property
    def read(self) -> ShippedRead: ...  # the compile command it is held to, read once when it was located


def shipped_command_hits(target: Target, retune: str) -> list[Hit]:
    """A hit when the compile command the ACF was tuned from is gone, unreadable, or no longer
    the build the ACF's baseline records, or when the gate's --compile-commands is not the database
    the ACF names (or ships a command for a kernel the ACF was tuned without one); none for an ACF
    tuned without one and gated without --compile-commands."""
    acf, read = target.acf, target.read
    given = read.database if read.given else None
    recorded = str(acf.data["kernel"].get("settings_sha256") or "none")[:12]  # the ACF's, never today's tune.toml's
    if acf.shipped is None:
        return _untuned_from(target, read, recorded, retune) if given is not None else []
    named = None if not acf.shipped.path else Path(path_from_here(str(acf.path.parent / acf.shipped.path)))
    database = read.shown
    if database is None:  # the ACF's word alone for the build its baseline is
        return [Hit(RULE, recorded, "not checked", "the ACF's [baseline] names no compilation database: the gate "
                    f"cannot tell whether its baseline ({acf.shipped.origin}) is the build that ships")]
    other = [] if named is None or given is None or same_file(named, given) else [Hit(
        RULE, str(named), str(database), f"the ACF's [baseline] names the compilation database {named}, but the "
        f"database that ships is {database} (--compile-commands): the ACF is held to {database}", retune)]
    if read.problem in ("outside", "not-regular", "gone"):
        return [*other, _unchecked(recorded, read.detail, database)]
    if read.problem == "no-command":  # the kernel is not built there (a configuration that leaves it out)
        return [*other, Hit(RULE, recorded, "no command", f"{read.detail}: the kernel is not built by that "
                            "database, and the gate cannot tell whether the ACF's baseline is still the build that ships")]
    command, spec = read.command, read.with_command
    if command is None or spec is None:
        return [*other, Hit(RULE, recorded, "unreadable", f"the compile command the ACF {'is held to' if given else 'was tuned from'} cannot be read "
                            f"now ({read.detail}): the gate cannot tell whether its baseline is still the "
                            "build that ships")]
    space = load_space(acf.nvcc_version)
    shipped = under_register_cap(command.shipped, spec.nvcc_flags)
    now = replace(spec, shipped=shipped, mode=target.spec.mode, metric_regex=target.spec.metric_regex)  # timed as gated
    # the arch `tune` takes from the command, where the ACF's was the command's own (no arch flag of it set aside)
    # or where the command, tuned building it among others, builds the ACF's arch no longer (`arch_coverage.dropped`)
    # (one that still builds it beside a newer one, `--gpu-code=sm_90,sm_120`, also builds sm_120: `arch_coverage`)
    kept = acf.arch in command.archs
    moved = command.arch if command.arch != acf.arch and (not kept and not arch_coverage.set_aside(acf.shipped.fixed)
                                                          or arch_coverage.dropped(acf, command)) else None
    # a command that names no arch builds nvcc's default: an ACF of an earlier release was tuned for
    # tune.toml's arch from it, the command unchanged; said as it is, not as a change
    default = moved is not None and command.shipped is not None and command.shipped.default_arch == moved
    changes = _changes(target.spec, now, space, acf.arch, None if default else moved, acf.controls)
    # an arch it now builds beside the one tuned, never checked (`arch_coverage`); a moved arch is said below
    archs = arch_coverage.new_arch_hits(acf, command, database, retune) if moved is None else []
    if not (changes or default) or applies_choice(acf, target.spec, spec, shipped, command.arch):
        return archs  # what the command builds is what the ACF was tuned from, whichever database holds it
    said = [(f"the compile command in {database} "
             f"{'differs from the one the ACF was tuned from' if other else 'changed since the ACF was tuned'} "
             f"({'; '.join(changes)})")] if changes else []
    if default:
        said.append(f"{'it' if said else f'the compile command in {database}'} names no arch, so it builds nvcc's "
                    f"default {moved}, but the ACF was tuned for {acf.arch} (`flags` gives -arch={acf.arch}, "
                    f"which builds {acf.arch} alone)")
    measured = now.settings_sha256()[:12]
    if moved is not None and measured == recorded:  # the arch is no setting: the hashes would say nothing
        recorded, measured = acf.arch, f"{moved} (nvcc's default)" if default else moved
    return [*other, Hit(RULE, recorded, measured, f"{'; '.join(said)}: the ACF's baseline is "
                        f"{'no longer' if changes else 'not'} the build that ships", retune), *archs]


def applies_choice(acf: acf_file.Acf, tuned: KernelSpec, now: KernelSpec, shipped: ShippedBuild | None,
                   arch: str | None) -> bool:
    """The command now ships exactly the ACF's choice (its searched settings are the ACF's controls,
    its base flags and arch those the ACF was tuned with) where it shipped something else before:
    the ACF applied as `flags` says, not a changed build."""
    if acf.shipped is None or arch not in (None, acf.arch) and not arch_coverage.set_aside(acf.shipped.fixed):
        return False
    if (not same_code_order(tuned.nvcc_flags.flags, now.nvcc_flags.flags)  # `compileiq_apply` appends its flags
            or not same_folder_order(tuned.include_dirs, now.include_dirs)
            or not same_folder_order(tuned.system_dirs, now.system_dirs)):
        return False
    defaults = load_space(acf.nvcc_version).default_config().as_dict()
    first = tuned.default_values()  # a tuned macro no -D sets builds at tune.toml's first value

    def searched(values: Mapping[str, Value]) -> dict[str, object]:  # as built: `--use_fast_math -ftz=true` is `--use_fast_math`
        flags = {k: v for k, v in values.items() if not k.startswith("define.")}
        macros = first | {k: v for k, v in values.items() if k in first}
        return {**{k: implied.effective(flags, defaults, k) for k in defaults if not k.startswith("define.")}, **macros}

    chosen = searched(acf.controls)
    ships = searched(shipped.values() if shipped is not None else {})
    return ships == chosen and ships != searched(acf.shipped.values())


def _untuned_from(target: Target, read: ShippedRead, recorded: str, retune: str) -> list[Hit]:
    """An ACF tuned without a compile command, gated with a database that has one for its kernel:
    its baseline (the compiler defaults) is not the build that ships. A database with no usable command
    for the kernel (none names it: a file the build compiles #includes it, or another configuration's
    database) is a finding too: the gate checked nothing of the build that ships, and a note on stderr
    alone reached no report (a database that is not one is bad input, `locate`)."""
    if read.shown is None:
        return []
    if read.command is None:
        return [Hit(RULE, recorded, "no command" if read.problem == "no-command" else "unreadable",
                    f"{read.detail}: the ACF was tuned from the compiler defaults, and the gate cannot tell "
                    f"whether they are the build that ships ({read.shown} gave no usable compile command for "
                    f"{Path(target.kernel_label).name})")]
    settings = read.command.shipped.settings if read.command.shipped is not None else ()
    ships = f"ships {' '.join(dict.fromkeys(s.flag for s in settings))}" if settings else "with its own flags"
    return [Hit(RULE, recorded, "compile command", f"the ACF was tuned without a compile command, but "
                f"{read.shown} has one for {Path(target.kernel_label).name} ({ships}): the ACF's baseline is not "
                "the build that ships", retune)]


def _unchecked(recorded: str, what: str, database: Path) -> Hit:
    return Hit(RULE, recorded, "not checked", f"the compile command the ACF was tuned from, {database}, {what}: "
               "the gate cannot tell whether the ACF's baseline is still the build that ships")


def _changes(tuned: KernelSpec, now: KernelSpec, space: SearchSpace, arch: str, moved: str | None,
             chosen: Mapping[str, Value]) -> list[str]:
    """What of the study's identity the command changes, as people read it: each setting at the
    value its build has (`implied.effective`: `-ftz=false` dropped beside `--use_fast_math` is ftz
    false -> true, implied by it, not false -> false); one whose build has the same value is no
    change (`-ftz=true` added beside `--use_fast_math`, which implies it, or `-ftz=false` alone).
    A setting now at the ACF's `chosen` value is the ACF applied, not drift: left out (a command
    that applies the ACF and adds `-Xptxas -O1` changed the level, not the choice it applied); one
    that applies only some of the choice says which of it is not shipped."""
    defaults = space.default_config().as_dict() | tuned.default_values()  # a macro's: tune.toml's first value
    changes: list[str] = []
    before, after = tuned.nvcc_flags.flags, now.nvcc_flags.flags
    # nvcc's -maxrregcount added: it overrides the ACF's ptxas cap (said once, never as the cap's "-> default");
    # one in place of the ACF's own: the command's replaces it, the build the gate measures (`as_applied`)
    added = [f for f in after if f not in before]
    cap = now.nvcc_flags.register_cap
    subject = "which" if added == [cap] else f"the command's {cap}"
    capped = (overridden_cap(now.nvcc_flags, chosen, subject) if tuned.nvcc_flags.register_cap is None
              else replaced_cap(now.nvcc_flags, tuned.nvcc_flags, subject))
    if added:
        changes.append(f"adds {' '.join(added)}" + ((", " if subject == "which" else "; ") + capped if capped else ""))
    if dropped := [f for f in before if f not in after]:  # the ACF's cap dropped with it: measured without (`as_applied`)
        uncapped = dropped_cap(now.nvcc_flags, tuned.nvcc_flags)
        changes.append(f"drops {' '.join(dropped)}" + (f", {uncapped}" if uncapped else ""))
    if not added and not dropped and (moved_flags := reordered(before, after)):  # a move that changes no code is none
        changes.append(f"gives {'; '.join(moved_flags)} in another order, where the order changes the build")
    if (set(tuned.include_dirs) == set(now.include_dirs)
            and not (same_folder_order(tuned.include_dirs, now.include_dirs)
                     and same_folder_order(tuned.system_dirs, now.system_dirs))):
        changes.append("searches its include folders in another order (a header in two of them is read from the first)")
    old, new = tuned.shipped_values(), now.shipped_values()  # a -D at tune.toml's first value is no change
    applied = False
    for name in dict.fromkeys([*old, *new]):  # `-ftz=true` added beside `--use_fast_math` builds the same code
        if capped and name == CAPPED:
            continue
        if old.get(name) != new.get(name) and implied.effective(old, defaults, name) != implied.effective(new, defaults, name):
            if implied.effective(new, defaults, name) == implied.effective(chosen, defaults, name):
                applied = True  # the ACF's own choice, as `flags` gives it
                continue
            kept = (", which the ACF's flags leave in place (they give no cap; ptxas takes the last it is given): "
                    "the gate measures the ACF under it") if name == CAPPED and new.get(name) is not None and \
                chosen.get(name) in (None, defaults.get(name)) else ""
            changes.append(f"{name} {_value(old, space, defaults, name)} -> {_value(new, space, defaults, name)}{kept}")
    if applied and not changes and (unshipped := [
            f"{name} {_value(chosen, space, defaults, name)}" for name in dict.fromkeys([*chosen, *new])
            if implied.effective(new, defaults, name) != implied.effective(chosen, defaults, name)]):
        changes.append(f"applies only part of the ACF's choice, not {', '.join(unshipped)}")
    if moved is not None:
        changes.append(f"builds for {moved}, not the ACF's {arch}")
    return changes


def _value(values: Mapping[str, Value], space: SearchSpace, defaults: Mapping[str, Value], name: str) -> str:
    value = implied.effective(values, defaults, name)
    shown = str(value).lower() if isinstance(value, bool) else str(value)
    if name in values:
        return shown
    if (by := implied.implied_by(values, name)) is not None:
        return f"{shown} (implied by {' '.join(space.parameter(by).argv(values[by]))})"
    if value is None:  # a macro tune.toml no longer tunes: the command gives it no value
        return "not set"
    origin = "tune.toml's first value" if name.startswith("define.") else "the default"
    return f"{shown} ({origin})"
