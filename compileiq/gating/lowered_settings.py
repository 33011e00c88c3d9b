"""`lowered-optimisation`: a build that ships a lower ptxas optimisation than the ACF was tuned at.

An ACF's evidence is the code its choice builds. A compile command that ships `-Xptxas -O1` beside
the ACF's flags (a debug option left in, a careless paste) builds other code, slower for all the
gate can tell, and the gate passed it with a `stale-settings` warning. Here it is its own finding,
an error by default, one per setting, naming the flag and the ACF's value.

Lowered means what the tuner's no-harm rules mean (`eligibility.lowered_optimisation`: a lower `-O`,
expensive optimisations off, optimizer constants off), below both the ACF's choice and the build it
was tuned from (its `[baseline]`, else the compiler defaults): a command that still ships the build
the ACF was tuned from (a project that has not applied the ACF) lowers nothing; the gate cannot tell
that from one that stopped applying it (docs/ci.md). nvcc's own device switches (`-G`, `-dopt`,
`-Xcicc`) are never read here: a command with one is not one compileiq reads (`shipped_read`).

A host optimisation level the ACF applied (`build.host_check`: it changes the kernel's device code,
as it defines __OPTIMIZE__ in the device pass) is held alike: a command whose build no longer has
one (`-O3` dropped, or overridden by a later `-O0`) ships other device code than the ACF cites.
"""

from __future__ import annotations

from typing import Protocol

from compileiq.build.host_check import IN_BASE
from compileiq.core.space import SpaceError, Value
from compileiq.core.space_files import load_space
from compileiq.evaluate.eligibility import lowered_optimisation
from compileiq.gating.rules import Hit
from compileiq.gating.shipped_read import ShippedRead
from compileiq.results import acf as acf_file
from compileiq.source.base_flags import host_level
from compileiq.source.host_levels import level_of
from compileiq.source.shipped import APPLIED_HOST

RULE = "lowered-optimisation"


class Target(Protocol):
    """What the check reads of a gated ACF (`check.Target`)."""

    @property
    def acf(self) -> acf_file.Acf: ...
    @property
    def read(self) -> ShippedRead: ...  # the compile command it is held to, read once when it was located
    @property
    def applied(self) -> bool: ...  # that command ships exactly the ACF's choice


def lowered_hits(target: Target) -> list[Hit]:
    """A hit for each optimisation setting the compile command ships below both the ACF's choice
    and the build the ACF was tuned from (see the module's text); none where no command was read."""
    acf, command = target.acf, target.read.command
    if command is None or command.shipped is None:
        return []
    dropped = _dropped_host_level(target)
    if target.applied:
        return dropped
    try:
        space = load_space(acf.nvcc_version)
    except SpaceError:  # the reader loaded it already; nothing to hold the command to otherwise
        return []
    defaults = space.default_config().as_dict()
    chosen = defaults | {name: value for name, value in acf.controls.items() if name in defaults}
    tuned_from = defaults | (acf.shipped.values() if acf.shipped is not None else {})
    ships = command.shipped.values()
    below_tuned_from = {found.partition("=")[0] for found in lowered_optimisation(ships, tuned_from)}
    hits = dropped
    for name in (found.partition("=")[0] for found in lowered_optimisation(ships, chosen)):
        if name not in below_tuned_from:
            continue
        flag = [s.flag for s in command.shipped.settings if s.name == name][-1]  # the last one wins
        acf_value = f"{_text(chosen[name])}{' (the default)' * (name not in acf.controls)}"
        hits.append(Hit(RULE, f"{name} {acf_value}", f"{name} {_text(ships[name])}",
                        f"{target.read.shown} ships {flag} ({name} {_text(ships[name])}), below the ACF's {name} "
                        f"{acf_value} that its evidence was built with: the code that ships is not the code the "
                        f"ACF cites; take {flag} out of the build"))
    return hits


def _dropped_host_level(target: Target) -> list[Hit]:
    """A hit where the ACF applied a host -O level and the command's build has none."""
    acf, command = target.acf, target.read.command
    applied = [f.flag for f in (acf.shipped.fixed if acf.shipped is not None else ())
               if f.applied and APPLIED_HOST in f.why and host_level(f.flag) and not f.why.endswith(IN_BASE)]
    if not applied or command is None or level_of(command.stripped):
        return []
    level = applied[-1]
    return [Hit(RULE, f"host {level}", "no host -O level",
                f"{target.read.shown} builds {command.source.name} with no host optimisation level, where the ACF "
                f"applied {level} to every build (it defines __OPTIMIZE__ in the device pass, which the kernel's code "
                f"reads): the code that ships is not the code the ACF cites; put {level} back")]


def _text(value: Value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
