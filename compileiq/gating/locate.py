"""Locating what the gate checks: an ACF (validated), its kernel source, and the kernel's own
settings now (tune.toml and, where the ACF is held to one, its compile command), as a `Target`.
Nothing is built here."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from compileiq.core.bounded_read import is_file
from compileiq.core.errors import UsageError
from compileiq.core.output_file import not_regular
from compileiq.gating import arch_coverage, kernel_settings, macro_settings
from compileiq.gating.retune import path_from_here
from compileiq.gating.rules import BaseFlagDifference
from compileiq.gating.shipped_read import ShippedRead, checkout, named_database, read_shipped
from compileiq.results import acf as acf_file
from compileiq.source.kernel import load_spec
from compileiq.source.shipped import under_register_cap
from compileiq.source.spec import KernelSpec, ShippedBuild


@dataclass(frozen=True)
class Target:
    """One ACF and the kernel source it is checked against."""

    acf: acf_file.Acf
    acf_label: str  # the ACF path as given
    kernel_label: str  # the kernel path as found (relative when it was given relative)
    spec: KernelSpec  # the kernel's own settings (tune.toml, its compile command): the baseline's build
    measuring_args: tuple[str, ...] = ()  # the gate's --program/--metric-regex, for a re-tune command
    acf_spec: KernelSpec | None = None  # the ACF's build where its base flags are not the kernel's: tune.toml and them (`as_applied`)
    base_difference: BaseFlagDifference = field(default_factory=lambda: BaseFlagDifference((), ()))  # the ACF's base flags against the kernel's
    settings_origin: str = "tune.toml"  # where the kernel's base flags were read
    recorded_spec: KernelSpec | None = None  # tune.toml and the ACF's base flags: the settings it records
    shipped_now: tuple[ShippedBuild | None] | None = None  # the named compile command's build now, where read
    read: ShippedRead = field(default_factory=ShippedRead)  # the compile command it is held to, read once (the baseline's, the finding's)
    notes: tuple[str, ...] = ()  # what the report says besides the findings (which database held it)
    applied: bool = False  # the compile command now ships the ACF's choice (`kernel_settings`)

    @property
    def built_spec(self) -> KernelSpec:
        return self.acf_spec if self.acf_spec is not None else self.spec

    @property
    def default_arch(self) -> str:
        """nvcc's default arch where the compile command the ACF is held to names no arch, else ""."""
        command = self.read.command
        return command.shipped.default_arch if command is not None and command.shipped is not None else ""

    @property
    def dropped_arch(self) -> bool:
        """The compile command held to builds the ACF's arch no longer (`arch_coverage.dropped`)."""
        return self.read.command is not None and arch_coverage.dropped(self.acf, self.read.command)

    @property
    def compile_commands(self) -> Path | None:
        """The gate's --compile-commands: the database that ships."""
        return self.read.database if self.read.given else None


