"""The Python API for scripts and notebooks: tune a kernel, read an ACF, format its flags, gate.

    import compileiq
    result = compileiq.tune("kernels/spill_heavy/spill_heavy.cu", objective="spills", budget=8,
                            workers="local", out="store/spill_heavy.api.acf.toml")
    print(result.best_value, result.flags, result.acf_path)

A thin layer over `compileiq.app` (what the command line calls): the same options, defaults,
checks and one-line errors (compileiq.core.errors.UsageError), with frozen typed results and no
progress display (pass `on_trial` to follow a run).
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from compileiq import app
from compileiq.core.errors import UsageError
from compileiq.core.records import Trial
from compileiq.results import flag_formats
from compileiq.results.acf import Acf
from compileiq.results.flag_notes import FlagNotes
from compileiq.results.flag_notes import notes as notes_of
from compileiq.tuning.progress import Outcome, SilentProgress

if TYPE_CHECKING:
    from compileiq.gating.check import GateReport

_DEFAULTS = app.TuneOptions(kernel=Path())
PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class TrialRow:
    """One trial of a study, read-only."""

    number: int
    state: str  # "complete", "failed" or "running"
    value: float | None  # the objective (lower is better); None when the trial failed
    config: Mapping[str, Any]  # parameter name -> value
    metrics: Mapping[str, Any]  # spill_bytes, registers, occupancy, ... as measured
    reason: str | None  # why it failed
    purpose: str = "search"  # search (counted by the budget), simplify, ablation or confirm

    @property
    def ok(self) -> bool:
        return self.state == "complete"


@dataclass(frozen=True)
class TuneResult:
    """What `tune` found: the chosen settings, their value against the compiler defaults, every
    trial of the study, and the ACF that records them."""

    kernel: str
    objective: str
    study: str  # the study's name (`compileiq show STUDY`)
    database: str  # where the study is kept (password hidden)
    acf_path: Path
    flags: tuple[str, ...]  # the chosen settings as nvcc arguments (with -arch=)
    best: TrialRow  # the trial the ACF records (the search's winner, simplified)
    baseline: TrialRow  # the compiler defaults
    trials: tuple[TrialRow, ...]
    search_trials: int = 0  # the study's search trials: what the budget counts
    extra_trials: int = 0  # built to simplify or ablate the winner: free of the budget
    stopped: str = ""  # which limit ended the search: "budget 40", "time budget 10m", ...
    acf_unchanged: bool = False  # the ACF held this choice already and was left as it was, byte for byte

    @property
    def best_config(self) -> Mapping[str, Any]:
        return self.best.config

    @property
    def best_value(self) -> float | None:
        return self.best.value

    @property
    def baseline_value(self) -> float | None:
        return self.baseline.value

    @property
    def improved(self) -> bool:
        return self.best_value is not None and self.baseline_value is not None and self.best_value < self.baseline_value


def tune(
    kernel: PathLike,
    *,
    objective: str = _DEFAULTS.objective,
    budget: int = _DEFAULTS.budget,
    strategy: str = _DEFAULTS.strategy,
    seed: int = _DEFAULTS.seed,
    surrogate: str = _DEFAULTS.surrogate,
    batch_size: int = _DEFAULTS.batch_size,
    out: PathLike | None = None,
    db: str | None = None,
    study: str | None = None,
    workers: str = _DEFAULTS.workers,
    ray_address: str | None = None,
    resume: bool = False,
    arch: str | None = None,
    allow_numerics: bool = False,
    allow_semantics: bool = False,
    only: Iterable[str] = (),
    exclude: Iterable[str] = (),
    simplify: bool = _DEFAULTS.simplify,
    warm_start: bool = _DEFAULTS.warm_start,
    program: bool = False,
    metric_regex: str | None = None,
    time_budget: str | float | None = None,
    patience: int | None = None,
    pick: str | None = None,
    stream: bool = False,
    force: bool = False,
    finalists: int = _DEFAULTS.finalists,
    compile_commands: PathLike | None = None,
    compile_output: str | None = None,
    on_trial: Callable[[TrialRow], None] | None = None,
) -> TuneResult:
    """Tune KERNEL (a .cu file; a tune.toml beside it is read) and write its ACF, exactly as
    `compileiq tune` does with the same options; `on_trial` is called with each finished trial.
    `budget` counts search trials (simplification and ablation builds are extra); `time_budget`
    ("10m", or seconds) and `patience` (batches without a better best) may end the search first.
    Several objectives ("registers,instructions") search the Pareto front; `pick` chooses on it
    ("knee", "first", "weights=a:0.7,b:0.3"). An ACF already at the path that holds more evidence
    (another study, more search trials, a simplification or confirmation this run lacks) is not
    replaced (UsageError, before the run where it can be known) unless `force`."""
    _integers(budget=budget, seed=seed, batch_size=batch_size, finalists=finalists, patience=patience)
    _texts(objective=objective, strategy=strategy, surrogate=surrogate, workers=workers)
    _texts(optional=True, db=db, study=study, ray_address=ray_address, arch=arch, metric_regex=metric_regex,
           pick=pick, compile_output=compile_output)
    _booleans(resume=resume, allow_numerics=allow_numerics, allow_semantics=allow_semantics, simplify=simplify,
              warm_start=warm_start, program=program, stream=stream, force=force)
    if on_trial is not None and not callable(on_trial):
        raise UsageError(f"on_trial must be a function of one TrialRow, got {on_trial!r}")
    if time_budget is not None and not isinstance(time_budget, str | int | float) or isinstance(time_budget, bool):
        raise UsageError(f"time_budget must be a duration (\"10m\") or seconds, got {time_budget!r}")
    options = app.TuneOptions(
        kernel=_path("kernel", kernel), objective=objective, budget=budget, strategy=strategy, seed=seed,
        surrogate=surrogate, batch_size=batch_size, out=None if out is None else _path("out", out), db=db,
        study=study, workers=workers, ray_address=ray_address, resume=resume, arch=arch,
        allow_numerics=allow_numerics, allow_semantics=allow_semantics, only=_names(only),
        exclude=_names(exclude), simplify=simplify, warm_start=warm_start, program=program, metric_regex=metric_regex,
        time_budget=_duration(time_budget), patience=patience, pick=pick, stream=stream, force=force,
        finalists=finalists, compile_commands=None if compile_commands is None else _path("compile_commands", compile_commands),
        compile_output=compile_output,
    )  # fmt: skip
    try:
        report = app.tune(options, _CallbackProgress(on_trial))
    except UsageError as error:  # the checks past this point name the command line's options: name ours
        raise type(error)(_keywords(str(error))) from None
    result = report.result
    return TuneResult(
        kernel=report.kernel.name, objective=objective, study=result.study.name, database=report.database,
        acf_path=report.acf_path, flags=load_acf(report.acf_path).flags(),
        best=trial_row(result.chosen), baseline=trial_row(result.baseline),
        trials=tuple(trial_row(t) for t in result.trials),
        search_trials=result.search_trials, extra_trials=result.extra_trials, stopped=result.stopped,
        acf_unchanged=report.acf_unchanged,
    )  # fmt: skip


def load_acf(path: PathLike) -> Acf:
    """Read and validate an advanced-control file (compileiq.results.acf.AcfError when it is not valid)."""
    return app.read_acf(_path("path", path))


def flags(acf: Acf | PathLike, format: str = "args", stage: str = "all", with_arch: bool = True,
          with_base: bool = False) -> str:
    """An ACF's flags as text: args (shell words), optf (an nvcc options file), cmake, bazel, json;
    `with_base` adds the base flags a rebuild needs (`compileiq flags --all`)."""
    _booleans(with_arch=with_arch, with_base=with_base)
    loaded = acf if isinstance(acf, Acf) else app.read_acf(_path("acf", acf))
    text = flag_formats.render(loaded, format, stage, with_arch=with_arch, with_base=with_base, option="")
    if problem := app.flags_refusal(loaded, format, stage, with_arch):  # as `compileiq flags` refuses it
        raise UsageError(problem)
    return text


def flag_notes(acf: Acf | PathLike, format: str = "args", stage: str = "all", with_arch: bool = True,
               with_base: bool = False) -> FlagNotes:
    """The notes `compileiq flags` prints on stderr beside the same flags (`flags` gives the text):
    `.lines`, each as the command prints it (what the flags leave out that the build needs, what to
    remove from the build's command, an arch other than the one tuned), and `.left_out`, the flags
    they name as left out (`flag` and `kind`: "base" or "not_applied"). The same keywords and errors
    as `flags`."""
    loaded = acf if isinstance(acf, Acf) else app.read_acf(_path("acf", acf))
    flags(loaded, format, stage, with_arch, with_base)  # its checks: a format, stage or ACF it refuses
    return notes_of(loaded, format, stage, with_arch, with_base)


def gate(
    acfs: PathLike | Iterable[PathLike],
    *,
    kernel: PathLike | None = None,
    rules: Mapping[str, str] | Iterable[str] = (),
    device: bool | None = None,
    compile_commands: PathLike | None = None,
    program: bool = False,
    metric_regex: str | None = None,
) -> GateReport:
    """Check ACFs against their recorded evidence, as `compileiq gate` does; `report.exit_code`
    is 0 (pass), 1 (a regression) or 2: an ACF that cannot be checked (unreadable, its kernel not
    found or no longer preprocessed) is an ERROR result naming why, beside the other ACFs' verdicts,
    as in the command's report (bad arguments to this function raise UsageError).
    device: None times on a visible GPU (else static rules), False static rules only, True the GPU.
    compile_commands: the compilation database that ships (`--compile-commands`): each ACF is held
    to its kernel's command there, not to the one its `[baseline]` names. program, metric_regex:
    time a program-mode kernel as `tune` did (`--program`, `--metric-regex`)."""
    from compileiq.evaluate.timing import HarnessTiming
    from compileiq.gating import check as gate_lib

    if not isinstance(acfs, str | os.PathLike | Iterable):
        raise UsageError(f"acfs must be a path or paths of ACF files, got {acfs!r}")
    paths = (acfs,) if isinstance(acfs, str | os.PathLike) else tuple(acfs)
    if not isinstance(rules, Mapping | Iterable) or isinstance(rules, str):
        raise UsageError(f"rules must be a mapping of rule to severity or NAME=SEVERITY texts, got {rules!r}")
    given = [f"{k}={v}" for k, v in rules.items()] if isinstance(rules, Mapping) else list(rules)
    if bad := [r for r in given if not isinstance(r, str)]:
        raise UsageError(f"rules must be NAME=SEVERITY texts, got {bad[0]!r}")
    if device is not None and not isinstance(device, bool):
        raise UsageError(f"device must be True, False or None, got {device!r}")
    _booleans(program=program)
    _texts(optional=True, metric_regex=metric_regex)
    options = gate_lib.GateOptions(acfs=tuple(_path("acfs", p) for p in paths),
                                   kernel=None if kernel is None else _path("kernel", kernel),
                                   rules=tuple(given), device=device, program=program, metric_regex=metric_regex,
                                   compile_commands=None if compile_commands is None else _path("compile_commands",
                                                                                                compile_commands))
    try:
        return gate_lib.run(options, HarnessTiming())  # what `compileiq gate` runs with the same options
    except UsageError as error:  # its checks name the command line's options: name ours
        raise type(error)(_keywords(str(error))) from None


def trial_row(trial: Trial) -> TrialRow:
    return TrialRow(
        number=trial.number, state=trial.state.value, value=trial.value,
        config=MappingProxyType(dict(trial.config)), metrics=MappingProxyType(dict(trial.metrics)),
        reason=trial.reason, purpose=trial.purpose,
    )  # fmt: skip


class _CallbackProgress(SilentProgress):
    def __init__(self, on_trial: Callable[[TrialRow], None] | None) -> None:
        self._on_trial = on_trial

    def trial(self, outcome: Outcome, best: Trial | None) -> None:
        if self._on_trial is not None:
            self._on_trial(trial_row(outcome.trial))


def _integers(**given: object) -> None:
    """A keyword that takes a whole number: UsageError naming it (the checks past this point name
    the command line's options, and a string there failed with a bare TypeError)."""
    for name, value in given.items():
        if value is not None and (type(value) is not int):
            raise UsageError(f"{name} must be a whole number, got {value!r}")


def _texts(optional: bool = False, **given: object) -> None:
    """A keyword that takes text: UsageError naming it (a number there failed deep inside)."""
    for name, value in given.items():
        if not (isinstance(value, str) or optional and value is None):
            raise UsageError(f"{name} must be a string, got {value!r}")


def _booleans(**given: object) -> None:
    for name, value in given.items():
        if not isinstance(value, bool):
            raise UsageError(f"{name} must be True or False, got {value!r}")


def _path(name: str, value: object) -> Path:
    """A path keyword: text or os.PathLike (whose __fspath__ gives text, not bytes) without a NUL
    byte, else UsageError naming it."""
    try:
        text = os.fspath(value) if isinstance(value, str | os.PathLike) else None
    except TypeError:  # __fspath__ returned something else than str or bytes
        text = None
    if not isinstance(text, str) or "\0" in text:
        raise UsageError(f"{name} must be a file path, got {value!r}")
    return Path(text)


def _keywords(message: str) -> str:
    """A message of the shared checks with the command line's option names (--batch-size) given
    as this API's keywords (batch_size)."""
    for keyword in inspect.signature(tune).parameters:
        if keyword not in ("force", "out"):  # the ACF refusal names both ways itself
            message = re.sub(rf"--{keyword.replace('_', '-')}\b(?!-)", keyword, message)
    return message


def _duration(value: str | float | None) -> str | None:
    """A time budget as the command line takes it: "10m" stays, 90 (seconds) becomes "90s"."""
    if value is None or isinstance(value, str):
        return value
    return f"{float(value):g}s"


def _names(names: Iterable[str]) -> tuple[str, ...]:
    if isinstance(names, str):
        names = names.split(",")
    listed = list(names) if isinstance(names, Iterable) else None
    if listed is None or not all(isinstance(n, str) for n in listed):
        raise UsageError(f"only and exclude take parameter names (texts), got {names!r}")
    return tuple(n.strip() for n in listed if n.strip())

