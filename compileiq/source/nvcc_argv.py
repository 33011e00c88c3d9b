"""An nvcc command line as `compile_db` reads it: options files expanded (``--options-file``,
``-optf``: one level), each argument lexed into (flag, value, as given) the way nvcc 13.0 pairs an
option with its value, and which options a ``-forward-unknown-...`` flag hands to the host compiler.
What the options mean for the build is `compile_db`'s; nothing here runs or opens anything but the
options files the command names."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path

from compileiq.core import bounded_read
from compileiq.core.errors import UsageError
from compileiq.core.text import printable
from compileiq.source.nvcc_options import NVCC_OPTIONS

# Options whose value is the next argument when not joined with "=" (or, for short ones, attached).
_WITH_VALUE = {"-o", "-x", "-MF", "-MT", "-MQ", "-ccbin", "--compiler-bindir", "-Xcompiler",
               "--compiler-options", "-Xlinker", "--linker-options", "-Xptxas", "--ptxas-options",
               "-Xnvlink", "--nvlink-options", "-Xarchive", "--archive-options", "-I", "--include-path",
               "-isystem", "--system-include", "-D", "--define-macro", "-U", "--undefine-macro",
               "-std", "--std", "-arch", "--gpu-architecture", "-code", "--gpu-code", "-gencode",
               "--generate-code", "-include", "--pre-include", "-L", "--library-path", "-l",
               "--library", "-maxrregcount", "--maxrregcount", "-odir", "--output-directory",
               "-MD", "-MMD", "--optimize", "--ftz", "-ftz", "--prec-div", "-prec-div", "--prec-sqrt",
               "-prec-sqrt", "--fmad", "-fmad", "--jump-table-density", "-jtd", "--threads", "-t",
               "--split-compile", "-split-compile", "--keep-dir", "-keep-dir", "--Werror", "-Werror",
               "--machine", "-m", "--diag-error", "-diag-error", "--diag-warn", "-diag-warn", "--dopt", "-dopt",
               # nvcc's pass-throughs to its own tools that `nvcc --help` does not list: their value is theirs
               "-Xcicc", "--cicc-options", "-Xcudafe", "--cudafe-options", "-Xfatbin", "--fatbin-options",
               "-Xnvasm", "--nvasm-options", "-Xnvdisasm", "--nvdisasm-options",
               # the rest of `nvcc --help`'s options with a value: nvcc 13.0 takes each in two words too
               "--output-file", "--dependency-output", "--archiver-binary", "-arbin", "--cudart", "-cudart",
               "--cudadevrt", "-cudadevrt", "--libdevice-directory", "-ldir", "--target-directory", "-target-dir",
               "--optimization-info", "-opt-info", "-O", "--Ofast-compile", "-Ofc", "--ftemplate-backtrace-limit",
               "-ftemplate-backtrace-limit", "--ftemplate-depth", "-ftemplate-depth", "--x",
               "--static-global-template-stub", "-static-global-template-stub", "--device-entity-has-hidden-visibility",
               "-device-entity-has-hidden-visibility", "--split-compile-extended", "-split-compile-extended",
               "--fdevice-time-trace", "-fdevice-time-trace", "--time", "-time", "--run-args", "-run-args",
               "--input-drive-prefix", "-idp", "--dependency-drive-prefix", "-ddp", "--drive-prefix", "-dp",
               "--dependency-target-name", "--relocatable-device-code", "-rdc", "--entries", "-e",
               "--default-stream", "-default-stream", "--diag-suppress", "-diag-suppress", "--host-linker-script",
               "-hls", "--brief-diagnostics", "-brief-diag", "--device-stack-protector", "-device-stack-protector",
               "--compress-mode", "-compress-mode", "--frandom-seed", "-frandom-seed", "--sanitize", "-sanitize"}
# nvcc hands the options it does not know to the host compiler (or linker) under these, as CMake's
# commands say: such an option is a host option, set aside like -Xcompiler's.
FORWARD_UNKNOWN = {"-forward-unknown-to-host-compiler", "--forward-unknown-to-host-compiler",
                   "-forward-unknown-to-host-linker", "--forward-unknown-to-host-linker",
                   "-forward-unknown-opts", "--forward-unknown-opts"}
_SHORT_ATTACHED = ("-I", "-D", "-U", "-O", "-L")
_ATTACHED_FIRST = ("-isystem", "-I", "-D", "-U")  # the value joined to the option, whatever it holds
# nvcc takes -lNAME as -l NAME (a library to link), except its own options spelled with -l.
_LINK_LIBRARY_ATTACHED = re.compile(r"-l(?!ineinfo$|to$|toir$|ink$|ib$|dir$)(.+)")
_THREADS_ATTACHED = re.compile(r"-t(\d+)")  # nvcc takes -t4 as -t 4 (not -t in general: -time is another option)
_NO_VALUE_DASHES = {"-MD", "-MMD"}  # gcc spells these without a value; nvcc's -MD takes none either

_OPTIONS_FILE = {"--options-file", "-optf"}
MAX_OPTIONS_FILE_BYTES = 2**20
MAX_SHOWN_WORD = 80  # shipped.MAX_SHOWN: how long a word an error quotes before it cuts it


class OptionsFileError(UsageError):
    """An options file of the command that cannot be read, or holds more than nvcc options."""


def expand_options_files(args: Sequence[str], directory: Path,
                         where: str) -> tuple[list[str], dict[str, str]]:
    """The arguments with each ``--options-file FILE[,FILE]`` (``-optf``) replaced by the file's
    arguments: CMake 3.29.5+ puts a CUDA target's -I folders in ``includes_CUDA.rsp`` this way.
    One level: an options file that names another is left to the allow-list to refuse. With each
    word taken from a file, how an error names it instead of showing it (`unshown`)."""
    out: list[str] = []
    hidden: dict[str, str] = {}
    it = iter(args)
    for arg in it:
        flag, eq, value = arg.partition("=")
        if flag not in _OPTIONS_FILE:
            out.append(arg)
            continue
        for name in (value if eq else next(it, "")).split(","):
            tokens = _options_file(directory / name, where)
            for n, token in enumerate(tokens, 1):
                hidden.setdefault(token, f"argument {n} of --options-file {directory / name}")
            out.extend(tokens)
    return out, hidden


def unshown(message: str, hidden: dict[str, str]) -> str:
    """An error message with each word of an options file in it named by where it is (`argument 3
    of --options-file FILE`), not shown: the file may be any file the command names; quoted (as
    repr and `shipped.shown` cut them) or bare, and bare only as a whole word (`_BOUND` either side),
    never inside another (an options file's `cu` is no part of `reduction.cu`)."""
    named: dict[str, str] = {}
    for token, name in hidden.items():
        cut = printable(token)
        for form in (repr(token), repr(cut), repr(cut[:MAX_SHOWN_WORD] + "..."), token, cut):
            if len(form.strip("'\"")) >= 2:
                named.setdefault(form, name)
    if not named:
        return message
    forms = sorted(named, key=len, reverse=True)  # one pass, longest first: nothing is replaced twice
    pattern = "|".join(re.escape(form) if form[:1] in "'\"" else rf"(?<!{_BOUND}){re.escape(form)}(?!{_BOUND})"
                       for form in forms)
    return re.sub(pattern, lambda m: named[m[0]], message)


_BOUND = r"""[^\s'",=:;()\[\]]"""  # what may not stand next to a bare word: it would be part of another


def _options_file(path: Path, where: str) -> list[str]:
    try:
        tokens = shlex.split(bounded_read.read_text(path, MAX_OPTIONS_FILE_BYTES))
    except bounded_read.FileReadError as error:
        if error.problem == "missing":
            raise OptionsFileError(f"{where}: its --options-file {path} is missing: run the build's configure step "
                                   "(cmake) first, or configure with -DCMAKE_CUDA_USE_RESPONSE_FILE_FOR_INCLUDES=OFF"
                                   ) from None
        if error.problem == "not-regular":
            raise OptionsFileError(f"{where}: --options-file {path} is {error.kind}, not a file of arguments") from None
        raise OptionsFileError(f"{where}: --options-file {path} {error.detail}") from None
    except ValueError as error:  # shlex: an unclosed quote
        raise OptionsFileError(f"{where}: --options-file {path}: {' '.join(str(error).split())}") from None
    # A file of nvcc options holds options and their values only. Anything else is not echoed: the
    # file may be any file the command names (a password file's first line would be shown).
    if stray := next((n for n, (flag, _, _) in enumerate(options(tokens), 1) if not flag), None):
        raise OptionsFileError(f"{where}: --options-file {path} is not a file of nvcc options (argument {stray} is "
                               "neither an option nor an option's value; not shown)")
    return tokens


def options(args: Sequence[str]) -> Iterator[tuple[str, str, str]]:
    """(flag, value, as given) for each option; a positional argument has flag ""."""
    it = iter(args)
    for arg in it:
        if not arg.startswith("-"):
            yield "", arg, arg
            continue
        attached = next((p for p in _ATTACHED_FIRST if arg.startswith(p) and len(arg) > len(p)), None)
        if attached is not None:  # -DNAME=VALUE: its "=" is the macro's; -isystem=DIR's is nvcc's
            rest = arg[len(attached):]
            yield attached, rest.removeprefix("=") if attached == "-isystem" else rest, arg
            continue
        flag, eq, value = arg.partition("=")
        if eq:
            yield flag, value, arg
            continue
        short = next((p for p in _SHORT_ATTACHED if arg.startswith(p) and len(arg) > len(p)), None)
        if threads := _THREADS_ATTACHED.fullmatch(arg):
            yield "-t", threads[1], arg
        elif library := _LINK_LIBRARY_ATTACHED.fullmatch(arg):
            yield "-l", library[1], arg
        elif short is not None and arg not in _WITH_VALUE and not arg.startswith("--"):
            yield short, arg[len(short):], arg
        elif arg in _WITH_VALUE and arg not in _NO_VALUE_DASHES:
            following = next(it, "")
            yield arg, following, f"{arg} {following}"
        else:
            yield arg, "", arg


def host_compilers(flag: str) -> bool:
    """Whether a -forward-unknown-... flag hands this option to the host compiler: an option nvcc
    does not take, listed or not. Never an -X... pass-through (nvcc has more than it lists, -Xcicc
    among them, which changes the device code): such an option is held to the base-flag allow-list."""
    return flag.startswith("-") and not flag.startswith("-X") and flag not in NVCC_OPTIONS


def forwarding(flag: str) -> str | None:
    """The -forward-unknown-... flag that made a stripped option the host compiler's, or None."""
    return flag if flag in FORWARD_UNKNOWN else None
