"""A source file's real compile command from a compilation database (CMake's or Bear's
compile_commands.json), turned into base flags and the build it ships.

Kept: what the code needs to build (-I, -D, -U, -std, language and device-code switches), with
include paths made absolute. Taken apart: the target arch. The settings compileiq tunes (nvcc
flags of the search space, options passed to ptxas) become the shipped build's settings, where
the search starts from (`shipped`); host -O, host-compiler and linker options are recorded as
fixed and not applied; build mechanics (-c, -o, -x, dependency files) are dropped. What is kept
still passes the base-flag allow-list before anything runs.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from compileiq.core.defines import define_arg_problem, macro_problem
from compileiq.core.space import SearchSpace
from compileiq.core.text import printable
from compileiq.core.toolchain import default_arch, find_toolchain
from compileiq.core.words import PLAIN_WORD
from compileiq.source import nvcc_argv, preprocessor, shipped
from compileiq.source.arch_code import gencode, incompatible, paired, refused
from compileiq.source.base_flags import SYSTEM, BaseFlagError, as_built, parse_base_flags
from compileiq.source.compile_db_file import (
    CompileDbError,
    NoCommand,
    OutputGone,
    SeveralCommands,
    entries,
    output_of,
)
from compileiq.source.device_neutral import NOTHING_TO_TUNE, lto_arch, no_device_effect
from compileiq.source.includers import includers
from compileiq.source.preprocessor import Macros
from compileiq.source.spec import FixedFlag, KernelSpec, ShippedBuild, ShippedSetting

_BUILD_MECHANICS = {"-c", "--compile", "-o", "--output-file", "-x", "--x", "-MD", "-MMD", "-MF", "-MT",
                    "-MQ", "-M", "-MM", "--generate-dependencies", "-odir", "--output-directory"}
_FORWARDED = "{why}; not an nvcc 13.0 option: {flag} forwards it"
_FORWARDS = ("nvcc hands the options it does not know to the host compiler, each then set aside as a host option "
             "with why: this flag itself changes no code")
_LINK = {"-Xlinker", "--linker-options", "-Xnvlink", "--nvlink-options", "-Xarchive", "--archive-options",
         "-L", "--library-path", "-l", "--library", "-shared"}
_HOST_COMPILER_OPTIONS = {"-Xcompiler", "--compiler-options"}  # each option split out (`preprocessor`)
_HOST = {*_HOST_COMPILER_OPTIONS, "-fPIC", "-pthread"}  # nvcc hands these to the host compiler (__PIC__, _REENTRANT)
_HOST_OR_LINK = {*_LINK, *_HOST}
_HOST_COMPILER = {"-ccbin", "--compiler-bindir"}
_CCBIN = ("picks the host compiler, which also preprocesses the device code (its predefined macros, its "
          "headers): compileiq builds with the one nvcc finds by default (first on PATH), which may differ")
_PTXAS = {"-Xptxas", "--ptxas-options"}
_STRIPPED = {*_HOST_OR_LINK, *_HOST_COMPILER, *_PTXAS, "-O", "--optimize"}
_MACRO_FLAGS = ("-D", "--define-macro", "-U", "--undefine-macro")
_MACRO_OVERRIDDEN = "overridden by the later {later}: nvcc's preprocessor takes a macro's last -D or -U"
_REGISTER_CAP = {"-maxrregcount", "--maxrregcount"}  # nvcc's: caps cicc too, so a base flag, not ptxas.maxrregcount


@dataclass(frozen=True)
class CompileCommand:
    """The parts of one file's compile command that tuning needs."""

    source: Path
    directory: Path
    base_flags: tuple[str, ...]
    arch: str | None
    stripped: tuple[str, ...]  # what was taken out, as given, for the user to see
    shipped: ShippedBuild | None = None  # the searched settings and fixed flags of the command
    arch_flags: tuple[tuple[str, tuple[str, ...]], ...] = ()  # each -arch/-gencode/... as given, with its sm_XY

    def read_as(self) -> tuple[object, ...]:
        """What compileiq reads of the command (flags, arch, shipped settings): two commands for
        one file that agree on it are one build to tune."""
        shipped = None if self.shipped is None else (self.shipped.settings, self.shipped.fixed)
        return self.base_flags, self.arch_flags, shipped

    @property
    def archs(self) -> tuple[str, ...]:
        """Every arch the command builds for, in order (a multi-arch build has several)."""
        return tuple(dict.fromkeys(a for _, archs in self.arch_flags for a in archs))


