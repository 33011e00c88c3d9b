"""The notes `compileiq flags` gives beside an ACF's flags, from one place for every format: what
the printed flags leave out that the build still needs (base flags, the shipped build's flags the ACF
records as not applied), what to remove from the build's command, and where the arch printed is not
what the tuning scored. The command prints `notes(...).lines` on stderr (stdout stays pasteable), the
JSON document carries the same lines and the flags left out (`left_out`), and the CMake and Bazel
files start with the removal and arch lines as comments (`flag_formats`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from compileiq.results.acf import Acf
from compileiq.results.arch_replace import arch_words, replaced_note
from compileiq.source.arch_code import shipped_code

# a format whose flags stand for a whole nvcc command with --all (a bazel cuda_library is a new target)
_WHOLE_COMMAND = ("args", "optf", "json", "bazel")


@dataclass(frozen=True)
class LeftOut:
    """A flag of the build that the printed flags leave out: `kind` "base" (`--all` adds it) or
    "not_applied" (the ACF records it as not applied: keep it from the build's own command)."""

    flag: str
    kind: str


@dataclass(frozen=True)
class FlagNotes:
    """Every note of one `flags` call, each line as stderr prints it, and the flags it says are left out."""

    lines: tuple[str, ...]
    left_out: tuple[LeftOut, ...]


def notes(acf: Acf, fmt: str, stage: str = "all", with_arch: bool = True, with_base: bool = False) -> FlagNotes:
    """The notes of `acf`'s flags in format `fmt`: one source for stderr, the JSON and the build files."""
    base = base_left_out(acf, fmt, stage, with_base)
    aside = set_aside(acf, fmt, stage, with_base)
    code = code_note(acf, fmt, stage, with_arch)
    removal = removal_note(acf)
    lines = (base_note(acf, stage, base), bazel_note(acf, fmt, stage, with_base), set_aside_note(aside),
             f"note: {code}" if code else None, replaced_note(acf, fmt, stage, with_arch),
             f"compileiq: {removal}" if removal else None)
    return FlagNotes(lines=tuple(line for line in lines if line),
                     left_out=tuple(LeftOut(flag, "base") for flag in base)
                     + tuple(LeftOut(flag, "not_applied") for flag in aside))


def base_left_out(acf: Acf, fmt: str, stage: str, with_base: bool) -> tuple[str, ...]:
    """The base flags the code needs (tune.toml nvcc_flags/include_dirs, the compile command's) that
    only --all prints; none where a build file's target supplies them (an ACF from a compile command)."""
    if with_base:
        return ()
    if stage == "ptxas":  # what nvcc hands ptxas of the base flags: its register cap, --generate-line-info
        bare = acf.flags("ptxas")
        return tuple(token for token in acf.flags("ptxas", with_base=True) if token not in bare)
    if acf.shipped is not None and fmt in ("cmake", "bazel"):  # the target that builds the source supplies them
        return ()
    return tuple(acf.base_args())  # as --all prints them: include folders from the current folder


def base_note(acf: Acf, stage: str, needed: tuple[str, ...]) -> str | None:
    """One line when the build also needs the base flags `needed` (`base_left_out`) that only --all prints."""
    if not needed:
        return None
    shown = " ".join(needed[:4]) + (" …" if len(needed) > 4 else "")
    if stage == "ptxas":
        return (f"note: ptxas run on its own also needs {len(needed)} flag(s) nvcc hands it of the build's base flags "
                f"({shown}): --all adds them")
    if acf.shipped is not None:  # tuned from a compile command: that build's own command gives them
        return (f"note: the tuned flags leave out {len(needed)} base flag(s) your build's command "
                f"({acf.shipped.origin}) gave when tuned ({shown}): append the tuned flags to that command; --all "
                "adds the base flags too, for a build without it")
    return (f"note: the build also needs {len(needed)} base flag(s) the tuned ones leave out ({shown}): "
            "--all adds them")


def set_aside(acf: Acf, fmt: str, stage: str, with_base: bool) -> tuple[str, ...]:
    """The shipped build's flags the ACF records as fixed and not applied (`[[baseline.fixed]]`
    applied = false: host -O, -Xcompiler, a linker -L, another arch's -gencode) where `--all` stands
    for a whole nvcc command (args, optf, json) or a new target (bazel): the printed flags leave them
    out. They are named, never re-emitted: an ACF is untrusted, and those flags were never vetted as
    base flags (a `-Xcompiler=-fplugin=...` would run code), so they must come from the build's own
    command. CMake's source property adds to the target's own command, which keeps them."""
    if not with_base or fmt not in _WHOLE_COMMAND or stage == "ptxas" or acf.shipped is None:
        return ()
    return tuple(f.flag for f in acf.shipped.fixed if not f.applied)


def set_aside_note(left: tuple[str, ...]) -> str | None:
    """One line naming the flags `set_aside` found."""
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


def bazel_note(acf: Acf, fmt: str, stage: str, with_base: bool) -> str | None:
    """One line for stderr when `bazel_library` leaves include folders out: Bazel resolves
    `includes` from the package and takes none above it (cc_library warns "not below the relative
    path of its package. This will be an error in the future", and a path above the workspace is
    no path at all; rules_cuda refuses an absolute one), and a header there is not in the build's
    sandbox unless a target declares it."""
    applies = fmt == "bazel" and with_base and stage != "ptxas"
    outside = package_includes(acf)[1] if applies else ()
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


def package_includes(acf: Acf) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The ACF's include folders inside the kernel's folder (the package) and those outside it
    (above it, or absolute), each as tune.toml gives it."""
    inside: list[str] = []
    outside: list[str] = []
    for folder in acf.base.include_dirs:
        above = os.path.isabs(folder) or os.path.normpath(folder).split(os.sep)[0] == os.pardir
        (outside if above else inside).append(folder)
    return tuple(inside), tuple(outside)
