"""`risk-not-allowed`: an ACF that turns on a numerics-changing or semantics-assuming setting that
nobody asked for.

The search space marks such settings by risk class (`--use_fast_math`, `--ftz`, `--prec-div`,
`--prec-sqrt`, `--fmad`, ptxas's float-atomics: numerics; `-restrict`, `maxntid`: semantics). `tune`
searches them only where asked (`--allow-numerics`/`--allow-semantics`, tune.toml's `allow_*`), or
where the build that ships sets them (then they are searched from the shipped value: the project's
own choice). An ACF tuned from a build with `--use_fast_math` keeps it; when the build that ships
drops it, applying the ACF turns fast math back on: a numerics change nobody asked for, which the
gate passed with a `stale-settings` warning. Here it is its own finding, an error by default.

A risky setting of the ACF is fine where its value is the compiler's default (it turns nothing
on), the value the build that ships sets now, or its risk class was allowed: by the ACF's tuning
(`[provenance] allowed_risks`, written by `tune`; an older ACF: `provenance.searched`'s
`allow_numerics`/`allow_semantics`) or by the kernel's tune.toml as it is now (the project's own
consent). The build that ships is the compile command the gate reads now; where none was read,
the one the ACF's `[baseline]` records (the gate then warns that it was not checked), else the
compiler defaults (the kernel ships as tune.toml builds it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from compileiq.core.space import SearchSpace, SpaceError, Value, same
from compileiq.core.space_files import load_space
from compileiq.gating.rules import Hit
from compileiq.results import acf as acf_file
from compileiq.results.evidence import ALLOWED_RISKS
from compileiq.source.spec import KernelSpec, ShippedBuild

RULE = "risk-not-allowed"
RISKS = ("numerics", "semantics")
_WHAT = {"numerics": "numerics-changing", "semantics": "semantics-assuming"}


class Target(Protocol):
    """What the check reads of a gated ACF (`check.Target`)."""

    @property
    def acf(self) -> acf_file.Acf: ...
    @property
    def spec(self) -> KernelSpec: ...  # the kernel's own settings now (tune.toml's allow_*)
    @property
    def shipped_now(self) -> tuple[ShippedBuild | None] | None: ...  # the compile command's build now, where read


def _recorded_allowed(acf: acf_file.Acf) -> set[str]:
    """The risk classes the ACF says its tuning allowed (untrusted text: only the known names)."""
    recorded = acf.provenance.get(ALLOWED_RISKS)
    if isinstance(recorded, list):
        return {risk for risk in recorded if risk in RISKS}
    searched = acf.provenance.get("searched")  # an older ACF: the command line's --allow-* alone
    if not isinstance(searched, dict):
        return set()
    return {risk for risk in RISKS if searched.get(f"allow_{risk}") is True}


def risk_hits(target: Target, applied: bool, retune: str) -> list[Hit]:
    """`risk-not-allowed` for each risky setting the ACF turns on that neither the build that ships
    nor an allowance asked for (see the module's text); `applied`: the compile command now ships the
    ACF's choice itself."""
    acf, spec = target.acf, target.spec
    if applied:  # the command ships the ACF's choice: the project asked for it
        return []
    allowed = _recorded_allowed(acf) | {risk for risk, on in (("numerics", spec.allow_numerics),
                                                              ("semantics", spec.allow_semantics)) if on}
    try:
        space = load_space(acf.nvcc_version)
    except SpaceError:  # the reader loaded it already; nothing to hold the controls to otherwise
        return []
    ships, name = _shipping(target)
    hits = []
    for setting, value in acf.controls.items():
        risk = _risk(space, setting)
        if risk is None or risk in allowed:
            continue
        default = space.parameter(setting).default
        shipped = ships.get(setting, default)
        if same(value, default) or same(value, shipped):
            continue
        flag = " ".join(space.parameter(setting).argv(value)) or setting
        ships_text = f"ships {_text(shipped)}" + " (the default)" * same(shipped, default)
        hits.append(Hit(RULE, f"{setting} {_text(value)}", ships_text,
                        f"the ACF turns on {flag} ({setting} = {_text(value)}), a {_WHAT[risk]} setting that "
                        f"{name} does not set and that its tuning was not allowed to search (no --allow-{risk}, "
                        f"no allow_{risk} in tune.toml): applied, it changes the kernel's {risk} unasked; "
                        f"re-tune (with --allow-{risk} if the change is wanted)",
                        retune))
    return hits


def _risk(space: SearchSpace, setting: str) -> str | None:
    if setting.startswith("define."):
        return None
    try:
        risk = space.parameter(setting).risk
    except SpaceError:
        return None
    return risk if risk in RISKS else None


def _shipping(target: Target) -> tuple[Mapping[str, Value], str]:
    """The searched settings' values in the build that ships, and what it is called."""
    if target.shipped_now is not None:
        build = target.shipped_now[0]
        return (build.values(), f"the build that ships ({build.origin})") if build is not None else (
            {}, "the build that ships")
    if (recorded := target.acf.shipped) is not None:  # its command could not be read: the ACF's word
        return recorded.values(), f"the build that ships ({recorded.origin}, as the ACF records it)"
    return {}, "the kernel's build (the compiler defaults: no compile command)"


def _text(value: Value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
