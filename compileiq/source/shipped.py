"""The build a project ships, read from its compile command: each flag compileiq tunes becomes a
setting of the search space (the baseline starts from it), every other flag is recorded as fixed.

A tuned flag whose value the space does not hold (``-maxrregcount 57``), or a ptxas option that
is neither a searched setting nor a report-only one, is one clear error: the baseline must be the
build that ships, and compileiq never hands an unvetted flag to nvcc (it runs sub-tools through
/bin/sh). Host-compiler, linker and host-optimisation flags are recorded as fixed, not applied, with
why: a linker option leaves the device code as it is; a host compiler option (-O3, -fopenmp) may change
the macros the device pass predefines, since nvcc preprocesses the device code with the host compiler.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace

from compileiq.core import implied
from compileiq.core.errors import UsageError
from compileiq.core.space import SearchSpace, Stage, Value
from compileiq.core.text import printable
from compileiq.source import arch_model
from compileiq.source.arch_code import (
    PTX_ONLY,
    canonical,
    ptx_arch,
    ptx_names,
    ptx_only_archs,
    shipped_code,
)
from compileiq.source.base_flags import CAPPED, BaseFlags
from compileiq.source.spec import FixedFlag, ShippedBuild, ShippedSetting

# nvcc's short spellings of the front-end options the space renders (nvcc --help).
_NVCC_ALIASES = {"-use_fast_math": "--use_fast_math", "-ftz": "--ftz", "-prec-div": "--prec-div",
                 "-prec-sqrt": "--prec-sqrt", "-fmad": "--fmad", "-restrict": "--restrict",
                 "-jtd": "--jump-table-density", "-extra-device-vectorization": "--extra-device-vectorization"}
# ptxas's short spellings (ptxas --help) -> the long ones the space renders.
NVCC_SPELLINGS = tuple(_NVCC_ALIASES)
_PTXAS_ALIASES = {"-O": "--opt-level", "-maxrregcount": "--maxrregcount", "-dlcm": "--def-load-cache",
                  "-dscm": "--def-store-cache", "-maxntid": "--maxntid", "-minnctapersm": "--minnctapersm",
                  "-override-directive-values": "--override-directive-values",
                  "-allow-expensive-optimizations": "--allow-expensive-optimizations",
                  "-disable-optimizer-consts": "--disable-optimizer-constants",
                  "-opt-fp-atomics": "--optimize-float-atomics", "-regUsageLevel": "--register-usage-level"}
_PTXAS_VALUED = {"--opt-level", "--maxrregcount", "--def-load-cache", "--def-store-cache", "--maxntid",
                 "--minnctapersm", "--allow-expensive-optimizations", "--register-usage-level"}
# ptxas options that only report or warn: the code is the same without them.
_PTXAS_REPORTS = {"-v", "--verbose", "-warn-spills", "--warn-on-spills", "-warn-lmem-usage",
                  "--warn-on-local-memory-usage", "-warn-double-usage", "--warn-on-double-precision-use",
                  "-Werror", "--warning-as-error", "-w", "--disable-warnings", "-suppress-stack-size-warning",
                  "--suppress-stack-size-warning", "-suppress-double-demote-warning",
                  "--suppress-double-demote-warning"}
LINKER_OPTION = "linker option: device code is unchanged"
HOST_OPTIMISATION = ("host optimisation level (nvcc -O): may change the macros the device pass predefines "
                     "(__OPTIMIZE__); compileiq builds without it")
APPLIED_HOST = ": applied: "  # how `build.host_check` says why a host option of the command is applied
REPORT_ONLY = "ptxas report or warning only: the code is the same without it"
MAX_SHOWN = 80
_OPTION_WORD = re.compile(r"-[A-Za-z0-9_=.,\-]+")  # a ptxas option (and its value), nothing a shell acts on


class ShippedFlagError(UsageError):
    """A flag of the shipped command that compileiq cannot reproduce or may not pass on."""


def shown(flag: str) -> str:
    """A flag from a compile command, quoted and cut short for a one-line message."""
    text = printable(flag)
    return repr(text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "...")


def frontend_setting(flag: str, value: str, given: str, space: SearchSpace, where: str) -> ShippedSetting:
    """The setting an nvcc front-end option of the space stands for."""
    option = _NVCC_ALIASES.get(flag, flag)
    return _setting("frontend", f"{option}={value}" if value else option, given, space, where)


def ptxas_settings(value: str, given: str, space: SearchSpace,
                   where: str) -> tuple[list[ShippedSetting], list[FixedFlag]]:
    """The settings and report-only options of one ``-Xptxas`` value (comma-separated options)."""
    settings: list[ShippedSetting] = []
    reports: list[FixedFlag] = []
    if len(words := value.split()) > 1 and all(_OPTION_WORD.fullmatch(w) for w in words):  # "-O3 -v": /bin/sh splits it
        raise ShippedFlagError(f"{where}: {shown(given)} holds a space inside one -Xptxas value: nvcc passes it to "
                               "ptxas through a shell, which splits it there, and compileiq does not; separate ptxas "
                               "options with commas (-Xptxas -O3,-v), or tune without --compile-commands")
    tokens = iter(value.split(","))
    for token in tokens:
        name, eq, attached = token.partition("=")
        option = _PTXAS_ALIASES.get(name, name)
        if token.startswith("-O") and token[2:].isdigit():
            option, attached, eq = "--opt-level", token[2:], "="
        if token in _PTXAS_REPORTS:
            reports.append(FixedFlag(given if "," not in value else f"-Xptxas {token}", False, REPORT_ONLY))
            continue
        if option not in _PTXAS_VALUED and not eq:
            settings.append(_setting("ptxas", option, given, space, where))
            continue
        argument = attached if eq else next(tokens, "")
        canonical = f"-O{argument}" if option == "--opt-level" else f"{option}={argument}"
        part = f"-Xptxas {token}" + ("" if eq or token.startswith("-O") else f",{argument}")
        settings.append(replace(_setting("ptxas", canonical, given, space, where), part=part if "," in value else ""))
    return settings, reports


def _setting(stage: Stage, token: str, given: str, space: SearchSpace, where: str) -> ShippedSetting:
    found = space.setting_of(stage, token) or _false_flag(stage, token, space)
    if found is None:
        raise ShippedFlagError(f"{where}: {shown(given)} {_why_not(stage, token, space)}; compileiq tunes from "
                               "the build you ship and cannot reproduce this one: change the flag, or tune "
                               "without --compile-commands")
    name, value = found
    return ShippedSetting(name, value, given)


def _false_flag(stage: Stage, token: str, space: SearchSpace) -> tuple[str, Value] | None:
    """``--ftz=false``: the default of a flag the space renders as ``--ftz=true``."""
    if not token.endswith("=false"):
        return None
    found = space.setting_of(stage, token.removesuffix("=false") + "=true")
    return (found[0], False) if found is not None and found[1] is True else None


def _why_not(stage: Stage, token: str, space: SearchSpace) -> str:
    for parameter in space.parameters:
        render = parameter.render
        ours = (token.startswith(render.split("{value}")[0]) if "{value}" in render
                else token.partition("=")[0] == render.partition("=")[0])
        if parameter.stage == stage and render and ours and "=" in token and "=" not in render:
            return (f"gives a value to {render}, which takes none ({parameter.name} is on or off; the compiler "
                    "refuses it too: 'no argument expected')")
        if parameter.stage == stage and render and ours:
            values = ", ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in parameter.values)
            return f"sets {parameter.name} to a value the search space does not have (it has {values})"
    what = "ptxas option" if stage == "ptxas" else "nvcc option"
    return f"is a {what} that is neither searched by compileiq nor known to leave the code unchanged"


def under_register_cap(build: ShippedBuild | None, flags: BaseFlags) -> ShippedBuild | None:
    """The shipped build with its ptxas register cap (`-Xptxas --maxrregcount=M`) recorded as not
    applied when the base flags hold nvcc's own (-maxrregcount=N): nvcc hands ptxas its cap after
    any -Xptxas one, so N is the build's cap, and ptxas.maxrregcount is not searched (`cap_note`)."""
    cap = flags.register_cap
    if build is None or cap is None or not any(s.name == CAPPED for s in build.settings):
        return build
    overridden = tuple(FixedFlag(s.part or s.flag, False, f"overridden by nvcc's {cap}, which nvcc hands ptxas last")
                       for s in build.settings if s.name == CAPPED)
    return replace(build, settings=tuple(s for s in build.settings if s.name != CAPPED), fixed=(*build.fixed, *overridden))


