"""The re-tune line a stale ACF's findings end with: the `compileiq tune` command that re-tunes it
in place, pasteable from here, searching what the tuning searched (its objective, pick, arch, how it
was timed, its shipped build, budget, space and search options, database and study), read from
the ACF, which is untrusted: only what passes a check is repeated, and nothing is ever run."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from pathlib import Path
from typing import Protocol

from compileiq.core.bounded_read import is_file
from compileiq.core.metric_ranges import MAX_BUDGET
from compileiq.core.space_files import available_versions, space_version
from compileiq.gating import arch_coverage
from compileiq.gating.rules import Measured
from compileiq.results import acf as acf_file
from compileiq.source.spec import KernelSpec


class Target(Protocol):
    """What a re-tune line reads of a gated ACF (`check.Target`)."""

    @property
    def acf(self) -> acf_file.Acf: ...
    @property
    def acf_label(self) -> str: ...
    @property
    def kernel_label(self) -> str: ...
    @property
    def spec(self) -> KernelSpec: ...
    @property
    def measuring_args(self) -> tuple[str, ...]: ...
    @property
    def compile_commands(self) -> Path | None: ...  # the gate's --compile-commands
    @property
    def default_arch(self) -> str: ...  # nvcc's, where the compile command held to names no arch; else ""
    @property
    def dropped_arch(self) -> bool: ...  # the compile command held to builds the ACF's arch no longer


def retune_command(target: Target, measured: Measured) -> str:
    """The command that re-tunes a stale ACF in place, pasteable from this folder: the kernel and
    the ACF as paths from here, the ACF's objective, pick rule, arch (`retune_arch`), how to time it
    (`retune_measuring`), and database (a URL whose password the ACF shows as *** is left to
    `--db "$COMPILEIQ_DB"`, so that the pasted command reads it from the environment), and `--force`, since the
    re-tune is a new study (the source, settings or toolchain the old one was made for changed)
    and an ACF of another study is otherwise not replaced. A study the user named (not the
    default `<kernel>-<objective>-<8 hex>`, nor its longer-hash fallback) keeps its name with the
    kernel's state now as a suffix (`retune_study`): the old name belongs to the old key. Only the
    command: what it needs first (`retune_needs`) is said in the finding, never pasted with it."""
    acf = target.acf
    objective = str(acf.objective.get("name", "static"))
    database = str(acf.provenance.get("database", ""))
    masked = "***" in database  # a password the ACF never holds: the command reads it from COMPILEIQ_DB
    db = ["--db", database] if database and not masked and portable_database(database) else []
    pick = acf.evidence.get("pick", {}).get("rule") if "objectives" in acf.objective else None
    picked = ["--pick", str(pick)] if pick else []
    study = retune_study(str(acf.provenance.get("study", "")), acf.kernel, objective, measured)
    named = [f"--study={study}"] if study else []
    budget = acf.provenance.get("budget")
    budgeted = ["--budget", str(budget)] if type(budget) is int and 0 < budget <= MAX_BUDGET else []
    head = shlex.join(["compileiq", "tune", path_from_here(target.kernel_label), "--objective", objective,
                       *picked, *retune_arch(target), *retune_measuring(target), *shipped_from(target), *budgeted,
                       *retune_space(acf.provenance.get("searched")), *db])
    tail = shlex.join([*named, "--out", path_from_here(target.acf_label), "--force"])
    return f'{head} --db "$COMPILEIQ_DB" {tail}' if masked else f"{head} {tail}"


def retune_arch(target: Target) -> tuple[str, ...]:
    """`--arch` as the ACF records it, unless the re-tune reads a compile command that names no arch
    and the ACF set none of its arch aside (no --arch chose another): `tune` then tunes the arch that
    command builds, nvcc's default, and `--arch` would make `flags` give -arch=sm_XY in its place, an
    sm_XY-only build (an ACF of an earlier release was tuned for tune.toml's arch from such a command);
    nor where that command builds the ACF's arch no longer (`--arch sm_90` would tune an arch it does not ship)."""
    acf = target.acf
    chose = acf.shipped is not None and bool(arch_coverage.set_aside(acf.shipped.fixed))  # from the flags, not `why`
    if target.default_arch and shipped_from(target) and not chose:
        return ()
    if target.dropped_arch and shipped_from(target):  # narrowed to -arch=sm_80: tune takes the arch it builds
        return ()
    return ("--arch", acf.arch)


def retune_needs(target: Target, nvcc_version: str | None) -> tuple[str, ...]:
    """What the re-tune command cannot run without, as a reader fixes it: a compileiq with a search
    space for the nvcc of this machine (after a CUDA upgrade, `tune` refuses one it has none for),
    and the compilation database the command names where it is gone (a CI clone without the build
    folder): `tune` would refuse it as not found."""
    needs = []
    if nvcc_version and space_version(nvcc_version) is None:
        have = ", ".join(available_versions()) or "none"
        needs.append(f"re-tuning needs a compileiq with a search space for nvcc {nvcc_version} (this one has {have})")
    shipped = shipped_from(target)
    if shipped and not is_file(Path(shipped[1])):
        needs.append(f"regenerate {shipped[1]} first (it is gone)")
    return tuple(needs)


def portable_database(database: str) -> bool:
    """Whether the database the ACF records can be named in a command pasted here: a server URL or a
    relative SQLite path (the default store/compileiq.db, from the checkout), or an absolute SQLite
    path whose file is on this machine. The tuner's absolute local file elsewhere (a CI runner
    gating a developer's ACF) is not: the command then uses the default ($COMPILEIQ_DB, else
    store/compileiq.db)."""
    if not database.startswith("sqlite:///"):
        return True
    path = database.removeprefix("sqlite:///").split("?", 1)[0]
    return not os.path.isabs(path) or is_file(Path(path))


_PARAMETER_NAME = re.compile(r"(?:nvcc|ptxas|define)\.[A-Za-z_][A-Za-z0-9_]*")


def retune_space(searched: object) -> list[str]:
    """--only/--exclude/--allow-*/--strategy/--seed as the ACF's `provenance.searched` records
    them, so that a re-tune searches the space the tuning did, as it did (not the whole default
    space, another study). Untrusted: only parameter names, true flags, a known strategy and a seed
    in range are repeated; anything else is left out."""
    if not isinstance(searched, dict):
        return []
    args: list[str] = []
    for key in ("only", "exclude"):
        names = searched.get(key)
        if isinstance(names, list) and 0 < len(names) <= 256 and all(
                isinstance(n, str) and _PARAMETER_NAME.fullmatch(n) for n in names):
            args += [f"--{key}", ",".join(names)]
    args += [f"--{key.replace('_', '-')}" for key in ("allow_numerics", "allow_semantics") if searched.get(key) is True]
    if searched.get("strategy") in ("random", "exhaustive"):
        args += ["--strategy", str(searched["strategy"])]
    if type(seed := searched.get("seed")) is int and 0 < seed < 2**32:
        args += ["--seed", str(seed)]
    return args


def shipped_from(target: Target) -> tuple[str, ...]:
    """`--compile-commands` as the gate's own names it, else as the ACF's [baseline] records it
    (relative to the ACF's folder): a re-tune starts from the build that ships, with its -I/-D."""
    shipped = target.acf.shipped
    chosen = ("--compile-output", shipped.output) if shipped is not None and shipped.output and shipped.others else ()
    if target.compile_commands is not None:
        return ("--compile-commands", path_from_here(str(target.compile_commands)), *chosen)
    if shipped is None or not shipped.path:
        return ()
    where = os.path.join(os.path.dirname(target.acf_label), shipped.path)
    return ("--compile-commands", path_from_here(where), *chosen)


def retune_measuring(target: Target) -> tuple[str, ...]:
    """How a re-tune times the kernel: the gate's own --program/--metric-regex; without them, and
    when neither they nor tune.toml say program mode, the ACF's recorded program mode and pattern,
    so that a re-tune made from a static gate run without those options does not time a program
    with the harness. Only printed (shell-quoted, as `measuring_problem` prints them), never used
    to measure by the gate."""
    if target.measuring_args or target.acf.mode != "program" or target.spec.mode == "program":
        return target.measuring_args
    return recorded_program_options(target.acf)


def recorded_program_options(acf: acf_file.Acf) -> tuple[str, ...]:
    """The tune options that time a program as this program-mode ACF records it was timed."""
    return ("--program", *(("--metric-regex", acf.metric_regex) if acf.metric_regex else ()))


def retune_study(recorded: str, kernel: str, objective: str, measured: Measured) -> str | None:
    """The study a re-tune records into: None (the default name) when the ACF's study had a
    derived name, else the recorded name (less an earlier re-tune's suffix) and 8 hex digits of
    the kernel's source, settings and toolchain now, so that the same re-tune run twice shares one study."""
    derived = r"[0-9a-f]{8}|[0-9a-f]{16}|[0-9a-f]{64}"  # `derived_study_names`: a longer hash where a study held the name
    if not recorded or re.fullmatch(rf"{re.escape(kernel)}-{re.escape(objective)}-(?:{derived})", recorded):
        return None
    state = f"{measured.source_sha256}\0{measured.settings_sha256}\0{measured.toolchain_build}"
    return f"{re.sub(r'-[0-9a-f]{8}$', '', recorded)}-{hashlib.sha256(state.encode()).hexdigest()[:8]}"


def path_from_here(path: str) -> str:
    """`path` as a shell word that names the same file from the current folder: its folder's links
    resolved (no `a/../b`), relative when it lies below here, else absolute."""
    folder = os.path.realpath(os.path.dirname(path) or ".")
    full = os.path.join(folder, os.path.basename(path))
    here = os.path.realpath(os.getcwd())
    inside = os.path.commonpath([here, full]) == here
    shown = os.path.relpath(full, here) if inside else full
    return f"./{shown}" if shown.startswith("-") else shown  # never read as an option
