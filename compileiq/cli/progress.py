"""The progress a tuning run shows on stderr: plain lines in a pipe, a bar on a terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from compileiq.cli.console import err, kind_label, safe
from compileiq.cli.render import value_text
from compileiq.cli.run_notes import RunningFront
from compileiq.core.readings import reading
from compileiq.core.records import Study, Trial, TrialState, first_line

if TYPE_CHECKING:  # the command must start fast (`compileiq flags` runs once per kernel in a build)
    from rich.progress import Progress, TaskID
    from rich.status import Status

    from compileiq.tuning.progress import Outcome


class LineProgress:
    """Progress on stderr: plain lines in a pipe or CI log (and with --json, whose stdout stays one
    document); on a terminal a progress bar (search trials done / budget, best so far, rate, time
    left) with each trial's line printed above it. `hold`: lines wait until the run has a result
    (its first complete trial, or its end), so that a run that fails first says one error line."""

    def __init__(self, quiet: bool = False, *, live: bool | None = None, hold: bool = False) -> None:
        self._quiet = quiet
        self._held: list[str] | None = [] if hold else None
        self._live = (err.is_terminal and not quiet) if live is None else live
        self._budget = 0
        self._done = 0
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._reading = reading("")
        self._front = RunningFront()  # several objectives: the progress line's "best"
        self._status: Status | None = None

    def status(self, text: str) -> None:
        """On a terminal, a passing line for what the run is doing before its study line (a
        start-up phase: "bundling sources (nvcc -M)…"), so that a slow start never looks hung; it
        is erased, so a run that fails early still ends with its one error line."""
        if not self._live:
            return
        if self._status is None:
            self._status = err.status(safe(text))
            self._status.start()
        else:
            self._status.update(safe(text))

    def _end_status(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def started(self, study: Study, budget: int, finished: int) -> None:
        self._end_status()
        self._budget, self._done = budget, finished
        self._reading = reading(study.key.objective)
        self.note(f"study {study.name} (#{study.id}): {finished}/{budget} trials already recorded; "
                  f"objective {study.key.objective} ({kind_label(study.key.objective)}; {self._reading.heading})")
        if self._live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(TextColumn("tuning"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[best]}"), TextColumn("{task.fields[rate]}"),
                                 TimeRemainingColumn(), console=err, transient=True)
            self._task = self._bar.add_task("tuning", total=max(budget, finished), completed=finished,
                                            best="best -", rate="")
            self._bar.start()

    def trial(self, outcome: Outcome, best: Trial | None) -> None:
        trial = outcome.trial
        self._done += trial.searched
        objective = self._reading.objective
        shown = value_text(trial, objective) if trial.value is not None else f"FAILED ({safe(_cut(first_line(trial.reason, None), 120))})"
        if outcome.refused:
            shown += f" (refused: {safe(_cut(first_line(outcome.refused, None), 300))})"
        if "," in objective:  # no one best of a trade-off: the front of the results that may win so far
            best_text = self._front.add(trial, objective) if not outcome.refused else self._front.text()
        else:
            best_text = _best_text(self._reading.text(best.value) if best and best.value is not None else None,
                                   best.number if best else 0, outcome.baseline_pending)
        step = f"{self._done}/{self._budget}" if trial.searched else safe(trial.purpose)
        self._line(f"[{step}] #{trial.number} {shown}  {best_text}  [{safe(outcome.source)}]")
        if trial.state is TrialState.COMPLETE:
            self._release()
        if self._bar is not None and self._task is not None:
            task = self._bar.tasks[0]
            rate = f"{task.speed * 60:.0f}/min" if task.speed else ""
            self._bar.update(self._task, completed=min(self._done, self._budget), best=best_text, rate=rate)

    def note(self, message: str) -> None:
        self._line(safe(message))

    def _line(self, text: str) -> None:
        if self._held is not None:
            self._held.append(text)
        elif not self._quiet:
            (self._bar.console if self._bar is not None else err).print(text, markup=False, highlight=False)

    def _release(self) -> None:
        held, self._held = self._held, None
        for text in held or ():
            self._line(text)

    def close(self, failed: bool = False) -> None:
        """End the display; lines still held are printed, or dropped when the run `failed`."""
        self._end_status()
        if failed:
            self._held = None
        self._release()
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _best_text(value: str | None, number: int, baseline_pending: bool) -> str:
    """The progress line's best; while the baseline has no result (another tuner builds it), the
    best so far, which the baseline's rules and its rank among equals may still overturn."""
    if not baseline_pending:
        return f"best {value} (#{number})" if value is not None else "best -"
    return f"best so far {value} (#{number}; baseline pending)" if value is not None else "best - (baseline pending)"


def _cut(text: str, limit: int) -> str:
    """`text`, cut at a word boundary and marked "..." where it is longer than `limit` (the full
    reason is in the note at the end, `show` and `--json`)."""
    if len(text) <= limit:
        return text
    head = text[:limit - 3]
    return (head.rsplit(" ", 1)[0] if " " in head[limit // 2:] else head) + "..."
