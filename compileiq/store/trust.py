"""Rows from a shared database or an export file are untrusted: what one must look like before
anything uses it. A row that does not is skipped with its reason, never a crash."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from typing import Any

from compileiq.build.compile import BuildStatus, EntryResources
from compileiq.core import metric_ranges, static_score
from compileiq.core.records import (
    PURPOSES,
    RUNTIME_KIND,
    BuildRecord,
    Measurement,
    StudyKey,
    Trial,
    TrialState,
    is_trial_number,
)
from compileiq.core.space import Config, SearchSpace, SpaceError, canonical_key
from compileiq.core.space_files import load_space
from compileiq.core.static_score import StaticMetrics
from compileiq.store.space_order import study_space

_HASH = re.compile(r"[0-9A-Za-z]{1,128}")
_SPACE_ID = re.compile(r"nvcc-(?P<version>[\w.]+)\+ptxas-(?P=version)")
_DEFINE = "define."
_DEFINE_VALUE = re.compile(r"[\w.+-]{1,64}")  # a macro value from a file: no shell text


class Malformed:
    """A stored JSON or time value that could not be read (damaged, or nested too deeply)."""

    def __repr__(self) -> str:
        return "<unreadable>"


MALFORMED = Malformed()


def lenient_json(text: str | bytes) -> Any:
    """``json.loads``, but MALFORMED for damaged or too deeply nested JSON (never an exception)."""
    try:
        return json.loads(text)
    except (ValueError, TypeError, RecursionError):
        return MALFORMED


def trial_problem(trial: Trial, space: SearchSpace | None = None) -> str | None:
    """Why ``trial`` cannot be used (None if it can): a config that is not a flat object, a
    result of the wrong type; given a ``space``, a config that does not fit it or whose key is
    not its canonical JSON."""
    if not isinstance(trial.config, dict):
        return "its config is not a JSON object"
    if space is not None and _known_valid(trial, space):
        return _result_problem(trial)
    try:
        config = Config.of(trial.config)
    except SpaceError as error:
        return f"its config: {error}"
    if space is not None:
        if config.key != trial.config_key:
            return "its config_key does not match its config"
        try:
            space.validate(config)
        except SpaceError as error:
            return f"its config is not in the search space: {error}"
    return _result_problem(trial)


def _known_valid(trial: Trial, space: SearchSpace) -> bool:
    """The row's config is, JSON text for JSON text, its key, and the space validated that config
    before: checked once per config, not once per read of the study."""
    try:
        text = canonical_key(trial.config)
    except (TypeError, ValueError):
        return False
    return text == trial.config_key and space.knows_valid(text)


def _result_problem(trial: Trial) -> str | None:
    if not is_trial_number(trial.number):
        return f"its number {str(trial.number)[:40]!r} is not a trial number"
    if not isinstance(trial.metrics, dict):
        return "its metrics are not a JSON object"
    if problem := metric_ranges.problem(trial.metrics):
        return f"its metrics: {problem}"
    if trial.state is TrialState.COMPLETE and not _finite(trial.value):
        return f"a complete trial with value {metric_ranges.shown(trial.value)!r}"
    if trial.value is not None and not _finite(trial.value):
        return f"value {metric_ranges.shown(trial.value)!r} is not a finite number"
    if trial.code_hash is not None and not _is_hash(trial.code_hash):
        return "its code_hash is not a hash"
    if trial.compile_seconds is not None and not (_finite(trial.compile_seconds) and trial.compile_seconds >= 0):
        return f"compile_seconds {metric_ranges.shown(trial.compile_seconds)!r} is not a duration"
    if not all(isinstance(v, str | None) for v in (trial.reason, trial.worker or "")):
        return "its reason or worker is not text"
    if not isinstance(trial.purpose, str) or trial.purpose not in PURPOSES:
        return f"its purpose {str(trial.purpose)[:40]!r} is not one of {', '.join(PURPOSES)}"
    return None


def build_problem(build: BuildRecord) -> str | None:
    if not (_is_hash(build.key) and all(v is None or _is_hash(v) for v in (build.code_hash, build.ptx_key))):
        return "its key, code_hash or ptx_key is not a hash"
    if not isinstance(build.metrics, dict) or not isinstance(build.message, str) or not isinstance(build.ok, bool):
        return "its metrics, message or ok flag has the wrong type"
    if problem := _build_metrics_problem(build.metrics):
        return problem  # a cached build is scored again as it says: its counts are the evidence
    return None if _finite(build.seconds) else f"seconds {metric_ranges.shown(build.seconds)!r} is not a number"


_STATUSES = frozenset(status.value for status in BuildStatus)
_ENTRY_FIELDS = {name: spec.type for name, spec in EntryResources.__dataclass_fields__.items()}
_ENTRY_REQUIRED = {name for name, spec in EntryResources.__dataclass_fields__.items()
                   if spec.default is dataclasses.MISSING}
MAX_ENTRIES = 10_000


def _build_metrics_problem(metrics: dict[str, Any]) -> str | None:
    if metrics.get("status", BuildStatus.OK.value) not in _STATUSES:
        return f"its status {str(metrics.get('status'))[:40]!r} is not a build status"
    entries = metrics.get("entries", [])
    if not isinstance(entries, list) or len(entries) > MAX_ENTRIES:
        return "its entries are not a list of functions"
    for entry in entries:
        if not isinstance(entry, dict) or not _ENTRY_REQUIRED <= set(entry) <= set(_ENTRY_FIELDS):
            return "an entry does not have the fields of a compiled function"
        if not isinstance(entry["name"], str) or not isinstance(entry.get("entry", True), bool):
            return "an entry's name or entry flag has the wrong type"
        counts = [value for name, value in entry.items() if name not in ("name", "entry")]
        if (not all(metric_ranges.is_count(value) for value in counts) or entry["registers"] > 255
                or entry.get("max_threads", 0) > metric_ranges.RANGES["block_size"][2]):
            return (f"function {entry['name'][:60]!r}: a count that is not an integer from 0 to 2**40"
                    " (registers up to 255, max_threads up to 1024)")
    return None


def measurement_problem(measurement: Measurement) -> str | None:
    if not (_is_hash(measurement.code_hash) and _is_hash(measurement.harness_args_hash)):
        return "its code_hash or harness_args_hash is not a hash"
    if not all(isinstance(v, str) for v in (measurement.device, measurement.driver, measurement.status)):
        return "its device, driver or status is not text"
    numbers = (*measurement.samples, *measurement.clocks)
    return None if all(_finite(v) for v in numbers) else "a sample or clock is not a finite number"


def export_space(key: StudyKey, names: list[str]) -> SearchSpace | None:
    """The space a study's config with ``names`` was drawn from, as far as this install knows it:
    the bundled space of ``key.space_id`` cut to ``names`` in the order the study's hash was taken
    in (`space_order`: a shipped build's fast math comes last), each ``define.NAME`` as any value.
    None when this install has no such space (the rows are then checked for shape only)."""
    full = _bundled(key.space_id)
    if full is None:
        return None
    try:
        own = [name for name in names if not name.startswith(_DEFINE)]
        return study_space(full.select(allow_numerics=True, allow_semantics=True, only=own), key.space_sha256)
    except SpaceError:
        return full  # an unknown name: validating against the whole space names it


@functools.lru_cache(maxsize=8)
def _bundled(space_id: str) -> SearchSpace | None:
    """The whole bundled space called ``space_id`` ("nvcc-V+ptxas-V"), if this install has it."""
    match = _SPACE_ID.fullmatch(space_id)
    if match is None:
        return None
    try:
        full = load_space(match["version"])
    except SpaceError:
        return None
    return full if full.id == space_id else None


STATIC_EVALUATOR = "static"  # the evaluator of a study scored without a GPU (`StaticEvaluator.kind`)
_OBJECTIVES = ("static", "spills", "registers", "occupancy", "instructions", "time")  # as tune takes them


def key_problem(key: StudyKey) -> str | None:
    """Why a study key (of an export: untrusted) is not one `tune` writes, else None: its objectives
    known, and its evaluator the GPU's where they include time, "static" where they do not (static
    scores relabelled as runtimes would read as milliseconds measured on a GPU)."""
    names = key.objective.split(",")
    if not key.objective or any(n not in _OBJECTIVES for n in names) or len(set(names)) != len(names):
        return f"its objective {key.objective[:80]!r} is not one or several of {', '.join(_OBJECTIVES)}"
    timed, static = "time" in names, key.evaluator == STATIC_EVALUATOR
    if timed and static:
        return f"its objective {key.objective!r} is a GPU runtime, but its evaluator is static (no GPU ran it)"
    if not timed and not static:
        return (f"its objective {key.objective!r} is a static one, but its evaluator is {key.evaluator[:80]!r} "
                "(static objectives are scored by the static evaluator)")
    return None


class ExportStudy:
    """One study's parameters in an export, decided once: those of its first valid trial (the
    baseline, which every trial of a study shares), with the space they were drawn from
    (`export_space`, whose order search is costly: once per parameter set, and only for the first
    few sets seen before a trial passes: a file of distinct sets is not a study)."""

    MAX_SETS = 4  # parameter sets tried before a trial of the study passes

    def __init__(self, key: StudyKey) -> None:
        self.key = key
        self.names: frozenset[str] | None = None
        self._spaces: dict[frozenset[str], SearchSpace | None] = {}

    def space_for(self, names: list[str]) -> SearchSpace | None | str:
        """The study's space for a trial setting ``names``, or why such a trial is not the study's."""
        found = frozenset(names)
        if self.names is not None and found != self.names:
            return "its config's parameters are not the study's (those of its first valid trial)"
        if found not in self._spaces:
            if len(self._spaces) >= self.MAX_SETS:
                return "its config's parameters are not the study's (too many other sets before a valid trial)"
            self._spaces[found] = export_space(self.key, names)
        return self._spaces[found]

    def accept(self, names: list[str]) -> None:
        """A trial setting ``names`` passed every check: they are the study's from now on."""
        if self.names is None:
            self.names = frozenset(names)