def read_command(database: Path, source: Path, space: SearchSpace, spec: KernelSpec | None = None,
                 output: str | None = None) -> CompileCommand:
    """The command that compiles `source` in `database`, as base flags; CompileDbError otherwise.
    `spec` (tune.toml's kernel): its macros, which the command's -D/-U of them must agree with.
    Several commands for the file (one .cu in two targets): `output` (an entry's `output`, as
    `--compile-output` names it) chooses one; without it they must read the same, else refused."""
    wanted = source.expanduser().resolve()
    found = []
    every = []
    for index, entry in enumerate(entries(database), 1):
        directory = database.parent / Path(str(entry.get("directory", "."))).expanduser()
        every.append((entry, directory, output_of(entry) or f"entry {index}"))
        if (directory / entry["file"]).resolve() == wanted:
            found.append((printable(output_of(entry) or f"entry {index}"), entry, directory.resolve()))
    if not found:
        raise NoCommand(f"{database}: no compile command for {source}{_included_by(every, wanted, source)}")
    names = [name for name, _, _ in found]
    macros = Macros.of(spec)
    readings: list[tuple[object, ...] | None] = []  # None: a command compileiq does not read
    for _, entry, directory in found if len(found) > 1 else ():
        try:
            readings.append(_command(entry, directory, wanted, space, database, macros).read_as())
        except CompileDbError:
            readings.append(None)
    differ = len(set(readings)) > 1  # commands that read alike are one build, whichever is taken
    index = 0
    if output is not None:
        index = next((i for i, (name, _, folder) in enumerate(found)
                      if name == output or (folder / name).resolve() == Path(output).expanduser().resolve()), -1)
        if index < 0:
            raise OutputGone(f"{database}: no command for {source.name} with output {output!r} "
                             f"(its commands' outputs: {', '.join(names)})")
    elif differ:
        raise SeveralCommands(f"{database}: {len(found)} commands for {source.name} build it differently "
                              f"(outputs: {', '.join(names)}): pass --compile-output OUTPUT to choose the one "
                              "to tune (an ACF tuned so records it for the gate)")
    name, entry, directory = found[index]
    first = _command(entry, directory, wanted, space, database, macros)
    # recorded only where the commands differ (the gate must take the same one); "entry 2" only where
    # the user chose it so; the others named are those that build it otherwise (flags --format cmake)
    others = tuple(n for i, n in enumerate(names) if readings[i] != readings[index]) if differ else ()
    recorded = name if others and (output_of(entry) or output) else ""
    shipped = None if first.shipped is None else replace(first.shipped, output=recorded, others=others)
    return replace(first, shipped=shipped)


def _included_by(every: list[tuple[dict[str, Any], Path, str]], wanted: Path, source: Path) -> str:
    """What the error adds where an entry's file #includes the kernel (the build compiles the includer)."""
    found = includers(every, wanted)
    if not found:
        return ""
    first, includer = found[0], printable(found[0].file.name)  # a name the (untrusted) database gave
    more = f" (and {len(found) - 1} other file(s))" if len(found) > 1 else ""
    return (f"; {includer} ({first.entry}) #includes it{more}: the build compiles {includer}, so tune "
            f"{includer} with --compile-commands, or tune {source.name} from a database entry of your own "
            f"whose \"file\" is {source.name} and whose command is {includer}'s with {source.name} in its place "
            "(docs/ci.md, \"A compile command by hand\")")


def _command(entry: dict[str, Any], directory: Path, source: Path, space: SearchSpace,
             database: Path, macros: Macros) -> CompileCommand:
    arguments = entry.get("arguments")
    if isinstance(arguments, list) and all(isinstance(a, str) for a in arguments):
        argv = list(arguments)
    elif isinstance(entry.get("command"), str):
        try:
            argv = shlex.split(entry["command"])
        except ValueError as error:
            raise CompileDbError(f"{database}: command for {source.name}: {error}") from None
    else:
        raise CompileDbError(f"{database}: the entry for {source.name} has no command or arguments")
    where = f"{database}: the command for {source.name}"
    try:
        args, hidden = nvcc_argv.expand_options_files(argv[1:], directory, where)
    except nvcc_argv.OptionsFileError as error:
        raise CompileDbError(str(error)) from None
    try:
        return _read(args, entry, directory, source, space, database, macros, where)
    except (CompileDbError, BaseFlagError) as error:  # an options file may be any file: its words are not shown
        raise type(error)(nvcc_argv.unshown(str(error), hidden)) from None


