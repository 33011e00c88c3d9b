"""Checks of an ACF's untrusted tables beyond its controls: every recorded number a finite value
of its range, a front of several objectives, the candidates to time (settings of the search space
and the exact command compileiq writes), and the shipped build it was held to (`[baseline]`).
Each failure is an `AcfError` with one line naming the first bad entry.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from compileiq.core import metric_ranges
from compileiq.core.defines import define_arg_problem
from compileiq.core.errors import UsageError
from compileiq.core.metric_ranges import MAX_PICK_RULE, is_count, is_finite
from compileiq.core.readings import reading
from compileiq.core.space import Config, SearchSpace, SpaceError
from compileiq.core.static_score import StaticMetrics
from compileiq.evaluate.metrics import STATIC_OBJECTIVES, objective_value
from compileiq.results import to_time
from compileiq.source.arch_code import paired
from compileiq.source.base_flags import (
    BaseFlagError,
    parse_base_flags,
    quoted_path_problem,
)
from compileiq.source.shipped import arch_flag_archs, to_remove
from compileiq.source.shipped import building as shipped_building
from compileiq.source.spec import (
    MODES,
    FixedFlag,
    ShippedBuild,
    ShippedSetting,
    metric_regex_problem,
)


class AcfError(UsageError):
    """An ACF that is unreadable, malformed, or asks for something outside the search space."""


_OBJECTIVE_NUMBERS = ("baseline", "best", "baseline_shown", "best_shown", "speedup", "confirmation_delta",
                      "confirmed_finalists", "confirmed_median")  # one objective's values


def check_args(path: Path, args: dict[str, Any], argv: tuple[str, ...], space: SearchSpace, config: Config) -> None:
    """[args]: argv (`argv`: what the controls and defines give), frontend (nvcc -ptx) and ptxas (a
    direct ptxas call) exactly what the controls give, as compileiq wrote them: a reviewer reads
    them, and a build may use them as documented, though compileiq rebuilds them from the controls."""
    for key, expected in (("argv", argv), ("frontend", space.frontend_args(config)), ("ptxas", space.ptxas_args(config))):
        given = args.get(key)
        if not isinstance(given, list) or not all(isinstance(word, str) for word in given):
            raise AcfError(f"{path} is not a valid ACF: missing or malformed args.{key} (a list of strings)")
        if tuple(given) != expected:
            raise AcfError(f"{path}: args.{key} does not match its controls (edited by hand?); "
                           f"expected: {shlex.join(expected) if expected else 'an empty list'}")


def check_numbers(path: Path, objective: dict[str, Any], evidence: dict[str, Any]) -> None:
    """Every recorded number a finite value of its type and range; one line naming the first that is not."""
    for name in _OBJECTIVE_NUMBERS if "objectives" not in objective else ():  # several: _check_front
        if name in objective and not is_finite(objective[name]):
            raise AcfError(f"{path}: objective.{name} = {str(objective[name])[:40]!r} must be a finite number")
    if "confirmed_median" in objective and not objective["confirmed_median"] > 0:  # the gate's reference time
        raise AcfError(f"{path}: objective.confirmed_median = {objective['confirmed_median']!r} must be a positive time")
    for table in ("baseline", "best"):
        values = evidence.get(table, {})
        if not isinstance(values, dict):
            raise AcfError(f"{path}: evidence.{table} must be a table")
        if problem := metric_ranges.problem(values):  # the gate compares a rebuild against them
            raise AcfError(f"{path}: evidence.{table}.{problem}")


def check_objective(path: Path, objective: dict[str, Any], evidence: dict[str, Any]) -> None:
    """One static objective: `objective.best` and `.baseline` are what the objective gives for
    `evidence.best` and `.baseline`, and `improved` says whether the first is lower. The numbers a
    reader sees first may not claim a gain the evidence (which the gate checks) does not hold."""
    name = objective.get("name")
    if name not in STATIC_OBJECTIVES or objective.get("evaluator", "static") != "static":
        return  # a runtime's values are measurements; several objectives: check_front
    for table in ("baseline", "best"):
        metrics = _static_metrics(evidence.get(table, {}))
        if table not in objective or metrics is None:
            continue
        expected = objective_value(name, metrics)
        if objective[table] != expected:
            raise AcfError(f"{path}: objective.{table} = {objective[table]!r} is not what evidence.{table} "
                           f"gives for {name} ({expected:g})")
    if {"best", "baseline", "improved"} <= set(objective) and (
            objective["improved"] is not (objective["best"] < objective["baseline"])):
        raise AcfError(f"{path}: objective.improved = {objective['improved']!r} contradicts objective.best "
                       f"{objective['best']!r} against objective.baseline {objective['baseline']!r}")


def _static_metrics(table: Any) -> StaticMetrics | None:
    """An evidence table's metrics (checked by `check_numbers` before), None when one is missing."""
    return StaticMetrics.of(table)