# The -arch values that name no arch but a set of them (every arch nvcc supports, their major
# versions, the GPUs of the machine that compiles), as notes and [baseline] say each.
ARCH_SETS = {"all": "every arch nvcc supports (-arch=all)",
              "all-major": "every major arch nvcc supports (-arch=all-major)",
              "native": "the GPUs of the machine that compiles it (-arch=native)"}


# The flags that name the archs a command builds for, and an arch as they spell it (sm_90, compute_90).
ARCH_FLAGS = {"-arch", "--gpu-architecture", "-code", "--gpu-code", "-gencode", "--generate-code"}
_ARCH_IN_CODE = re.compile(r"(?:sm|compute)_([0-9]+[a-z]?)")  # ASCII digits: \d takes any
_CODE_LIST = re.compile(r"code=\[?([^\]\s]*)")  # -gencode's machine code list
_MACHINE_CODE = re.compile(r"sm_([0-9]+[a-z]?)")


def archs_named(value: str) -> tuple[str, ...]:
    """Each arch an arch flag's value builds for, as sm_XY, in order: a -gencode's code= list alone
    (arch=compute_80,code=sm_86 builds sm_86 machine code, nothing for sm_80; code="sm_90,compute_80"
    is code=[sm_90,compute_80], as nvcc reads it: `arch_code.gencode`)."""
    value = canonical(value)
    code = _CODE_LIST.search(value)
    return tuple(dict.fromkeys(f"sm_{n}" for n in _ARCH_IN_CODE.findall(code[1] if code else value)))