def _read(args: list[str], entry: dict[str, Any], directory: Path, source: Path, space: SearchSpace,
          database: Path, macros: Macros, where: str) -> CompileCommand:
    if unprintable := next((a for a in args if printable(a) != a), None):  # an ACF records every flag as text
        raise CompileDbError(f"{where}: argument {printable(unprintable)!r} holds a control character "
                             "(a newline, an escape): no compiler option does")
    # $PWD in a host option is the folder the build runs the command in, as given or as resolved:
    # read only where both are one plain word (a space would split it, `preprocessor.shell_words`)
    given_folder = database.parent / Path(str(entry.get("directory", "."))).expanduser()
    pwd = all(PLAIN_WORD.fullmatch(str(folder)) for folder in (directory, given_folder))
    kept, stripped, arch_flags = _split(args, directory, source, _tuned_flags(space), macros, where, pwd)
    _each_allowed(kept, where)  # here, so that an options file's words are not shown (its folders: where they are read)
    if why := refused(given for given, _ in arch_flags):
        raise CompileDbError(f"{where}: its arch flags hold {why}: the command builds nothing; fix its arch flags")
    if pair := incompatible(given for given, _ in arch_flags):  # nvcc: "Incompatible code generation requested"
        raise CompileDbError(f"{where}: its arch flags pair arch={pair[0]} with code={pair[1]}, which nvcc refuses "
                             "(\"Incompatible code generation requested\": machine code is made from PTX of its own arch "
                             "or an older one, PTX for that arch alone): the command builds nothing; fix its arch flags")
    arch_flags = paired(arch_flags)  # -arch=compute_80 -code=sm_86 builds sm_86 alone
    # no arch flag: nvcc builds its own default arch (13.0: sm_75 machine code and compute_75 PTX, as
    # -arch=sm_75 does), read from the installed nvcc, and that is the arch the command builds
    default = "" if arch_flags else (default_arch(find_toolchain().nvcc) or "")
    arch_flags = arch_flags or ([(f"-arch={default}", (default,))] if default else [])
    # a multi-arch command is tuned for its newest arch (--arch names another), in whatever order it lists them
    arch = shipped.newest(found for given, archs in arch_flags if archs and (found := shipped.arch_of(given)))
    try:
        settings, fixed = _shipped(stripped, space, macros, where)
    except (shipped.ShippedFlagError, preprocessor.MacroError) as error:
        raise CompileDbError(str(error)) from None
    # every token of the command is accounted for: its -D/-U/-I are base flags too (an ACF reads a
    # fixed flag back with shlex, so a folder with a space is quoted)
    # each once, where nvcc reads it (`as_built`: -std=c++14 -std=c++17 -std=c++14 is C++14, as [base] says)
    applied = [FixedFlag(shlex.quote(flag), True, "allow-listed base flag: applied to every build")
               for flag in as_built(kept)]
    forward = [FixedFlag(a, False, _FORWARDS) for a in dict.fromkeys(args) if a in nvcc_argv.FORWARD_UNKNOWN]
    build = ShippedBuild(database.name, settings, (*applied, *forward, *fixed), path=str(database.resolve()),
                         default_arch=default)
    return CompileCommand(source, directory, tuple(kept), arch, tuple(g for _, _, g in stripped), build,
                          tuple(arch_flags))


def _each_allowed(kept: Sequence[str], where: str) -> None:
    """Each kept flag passes the base-flag allow-list alone, as the ACF's check reads it back
    (`acf_checks`): refused here, before any build, never when the ACF is written after the search.
    Folders are held to the path allow-list with the rest of the base flags (`kernel.with_base_flags`)."""
    for flag in kept:
        if flag.startswith(("-I", SYSTEM)):
            continue
        parse_base_flags([flag], where)  # BaseFlagError: "{where}: '-x' is not an allowed base flag ..."