OBJECTIVE_NAMES = ("spills", "registers", "occupancy", "instructions", "time")
MAX_FRONT = 10_000


def check_front(path: Path, objective: dict[str, Any], evidence: dict[str, Any], space: SearchSpace) -> None:
    """An ACF of several objectives: its objectives, `[[evidence.front]]` (values per objective, settings
    of the search space) and `[evidence.pick]` are checked like the rest (one-line errors)."""
    if "objectives" not in objective and "front" not in evidence and "pick" not in evidence:
        return
    names = objective.get("objectives")
    if (not isinstance(names, list) or not 2 <= len(names) <= 3 or len(set(map(str, names))) != len(names)
            or not all(isinstance(n, str) and n in OBJECTIVE_NAMES for n in names)
            or objective.get("name") != ",".join(names)):
        raise AcfError(f"{path}: objective.objectives must be 2-3 distinct names from {', '.join(OBJECTIVE_NAMES)} "
                       "matching objective.name")
    for table in ("baseline", "best"):
        values = objective.get(table, {})
        if not isinstance(values, dict) or not set(values) <= set(names) or not all(map(is_finite, values.values())):
            raise AcfError(f"{path}: objective.{table} must give a finite number for each of {', '.join(names)}")
        metrics = _static_metrics(evidence.get(table)) if objective.get("evaluator", "static") == "static" else None
        if metrics is None:
            continue
        for static in (n for n in names if n in values and n in STATIC_OBJECTIVES):
            if values[static] != (expected := objective_value(static, metrics)):
                raise AcfError(f"{path}: objective.{table}.{static} = {values[static]!r} is not what "
                               f"evidence.{table} gives ({expected:g})")
    for table in ("baseline", "best"):
        _check_shown(f"{path}: objective.{table}_shown", objective.get(f"{table}_shown"), objective.get(table))
    for where, point in _trial_tables(path, evidence, "front", MAX_FRONT, "points"):
        values = point.get("values")
        if not isinstance(values, dict) or sorted(values) != sorted(names) or not all(map(is_finite, values.values())):
            raise AcfError(f"{where}.values must give a finite number for each of {', '.join(names)}")
        _check_shown(f"{where}.values_shown", point.get("values_shown"), values)
        _check_settings(where, point.get("settings", {}), space)
    pick = evidence.get("pick")
    if pick is not None:
        rule = pick.get("rule") if isinstance(pick, dict) else None
        if not isinstance(rule, str) or len(rule) > MAX_PICK_RULE or not is_count(pick.get("trial")):
            raise AcfError(f"{path}: evidence.pick needs a rule and a trial number")
        # the pick rules' parser (it imports the store: only here)
        from compileiq.results.pareto import check_rule

        try:
            check_rule(rule, names)
        except UsageError as error:
            raise AcfError(f"{path}: evidence.pick: {one_line(error)}") from None




def _check_shown(where: str, shown: Any, values: Any) -> None:
    """An objective's value as people read it (occupancy, where the search minimised its shortfall)
    beside the recorded one: only what the recorded one gives."""
    if shown is None:
        return
    if (not isinstance(shown, dict) or not isinstance(values, dict)
            or any(name not in values or reading(name).shown(values[name]) != number for name, number in shown.items())):
        raise AcfError(f"{where} must give each objective's recorded value as it reads (occupancy: 1 - its shortfall)")