def arch_flag_archs(given: str) -> tuple[str, ...] | None:
    """The archs an arch flag as a compile command gives it builds for ("-arch=sm_90",
    "-gencode arch=compute_80,code=sm_80": its sm_XY names); None for any other flag."""
    first, _, _ = given.strip().partition(" ")
    if first.partition("=")[0] not in ARCH_FLAGS:
        return None
    return archs_named(given)


def arch_of(value: str) -> str | None:
    """sm_XY from -arch=sm_90, --generate-code=arch=compute_90,code=[compute_90,sm_90], ...: the
    newest machine code a code= list names (code=[sm_80,sm_90] is tuned for sm_90), else the last
    arch named."""
    value = canonical(value)
    code = _CODE_LIST.search(value)
    if code is not None and (machine := _MACHINE_CODE.findall(code[1])):
        return newest(f"sm_{m}" for m in machine)
    found = _ARCH_IN_CODE.findall(value)
    return f"sm_{found[-1]}" if found else None


def newest(archs: Iterable[str]) -> str | None:
    """The newest of some sm_XY archs (sm_90 over sm_75 whatever their order; CMake lists
    CUDA_ARCHITECTURES oldest first): the one a multi-arch build is tuned for, the one its newest
    GPUs run. None for none."""
    def key(arch: str) -> tuple[int, str]:
        number = re.match(r"sm_([0-9]+)(.*)", arch)
        return (int(number[1]), number[2]) if number else (-1, arch)

    return max(archs, key=key, default=None)


# how [baseline] records an -arch a later one overrides: nvcc keeps the last -arch (`arch_model`)
OVERRIDDEN_ARCH = "overridden by the later {later}: nvcc keeps the last -arch, so this one builds nothing"
TUNED_ARCH = "builds for the arch tuned"  # how [baseline] says so of the command's flag for it (`other_archs`)
# what [baseline] adds to the why of the -arch=sm_XY that stands for a command naming no arch (`compile_db`);
# after it, so that a why still starts "builds for " where --arch tuned another (the gate reads it so)
NVCC_DEFAULT_ARCH = "the command names no arch: nvcc's default, {arch}, as -arch={arch} builds it"  # 200 chars in all


