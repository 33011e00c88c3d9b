"""Base flags: the nvcc flags a kernel needs to build at all (``nvcc_flags`` in tune.toml).

Nothing here trusts its input: every flag passes an allow-list of known-safe nvcc options, every
``-D`` the macro allow-list of the search space and every path the path allow-list, before any
process starts (nvcc runs its sub-tools through /bin/sh). Tuned settings (fast math, ptxas -O, ...)
are the search's to choose, so they are not base flags. nvcc's host -O level is one where it
changes the device code (it defines __OPTIMIZE__ in the device pass: `build.host_check`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from compileiq.core.defines import define_arg_problem, macro_problem
from compileiq.core.errors import UsageError
from compileiq.source.flag_groups import order_group

# Characters a path handed to nvcc may hold: no shell text, no list separator (comma), no space.
_PATH = re.compile(r"[A-Za-z0-9_.+\-/@]+")
_STD = re.compile(r"c\+\+(03|11|14|17|20)")
_DIAG = re.compile(r"\d+(,\d+)*")

# Flags taken as they are, by their spellings -> the canonical spelling recorded.
_PLAIN = {
    "--extended-lambda": "--extended-lambda", "-extended-lambda": "--extended-lambda",
    "--expt-extended-lambda": "--extended-lambda", "-expt-extended-lambda": "--extended-lambda",
    "--expt-relaxed-constexpr": "--expt-relaxed-constexpr",
    "-expt-relaxed-constexpr": "--expt-relaxed-constexpr",
    "-lineinfo": "-lineinfo", "--generate-line-info": "-lineinfo",
    "-rdc=true": "-rdc=true", "-rdc=false": "-rdc=false", "-dc": "-rdc=true", "--device-c": "-rdc=true",
    "--relocatable-device-code=true": "-rdc=true", "--relocatable-device-code=false": "-rdc=false",
    "-w": "-w", "--disable-warnings": "-w",
    "-Wno-deprecated-gpu-targets": "-Wno-deprecated-gpu-targets",
    "-Wno-deprecated-declarations": "-Wno-deprecated-declarations",
    "--default-stream=per-thread": "--default-stream=per-thread",
    "--default-stream=legacy": "--default-stream=legacy",
    # nvcc's host optimisation level: a base flag only where it changes the device code (`host_check`);
    # never -O0, which would lower the level of the build it is pasted into
    "-O1": "-O1", "-O2": "-O2", "-O3": "-O3",
}  # fmt: skip
# Options whose value may also be the next argument: spelling -> canonical prefix.
_VALUED = {
    "-std": "-std=", "--std": "-std=", "-rdc": "-rdc=", "--relocatable-device-code": "-rdc=",
    "-I": "-I", "--include-path": "-I", "-isystem": "-isystem=", "--system-include": "-isystem=",
    "-D": "-D", "--define-macro": "-D",
    "-U": "-U", "--undefine-macro": "-U", "--diag-suppress": "--diag-suppress=",
    "-diag-suppress": "--diag-suppress=", "--default-stream": "--default-stream=", "-default-stream": "--default-stream=",
    "-maxrregcount": "-maxrregcount=", "--maxrregcount": "-maxrregcount=",
}
ALLOWED = ("-std=c++NN, -rdc=true, --extended-lambda, --expt-relaxed-constexpr, -lineinfo, -w, "
           "--diag-suppress=N, --default-stream=..., -maxrregcount=N, -I DIR, -isystem DIR, -D NAME[=VALUE], "
           "-U NAME, -O1..-O3")
SYSTEM = "-isystem="  # a system include folder's one-word spelling (nvcc takes it; searched after every -I)


def host_level(flag: str) -> bool:
    """Whether `flag` is a host optimisation level a build may be given (-O1..-O3; never -O0, which
    lowers it): it reaches the device code only through the macros the host compiler predefines in
    the device pass (__OPTIMIZE__)."""
    return flag in ("-O1", "-O2", "-O3")


class BaseFlagError(UsageError):
    """A base flag that is not on the allow-list, or carries an unsafe value."""


@dataclass(frozen=True)
class BaseFlags:
    """Validated base flags in canonical spelling; include folders kept apart (they are mapped
    into the source bundle, so a worker with no shared disk finds them)."""

    flags: tuple[str, ...] = ()  # e.g. ("-rdc=true", "-std=c++20", "-DUSE_X=1")
    include_dirs: tuple[str, ...] = ()  # the -I folders as given
    # the -isystem folders as given: searched after every -I folder, so a header in both comes from
    # the -I one; kept apart from them, never rewritten to -I (that would change which header is read)
    system_dirs: tuple[str, ...] = ()

    @property
    def register_cap(self) -> str | None:
        """nvcc's -maxrregcount=N among them (it caps the front end and ptxas: the search's
        ptxas.maxrregcount could not change what a build with it gets), else None."""
        return next((flag for flag in reversed(self.flags) if flag.startswith("-maxrregcount=")), None)  # nvcc: the last

    @property
    def relocatable(self) -> bool:
        """-rdc=true: the PTX is assembled with ptxas --compile-only."""
        return "-rdc=true" in self.flags

    def as_args(self) -> tuple[str, ...]:
        """Every flag as nvcc arguments, include folders last (what a rebuild needs)."""
        return self.flags + tuple(f"-I{d}" for d in self.include_dirs) + tuple(SYSTEM + d for d in self.system_dirs)


def ptxas_cap_args(flags: Iterable[str]) -> tuple[str, ...]:
    """What nvcc hands ptxas of its own -maxrregcount=N (it caps the front end, cicc, and ptxas
    alike): --maxrregcount=N, given after any -Xptxas setting, so a build in two stages does the same."""
    return tuple(f"--maxrregcount={flag.partition('=')[2]}" for flag in flags if flag.startswith("-maxrregcount="))


# What nvcc hands ptxas of the allowed base flags (`nvcc -dryrun`, 13.0) -> ptxas's spelling. The
# others reach no ptxas option, but -rdc=true (--compile-only) and -maxrregcount (`ptxas_cap_args`);
# -G (--device-debug and more) is refused; a searched setting's own is its `ptxas_render`.
_FORWARDED = {"-w": "-w", "-lineinfo": "--generate-line-info"}


def ptxas_forwarded_args(flags: Iterable[str]) -> tuple[str, ...]:
    """What nvcc hands ptxas of the base flags `flags` besides its register cap (`ptxas_cap_args`):
    -lineinfo is ptxas's --generate-line-info, -w its -w, so that a build in two stages (nvcc -ptx,
    then ptxas with `flags --stage ptxas --all`) makes the cubin nvcc makes. Not handed to the
    tuning's own ptxas runs: neither changes the code they score."""
    return tuple(dict.fromkeys(_FORWARDED[flag] for flag in flags if flag in _FORWARDED))