def _shipped(stripped: Sequence[tuple[str, str, str]], space: SearchSpace, macros: Macros,
             where: str) -> tuple[tuple[ShippedSetting, ...], tuple[FixedFlag, ...]]:
    """The command's tuned flags as settings of the space; the rest as fixed flags, not applied."""
    settings: list[ShippedSetting] = []
    fixed: list[FixedFlag] = []
    # the preprocessor takes a macro's last -D or -U (`-DN=8 -UN -DN=2` builds N=2): that one alone is
    # held to tune.toml's macros, and the earlier ones are recorded as overridden by it
    last = {value.partition("=")[0]: index for index, (flag, value, _) in enumerate(stripped) if flag in _MACRO_FLAGS}
    for index, (flag, value, given) in enumerate(stripped):
        if flag in _MACRO_FLAGS and index != (later := last[value.partition("=")[0]]):
            fixed.append(FixedFlag(given, False, _MACRO_OVERRIDDEN.format(later=stripped[later][2])))
        elif flag in ("-Xptxas", "--ptxas-options"):
            found, reports = shipped.ptxas_settings(value, given, space, where)
            settings += found
            fixed += reports
        elif flag in ("-O", "--optimize"):
            if not value.isascii() or not value.isdigit():  # nvcc 13.0: "nvcc fatal: 's': expected a number"
                raise CompileDbError(f"{where}: {given}: nvcc's {flag} takes a number (0-3) and stops on "
                                     f"{value!r} ('expected a number'), so the command builds nothing; give "
                                     "-O0..-O3, or a host level as -Xcompiler -Os")
            fixed.append(FixedFlag(given, False, shipped.HOST_OPTIMISATION))
        elif flag in _LINK:
            fixed.append(FixedFlag(given, False, shipped.LINKER_OPTION))
        elif flag in _HOST:
            fixed.append(FixedFlag(given, False, preprocessor.host_why(value if flag in _HOST_COMPILER_OPTIONS else flag)))
        elif flag in _HOST_COMPILER:
            fixed.append(FixedFlag(given, False, _CCBIN))
        elif flag in _MACRO_FLAGS:  # a macro of tune.toml (`_one`)
            macro = preprocessor.shipped_macro(flag, value, given, macros, where)
            if isinstance(macro, FixedFlag):
                fixed.append(macro)
            else:
                settings.append(macro)
        elif why := no_device_effect(flag, value):
            fixed.append(FixedFlag(given, False, why))
        elif forwarded := nvcc_argv.forwarding(flag):
            fixed.append(FixedFlag(given, False, _FORWARDED.format(flag=forwarded, why=preprocessor.host_why(given))))
        else:
            settings.append(shipped.frontend_setting(flag, value, given, space, where))
    once, overridden = shipped.check_once(settings, where)
    # a flag given twice counts once, at its last place: nvcc takes its last -O (`-O3 -O0 -O3` is -O3)
    return once, tuple(reversed(dict.fromkeys(reversed((*fixed, *overridden)))))


def _split(args: Sequence[str], directory: Path, source: Path, tuned: set[str], macros: Macros, where: str,
           pwd: bool) -> tuple[list[str], list[tuple[str, str, str]], list[tuple[str, tuple[str, ...]]]]:
    """The kept base flags, the stripped (flag, value, as given), and each arch flag as given with
    the archs it builds for (an -arch=all, all-major or native: that word). Each in the order the
    preprocessor reads them: nvcc hands it every -Xcompiler item first, then its own -I, -D and -U
    (`nvcc -dryrun`: `-DN=8 -Xcompiler -DN=2` builds N=8, its own -D the later one)."""
    kept: list[str] = []
    stripped: list[tuple[str, str, str]] = []
    host_kept: list[str] = []  # -Xcompiler's -I, -isystem, -D, -U: read before the command's own
    host_stripped: list[tuple[str, str, str]] = []  # -Xcompiler's -D/-U of a tune.toml macro, likewise
    arch_flags: list[tuple[str, tuple[str, ...]]] = []
    forward = next((a for a in args if a in nvcc_argv.FORWARD_UNKNOWN), None)
    for flag, value, given in nvcc_argv.options(args):
        if flag == "" and value and (directory / value).resolve() == source:
            continue  # the source file itself
        if why := NOTHING_TO_TUNE.get(flag):
            raise CompileDbError(f"{where}: {given} {why}")
        if why := lto_arch(flag, value):  # an ACF's command is untrusted: shown quoted and cut short
            raise CompileDbError(f"{where}: {shipped.shown(given)} {why}")
        if flag in ("-arch", "--gpu-architecture") and value in shipped.ARCH_SETS:
            arch_flags.append((given, (value,)))
        elif flag in shipped.ARCH_FLAGS:
            if flag in ("-gencode", "--generate-code") and gencode(value) is None:
                raise CompileDbError(f"{where}: {shipped.shown(given)} is no -gencode nvcc 13.0 builds from (it takes "
                                     "arch=compute_XY,code=LIST, a list of several in [...] or \"...\"): fix the "
                                     "command's arch flags")
            arch_flags.append((given, shipped.archs_named(value)))
        elif flag in _BUILD_MECHANICS or flag in nvcc_argv.FORWARD_UNKNOWN:
            continue
        elif flag in _HOST_COMPILER_OPTIONS:  # nvcc preprocesses the device code with these too
            try:
                for option in preprocessor.host_options(flag, value, given, where, pwd):
                    taken: list[tuple[str, str, str]] = []
                    _one(option, directory, tuned, macros, where, host_kept, taken)
                    # a tune.toml macro's -D/-U: read before the command's own; any other stays in its place
                    (host_stripped if option[0] in _MACRO_FLAGS else stripped).extend(taken)
            except preprocessor.MacroError as error:
                raise CompileDbError(str(error)) from None
        elif forward is not None and nvcc_argv.host_compilers(flag) and not _known(flag, value, tuned):
            try:
                preprocessor.forwarded_problem(given, forward, where, pwd)
            except preprocessor.MacroError as error:
                raise CompileDbError(str(error)) from None
            stripped.append((forward, value, given))  # the host compiler's: _shipped names why
        else:
            _one((flag, value, given), directory, tuned, macros, where, kept, stripped)
    return host_kept + kept, host_stripped + stripped, arch_flags