def other_archs(build: ShippedBuild | None, arch_flags: Iterable[tuple[str, tuple[str, ...]]],
                tuned: str) -> ShippedBuild | None:
    """The shipped build with each arch flag that builds for an arch other than the one tuned
    recorded as not applied, naming the arch it leaves out: the chosen settings are checked on
    `tuned` alone (`arch_note`). An -arch=all, all-major or native builds for more than the one
    arch tuned (native: for whichever GPU compiles it), so it is recorded so too."""
    fixed = []
    arch_flags = list(arch_flags)
    ptx = ptx_only_archs(given for given, _ in arch_flags)  # PTX alone: ptxas settings never reach it
    last = arch_model.read(given for given, _ in arch_flags).arch
    for index, (given, archs) in enumerate(arch_flags):
        later = [g for g, _ in arch_flags[index + 1:] if arch_model.option(g)[0] in arch_model.ARCH_OPTIONS]
        if arch_model.option(given)[0] in arch_model.ARCH_OPTIONS and later:
            fixed.append(FixedFlag(given, False, OVERRIDDEN_ARCH.format(later=f"-arch={last}")))
            continue
        others = [a for a in archs if a != tuned and a not in ptx]
        virtual = [a for a in archs if a != tuned and a in ptx]
        if sets := [ARCH_SETS[a] for a in archs if a in ARCH_SETS]:
            fixed.append(FixedFlag(given, False, f"builds for {', '.join(sets)}, not tuned: the settings are chosen "
                                   f"on {tuned} alone; --arch sm_XY tunes for another"))
        elif others or virtual:
            said = [f"builds for {', '.join(others)}, not tuned"] if others else []
            said += [PTX_ONLY.format(ptx=ptx_names(virtual))] if virtual else []
            fixed.append(FixedFlag(given, False, f"{'; '.join(said)}: the settings are chosen on {tuned} alone"
                                   + (f"; --arch {others[0]} tunes for {others[0]}" if others else "")))
        elif archs == (tuned,):  # the command's own flags for the arch tuned: `flags` builds it alike
            fixed.append(FixedFlag(given, True, TUNED_ARCH))
    code = shipped_code((f.flag for f in fixed if f.why == TUNED_ARCH), tuned)
    older = ptx_arch((given for given, _ in arch_flags), tuned)  # as `Acf.arch_args` gives it
    form = " ".join((code.args() if code is not None else None)
                    or ((f"-arch={older}", f"-code={tuned}") if older != tuned else (f"-arch={tuned}",)))
    if code is not None and code.ptx_only:  # ptxas settings need machine code: `code_note`
        form += f" (PTX only), or {' '.join(code.args(machine_code=True) or ())} with ptxas settings"
    fixed = [replace(f, why=f"{TUNED_ARCH}: flags gives it as {form}") if f.why == TUNED_ARCH else f for f in fixed]
    if build is not None and build.default_arch:  # not the command's flag: say so wherever [baseline] shows it
        fixed = [replace(f, why=f"{f.why}; {NVCC_DEFAULT_ARCH.format(arch=build.default_arch)}") for f in fixed]
    if build is None or not fixed:
        return build
    return replace(build, fixed=tuple(dict.fromkeys((*build.fixed, *fixed))))


def arch_note(tuned: str, left_out: Iterable[str], ptx_only: Iterable[str] = (), *,
              builds_tuned: bool = True) -> list[str]:
    """The lines `space` and `tune` print for a multi-arch compile command: which arch is tuned,
    which are left out (the chosen settings are not checked there), and how to tune another;
    `ptx_only`: those it embeds PTX alone for (`arch_code.ptx_only_archs`), which no --arch tunes;
    `builds_tuned`: false where --arch tunes an arch the command does not build (never listed as one
    it builds: `flags` gives -arch=TUNED in place of its arch flags, or of nvcc's default arch)."""
    from compileiq.source.arch import detect_arch

    archs = list(left_out)
    notes = []
    for word in (a for a in archs if a in ARCH_SETS):
        if word != "native":
            notes.append(f"the compile command builds for {ARCH_SETS[word]}: tuned for {tuned} only, the other "
                         f"archs left out (the chosen settings are not checked there): --arch sm_XY tunes for another")
        elif (gpu := detect_arch()) is None:
            notes.append(f"the compile command builds for {ARCH_SETS[word]}, and this machine has no GPU (nvcc "
                         f"builds it for its default arch here): tuned for {tuned}; the GPU of the machine that "
                         "builds it is left out unless it is that one: --arch sm_XY tunes for another")
        else:
            notes.append(f"the compile command builds for {ARCH_SETS[word]}, {gpu} here: tuned for {tuned}; another "
                         "machine's GPU is left out unless it is that one: --arch sm_XY tunes for another")
    virtual = [a for a in archs if a in set(ptx_only) and a not in ARCH_SETS]
    others = [a for a in archs if a not in ARCH_SETS and a not in virtual]
    ptx = f"{PTX_ONLY.format(ptx=ptx_names(virtual))}, which the front-end settings reach unchecked" if virtual else ""
    if others and not builds_tuned:
        notes.append(f"the compile command builds for {', '.join(others)}, not {tuned}: tuned for {tuned} (--arch), "
                     f"{', '.join(others)} left out (the chosen settings are not checked there): --arch "
                     f"{others[0]} tunes for {others[0]}" + (f"; it also embeds {ptx}" if ptx else ""))
    elif others:
        notes.append(f"the compile command builds for {', '.join([tuned, *others])}: tuned for {tuned} only; "
                     f"{', '.join(others)} left out (the chosen settings are not checked there): --arch "
                     f"{others[0]} tunes for {others[0]}" + (f"; it also embeds {ptx}" if ptx else ""))
    elif ptx:
        notes.append(f"the compile command builds for {tuned}, tuned for it, and embeds {ptx}")
    return notes


