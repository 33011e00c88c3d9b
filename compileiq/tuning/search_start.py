"""The searcher a request needs, loaded in the background from the start of a run (the baseline
compiles meanwhile): one objective, scikit-optimize's `Searcher` (or the same in a process of its
own when streaming a large batch); several, the `FrontSearcher`."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from compileiq.results import multi_objective
from compileiq.search.loading import SearchLoad
from compileiq.search.search_process import RemoteSearcher
from compileiq.search.settings import check_settings
from compileiq.tuning.request import TuneRequest
from compileiq.tuning.startup import PhaseProgress

if TYPE_CHECKING:  # loaded on a thread of its own: scikit-optimize is slow to import
    from compileiq.search.searcher import Searcher


def start_search(request: TuneRequest, phases: PhaseProgress | None = None) -> SearchLoad[Searcher | RemoteSearcher]:
    """Check the search settings, then load the searcher in the background (the baseline compiles
    meanwhile); with `phases`, the load is announced now and its duration told when first needed."""
    check_settings(request.search, request.space)
    phase = phases.starting("loading the search") if phases is not None else None
    return SearchLoad(partial(_new_searcher, request),
                      None if phase is None else lambda seconds: phase.done("search loaded", seconds))


def _new_searcher(request: TuneRequest) -> Searcher | RemoteSearcher:
    objectives = len(multi_objective.objectives_of(request.objective))
    if objectives == 1:
        if request.searches_in_a_process:
            return RemoteSearcher(request.space, request.search)
        if request.stream:  # not reproducible by seed: nothing to replay (`resume_replay`)
            from compileiq.search.searcher import Searcher

            return Searcher(request.space, request.search)
        from compileiq.search.journal import JournaledSearcher

        return JournaledSearcher(request.space, request.search)
    from compileiq.search.front_search import FrontSearcher

    return FrontSearcher(request.space, request.search, objectives)

