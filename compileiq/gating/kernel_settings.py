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
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from compileiq.core.errors import UsageError
from compileiq.core.space_files import load_space
from compileiq.gating.rules import BaseFlagDifference
from compileiq.results import acf as acf_file
from compileiq.source.base_flags import BaseFlags
from compileiq.source.kernel import load_spec, with_base_flags
from compileiq.source.shipped import under_register_cap
from compileiq.source.spec import KernelSpec, ShippedBuild, resolved


@dataclass(frozen=True)
class KernelSettings:
    spec: KernelSpec  # tune.toml, with the compile command's base flags where one was read
    origin: str  # where its base flags come from, for the finding's text
    tune_toml: KernelSpec  # tune.toml alone
    command_read: bool = False  # the compile command the ACF's [baseline] names was read now
    shipped: ShippedBuild | None = None  # what that command ships now (the baseline's reference), where read


def current(found: Path, acf: acf_file.Acf) -> KernelSettings:
    """The kernel's settings as `tune` would read them now (KernelError/UsageError for a bad tune.toml)."""
    spec = load_spec(found, arch=acf.arch)
    shipped = acf.shipped
    if shipped is None:
        return KernelSettings(spec, "tune.toml", spec)
    from compileiq.source.compile_db import read_command

    try:
        if not shipped.path:
            raise UsageError("the ACF names no compilation database")
        database = Path(shipped.path) if Path(shipped.path).is_absolute() else acf.path.parent / shipped.path
        command = read_command(database, found, load_space(acf.nvcc_version))
        with_command = with_base_flags(spec, command.base_flags, f"{database}: the command for {found.name}")
    except UsageError:  # none named, gone (a CI clone without the build folder), or no longer a command
        # compileiq reads: nothing to hold the ACF to here; its flags and baseline are used as it records
        # them, and `shipped_command.shipped_command_hits` says the compile command was not checked
        return KernelSettings(as_recorded(spec, acf), "the ACF's [base] (its compile command not checked)", spec)
    now = under_register_cap(command.shipped, with_command.nvcc_flags)
    return KernelSettings(with_command, f"tune.toml and {shipped.origin}", spec, True, now)


def as_recorded(spec: KernelSpec, acf: acf_file.Acf) -> KernelSpec:
    """tune.toml's settings with the ACF's recorded base flags: the build `flags --all` gives."""
    if not (acf.base.flags or acf.base.include_dirs):
        return spec
    return with_base_flags(spec, acf.base.as_args(), f"{acf.path}: base.nvcc_flags")


def difference(own: KernelSpec, recorded: BaseFlags) -> BaseFlagDifference:
    """The ACF's recorded base flags against the kernel's own: flags compared as canonical text,
    include folders as the folders they name from the kernel's folder."""
    theirs = set(own.nvcc_flags.flags)
    extra = [flag for flag in recorded.flags if flag not in theirs]
    folders = set(own.include_dirs)
    for given in recorded.include_dirs:
        try:
            folder = resolved(own.source.parent / given, "include folder")
        except UsageError:
            folder = None
        if folder not in folders:
            extra.append(f"-I{given}")
    missing = [flag for flag in own.nvcc_flags.flags if flag not in set(recorded.flags)]
    return BaseFlagDifference(tuple(dict.fromkeys(extra)), tuple(dict.fromkeys(missing)))