CAPPED = "ptxas.maxrregcount"  # what nvcc's -maxrregcount among the base flags takes out of the search


def cap_note(flags: BaseFlags) -> list[str]:
    """The line `space` and `tune` print when the base flags hold nvcc's -maxrregcount: it caps the
    front end (cicc) and ptxas alike, and nvcc hands ptxas its own cap after any -Xptxas one, so a
    searched ptxas.maxrregcount would be scored at a cap no build with these flags gets."""
    cap = flags.register_cap
    if cap is None:
        return []
    note = (f"{CAPPED} is not searched: the base flags hold nvcc's {cap}, which caps registers for the front end "
            "(cicc) and ptxas alike and overrides any -Xptxas cap; to tune the cap, take it out of the build")
    return [note]


def overridden_cap(flags: BaseFlags, controls: Mapping[str, object], subject: str = "which") -> str:
    """Where the base flags hold nvcc's -maxrregcount=N and `controls` (an ACF's) set ptxas.maxrregcount:
    the clause that says the ACF's cap is overridden (nvcc 13.0 `-dryrun`: `ptxas --maxrregcount=40
    -maxrregcount=32`, nvcc's own last), so a build of the command with the ACF's flags gets N; else "".
    `subject` begins it ("which" after the cap itself, "the kernel's -maxrregcount=N" as a clause of its own)."""
    cap, chosen = flags.register_cap, controls.get(CAPPED, "default")
    if cap is None or chosen == "default":
        return ""
    return (f"{subject} overrides the ACF's {CAPPED} = {chosen} (-Xptxas=--maxrregcount={chosen}): nvcc hands ptxas its "
            f"own cap after any -Xptxas one, so the ACF's flags applied to this build cap it at {cap.partition('=')[2]} "
            "registers, the build the gate measured")


