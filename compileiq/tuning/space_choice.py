"""Which parameters a run searches: the installed compiler's space narrowed by --only, --exclude and
the risk classes, with the kernel's macros, the shipped build's settings and nvcc's register cap
taken into account, restricted by tune.toml's [tune] restrictions."""

from __future__ import annotations

from dataclasses import dataclass, replace

from compileiq.core import implied
from compileiq.core.errors import UsageError
from compileiq.core.space import SearchSpace, same
from compileiq.source import restrictions
from compileiq.source.base_flags import CAPPED
from compileiq.source.spec import KernelSpec


@dataclass(frozen=True)
class Selection:
    """What the command line narrows: --only, --exclude, --allow-numerics, --allow-semantics."""

    only: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    allow_numerics: bool = False
    allow_semantics: bool = False


def searched_space(spec: KernelSpec, space: SearchSpace, options: Selection, legacy: bool = False) -> SearchSpace:
    """The compiler's `space` narrowed by the options. The kernel's macros (``define.NAME``) are all
    searched unless --only or --exclude names one: then they go through --only/--exclude like any
    setting, and one not searched is held at tune.toml's first value. (So `--only ptxas.maxrregcount`
    searches the cap and every macro; `--only ptxas.maxrregcount,define.TM` holds the other macros.)
    `legacy`: as releases before 2026-12-06 made it, with a shipped fast-math twin (`--ftz=true`
    beside `--use_fast_math`) searched (`study_lookup`); now it is the build its twin is."""
    tuned = {name: list(values) for name, values in spec.tuned_defines}
    names = [*options.only, *options.exclude]
    macros_named = any(name.startswith("define.") for name in names)
    named = macros_named  # then the macros go through --only/--exclude like any setting
    if tuned and named:
        space = space.with_defines(tuned)
    full = space
    space = space.select(
        allow_numerics=options.allow_numerics or spec.allow_numerics,
        allow_semantics=options.allow_semantics or spec.allow_semantics,
        only=list(options.only) or None,
        exclude=list(options.exclude),
    )
    space = without_capped(_with_shipped(space, full, spec, options, legacy), spec, options)
    have = {p.name for p in space.parameters}
    # every macro, or (named) those left out: held at tune.toml's first value (the baseline's), as -D in every build
    macros = tuned if not named else {name: [values[0]] for name, values in tuned.items() if f"define.{name}" not in have}
    # the one space a build of the shipped values renders from (-ftz=false --use_fast_math), as the gate's rebuild
    space = implied.build_space(space, macros, spec.shipped.values() if spec.shipped else {})
    return space.restricted(restrictions.of_spec(spec))


def _with_shipped(space: SearchSpace, full: SearchSpace, spec: KernelSpec, options: Selection,
                  legacy: bool = False) -> SearchSpace:
    """Every setting the shipped build sets is searched from its shipped value (the baseline), even
    where its risk class is not (`--allow-numerics`): it is the project's own choice. One that
    --only or --exclude leaves out is held at its shipped value, in every build, as a macro left
    out is held at tune.toml's first value: the search never tunes a build nobody ships. (It was
    refused: `--only define.X` on a build with `-Xptxas -O3`, the compiler's default, had to
    search every -O level, 108 builds for 27 block sizes.) A setting at the value another shipped
    one implies (`--ftz=true` beside `--use_fast_math`) is not one: the build is its twin's."""
    have = {p.name for p in space.parameters} | (set() if legacy else _twins(spec))
    in_full = {p.name for p in full.parameters}
    added = []
    for setting in (s for s in (spec.shipped.settings if spec.shipped else ()) if s.name not in have):
        if setting.name.startswith("define.") and setting.name not in in_full:
            continue  # a macro joins the space after this, with every value tune.toml gives (the shipped one too)
        parameter = full.parameter(setting.name)
        if setting.name in options.exclude or (options.only and setting.name not in options.only):
            # rendered as the whole parameter renders it: nothing at the compiler's default, else the flag
            # (a macro's -D always: its default is tune.toml's, not the compiler's)
            parameter = replace(parameter, values=(setting.value,), default=setting.value,
                                render_default=parameter.render_default or not same(setting.value, parameter.default))
        added.append(parameter)
    return replace(space, parameters=space.parameters + tuple(added)) if added else space


def _twins(spec: KernelSpec) -> set[str]:
    """The shipped settings at the value another shipped one implies (`implied.without_implied`)."""
    shipped = spec.shipped.values() if spec.shipped is not None else {}
    return set(shipped) - set(implied.without_implied(shipped))


def without_capped(space: SearchSpace, spec: KernelSpec, options: Selection = Selection()) -> SearchSpace:
    """Without ptxas.maxrregcount when the base flags hold nvcc's own cap (`cap_note`): `tune`
    does not search it, and `space` does not list it."""
    cap = spec.nvcc_flags.register_cap
    if cap is None:
        return space
    if CAPPED in options.only:
        raise UsageError(f"--only names {CAPPED}, but the kernel's base flags hold nvcc's {cap}, which caps "
                         "registers for the front end and ptxas alike: take it out of the build to tune the cap")
    return replace(space, parameters=tuple(p for p in space.parameters if p.name != CAPPED))