# Settings ptxas takes the last of when a command sets them twice, checked with ptxas 13.0: the cubin
# of `-Xptxas -O1 -Xptxas -O3` is that of `-Xptxas -O3` (and the other order's that of -O1), joined
# with a comma or not, spelled -O or --opt-level; likewise two -Xptxas --maxrregcount. Any other
# setting given two values is refused: which one the compiler keeps is not checked.
LAST_WINS = frozenset({"ptxas.opt_level", "ptxas.maxrregcount"})


def check_once(settings: Iterable[ShippedSetting],
               where: str) -> tuple[tuple[ShippedSetting, ...], tuple[FixedFlag, ...]]:
    """One value per setting, and the flags of the command overridden by a later one (recorded as
    fixed and not applied, with why): a setting of `LAST_WINS` given twice takes the last value, as
    ptxas does; any other given two values is refused."""
    found: dict[str, ShippedSetting] = {}
    overridden: list[FixedFlag] = []
    for setting in settings:
        earlier = found.get(setting.name)
        if earlier is not None and earlier.value != setting.value:
            if setting.name not in LAST_WINS:
                raise ShippedFlagError(f"{where}: {shown(earlier.flag)} and {shown(setting.flag)} both set "
                                       f"{setting.name}: keep one")
            later = setting.part or setting.flag
            overridden.append(FixedFlag(earlier.part or earlier.flag, False,
                                        f"overridden by the later {later}: ptxas takes the last {setting.name}"))
            found[setting.name] = setting
        found.setdefault(setting.name, setting)
    return tuple(found.values()), tuple(overridden)


def value_text(value: Value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def describe(build: ShippedBuild) -> list[str]:
    """The start of a run: which flags of the shipped command are searched (from their shipped
    values), which are fixed and applied, which are not applied and why (two lines at most)."""
    twins = set(build.values()) - set(implied.without_implied(build.values()))  # the build its twin is: not searched
    searched = ", ".join(f"{s.name}={value_text(s.value)} ({s.flag}{', implied by the others' if s.name in twins else ''})"
                         for s in build.settings)
    applied = [f.flag for f in build.fixed if f.applied]
    start = (f"searched from its values: {searched}" if searched
             else "it sets no searched setting, so the compiler defaults")
    lines = [printable(f"baseline: your build ({build.origin}); {start}"
                       + (f"; fixed, applied to every build: {' '.join(applied)}" if applied else ""))]
    for flag in (f for f in build.fixed if f.applied and APPLIED_HOST in f.why):  # `host_check`: why it is applied
        lines.append(printable(f"applied: {flag.flag} {f'{flag.why}'.partition(APPLIED_HOST)[2]}"))
    skipped = [f for f in build.fixed if not f.applied]
    if skipped:
        reasons = dict.fromkeys(f.why for f in skipped)
        lines.append(printable("not applied: " + "; ".join(
            f"{' '.join(f.flag for f in skipped if f.why == why)} ({why})" for why in reasons)))
    return lines


def to_remove(settings: Iterable[ShippedSetting], chosen: Mapping[str, Value]) -> tuple[str, ...]:
    """The shipped flags a build must drop to get the chosen settings: each flag of a setting whose
    chosen value differs from the shipped one (appending cannot turn --use_fast_math off)."""
    return tuple(dict.fromkeys(s.flag for s in settings if chosen.get(s.name) != s.value))


def building(fixed: Iterable[FixedFlag]) -> tuple[FixedFlag, ...]:
    """The [[baseline.fixed]] arch flags that build something: each but an earlier -arch a later one
    overrides, told by position (`arch_model.builds`: of `-arch=sm_90 ... -arch=sm_90` the first builds
    nothing), read from the flags themselves, never from the ACF's `why` (anyone's to edit)."""
    arch = [f for f in fixed if arch_flag_archs(f.flag) is not None]
    return tuple(f for f, built in zip(arch, arch_model.builds(f.flag for f in arch), strict=True) if built)