def replaced_cap(flags: BaseFlags, recorded: BaseFlags, subject: str = "which") -> str:
    """Where the kernel's base flags (`flags`) and an ACF's recorded ones both hold nvcc's
    -maxrregcount, at different caps: the clause that says the kernel's replaces the ACF's (the build
    that ships has the kernel's own; the ACF's [base] is a record, `as_applied`), begun by `subject`
    as `overridden_cap`'s; else ""."""
    cap, theirs = flags.register_cap, recorded.register_cap
    if cap is None or theirs is None or cap == theirs:
        return ""
    return (f"{subject} replaces the ACF's {theirs}: the ACF's flags applied to this build cap it at "
            f"{cap.partition('=')[2]} registers, the build the gate measured")


def dropped_cap(flags: BaseFlags, recorded: BaseFlags, subject: str = "so") -> str:
    """Where an ACF's recorded base flags hold nvcc's -maxrregcount and the kernel's (`flags`) hold
    none: the clause that says the ACF's build was measured without it (the build that ships is the
    kernel's with the ACF's flags, `as_applied`), begun by `subject`; else ""."""
    theirs = recorded.register_cap
    if theirs is None or flags.register_cap is not None:
        return ""
    return (f"{subject} the ACF's build was measured without it: the ACF's flags applied to this build give no "
            f"register cap, not the ACF's recorded {theirs}")


def path_problem(path: str) -> str | None:
    """Why ``path`` may not be handed to nvcc (None: it may)."""
    if not _PATH.fullmatch(path):
        bad = next((c for c in path if not _PATH.fullmatch(c)), "")
        return f"path {path!r} contains {bad!r} (allowed: letters, digits and _ . + - / @)"
    if any(part.startswith("-") for part in path.split("/")):
        return f"path {path!r} has a part starting with '-'"
    return None


def quoted_path_problem(path: str) -> str | None:
    """Why ``path`` may not be named in a command compileiq prints, shell-quoted, and never runs
    itself (a compilation database's folder may hold a space), or None."""
    if not path.isprintable() or len(path) > 4096:
        return f"path {path[:80]!r} is not printable text of at most 4096 characters"
    if any(part.startswith("-") for part in path.split("/")):
        return f"path {path[:80]!r} has a part starting with '-'"
    return None


def check_path(path: str, where: str) -> str:
    if problem := path_problem(path):
        raise BaseFlagError(f"{where}: {problem}")
    return path


def parse_base_flags(args: Sequence[str], where: str) -> BaseFlags:
    """Validate nvcc arguments as base flags (from tune.toml's nvcc_flags, or a compile command).

    ``where`` names the source in the one-line error (e.g. "k/tune.toml: nvcc_flags").
    """
    flags: list[str] = []
    includes: list[str] = []
    system: list[str] = []
    for token in _canonical(args, where):
        if token.startswith("-I"):
            includes.append(check_path(token[2:], where))
        elif token.startswith(SYSTEM):
            system.append(check_path(token[len(SYSTEM):], where))
        else:
            _keep_effective(flags, token)
    if "-rdc=true" in flags and "-rdc=false" in flags:
        raise BaseFlagError(f"{where}: both -rdc=true and -rdc=false")
    return BaseFlags(tuple(flags), tuple(includes), tuple(dict.fromkeys(system)))