def _trial_tables(path: Path, evidence: dict[str, Any], key: str, most: int, noun: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """`[[evidence.KEY]]`: at most `most` tables, each naming its trial; (where, table) for each."""
    found = evidence.get(key, [])
    if not isinstance(found, list) or len(found) > most:
        raise AcfError(f"{path}: evidence.{key} must be a list of at most {most} {noun}")
    for index, table in enumerate(found):
        where = f"{path}: evidence.{key}[{index}]"
        if not isinstance(table, dict) or not is_count(table.get("trial")):
            raise AcfError(f"{where}: needs a trial number")
        yield where, table


def _check_settings(where: str, settings: Any, space: SearchSpace) -> None:
    """Settings recorded beside the choice (a front's point, a candidate to time): each one of the
    search space's, or an allowed macro."""
    if not isinstance(settings, dict):
        raise AcfError(f"{where}.settings must be a table of settings")
    for name, value in settings.items():
        if name.startswith("define."):
            if define_arg_problem(f"-D{name.removeprefix('define.')}={value}") or isinstance(value, dict | list):
                raise AcfError(f"{where}.settings: {name[:60]!r} = {str(value)[:60]!r} is not an allowed macro")
            continue
        try:
            allowed = space.parameter(name).allows(value)
        except SpaceError:
            allowed = False
        if not allowed:
            raise AcfError(f"{where}.settings: {name[:60]!r} = {str(value)[:60]!r} is not in the search space")


MAX_TO_TIME = 10


def check_to_time(path: Path, evidence: dict[str, Any], space: SearchSpace, shipped: ShippedBuild | None = None,
                  kernel_path: str = "") -> None:
    """`[[evidence.to_time]]`: candidates with settings of the search space, numbers in range, and the
    command compileiq renders for them (from the ACF's shipped build, if any), nothing else (a reader
    may paste it): the ACF's own kernel (`kernel_path`, from the ACF's folder) and compilation
    database, as far as a path written from where `tune` ran can be compared with them."""
    for where, entry in _trial_tables(path, evidence, "to_time", MAX_TO_TIME, "candidates"):
        if problem := metric_ranges.problem(entry):
            raise AcfError(f"{where}.{problem}")
        settings = entry.get("settings", {})
        _check_settings(where, settings, space)
        shown = entry.get("command")
        words = shlex.split(shown) if isinstance(shown, str) and shown.isprintable() and len(shown) < 4096 else []
        kernel = words[2] if len(words) > 2 and words[2] and not words[2].startswith("-") else None
        database = words[4] if words[3:4] == ["--compile-commands"] and len(words) > 4 else None
        from_shipped = ("--compile-commands", database, *to_time.chosen_output(shipped)) if database else ()
        budget = int(words[-1]) if words and words[-1].isascii() and words[-1].isdigit() else 0
        if not 0 < budget <= to_time.EXHAUSTIVE_LIMIT:  # the search's form, whose budget is tune's own
            budget = to_time.EXHAUSTIVE_LIMIT + 1  # (the count is not recomputed: an ACF keeps one value per macro)
        listed = words[words.index("--only") + 1].split(",") if "--only" in words[:-1] else []
        known = {p.name for p in space.parameters}
        macros = [name for name in listed if name.startswith("define.") and name in known]  # the run's, unrecorded
        written = {to_time.command(kernel, to_time.timed_names(list(settings), shipped, macros), budget, from_shipped),
                   to_time.command(kernel, list(settings), budget)} if kernel is not None else set()  # (or as older ACFs wrote it)
        if shown not in written:
            raise AcfError(f"{where}.command is not the command compileiq writes for these settings")
        if kernel is not None and not _names_the_same_file(kernel, kernel_path, path):
            if ".." in PurePosixPath(kernel).parts:  # the same text as the ACF's own path (from its folder)
                raise AcfError(f"{where}.command tunes {kernel[:80]!r}: a path with '..', which names no kernel of "
                               "an ACF (tune names it from the folder it ran in, or whole)")
            raise AcfError(f"{where}.command tunes {kernel[:80]!r}, not the ACF's kernel ({kernel_path[:80]!r})")
        if database and not (shipped is not None and shipped.path and _names_the_same_file(database, shipped.path, path)):
            raise AcfError(f"{where}.command reads {database[:80]!r}, not the ACF's compilation database "
                           f"([baseline].path)")


def _names_the_same_file(shown: str, recorded: str, acf: Path) -> bool:
    """Whether `shown` (a path as `tune` names files in its commands: from where it ran, else
    absolute) is the file `recorded` names (a path from the ACF's folder; an older ACF's, from where
    `tune` ran): an absolute one that very file, a relative one (no '..') its trailing folders and
    name, so that it names that file from the folder `tune` ran in."""
    folder = os.path.dirname(os.path.realpath(acf))
    targets = {os.path.normpath(os.path.join(folder, recorded)), os.path.abspath(recorded)}
    ours = PurePosixPath(shown)
    if ours.is_absolute():
        return os.path.normpath(shown) in targets
    parts = ours.parts
    return bool(parts) and ".." not in parts and any(PurePosixPath(t).parts[-len(parts):] == parts for t in targets)


MAX_SHIPPED_FLAGS = 512
MAX_FLAG_CHARS = 4096
_BASELINE_KEYS = {"source", "database", "path", "output", "other_outputs", "shipped_flags", "searched", "fixed", "remove"}


def shipped_baseline(path: Path, table: Any, space: SearchSpace) -> ShippedBuild | None:
    """`[baseline]` (untrusted): the shipped build, each searched setting one of the space's values,
    every flag printable text listed in shipped_flags (never run: shown, or named for removal); an
    applied fixed flag is an allow-listed base flag. None for an ACF without one."""
    if table is None:
        return None
    where = f"{path}: baseline"
    if not isinstance(table, dict) or not set(table) <= _BASELINE_KEYS or table.get("source") != "compile_commands":
        raise AcfError(f"{where} must be a table with source = \"compile_commands\" and the keys "
                       f"{', '.join(sorted(_BASELINE_KEYS))}")
    origin = table.get("database")
    if not _text(origin, 255):
        raise AcfError(f"{where}.database must be a file name (printable text)")
    located = table.get("path", "")
    if not isinstance(located, str) or (located and quoted_path_problem(located) is not None):
        raise AcfError(f"{where}.path must be the compilation database's path (printable text, no part starting with '-')")
    output, others = table.get("output", ""), table.get("other_outputs", [])
    if not (output == "" or _text(output, MAX_FLAG_CHARS)) or not isinstance(others, list) or len(others) > MAX_SHIPPED_FLAGS \
            or not all(_text(o, MAX_FLAG_CHARS) for o in others):
        raise AcfError(f"{where}.output and other_outputs must be the outputs of the database's commands (printable text)")
    flags = table.get("shipped_flags", [])
    if not isinstance(flags, list) or len(flags) > MAX_SHIPPED_FLAGS or not all(_text(f, MAX_FLAG_CHARS) for f in flags):
        raise AcfError(f"{where}.shipped_flags must be a list of at most {MAX_SHIPPED_FLAGS} flags (printable text)")
    settings = tuple(_searched(f"{where}.searched[{i}]", entry, space, flags)
                     for i, entry in enumerate(_list(where, table, "searched")))
    fixed = tuple(_fixed(f"{where}.fixed[{i}]", entry, flags) for i, entry in enumerate(_list(where, table, "fixed")))
    return ShippedBuild(str(origin), settings, fixed, path=located, output=output, others=tuple(others))


def _list(where: str, table: dict[str, Any], key: str) -> list[Any]:
    found = table.get(key, [])
    if not isinstance(found, list) or len(found) > MAX_SHIPPED_FLAGS:
        raise AcfError(f"{where}.{key} must be a list of at most {MAX_SHIPPED_FLAGS} tables")
    return found


def _searched(where: str, entry: Any, space: SearchSpace, flags: list[str]) -> ShippedSetting:
    if not isinstance(entry, dict) or entry.get("flag") not in flags:
        raise AcfError(f"{where} must give a setting, its value and its flag (one of baseline.shipped_flags)")
    _check_settings(where, {entry.get("setting"): entry.get("value")}, space)
    return ShippedSetting(str(entry["setting"]), entry["value"], str(entry["flag"]))


def _fixed(where: str, entry: Any, flags: list[str]) -> FixedFlag:
    if (not isinstance(entry, dict) or entry.get("flag") not in flags or not isinstance(entry.get("applied"), bool)
            or not _text(entry.get("why"), 200)):
        raise AcfError(f"{where} must give a flag (one of baseline.shipped_flags), applied (true or false) and why")
    flag = str(entry["flag"])
    if entry["applied"] and arch_flag_archs(flag):  # the command's flag for the arch tuned: `check_arch`
        return FixedFlag(flag, True, str(entry["why"]))
    if entry["applied"]:  # an applied flag reached nvcc: it must be an allow-listed base flag
        try:
            parse_base_flags(shlex.split(flag), where)
        except (BaseFlagError, ValueError):
            raise AcfError(f"{where}: {flag[:80]!r} is applied but not an allowed base flag") from None
    return FixedFlag(flag, entry["applied"], str(entry["why"]))


def checked_remove(path: Path, table: dict[str, Any], shipped: ShippedBuild, config: Config) -> tuple[str, ...]:
    """`baseline.remove`: exactly the shipped flags whose settings the controls change."""
    expected = to_remove(shipped.settings, config.as_dict())
    if table.get("remove", []) != list(expected):
        raise AcfError(f"{path}: baseline.remove does not match its controls (edited by hand?); expected: "
                       f"{list(expected)}")
    return expected


def check_arch(path: Path, arch: str, evidence: dict[str, Any], shipped: ShippedBuild | None) -> None:
    """`kernel.arch` is the arch the ACF's evidence was built for (`evidence.baseline.arch` and
    `evidence.best.arch`; an older ACF records none) and not one its shipped command's arch flags
    were left out for: an ACF edited to another arch would hand that arch settings chosen, and
    evidence recorded, on another GPU (the gate would compare builds for one with numbers of the
    other)."""
    for table in ("best", "baseline"):
        recorded = evidence.get(table, {}).get("arch")
        if recorded is not None and recorded != arch:
            built = str(recorded)[:40]
            raise AcfError(f"{path}: kernel.arch = {arch!r}, but evidence.{table} was built for {built!r} (edited by "
                           f"hand?): its settings were chosen on {built}; tune with --arch {arch} for {arch}")
    fixed_flags = shipped.fixed if shipped is not None else ()
    archs_of: dict[str, tuple[str, ...]] = {}  # read together: -arch=compute_80 beside -code=sm_86 builds sm_86 alone (`paired`)
    for applied in (True, False):
        archs_of |= dict(paired([(f.flag, a) for f in fixed_flags if f.applied is applied
                                 and (a := arch_flag_archs(f.flag))]))
    # an -arch a later one overrides builds nothing: read from the flags, never from the `why` an edit
    # can word "overridden by the later ..." to escape these checks
    building = {id(f) for f in shipped_building(fixed_flags)}  # by position, from the flags, not `why`
    for fixed in fixed_flags:
        archs = archs_of.get(fixed.flag) if id(fixed) in building else None
        if archs and not fixed.applied and set(archs) == {arch}:
            raise AcfError(f"{path}: kernel.arch = {arch!r}, but baseline.fixed records {fixed.flag[:80]!r} as left "
                           f"out for building another arch (edited by hand?)")
        if archs and fixed.applied and set(archs) != {arch}:
            raise AcfError(f"{path}: kernel.arch = {arch!r}, but baseline.fixed records {fixed.flag[:80]!r}, which "
                           f"builds for {', '.join(archs)}, as applied (edited by hand?)")


def measuring(path: Path, kernel: dict[str, Any]) -> tuple[str | None, str | None]:
    """kernel.mode and kernel.metric_regex: how the tuning's timed runs reported their time (an
    older ACF records neither). Compared with what the gate will do, never used to measure: a
    pattern from an ACF could read any number the program prints."""
    mode, regex = kernel.get("mode"), kernel.get("metric_regex")
    if mode is not None and mode not in MODES:
        raise AcfError(f"{path}: kernel.mode must be one of: {', '.join(MODES)}")
    if regex is not None:
        if problem := metric_regex_problem(regex):
            raise AcfError(f"{path}: kernel.metric_regex {problem}")
        if mode != "program":
            raise AcfError(f"{path}: kernel.metric_regex is for kernel.mode = \"program\"")
    return mode, regex


def _text(value: Any, most: int) -> bool:
    return isinstance(value, str) and 0 < len(value) <= most and value.isprintable()


def one_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
