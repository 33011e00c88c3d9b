"""An ACF's flags in the shape a build system takes them: shell arguments, an nvcc options file,
a CMake snippet, a Bazel `cuda_library` (rules_cuda), or JSON.

Everything here works from a validated `Acf` (compileiq.results.acf.read): every flag is one token the
search space can produce, so no format has to quote more than a file path.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from compileiq.core.errors import UsageError
from compileiq.core.words import PLAIN_WORD, PLAIN_WORD_CHARS
from compileiq.results.acf import Acf, AcfError
from compileiq.source.arch_code import PTX_ONLY, paired, ptx_names, ptx_only_archs, shipped_code
from compileiq.source.base_flags import SYSTEM
from compileiq.source.shipped import arch_flag_archs

FORMATS = ("args", "optf", "cmake", "bazel", "json")
# a kernel in a header: build systems compile the .cu files that include it, never the header itself
HEADER_SUFFIXES = (".cuh", ".h", ".hh", ".hpp", ".hxx", ".inl", ".inc")
STAGES = ("all", "frontend", "ptxas")
_PLAIN_TOKEN = PLAIN_WORD  # one rule for what a shell may read as one word (core/words)


def render(acf: Acf, fmt: str = "args", stage: str = "all", with_arch: bool = True, with_base: bool = False,
           option: str = "--") -> str:
    """The ACF's flags as text in format `fmt` (see FORMATS); ends with a newline except `args`.
    `option` spells the caller's names in an error: "--" the command's options (--format), "" the
    Python API's keywords (format)."""
    if fmt not in FORMATS:
        raise UsageError(f"{option}format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if stage not in STAGES:
        raise UsageError(f"{option}stage must be all, frontend or ptxas, got {stage!r}")
    if fmt in ("cmake", "bazel") and (problem := header_problem(acf, fmt, option)):
        raise UsageError(problem)
    if fmt == "cmake":  # CMake sets the architecture itself (CUDA_ARCHITECTURES)
        if stage == "ptxas":
            raise UsageError(f"{option}format cmake gives nvcc options: use {option}stage all or frontend")
        return cmake_snippet(acf, stage, with_base)
    if fmt == "bazel":  # rules_cuda sets the architecture itself (--@rules_cuda//cuda:archs)
        return bazel_library(acf, stage, with_base)
    flags = unique(acf.flags(stage, with_arch=with_arch, with_base=with_base))
    if fmt == "args":  # read as `nvcc $(compileiq flags ...)`: a shell splits and expands, never unquotes
        return " ".join(_plain(acf, token) for token in flags)
    if fmt == "optf":
        return "".join(f"{_plain(acf, token)}\n" for token in flags)
    return json.dumps(document(acf, stage, with_arch, with_base), indent=2) + "\n"


def header_problem(acf: Acf, fmt: str, option: str = "--") -> str | None:
    """Why a build file for the kernel's own source would give its flags to nothing: the kernel is in
    a header, which CMake and rules_cuda never compile (a source property on it, or a cuda_library
    whose srcs hold it alone, builds no object: the .cu files that #include it build untuned, and
    nothing says so). None for a source file."""
    source = acf.source_from_here()
    if os.path.splitext(source)[1].lower() not in HEADER_SUFFIXES:
        return None
    if fmt == "cmake":
        how = ("CMake never compiles a header: a source property on it gives these flags to nothing, and the .cu "
               "files that #include it build untuned; use find_package(compileiq) and compileiq_apply(TARGET "
               f"<target> ACF {acf.path}) for the target that builds them, or compileiq_apply(SOURCE <the .cu that "
               "includes it> ...)")
    else:
        how = ("rules_cuda never compiles a header: a cuda_library whose srcs hold it alone builds nothing, and the "
               "libraries whose .cu files #include it build untuned; give these flags (--format json lists copts "
               "as \"frontend\" and ptxasopts as \"ptxas\") to the cuda_library whose srcs hold the .cu that "
               "includes it")
    return f"{option}format {fmt}: the kernel's source {source} is a header: {how}"


def base_note(acf: Acf, fmt: str, stage: str, with_base: bool) -> str | None:
    """One line for stderr when the build also needs what only --all prints: the include folders
    and base flags the code needs (tune.toml nvcc_flags/include_dirs, compile_commands.json)."""
    if with_base or fmt == "json":  # JSON lists them under "base"
        return None
    if stage == "ptxas":  # what nvcc hands ptxas of the base flags: its register cap, --generate-line-info
        bare = acf.flags("ptxas")
        added = [token for token in acf.flags("ptxas", with_base=True) if token not in bare]
        return (f"note: ptxas run on its own also needs {len(added)} flag(s) nvcc hands it of the build's base flags "
                f"({' '.join(added)}): --all adds them") if added else None
    needed = acf.base_args()  # as --all prints them: include folders from the current folder
    if not needed:
        return None
    shown = " ".join(needed[:4]) + (" …" if len(needed) > 4 else "")
    if acf.shipped is not None:  # tuned from a compile command: that build's own command gives them
        if fmt in ("cmake", "bazel"):  # the target that builds the source supplies them already
            return None
        return (f"note: the tuned flags leave out {len(needed)} base flag(s) your build's command "
                f"({acf.shipped.origin}) gave when tuned ({shown}): append the tuned flags to that command; --all "
                "adds the base flags too, for a build without it")
    return (f"note: the build also needs {len(needed)} base flag(s) the tuned ones leave out ({shown}): "
            "--all adds them")


def set_aside_note(acf: Acf, fmt: str, stage: str, with_base: bool) -> str | None:
    """One line for stderr when `--all` stands for a whole nvcc command (args, optf) and the shipped
    build had flags the ACF records as fixed and not applied (`[[baseline.fixed]]` applied = false:
    host -O, -Xcompiler, another arch's -gencode): the printed flags leave them out. They are named,
    never re-emitted: an ACF is untrusted, and those flags were never vetted as base flags (a
    `-Xcompiler=-fplugin=...` would run code), so they must come from the build's own command."""
    if not with_base or fmt not in ("args", "optf") or stage == "ptxas" or acf.shipped is None:
        return None
    left = [f.flag for f in acf.shipped.fixed if not f.applied]
    if not left:
        return None
    return (f"note: --all leaves out {len(left)} flag(s) of your build as shipped that the ACF records as not "
            f"applied ({', '.join(left)}): keep them from the build's own command (the ACF prints only the "
            "flags it was tuned and checked with)")


def removal_note(acf: Acf) -> str | None:
    """The shipped flags the chosen settings turn off or change (`[baseline].remove`): a build that
    only appends the ACF's flags would keep them, so they must be taken out of its command."""
    if not acf.remove:
        return None
    origin = acf.shipped.origin if acf.shipped is not None else "compile_commands.json"
    return (f"remove from the kernel's compile command ({origin}): {' '.join(acf.remove)} -- the ACF "
            "changes or turns off these shipped settings; appending its flags alone would keep them")


def _note_comment(acf: Acf, fmt: str) -> str:
    """`removal_note` and `code_note` as the first lines of a build file (CMake, Bazel: `#` starts
    a comment in both): a file written with `> BUILD` keeps them, where stderr is lost."""
    return "".join(f"# compileiq: {note}\n" for note in (removal_note(acf), code_note(acf, fmt)) if note)


def code_note(acf: Acf, fmt: str = "args", stage: str = "all", with_arch: bool = True) -> str | None:
    """One line where the shipped build's flags for the arch tuned embed other than -arch=sm_XY
    would (`arch_code`): PTX alone, which ptxas settings cannot reach (the driver compiles it when
    it loads, with its own settings), so a choice that holds any gets sm_XY machine code added,
    never silently; or machine code from an older arch's PTX, which CMake and rules_cuda's archs
    cannot say, and which flags without the arch (`with_arch` False) leave to the user."""
    applied = (f.flag for f in acf.shipped.fixed if f.applied) if acf.shipped is not None else ()
    found = shipped_code(applied, acf.arch)
    n, older = acf.arch.removeprefix("sm_"), acf.ptx_arch() != acf.arch
    v = acf.ptx_arch().removeprefix("compute_")
    build_file = fmt in ("cmake", "bazel")  # the build system sets the arch
    if stage == "ptxas":  # ptxas itself always makes machine code
        return None
    if found is not None and found.ptx_only and acf.ptxas_args:
        how = (f"CUDA_ARCHITECTURES {n}, not {n}-virtual" if fmt == "cmake" else f"sm_{n} in the build's archs"
               if fmt == "bazel" else f"-arch=compute_{n} -code=sm_{n} -code=compute_{n}, the PTX kept")
        return (f"your build as shipped embeds compute_{n} PTX only, no sm_{n} machine code; the driver compiles it "
                "when it loads, with its own settings: the tuned ptxas settings "
                f"({' '.join(acf.ptxas_args)}) take effect only where sm_{n} machine code is embedded, so these "
                f"flags add it ({how}); a build that keeps compute_{n} PTX alone gets nothing from them")
    if found is not None and found.ptx_only:
        kept = f"CUDA_ARCHITECTURES {n}-virtual" if fmt == "cmake" else f"-arch=compute_{n}"
        return (f"your build as shipped embeds compute_{n} PTX only, kept so ({kept}): the driver compiles it when "
                f"it loads, with its own settings; the tuning scored sm_{n} machine code that ptxas built here"
                + ("" if not build_file else f", and the build system sets the arch: keep {kept}"))
    if older and (build_file or not with_arch):  # with the arch, the args themselves build what was scored
        # the pair alone, or -arch=compute_80 with a -code list that builds sm_80 too (left out)
        kept = (f"-arch=compute_{v}" if stage == "frontend" else f"-arch=compute_{v} -code=sm_{n}"
                if found is not None else f"-arch=compute_{v} and its -code list")
        other = (f"-arch=compute_{n} (or sm_{n}) compiles compute_{n} PTX" if stage == "frontend" else
                 f"-arch=sm_{n} builds sm_{n} from compute_{n} PTX")
        if fmt == "cmake":
            how = (f"CUDA_ARCHITECTURES cannot say so: {n}-real builds sm_{n} from compute_{n} PTX, other code than "
                   f"the tuning scored; set CUDA_ARCHITECTURES OFF: the options carry {' '.join(arch_words(acf, stage))}")
        elif fmt == "bazel":
            how = (f"keep {kept} in the build; no --@rules_cuda//cuda:archs line is given: archs=sm_{n} builds "
                   f"sm_{n} from compute_{n} PTX, other code than the tuning scored")
        else:  # --no-arch: the user supplies the arch
            how = f"these flags leave the arch out: keep {kept}; {other}, other code than the tuning scored"
        return (f"your build as shipped makes sm_{n} machine code from compute_{v} PTX"
                f"{f', nothing for sm_{v}' if found is not None else ''}, and the tuning compiled its trials so: {how}")
    return None


def unique(flags: tuple[str, ...]) -> tuple[str, ...]:
    """Each flag once, in first-seen order (an options file or CMake must not repeat one)."""
    return tuple(dict.fromkeys(flags))


def cuda_architectures(acf: Acf) -> str:
    """CMake's CUDA_ARCHITECTURES value that builds what `acf.arch_args()` builds, so the CMake
    formats and `flags` agree: `-arch=sm_90` (machine code and PTX, CMake's code=[compute_90,sm_90])
    is 90; `-arch=compute_90 -code=sm_90` (machine code only, from a shipped
    `-gencode arch=compute_90,code=sm_90`) is 90-real: a plain 90 would embed PTX the shipped
    build has not (and a newer GPU would JIT-compile it); `-arch=compute_90` (PTX alone) is
    90-virtual. sm_90a -> 90a, 90a-real. CMake cannot say `-arch=compute_80 -code=sm_86`: 86-real
    builds sm_86 from compute_86 PTX, not as the trials were: OFF, the arch words going in the
    options (`arch_words`; `code_note` says so)."""
    if acf.ptx_arch() != acf.arch:
        return "OFF"
    number = acf.arch.removeprefix("sm_")
    args = acf.arch_args()
    codes = [c for token in args if token.startswith("-code=") for c in token.removeprefix("-code=").split(",")]
    if not codes and args == (f"-arch=compute_{number}",):  # PTX alone, as shipped (`code_note`)
        return f"{number}-virtual"
    return f"{number}-real" if codes and f"compute_{number}" not in codes else number


def arch_words(acf: Acf, stage: str = "all") -> tuple[str, ...]:
    """The arch flags `acf.flags(stage)` holds (what --no-arch leaves out)."""
    with_arch, without = acf.flags(stage), set(acf.flags(stage, with_arch=False))
    return tuple(token for token in with_arch if token not in without)


def document(acf: Acf, stage: str = "all", with_arch: bool = True, with_base: bool = False) -> dict[str, Any]:
    """The JSON document of `--format json` (also what the CMake module reads)."""
    return {
        "acf": str(acf.path),
        "kernel": acf.kernel,
        "source": acf.source_from_here(),  # from the folder `flags` runs in, as the -I folders of "base"
        "source_in_acf": acf.source_path,  # as the ACF records it: relative to the ACF's folder
        "arch": acf.arch,
        "cuda_architectures": cuda_architectures(acf),
        "arch_flags": list(arch_words(acf, stage)),  # what --no-arch leaves out (the CMake package: OFF)
        "stage": stage,
        "flags": list(unique(acf.flags(stage, with_arch=with_arch, with_base=with_base))),
        "base": list(acf.base_args()),
        "frontend": list(acf.frontend_args),
        "ptxas": list(acf.ptxas_args),
        "defines": list(acf.fixed_defines),
        "recorded": {k: v for k, v in dict(acf.evidence.get("best", {})).items()
                     if isinstance(v, int | float | str | bool)},
        "remove": list(acf.remove),
        "note": code_note(acf, "json", stage, with_arch) or "",  # of "flags" (with the arch, or without)
        "cmake_note": code_note(acf, "cmake", stage) or "",  # the CMake package prints it
    }


def cmake_snippet(acf: Acf, stage: str = "all", with_base: bool = False) -> str:
    """set_source_files_properties(...) giving the kernel source the ACF's flags. Each flag is one
    token (ptxas options as -Xptxas=OPTION, never split from their -Xptxas); a source's
    COMPILE_OPTIONS are passed as they are (CMake neither de-duplicates them nor reads SHELL:).
    Paths (the source, include folders) are named from the folder `flags` runs in, as
    ${CMAKE_CURRENT_SOURCE_DIR}/PATH: the snippet is committed, and an absolute path would name this
    checkout alone (CMake ignores a property on a file that is no source: every other checkout built
    untuned, silently), so configure fails where the source is not there."""
    arch = cuda_architectures(acf)
    # OFF (sm_86 from compute_80 PTX): CMake passes no arch, so the options carry the shipped build's
    flags = acf.flags(stage, with_arch=arch == "OFF", with_base=with_base)
    folders = {f"{prefix}{d}" for prefix, d in _base_folders(acf)} if with_base else set()
    options = ";".join(_cmake_folder(token) if token in folders else _plain(acf, token) for token in unique(flags))
    source = acf.source_from_here()
    where = _cmake_here(source)
    shown = _cmake_quoted(f"compileiq: {source} not found: this snippet names the kernel relative to the folder "
                          "compileiq flags ran in; include it from that folder's CMakeLists.txt, run compileiq flags "
                          "again in the folder that includes it, or use compileiq_apply(TARGET ...)")
    head = _note_comment(acf, "cmake") + _other_targets(acf) + (
        f"# compileiq: kernel {json.dumps(acf.kernel)}, {checked_on(acf, _cmake_setting(acf, arch, stage))}\n")
    if not options:  # COMPILE_OPTIONS "" would overwrite the options the build set on the source
        return head + f"# compileiq: nothing to apply to {source}: the ACF's choice is the build's own\n"
    return head + (
        f"if(NOT EXISTS {where})\n  message(FATAL_ERROR {shown})\nendif()\n"
        f"set_source_files_properties({where} PROPERTIES COMPILE_OPTIONS "
        f'"{options}")\n'
    )


def _base_folders(acf: Acf) -> tuple[tuple[str, str], ...]:
    """The include folders of `acf.base_args()` as (flag, path from the current folder)."""
    folder = os.path.dirname(acf.source_from_here())
    return tuple((prefix, os.path.normpath(os.path.join(folder, d)))
                 for prefix, dirs in (("-I", acf.base.include_dirs), (SYSTEM, acf.base.system_dirs)) for d in dirs)


def _cmake_here(path: str) -> str:
    """A quoted CMake argument naming `path` (from the folder `flags` runs in) from the folder of the
    CMakeLists.txt that includes the snippet; an absolute path (tune.toml's) as it is."""
    quoted = _cmake_quoted(path)
    return quoted if os.path.isabs(path) else '"${CMAKE_CURRENT_SOURCE_DIR}/' + quoted[1:]


def _cmake_folder(token: str) -> str:
    """An include flag (-I, -isystem) inside the COMPILE_OPTIONS list: its folder from the including
    CMakeLists.txt's; no `;` (a list would split it there) and nothing CMake would expand."""
    prefix = SYSTEM if token.startswith(SYSTEM) else "-I"
    path = token.removeprefix(prefix)
    if ";" in path:
        raise AcfError(f"include folder {path!r} holds ';', which a CMake list splits: --format json lists it")
    return prefix + _cmake_here(path)[1:-1]


def _cmake_setting(acf: Acf, arch: str, stage: str) -> str:
    """How the snippet's target builds the arch: CUDA_ARCHITECTURES, or OFF and the arch in the options."""
    if arch != "OFF":
        return f"CUDA_ARCHITECTURES {arch}"
    return f"CUDA_ARCHITECTURES OFF, the options carrying {' '.join(arch_words(acf, stage))}"


def _other_targets(acf: Acf) -> str:
    """A comment where the ACF's build compiled the file in other commands too (one .cu in several
    targets): a source property reaches every target that compiles the file, tuned or not."""
    shipped = acf.shipped
    if shipped is None or not shipped.others:
        return ""
    more = " ..." if len(shipped.others) > 4 else ""
    tuned = f" ({shipped.output})" if shipped.output else ""
    return (f"# compileiq: {shipped.origin} also compiles this file as {', '.join(shipped.others[:4])}{more}; "
            "this source property reaches those targets too, untuned and unchecked there: to set the flags "
            f"for the tuned target{tuned} alone, use compileiq_apply(TARGET ...) instead\n")


def checked_on(acf: Acf, setting: str) -> str:
    """Which arch the flags were tuned and checked on, for a build file's comment: never an order to
    build for that arch alone where the shipped build has others (narrowing CUDA_ARCHITECTURES to
    it would drop them from the product); `setting` is the build system's way to name the arch."""
    fixed = acf.shipped.fixed if acf.shipped is not None else ()
    set_aside = paired([(f.flag, a) for f in fixed if not f.applied and (a := arch_flag_archs(f.flag))])
    ptx = ptx_only_archs(f.flag for f in fixed if arch_flag_archs(f.flag) is not None)  # ptxas never runs for it
    virtual = list(dict.fromkeys(a for _, archs in set_aside for a in archs if a != acf.arch and a in ptx))
    others = [a for _, archs in set_aside for a in archs if a != acf.arch and a not in ptx]
    also = (f"your build's {PTX_ONLY.format(ptx=ptx_names(virtual))} gets the front-end flags unchecked; "
            "keep it in the build") if virtual else ""
    if not others:
        return f"tuned and checked on {acf.arch} only; {also}" if also else f"tuned and checked on {acf.arch} only: {setting}"
    left = ", ".join(dict.fromkeys(others))
    return (f"tuned and checked on {acf.arch} only: your build's other archs ({left}) get these flags unchecked; "
            f"keep them in the build (compileiq tune --arch {others[0]} checks {others[0]})" + (f"; {also}" if also else ""))


def bazel_library(acf: Acf, stage: str = "all", with_base: bool = False) -> str:
    """A rules_cuda `cuda_library` for the kernel source, a BUILD file beside it: nvcc options in
    `copts`, include folders (`--all`) in `includes` as tune.toml gives them (relative to the kernel's
    folder, the package, as `srcs`) where they lie inside the package (`bazel_note` names the rest),
    ptxas options in `ptxasopts` (rules_cuda hands each to ptxas with -Xptxas); the arch goes on the
    command line."""
    frontend = acf.flags("frontend", with_arch=False, with_base=with_base)
    # -I folders go in includes; -isystem ones nowhere (`bazel_note`): a copts path is not the package's
    copts = unique(tuple(t for t in frontend if not t.startswith(("-I", SYSTEM)))) if stage != "ptxas" else ()
    includes = _package_includes(acf)[0] if with_base and stage != "ptxas" else ()
    ptxasopts = unique(acf.ptxas_args) if stage != "frontend" else ()
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", acf.kernel)[:64] or "kernel"
    source = os.path.basename(acf.source_path)
    # sm_86 from compute_80 PTX: rules_cuda's archs for it is unchecked here, so no archs line (`code_note`)
    setting = (f"--@rules_cuda//cuda:archs={acf.arch}" if acf.ptx_arch() == acf.arch else
               f"{' '.join(acf.arch_args())} (no --@rules_cuda//cuda:archs line: archs={acf.arch} is other code)")
    lists = "".join(f"    {attribute} = [\n" + "".join(f"        {json.dumps(_plain(acf, t))},\n" for t in tokens) + "    ],\n"
                    for attribute, tokens in (("copts", copts), ("includes", includes), ("ptxasopts", ptxasopts))
                    if tokens)
    return _note_comment(acf, "bazel") + (
        f"# compileiq: kernel {json.dumps(acf.kernel)}, {checked_on(acf, setting)}\n"
        'load("@rules_cuda//cuda:defs.bzl", "cuda_library")\n\n'
        f"cuda_library(\n    name = {json.dumps(name)},\n    srcs = [{json.dumps(source)}],\n{lists})\n"
    )


def bazel_note(acf: Acf, fmt: str, stage: str, with_base: bool) -> str | None:
    """One line for stderr when `bazel_library` leaves include folders out: Bazel resolves
    `includes` from the package and takes none above it (cc_library warns "not below the relative
    path of its package. This will be an error in the future", and a path above the workspace is
    no path at all; rules_cuda refuses an absolute one), and a header there is not in the build's
    sandbox unless a target declares it."""
    applies = fmt == "bazel" and with_base and stage != "ptxas"
    outside = _package_includes(acf)[1] if applies else ()
    system = acf.base.system_dirs if applies else ()
    notes = []
    if outside:
        notes.append(f"{len(outside)} include folder(s) outside the kernel's package left out of includes "
                     f"({' '.join(outside)}): Bazel takes none above the package; give those headers a cc_library in "
                     'their own package (hdrs, includes = ["."]) and add it to the cuda_library\'s deps')
    if system:  # includes gives -I, searched before any -isystem folder: another copy of a header would be read
        notes.append(f"{len(system)} system include folder(s) (-isystem) left out ({' '.join(system)}): a "
                     "cuda_library's includes gives -I, which changes which copy of a header is read; give those "
                     "headers a cc_library (includes: Bazel gives them as -isystem) and add it to the deps")
    return "note: " + "; ".join(notes) if notes else None


def _package_includes(acf: Acf) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The ACF's include folders inside the kernel's folder (the package) and those outside it
    (above it, or absolute), each as tune.toml gives it."""
    inside: list[str] = []
    outside: list[str] = []
    for folder in acf.base.include_dirs:
        above = os.path.isabs(folder) or os.path.normpath(folder).split(os.sep)[0] == os.pardir
        (outside if above else inside).append(folder)
    return tuple(inside), tuple(outside)


def _plain(acf: Acf, token: str) -> str:
    """A flag that needs no quoting anywhere: one word wherever a shell or a build file reads it."""
    if not _PLAIN_TOKEN.fullmatch(token):
        raise AcfError(f"{acf.path}: flag {token!r} cannot be written as one plain word (only {PLAIN_WORD_CHARS} "
                       "are; a shell would split, expand or read the rest): --format json lists it")
    return token


def _cmake_quoted(text: str) -> str:
    """A CMake quoted argument holding `text` as one string (not a list)."""
    return '"' + re.sub(r'([\\"$])', r"\\\1", text) + '"'


def cmake_dir() -> Path:
    """The folder of the CMake package shipped with compileiq (compileiq-config.cmake)."""
    return Path(__file__).resolve().parent.parent / "cmake"
