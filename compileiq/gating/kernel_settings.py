"""The kernel's own current settings, which the gate holds an ACF's recorded base flags to.

An ACF is untrusted: its `[base] nvcc_flags` (a register cap, a -D or -U of a fixed macro) change
the code as much as its tuned settings do. The gate takes the base flags from where `tune` took
them: tune.toml beside the kernel and, where the ACF's `[baseline]` names a compilation database
that is still there, the kernel's compile command in it. What the ACF records beyond (or short of)
those is a stale (or forged) setting, and the baseline it is judged against is built without it.
Where that compilation database is not there (a CI clone without the build folder) or cannot be
read, nothing can be checked: the ACF's own flags and baseline are used, with a warning.
Likewise the shipped build the baseline reproduces is the one that command gives now, not the
one the ACF's `[baseline]` says it gave: a forged or outdated `-Xptxas -O0` there would otherwise
let the ACF lower the optimisation level of the build that ships.

Which compilation database that is: the gate's `--compile-commands` where given (the database that
ships), else the one the ACF's `[baseline]` names (which the ACF chose: `database` says which, for
the report); it is read once per ACF (`shipped_read`), and these settings are that reading's. A command that now ships exactly the ACF's choice is the ACF applied, not a changed
build: its baseline is then the one the ACF records (the build before the change).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from compileiq.core.errors import UsageError
from compileiq.gating.rules import BaseFlagDifference
from compileiq.gating.shipped_command import applies_choice
from compileiq.gating.shipped_read import ShippedRead
from compileiq.results import acf as acf_file
from compileiq.source.base_flags import SYSTEM, BaseFlags, parse_base_flags
from compileiq.source.kernel import with_base_flags
from compileiq.source.shipped import under_register_cap
from compileiq.source.spec import KernelSpec, ShippedBuild, resolved


@dataclass(frozen=True)
class KernelSettings:
    spec: KernelSpec  # tune.toml, with the compile command's base flags where one was read
    origin: str  # where its base flags come from, for the finding's text
    tune_toml: KernelSpec  # tune.toml alone
    command_read: bool = False  # the compile command the ACF's [baseline] names was read now
    shipped: ShippedBuild | None = None  # what that command ships now (the baseline's reference), where read
    database: Path | None = None  # the compilation database the ACF is held to (None: tune.toml alone)
    given: bool = False  # that database is the gate's --compile-commands (else the ACF's [baseline] path)
    applied: bool = False  # its command now ships exactly the ACF's choice: the baseline is the recorded one


def current(acf: acf_file.Acf, spec: KernelSpec, read: ShippedRead) -> KernelSettings:
    """The kernel's settings as `tune` would read them now: `spec` is tune.toml's (`load_spec`),
    `read` the compile command the ACF is held to, read once when the gate located it."""
    shipped, database, given = acf.shipped, read.database, read.given
    if database is None:
        if shipped is None:
            return KernelSettings(spec, "tune.toml", spec)
        return KernelSettings(as_recorded(spec, acf), "the ACF's [base] (its compile command not checked)", spec)
    command, with_command = read.command, read.with_command
    if command is None or with_command is None:  # gone (a CI clone without the build folder), or no longer
        # a command compileiq reads: nothing to hold the ACF to here; its flags and baseline are used as it
        # records them, and `shipped_command.shipped_command_hits` says the compile command was not checked
        if shipped is None:  # the kernel is not in the database given: it ships as tune.toml builds it
            return KernelSettings(spec, "tune.toml", spec, database=database, given=given)
        return KernelSettings(as_recorded(spec, acf), "the ACF's [base] (its compile command not checked)", spec,
                              database=database, given=given)
    now = under_register_cap(command.shipped, with_command.nvcc_flags)
    origin = f"tune.toml and {database}" if given or shipped is None else f"tune.toml and {shipped.origin}"
    if shipped is not None and applies_choice(acf, as_recorded(spec, acf), with_command, now, command.arch):
        recorded = under_register_cap(shipped, with_command.nvcc_flags)  # the build before the ACF was applied
        return KernelSettings(with_command, origin, spec, True, recorded, database, given, applied=True)
    return KernelSettings(with_command, origin, spec, True, now, database, given)


def as_recorded(spec: KernelSpec, acf: acf_file.Acf) -> KernelSpec:
    """tune.toml's settings with the ACF's recorded base flags: the build `flags --all` gives."""
    if not (acf.base.flags or acf.base.include_dirs or acf.base.system_dirs):
        return spec
    return with_base_flags(spec, acf.base.as_args(), f"{acf.path}: base.nvcc_flags")


def as_applied(own: KernelSpec, recorded: KernelSpec) -> KernelSpec | None:
    """The ACF's build where its recorded base flags (`recorded`, `as_recorded`) are not the kernel's
    (`own`), as applying its flags to the kernel's build gives it: with the kernel's nvcc -maxrregcount
    where the ACF records none or another, and none where the kernel gives none. nvcc hands ptxas its
    own cap after any -Xptxas one (13.0 `-dryrun`: `ptxas --maxrregcount=40 -maxrregcount=32`) and
    cicc it alone, so the ACF's ptxas.maxrregcount never ships beside it; and the build has the
    kernel's own -maxrregcount (or none), not the one the ACF records (`base_flags.replaced_cap`,
    `base_flags.dropped_cap`: `flags` never gives the ACF's base flags). None where that build's base
    flags are the kernel's own."""
    cap, theirs = own.nvcc_flags.register_cap, recorded.nvcc_flags.register_cap
    if theirs == cap:
        return recorded
    kept = tuple(flag for flag in recorded.nvcc_flags.flags if not flag.startswith("-maxrregcount="))
    flags = replace(recorded.nvcc_flags, flags=(*kept, *([cap] if cap is not None else [])))
    return None if not difference(own, flags) else replace(recorded, nvcc_flags=flags)


