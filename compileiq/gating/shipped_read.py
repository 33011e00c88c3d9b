"""The compile command an ACF is held to, read once per ACF when the gate locates it.

Which compilation database: the gate's `--compile-commands` where given (the database that ships),
else the one the ACF's `[baseline]` names (relative to the ACF's folder), else none. The one
reading gives the kernel's base flags and the shipped build its baseline reproduces
(`kernel_settings.current`) and the `stale-settings` finding about that command
(`shipped_command.shipped_command_hits`): a database rewritten while the gate runs (a CMake
re-configure in the same CI job) cannot give one verdict a baseline from one reading and a finding
from another, and what counts as gone, not a file or unreadable is decided here alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from compileiq.build.host_check import checked
from compileiq.core.bounded_read import is_file
from compileiq.core.errors import UsageError
from compileiq.core.output_file import not_regular
from compileiq.core.records import first_line
from compileiq.core.space_files import load_space
from compileiq.gating.retune import path_from_here
from compileiq.results import acf as acf_file
from compileiq.source.compile_db import CompileCommand, read_command
from compileiq.source.compile_db_file import NoCommand, NotADatabase, OutputGone, SeveralCommands
from compileiq.source.kernel import with_base_flags
from compileiq.source.shipped_macros import (
    KernelDefaultError,
    check_shipped_macro_defaults,
    shipped_host_level,
)
from compileiq.source.spec import KernelSpec

Problem = Literal["outside", "not-regular", "gone", "not-a-database", "no-command", "unreadable"]


@dataclass(frozen=True)
class ShippedRead:
    """What the compilation database an ACF is held to said when the gate located the ACF."""

    database: Path | None = None  # --compile-commands, else the ACF's [baseline] path; None: neither
    given: bool = False  # the database is the gate's --compile-commands
    command: CompileCommand | None = None  # the kernel's command there, where one was read
    with_command: KernelSpec | None = None  # tune.toml with that command's base flags; None with `problem`
    problem: Problem | None = None
    detail: str = ""  # what the problem is, as the finding says it

    @property
    def shown(self) -> Path | None:
        """The database as a path from the folder the gate runs in (for messages)."""
        return None if self.database is None else Path(path_from_here(str(self.database)))


def named_database(acf: acf_file.Acf) -> Path | None:
    """The compilation database the ACF's [baseline] names (relative to the ACF's folder), or None."""
    if acf.shipped is None or not acf.shipped.path:
        return None
    return Path(acf.shipped.path) if Path(acf.shipped.path).is_absolute() else acf.path.parent / acf.shipped.path


def read_shipped(found: Path, acf: acf_file.Acf, compile_commands: Path | None, tune_toml: KernelSpec,
                 kernel_given: bool = False) -> ShippedRead:
    """Read the compile command for `found` once: in the gate's --compile-commands where given,
    else in the database the ACF's [baseline] names. Never raises for the database: a problem is
    part of the reading (the gate then holds the ACF to what it records, and says so).
    `kernel_given`: `found` is the gate's --kernel (the user's choice), not the ACF's word."""
    given = compile_commands is not None
    database = compile_commands if compile_commands is not None else named_database(acf)
    if database is None:
        return ShippedRead()
    shown = Path(path_from_here(str(database)))
    if not given and not _inside_tree(database, acf, found if kernel_given else None):  # the ACF is untrusted
        return ShippedRead(database, given, problem="outside", detail=_outside(acf, kernel_given, shown))
    if kind := not_regular(shown):  # never opened: a named pipe would block the reader
        return ShippedRead(database, given, problem="not-regular", detail=f"is {kind}, not a compilation database")
    if not is_file(shown):
        return ShippedRead(database, given, problem="gone", detail="is gone")
    try:
        output = acf.shipped.output or None if acf.shipped is not None else None  # the command tuned, of several
        try:
            command = read_command(shown, found, load_space(acf.nvcc_version), tune_toml, output)
        except OutputGone:  # that target renamed or gone: the commands left, if they read alike
            command = read_command(shown, found, load_space(acf.nvcc_version), tune_toml)
    except NotADatabase as error:  # not JSON, not a list of entries: it says nothing about the kernel
        return ShippedRead(database, given, problem="not-a-database", detail=first_line(str(error)))
    except NoCommand as error:  # the kernel is not built in that database (another configuration's)
        return ShippedRead(database, given, problem="no-command", detail=_said(error, given, shown, found))
    except UsageError as error:  # a command for the kernel that compileiq does not read
        return ShippedRead(database, given, problem="unreadable", detail=_said(error, given, shown, found))
    try:
        with_command = with_base_flags(tune_toml, command.base_flags, f"{shown}: the command for {found.name}")
        command, with_command = _host_checked(command, with_command)
    except UsageError as error:  # a base flag compileiq cannot take (an include folder gone)
        return ShippedRead(database, given, command, problem="unreadable", detail=_said(error, given, shown, found))
    return ShippedRead(database, given, command, with_command)


