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
from compileiq.results.arch_replace import arch_words
from compileiq.results.flag_notes import code_note, notes, package_includes, removal_note
from compileiq.source.arch_code import PTX_ONLY, paired, ptx_names, ptx_only_archs
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


def _note_comment(acf: Acf, fmt: str) -> str:
    """`removal_note` and `code_note` as the first lines of a build file (CMake, Bazel: `#` starts
    a comment in both): a file written with `> BUILD` keeps them, where stderr is lost."""
    return "".join(f"# compileiq: {note}\n" for note in (removal_note(acf), code_note(acf, fmt)) if note)


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


def document(acf: Acf, stage: str = "all", with_arch: bool = True, with_base: bool = False) -> dict[str, Any]:
    """The JSON document of `--format json` (also what the CMake module reads)."""
    found = notes(acf, "json", stage, with_arch, with_base)
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
        # every note `flags` prints on stderr for these flags (flag_notes), and the flags they leave out
        "notes": list(found.lines),
        "left_out": [{"flag": left.flag, "kind": left.kind} for left in found.left_out],
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
    includes = package_includes(acf)[0] if with_base and stage != "ptxas" else ()
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
