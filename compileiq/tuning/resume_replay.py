"""`tune --resume` of a stopped study: its searcher rebuilt by replaying what it was asked and told.

Each claim of a run (one objective, not `--stream`, no screening) stores the searcher's calls
since the previous claim (`search.journal`), the trial numbers it took, its purpose, and the run's
compile counters (`store.search_journal`). A resumed run gives a fresh searcher of the same space and
settings the same calls: the same initial design, the same random draws, the same results in the
same order, the same measured front-end/ptxas cost ratio; each ask must propose what it proposed
then. The searcher is then as the stopped run's was at its last claim, so the run goes on as the
uninterrupted one would have: the search batch the stop fell in (none where the last claim was
a simplification's, an ablation's or a confirmation's) is finished first, its unfinished trials
alone (on their rows), and its results are told together, in the order claimed; the cost ratio
goes on from the counters recorded at that claim, the resumed run's compiles added.

Where the record is missing (a study of an older compileiq, a `--stream` run), was written by
tuners working at once, or does not replay (an edited or forged row, another compileiq: a replay
tells only the results the study's own trials give, `search.journal.ReplayRules`), the caller
rebuilds the searcher from the trials, as before, and says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from compileiq.core.records import SEARCH, Trial, TrialState
from compileiq.tuning.progress import RunCounters
from compileiq.tuning.request import TuneRequest

Counters = tuple[int, float, int, float]  # front-end calls and seconds, ptxas calls and seconds
NO_COUNTERS: Counters = (0, 0.0, 0, 0.0)


@dataclass(frozen=True)
class Replayed:
    searcher: Any  # a `JournaledSearcher` (imported with the searcher: numpy)
    batches: int  # the asks replayed
    retry: tuple[int, ...]  # ids of the unfinished trials of the batch the stop fell in: the next batch
    held: tuple[Trial, ...]  # that batch's finished trials, told with them
    counters: Counters  # the compile counters at the last claim (the cost ratio goes on from them)


def replayed(rows: Sequence[tuple[int, Any]], request: TuneRequest, trials: Sequence[Trial],
             rules: Any) -> Replayed | str | None:
    """The study's searcher replayed from its journal `rows` (`store.search_journal`, read with
    `trials` before this run claimed anything), each call held to `rules` (a `ReplayRules`); None
    where nothing was recorded nor tried; else why it cannot be (one clause)."""
    if not rows:
        return None if not trials else "this study's search was not recorded for a replay (an older compileiq, or --stream)"
    run_ids = [run_id for run_id, _ in rows]
    if run_ids != sorted(run_ids) or any(t.state is TrialState.RUNNING for t in trials):
        return "its search was recorded by tuners working at once, or another is working on it"
    try:
        claims = [[int(number) for number in entry["claimed"]] for _, entry in rows]
        calls = [call for _, entry in rows for call in entry["calls"]]
        each = [_counters(entry["counters"]) for _, entry in rows]
        counters = each[-1]
        searching = str(rows[-1][1].get("purpose", SEARCH)) == SEARCH  # a stop outside the search: no batch to finish
        unmeasured = _unmeasured(each, [entry["calls"] for _, entry in rows])
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as error:  # int(1e999): OverflowError
        return f"its record of the search is unreadable ({type(error).__name__})"
    if unmeasured:
        return f"its search did not replay: {unmeasured}"
    recorded = {number for claim in claims for number in claim}
    if recorded - {t.number for t in trials}:  # no trial is ever deleted: an edited or forged row
        return "its record names trials the study does not hold (an edited or forged row)"
    if missing := sum(t.number not in recorded for t in trials):
        return f"{missing} of its trials were not recorded for a replay (an older compileiq's, or --stream's)"
    from compileiq.search.journal import JournaledSearcher, ReplayMismatch, replay

    searcher = JournaledSearcher(request.space, request.search)
    try:
        replay(searcher, calls, rules)
    except ReplayMismatch as error:
        return f"its search did not replay: {error}"
    except Exception as error:  # noqa: BLE001 - a record this compileiq cannot replay: the run goes on as before
        return f"its search did not replay ({type(error).__name__}: {error})"
    last = set(claims[-1]) if searching else set()
    stopped_in = [t for t in trials if t.number in last]
    retry = tuple(t.id for t in stopped_in if t.to_retry)
    held = tuple(t for t in stopped_in if t.final and t.config_key not in searcher.told) if retry else ()
    return Replayed(searcher, searcher.asks, retry, held, counters)


def entry(calls: list[Any], claimed: Sequence[Trial], purpose: str, base: Counters,
          counters: RunCounters) -> dict[str, Any]:
    """A claim's journal row: the searcher's calls since the previous one, the trial numbers it took,
    its purpose (`records.PURPOSES`), the compile counters (`base`: a resumed study's, at its last
    claim before this run)."""
    return {"calls": calls, "claimed": [t.number for t in claimed], "purpose": purpose,
            "counters": list(total(base, counters))}


def total(base: Counters, counters: RunCounters) -> Counters:
    return (base[0] + counters.frontend_calls, base[1] + counters.frontend_seconds,
            base[2] + counters.ptxas_calls, base[3] + counters.ptxas_seconds)


def cost_ratio(base: Counters, counters: RunCounters) -> float:
    """Mean front-end time over mean ptxas time, the stopped run's compiles included (nan if unknown)."""
    return _ratio(total(base, counters))


def _unmeasured(counters: Sequence[Counters], calls: Sequence[Any]) -> str | None:
    """Why the recorded front-end/ptxas cost ratios are not the run's own measurement (None: they
    are): the counters of the claims must grow, and each cost a row tells the searcher must be the
    ratio its row's counters give (no compile runs between that call and the claim). A forged ratio
    would weigh new front ends other than measured in every ask after it."""
    for before, after in pairwise(counters):
        if any(b > a for b, a in zip(before, after, strict=True)):
            return "its compile counters do not grow from one claim to the next"
    for row, (made, row_calls) in enumerate(zip(counters, calls, strict=True)):
        for call in row_calls:
            if isinstance(call, list) and call[:1] == ["cost"]:
                measured = _ratio(made)
                if len(call) != 2 or not math.isclose(float(call[1]), measured, rel_tol=1e-9):
                    return f"claim {row + 1} tells a front-end cost other than its compile counters measured"
    return None


def _ratio(counters: Counters) -> float:
    frontend_calls, frontend_seconds, ptxas_calls, ptxas_seconds = counters
    if not frontend_calls or not ptxas_calls or not ptxas_seconds:
        return math.nan
    return (frontend_seconds / frontend_calls) / (ptxas_seconds / ptxas_calls)


def _counters(value: Any) -> Counters:
    calls, seconds, ptxas_calls, ptxas_seconds = value
    counters = (int(calls), float(seconds), int(ptxas_calls), float(ptxas_seconds))
    if not all(math.isfinite(v) and v >= 0 for v in counters):
        raise ValueError("counters out of range")
    return counters