def _known(flag: str, value: str, tuned: set[str]) -> bool:
    """Whether `_one` takes the option otherwise than as a base flag (it strips it)."""
    return flag in _STRIPPED or flag in tuned or no_device_effect(flag, value) is not None


def _one(option: tuple[str, str, str], directory: Path, tuned: set[str], macros: Macros, where: str,
         kept: list[str], stripped: list[tuple[str, str, str]]) -> None:
    """One option of the command (or of its -Xcompiler values): a base flag (`kept`), or stripped."""
    flag, value, given = option
    if _known(flag, value, tuned):
        stripped.append(option)
    elif flag in ("-I", "--include-path"):
        kept.append(f"-I{_folder(directory / value)}")
    elif flag in ("-isystem", "--system-include"):  # searched after every -I: never made one
        kept.append(f"{SYSTEM}{_folder(directory / value)}")
    elif flag in ("-D", "--define-macro", "-U", "--undefine-macro") and macros.names(value):
        stripped.append(option)  # tune.toml's macro: _shipped makes it define.NAME's value, or tune.toml's -D
    elif flag in ("-D", "--define-macro"):
        if problem := define_arg_problem(f"-D{value}"):
            raise CompileDbError(f"{where}: {given}: {_define_way_out(value, problem)}")
        kept.append(f"-D{value}")
    elif flag in ("-U", "--undefine-macro"):
        kept.append(f"-U{value}")
    elif flag in ("-std", "--std"):
        kept.append(f"-std={value}")
    elif flag in _REGISTER_CAP:
        kept.append(f"-maxrregcount={value}")
    elif given == f"{flag} {value}":  # `-rdc true`: nvcc takes it as -rdc=true, one word, as an ACF records it
        kept.append(f"{flag}={value}")
    else:
        kept.append(given)


def _folder(path: Path) -> str:
    """An include folder as the command names it (/usr/local/cuda/include, not cuda-13.0): absolute,
    normalised, links kept where that names the same folder; checks resolve it (`kernel`)."""
    plain = os.path.normpath(path)
    return plain if Path(plain).resolve() == path.resolve() else str(path.resolve())


def _define_way_out(value: str, problem: str) -> str:
    """Why a -D of the command reaches no build of compileiq, and what a project can do about it."""
    name = value.partition("=")[0]
    if macro_problem(name) is not None:  # not a macro at all: nothing builds with it, nvcc's preprocessor neither
        return f"{problem}: a -D names a macro (-DNAME or -DNAME=VALUE); nvcc's preprocessor refuses it too: fix the command"
    return (f"{problem.partition(' (allowed:')[0]}, which nvcc would hand to /bin/sh: refused; if the code builds "
            f"without it, give {name} a default in the source (#ifndef {name}) and tune from a copy of the "
            "compilation database without it, or without --compile-commands")


def _tuned_flags(space: SearchSpace) -> set[str]:
    """The option names (before any '=') that the search space's nvcc parameters render."""
    names: set[str] = set(shipped.NVCC_SPELLINGS)
    for parameter in space.parameters:
        if parameter.stage != "frontend" or parameter.name.startswith("define."):
            continue
        for value in parameter.values:
            names.update(token.partition("=")[0] for token in parameter.argv(value))
    return names