def scored_problem(trial: Trial, key: StudyKey) -> str | None:
    """Why a complete trial (its metrics in range: `trial_problem` first) is not a result its study's
    evaluator records, else None. A static study's value is what its metrics give for the first
    objective (the one the evaluator scores); a runtime study's trial is a timing, as the GPU
    evaluator records one (`evaluate.timing`: its metrics say kind runtime and hold median_ms).
    Else a forged value (-5 with 3052 spill bytes) would steer the search and the study list, and a
    static study relabelled "time" would show its static scores as milliseconds on a GPU."""
    return static_value_problem(trial, key) or kind_problem(trial, key, with_median=True)


def static_value_problem(trial: Trial, key: StudyKey, lenient: bool = False) -> str | None:
    """Why a complete trial of a static study does not hold the value its own metrics give for the
    study's first objective (`scored_problem`'s static half), else None. `lenient` (every read of a
    study, `rows.of_its_kind`): a row without the metrics is let through (a tune rebuilds what it
    cites, `tuning.verify`); one whose metrics give another value is not (`show` listed a forged -1
    beside 3052 spill bytes)."""
    if trial.state is not TrialState.COMPLETE or not isinstance(trial.metrics, dict):
        return None
    if key.evaluator != STATIC_EVALUATOR:
        return None
    if (scored := StaticMetrics.of(trial.metrics)) is None:  # in range: `trial_problem` first
        return None if lenient else f"a complete static trial without its metrics ({', '.join(StaticMetrics.SCORED)})"
    name = key.objective.split(",")[0]
    expected = static_score.score(name, scored)
    if expected is None:
        return None  # no static objective: the study's key is refused (`key_problem`)
    value = trial.value
    if value is None or not _finite(value) or abs(value - expected) > 1e-9 * max(1.0, abs(expected)):
        return f"its value {metric_ranges.shown(trial.value)} is not what its metrics give for {name} ({expected:.12g})"
    return None