def _outside(acf: acf_file.Acf, kernel_given: bool, shown: Path) -> str:
    """Why a database the ACF names was not read, and what to pass: outside a git checkout the ACF's
    own folder is all it may name (`tune` writes store/, its database in build/ beside it)."""
    root, in_git = checkout(acf)
    also = " and the kernel's folder" if kernel_given else ""
    if in_git:
        return (f"is outside the ACF's checkout{also}, "
                "and was not read; pass --compile-commands to name the one that ships")
    folder = "" if (here := path_from_here(str(root))) == "." else f", {here}"
    return (f"is outside the ACF's folder{folder}{also}, "
            "which is in no git checkout (there an ACF's database is read only in its own folder), and was not read; "
            f"pass --compile-commands with the database that ships ({shown}, if that is it)")


def _host_checked(command: CompileCommand, spec: KernelSpec) -> tuple[CompileCommand, KernelSpec]:
    """The command and its base flags as `tune` reads them: MacroError where it gives no -D for a
    tuned macro whose kernel default is not tune.toml's first value (`tune` refuses such a command:
    the ACF's baseline is not what it builds); its set-aside host -O checked against the device code
    (`host_check`), so that an ACF whose build applies it is not called stale; at the arch the
    command builds, as `tune` checks it (a kernel may read __OPTIMIZE__ under one arch only)."""
    from compileiq.core.toolchain import find_toolchain

    as_built = replace(spec, shipped=command.shipped, arch=command.arch or spec.arch)
    level = shipped_host_level(as_built)  # the command's, as the shipped build has it
    found = checked(as_built, find_toolchain().nvcc)  # first: the baseline's flags hold the level where applied
    check_shipped_macro_defaults(found, find_toolchain().nvcc, level)  # a tuned macro it gives no -D: the kernel's own
    added = tuple(f for f in found.nvcc_flags.flags if f not in spec.nvcc_flags.flags)
    return replace(command, base_flags=(*command.base_flags, *added), shipped=found.shipped), \
        replace(found, shipped=spec.shipped, arch=spec.arch)


def _said(error: UsageError, given: bool, shown: Path, found: Path) -> str:
    """Why a command was not usable: the reader's words for the user's own --compile-commands; for
    a database the (untrusted) ACF named, none of them, as they may quote a token of that file."""
    if given or isinstance(error, KernelDefaultError):  # the latter: the kernel's words, no token of the file
        return first_line(str(error))
    if isinstance(error, NoCommand):
        return f"{shown}: no compile command for {found.name}"
    if isinstance(error, SeveralCommands):
        return (f"{shown}: several commands for {found.name} build it differently and the ACF records none "
                "of them: re-tune with --compile-output OUTPUT to choose the one that ships")
    return (f"{shown}: no command for {found.name} that compileiq reads (`compileiq space KERNEL "
            f"--compile-commands {shown}` says why)")


def checkout(acf: acf_file.Acf) -> tuple[Path, bool]:
    """The checkout that holds the ACF (symlinks followed): the nearest folder above it with `.git`
    (True), else the ACF's own folder (False)."""
    folder = acf.path.parent.resolve()
    found = next((f for f in (folder, *folder.parents) if (f / ".git").exists()), None)
    return (folder, False) if found is None else (found, True)


def _inside_tree(database: Path, acf: acf_file.Acf, kernel: Path | None) -> bool:
    """Whether the database an ACF names lies (symlinks followed) in the checkout that holds the ACF
    or in the folder of the gate's --kernel (`kernel`, the user's choice): an ACF arrives in a pull
    request, and may name any file of the machine that gates it, its own kernel's folder included."""
    roots = (checkout(acf)[0], *(() if kernel is None else (kernel.parent.resolve(),)))
    where = database.resolve()
    return any(where.is_relative_to(root) for root in roots)