def as_built(flags: Iterable[str]) -> tuple[str, ...]:
    """A command's base flags (`compile_db`'s kept ones, as canonical tokens) each once, in an order
    that builds what nvcc builds from every copy, as `parse_base_flags` reads them: a repeat kept last
    where another flag of its group came between (`_keep_effective`), an include folder at its first
    place (the compiler searches the first). What every view of the shipped build records and prints
    (`[baseline]`, tune's "fixed, applied to every build"), so that it reads as `[base]` does."""
    out: list[str] = []
    for flag in flags:
        if flag.startswith(("-I", SYSTEM)):
            out += [flag] if flag not in out else []
        else:
            _keep_effective(out, flag)
    return tuple(out)


def _keep_effective(flags: list[str], token: str) -> None:
    """Add `token` to `flags` once, so that the kept flags build what nvcc builds from every copy: a
    repeat stays at its first place unless another flag of its group came between (`-std=c++14
    -std=c++17 -std=c++14` is C++14 to nvcc, the last of its group: kept at the end, where keeping the
    first copy built C++17). A repeat that changes nothing keeps its first place, and so the study
    identity it had."""
    if token not in flags:
        flags.append(token)
        return
    group = order_group(token)
    if any(order_group(other) == group and other != token for other in flags[flags.index(token) + 1:]):
        flags.remove(token)
        flags.append(token)


def _canonical(args: Sequence[str], where: str) -> Iterator[str]:
    items = iter(args)
    for arg in items:
        if not isinstance(arg, str) or not arg:
            raise BaseFlagError(f"{where}: flags must be non-empty strings")
        if arg in _PLAIN:
            yield _PLAIN[arg]
            continue
        spelling, value = _split(arg)
        if spelling is None:
            raise BaseFlagError(f"{where}: {arg!r} is not an allowed base flag (allowed: {ALLOWED})")
        if value is None:
            value = next(items, None)
            if value is None:
                raise BaseFlagError(f"{where}: {arg!r} needs a value")
        yield _checked(_VALUED[spelling], value, arg, where)


def _split(arg: str) -> tuple[str | None, str | None]:
    """(the option's spelling, its value in the same argument or None)."""
    if arg in _VALUED:
        return arg, None
    head, eq, tail = arg.partition("=")
    if eq and head in _VALUED and head not in ("-I", "-D", "-U"):
        return head, tail
    for short in ("-I", "-D", "-U"):
        if arg.startswith(short) and len(arg) > 2 and not arg.startswith("-isystem"):
            return short, arg[2:]
    if arg.startswith("-isystem") and len(arg) > len("-isystem"):
        return "-isystem", arg[len("-isystem"):]
    return None, None


def _checked(prefix: str, value: str, arg: str, where: str) -> str:
    token = prefix + value
    problem: str | None = None
    if prefix == "-std=" and not _STD.fullmatch(value):
        problem = f"{arg!r}: unknown C++ standard {value!r}"
    elif prefix == "-rdc=" and value not in ("true", "false"):
        problem = f"{arg!r}: -rdc takes true or false"
    elif prefix == "-D":
        problem = define_arg_problem(token)
    elif prefix == "-U":
        problem = macro_problem(value)
    elif prefix == "--diag-suppress=" and not _DIAG.fullmatch(value):
        problem = f"{arg!r}: --diag-suppress takes warning numbers"
    elif prefix == "--default-stream=" and value not in ("per-thread", "legacy", "null"):
        problem = f"{arg!r}: --default-stream takes per-thread, legacy or null"
    elif prefix == "-maxrregcount=" and not (value.isascii() and value.isdigit() and 1 <= int(value) <= 255):
        problem = f"{arg!r}: -maxrregcount takes a register count from 1 to 255"
    if problem:
        raise BaseFlagError(f"{where}: {problem}")
    return token