def locate(path: Path, kernel: Path | None = None, program: bool = False, metric_regex: str | None = None,
           compile_commands: Path | None = None) -> Target:
    """Read an ACF (validated) and find its kernel; UsageError when either is wrong. `program` and
    `metric_regex` are the gate's --program and --metric-regex: how a timed gate runs the kernel;
    `compile_commands` its --compile-commands, the database that ships (default: the ACF's own)."""
    acf = acf_file.read(path)
    found = kernel if kernel is not None else _find_source(acf)
    if kernel is None and (problem := _outside_checkout(found, acf)):  # the ACF's word: never read nor built
        raise UsageError(problem)
    if kind := not_regular(found):
        raise UsageError(f"--kernel {found} is {kind}, not a regular file")
    if not is_file(found):
        raise UsageError(f"--kernel {found}: file not found")
    if found.stem != acf.kernel:
        raise UsageError(f"{path} is the ACF of kernel {acf.kernel!r}, not of {found} (kernel {found.stem!r})")
    tune_toml = load_spec(found, arch=acf.arch)
    read = read_shipped(found, acf, compile_commands, tune_toml, kernel is not None)  # once: baseline and finding
    if read.given and read.problem == "not-a-database":  # the user named it: bad input, as `space` says it,
        raise UsageError(read.detail)  # never "no command for this kernel", nor a warning the gate passes with
    if read.given and read.problem == "unreadable" and acf.shipped is not None:  # handed the build that ships
        raise UsageError(f"{read.detail} (--compile-commands: the gate cannot check the build that ships "
                         "against the ACF)")  # for an ACF tuned from its command: never a pass it checked nothing for
    own = kernel_settings.current(acf, tune_toml, read)  # the base flags are the kernel's, never the ACF's word
    if problem := macro_settings.restriction_problem(own.tune_toml, acf):  # tune.toml's, not the ACF's copy
        raise UsageError(problem)
    spec = own.spec.measured_as(program, metric_regex)
    recorded = kernel_settings.as_recorded(own.tune_toml.measured_as(program, metric_regex), acf)  # as `flags --all`
    if acf.shipped is not None:  # the baseline it was tuned from is part of its settings
        spec = replace(spec, shipped=under_register_cap(acf.shipped, spec.nvcc_flags))
        recorded = replace(recorded, shipped=under_register_cap(acf.shipped, recorded.nvcc_flags))
    measuring = ["--program"] * program + (["--metric-regex", metric_regex] if metric_regex is not None else [])
    differ = kernel_settings.difference(spec, acf.base)
    # what ships: a compile command's build with the ACF's tuned flags (`flags`), nvcc's -maxrregcount
    # the command's; without a command, the ACF's own base flags (`flags --all`), its cap among them
    built = (kernel_settings.as_applied(spec, recorded) if own.command_read else recorded) if differ else None
    return Target(acf, str(path), os.path.normpath(found), spec, tuple(measuring), built,
                  differ, own.origin, recorded,  # store/../k.cu reads k.cu
                  (own.shipped,) if own.command_read else None, read, _held_notes(found, acf, own), own.applied)


def _held_notes(found: Path, acf: acf_file.Acf, own: kernel_settings.KernelSettings) -> tuple[str, ...]:
    """Which compilation database the ACF was held to (its [baseline] chose it unless the gate's
    --compile-commands did: a reviewer should see which), and whether its command applies the ACF."""
    if own.database is None:
        return ()
    why = "--compile-commands" if own.given else "named by the ACF's [baseline]; pass --compile-commands to name the one that ships"
    database = path_from_here(str(own.database))
    named = named_database(acf)
    if own.given and named is not None and path_from_here(str(named)) != database:  # the same command there is no finding
        why += f"; the ACF's [baseline] names {path_from_here(str(named))}"
    if not own.command_read:  # no entry for the kernel there, or one compileiq cannot use
        return ((f"{database} ({why}) gave no usable compile command for {found.name}: held to the kernel's "
                 "tune.toml and the build the ACF records"),)
    notes = [f"held to the compile command for {found.name} in {database} ({why})"]
    if own.applied:
        notes.append(f"applied: the compile command in {database} builds the ACF's choice; its baseline is the "
                     "build the ACF records (before the change)")
    return tuple(notes)


def _find_source(acf: acf_file.Acf) -> Path:
    """The kernel as file-formats.md says (`Acf.source_candidates`): never from the folder the gate
    runs in, where the same ACF would be checked against another file (a vendored or older copy at
    that path) depending on where CI runs it, while its compilation database is read from the
    ACF's folder."""
    if (found := acf.source_file()) is not None:
        return found
    if (other := next((c for c in acf.source_candidates() if is_file(c)), None)) is not None:
        return other  # a file of another name: `locate` refuses it naming both, before reading it
    names = ", ".join(str(c) for c in acf.source_candidates())
    raise UsageError(f"{acf.path}: kernel source not found (tried {names}); pass --kernel PATH")


def _outside_checkout(found: Path, acf: acf_file.Acf) -> str | None:
    """Why the kernel an ACF in a git checkout names may not be gated: it lies (symlinks followed)
    outside that checkout. An ACF arrives in a pull request; the gate would read, hash and compile
    any `.cu` of the CI machine (another project's workspace) on its word, and quote it in the
    compiler's messages. Outside a git checkout (`compileiq tune` writes store/, the kernel beside
    it) the kernel is found as the ACF says."""
    root, in_git = checkout(acf)
    if not in_git or found.resolve().is_relative_to(root):
        return None
    return f"{acf.path}: the ACF names a kernel outside its checkout ({found}): pass --kernel"