def as_tuned(recorded: KernelSpec, acf: acf_file.Acf) -> KernelSpec:
    """`recorded` (`as_recorded`) with exactly the ACF's base flags, none of tune.toml's since: the
    build whose sources its `[kernel] source_sha256` hashes (the bundle's hash holds its base flags and
    include folders with the files). That hash again from this spec is the same sources, read as tuned."""
    where = f"{acf.path}: base.nvcc_flags"
    def folders(given: tuple[str, ...]) -> set[Path]:
        return {resolved(recorded.source.parent / d, "include folder") for d in given}

    flagged = folders((*recorded.nvcc_flags.include_dirs, *recorded.nvcc_flags.system_dirs))  # -I and -isystem alike
    system = folders(acf.base.system_dirs)
    kept = folders(acf.base.include_dirs) | system
    dirs = tuple(d for d in recorded.include_dirs if d not in flagged or d in kept)  # tune.toml's include_dirs stay
    return replace(recorded, nvcc_flags=parse_base_flags(acf.base.as_args(), where), include_dirs=dirs,
                   system_dirs=tuple(d for d in dirs if d in system))


def difference(own: KernelSpec, recorded: BaseFlags) -> BaseFlagDifference:
    """The ACF's recorded base flags against the kernel's own: flags compared as canonical text,
    include folders as the folders they name from the kernel's folder."""
    theirs = set(own.nvcc_flags.flags)
    extra = [flag for flag in recorded.flags if flag not in theirs]
    folders = set(own.include_dirs) - set(own.system_dirs)
    for system, dirs in ((False, recorded.include_dirs), (True, recorded.system_dirs)):
        for given in dirs:
            try:
                folder = resolved(own.source.parent / given, "include folder")
            except UsageError:
                folder = None
            if folder not in (set(own.system_dirs) if system else folders):
                extra.append(f"{SYSTEM if system else '-I'}{given}")
    missing = [flag for flag in own.nvcc_flags.flags if flag not in set(recorded.flags)]
    return BaseFlagDifference(tuple(dict.fromkeys(extra)), tuple(dict.fromkeys(missing)))
