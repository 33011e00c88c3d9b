"""A cross-kernel warm start: the lessons of other kernels' studies in the database, replayed
with the choice every view renders (`explain`), turned into a prior on what a new study proposes
first (`compileiq.search.transfer`). Their rows are as untrusted as any shared row: a study whose
rows cannot be explained is skipped, and nothing read here is recorded or told as a result."""

from __future__ import annotations

import math
from collections.abc import Collection

from compileiq.core.errors import CompileIQError
from compileiq.core.records import StudyKey, TrialState
from compileiq.core.space import Config, SearchSpace
from compileiq.results.explain import explain
from compileiq.search import transfer
from compileiq.store import Store

MAX_STUDIES = 32  # the latest other studies read
MAX_ROWS = 4096  # their trials read at most, in one query


def other_kernels_prior(store: Store, key: StudyKey, space: SearchSpace, baseline: Config, limit: int,
                        kernel: Collection[str] = ()) -> transfer.Prior:
    """What the other kernels' studies of this toolchain space suggest for a study of `key`
    (`kernel`: every identity of its kernel, none of them another's)."""
    lessons = []
    for study, trials in store.other_kernels_trials(key, MAX_STUDIES, MAX_ROWS, kernel):
        try:
            explained = explain(study, trials)
            base, chosen = explained.baseline, explained.chosen
            if base is None or base.state is not TrialState.COMPLETE or base.value is None:
                continue
            judged = [(t.config, explained.refusal(t) is not None) for t in trials
                      if t.state is TrialState.COMPLETE and t.value is not None]
            lessons.append(transfer.lesson(base.config, chosen.config if chosen is not None else None,
                                           _gain(base.value, chosen.value if chosen is not None else None), judged))
        except (CompileIQError, ValueError, TypeError, KeyError, AttributeError):
            continue  # a study whose rows do not make a choice teaches nothing
    return transfer.prior(lessons, space, baseline, limit)


def _gain(baseline: float, chosen: float | None) -> float:
    """The chosen trial's relative gain over the baseline (smaller is better), 0 when unknown."""
    if chosen is None or not (math.isfinite(baseline) and math.isfinite(chosen)) or baseline <= 0:
        return 0.0
    return (baseline - chosen) / baseline
