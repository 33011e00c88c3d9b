"""The choice the study list (`compileiq show`) names for each study: the trial `show STUDY`, the
report and the ACF name, taken from the same function.

The list reads one aggregate and the row each study's latest recorded choice names
(`Store.study_summaries`): where every view follows that record (`recorded_decision.listed_choice`)
it is the choice, and no trial is read. Otherwise (a study imported, a run that did not finish, a
row changed or forged since) the choice is replayed from that study's trials by `explain`, as
`show STUDY` replays it: the list never names a trial, such as the lowest value, that the study's
rules refuse.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compileiq.core.records import RunRecord, StudySummary, Trial
from compileiq.results.explain import explain
from compileiq.results.recorded_decision import listed_choice

ReadStudy = Callable[[int], tuple[Sequence[Trial], Sequence[RunRecord]]]  # study id -> its trials and runs


@dataclass(frozen=True)
class ListedChoice:
    number: int | None  # the chosen trial; None: the study has no trial that may be chosen
    value: float | None  # its recorded (minimised) value
    replayed: bool  # True: replayed from the trials (no recorded choice every view follows)


def study_choice(summary: StudySummary, read: ReadStudy) -> ListedChoice:
    """The study's choice as every view shows it; `read` is called only for a study whose recorded
    choice is not followed and that has trials."""
    recorded = listed_choice(summary)
    if recorded is not None:
        return ListedChoice(recorded[0], recorded[1], replayed=False)
    if not summary.trials:
        return ListedChoice(None, None, replayed=True)
    trials, runs = read(summary.study.id)
    chosen = explain(summary.study, trials, None, runs).chosen  # what `show STUDY` and the report choose
    return ListedChoice(chosen.number if chosen is not None else None, chosen.value if chosen is not None else None,
                        replayed=True)
