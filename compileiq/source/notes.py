"""What `compileiq space KERNEL` (and `tune`, before its run) says of a kernel beside the table:
one line each, about its macros, headers, arch and the settings its shipped build holds."""

from __future__ import annotations

from compileiq.core.records import first_line
from compileiq.core.space import same
from compileiq.core.space_files import load_space
from compileiq.core.toolchain import find_toolchain
from compileiq.source.arch_code import code_note, older_ptx_note, ptx_only_archs
from compileiq.source.kernel import bundle_sources
from compileiq.source.shipped import ARCH_SETS, arch_flag_archs, arch_note, value_text
from compileiq.source.spec import KernelSpec


def kernel_notes(spec: KernelSpec) -> list[str]:
    """What `compileiq space KERNEL` says beside the table, one line each: a kernel without tuned
    macros, a header it includes that the preprocessor cannot find (with where it is, if near), a
    tuned macro the kernel #defines itself (`tune` stops on it) or never names."""
    from compileiq.source.dependencies import DependencyError, UnsupportedArchError
    from compileiq.source.launch import LaunchModel
    from compileiq.source.macro_effect import check_macros_change_code
    from compileiq.source.macros import MacroError, check_macros_take_effect, source_notes

    untuned = f"{spec.source.name}: no tuned macros ([tune.defines] in tune.toml adds them to the search)"
    notes = ([] if spec.tuned_defines else [untuned]) + arch_notes(spec)
    try:
        bundle = bundle_sources(spec, find_toolchain().nvcc)
    except UnsupportedArchError:  # nothing in the table can be built for it: stop in one line, as tune does
        raise
    except DependencyError as error:  # the run would stop here: say so now, in one line
        return [*notes, first_line(str(error), 400)]
    LaunchModel(spec, bundle)  # tune's check of the [launch] facts at the defaults: refused here as there
    try:
        check_macros_take_effect(spec, bundle)
        check_macros_change_code(spec, find_toolchain().nvcc)
    except MacroError as error:  # `tune` stops on it: say so now
        notes.append(first_line(str(error), 400))
    return notes + source_notes(spec, bundle) + shipped_notes(spec)


def arch_notes(spec: KernelSpec) -> list[str]:
    """What `space` and `tune` say of the arch: the shipped build's other archs, left out, and what
    the shipped flags for the arch tuned embed where -arch=sm_XY would embed other code (PTX alone,
    or machine code from an older arch's PTX: `arch_code.code_note`)."""
    fixed = spec.shipped.fixed if spec.shipped is not None else ()
    applied = [f.flag for f in fixed if f.applied]
    code = code_note(applied, spec.arch) or older_ptx_note(spec.arch, spec.ptx_arch)
    ptx = ptx_only_archs(f.flag for f in fixed if arch_flag_archs(f.flag) is not None)
    built = [archs for f in fixed if (archs := arch_flag_archs(f.flag)) is not None]
    tuned = not built or any(spec.arch in archs or any(a in ARCH_SETS for a in archs) for archs in built)
    return [*command_arch_note(spec), *arch_note(spec.arch, spec.archs_left_out, ptx, builds_tuned=tuned),
            *([code] if code else [])]


def command_arch_note(spec: KernelSpec) -> list[str]:
    """Where the compile command (--compile-commands) chose the arch over tune.toml's `arch`, no
    --arch given (that one says it overrides): which arch is tuned, and why. A command that names
    no arch builds nvcc's default arch, which is tuned: said always, tune.toml's arch or not."""
    given = spec.toml_arch
    if spec.shipped is not None and spec.shipped.default_arch and spec.arch_overridden is None:
        instead = f", not tune.toml's arch = \"{given}\"" if given not in (None, spec.arch) else ""
        return [(f"tuning {spec.arch}: the compile command names no arch, so nvcc's default {spec.arch} is tuned, "
                 f"the arch it builds{instead} (--arch sm_XY tunes another)")]
    if spec.shipped is None or given is None or given == spec.arch or spec.arch_overridden is not None:
        return []
    return [(f"tuning {spec.arch}, the arch the compile command builds ({spec.shipped.origin}), not tune.toml's "
             f"arch = \"{given}\": with --compile-commands the command's arch is tuned; --arch {given} tunes that one")]


def shipped_notes(spec: KernelSpec) -> list[str]:
    """What `space --compile-commands` says of each setting the shipped build sets: its baseline
    is the shipped value, and --only/--exclude that leave it out hold it there (`space_choice`); none
    for one at its default (a tuned macro's -D at tune.toml's first value: `flags` of an ACF adds it)."""
    settings = spec.shipped.settings if spec.shipped is not None else ()
    defaults = load_space(find_toolchain().nvcc_version).default_config().as_dict() | spec.default_values()
    return [f"{s.name} starts from your build's {value_text(s.value)} ({s.flag}), not the default; --only or "
            "--exclude that leave it out hold it at that value in every build" for s in settings
            if s.name not in defaults or not same(s.value, defaults[s.name])]  # at the default: nothing to say