def kind_problem(trial: Trial, key: StudyKey, with_median: bool = False) -> str | None:
    """Why a complete trial is not of the kind its study's row says (a runtime study's a timing, as
    `evaluate.timing` records one; a static study's no timing), else None: a study row relabelled in
    a shared database would show static scores as milliseconds on a GPU, or timings as scores.
    `with_median`: a timing must hold its median_ms too (an import); a program's run that an earlier
    compileiq recorded without one is still a timing its own database reads back."""
    if trial.state is not TrialState.COMPLETE or not isinstance(trial.metrics, dict):
        return None
    timing = trial.metrics.get("kind") == RUNTIME_KIND
    if key.evaluator != STATIC_EVALUATOR or "time" in key.objective.split(","):
        if not timing or with_median and not _finite(trial.metrics.get("median_ms")):
            return "a trial of a GPU runtime study that is no timing (its metrics hold no runtime kind and median_ms)"
    elif timing:
        return "a trial of a static study that is a GPU timing (its metrics hold the runtime kind)"
    return None


def check_in_export(trial: Trial, key: StudyKey, study: ExportStudy | None = None) -> str | None:
    """``trial_problem`` for a trial of an export: its config must fit the bundled space of the
    study's space_id (its macros as given), and with no macros hash to the study's space; its value
    must be one its study's evaluator records (`scored_problem`). Given the ``study`` its other
    trials were read into, its parameters must be that study's."""
    problem = trial_problem(trial) or scored_problem(trial, key)
    if problem is not None or not isinstance(trial.config, dict):
        return problem
    if Config.of(trial.config).key != trial.config_key:
        return "its config_key does not match its config"
    study = study or ExportStudy(key)
    space = study.space_for(list(trial.config))
    if isinstance(space, str):
        return space
    if space is None:
        study.accept(list(trial.config))
        return None
    defines = {n[len(_DEFINE) :]: [v] for n, v in trial.config.items() if n.startswith(_DEFINE)}
    if any(not _DEFINE_VALUE.fullmatch(str(v)) for (v,) in defines.values()):
        return "its config sets a macro to a value that is not a plain word or number"
    try:
        space = space.with_defines(defines) if defines else space
    except SpaceError as error:
        return f"its config: {error}"
    problem = trial_problem(trial, space)
    if problem is None and not defines and space.sha256 != key.space_sha256:
        return "its config's parameters are not those of the study's search space"
    if problem is None:
        study.accept(list(trial.config))
    return problem


_finite = metric_ranges.is_finite  # never raises: an int past a float's range is no finite number


def _is_hash(value: Any) -> bool:
    return isinstance(value, str) and _HASH.fullmatch(value) is not None
