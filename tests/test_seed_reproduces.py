"""`--seed N` reproduces a run: the same trials, in the same order, however the compiles of a
batch happen to finish. Real nvcc/ptxas, tuner, searcher and SQLite on a bundled kernel; the one
fake is the order in which local threads hand back a batch's results."""

from __future__ import annotations

from pathlib import Path

from compileiq.app import SharedWorkers, TuneOptions, tuning_space
from compileiq.build.workers import LocalWorkers
from compileiq.core.toolchain import find_toolchain
from compileiq.search.searcher import SearchSettings
from compileiq.source.kernel import load_spec
from compileiq.store import Store
from compileiq.tuning.progress import SilentProgress
from compileiq.tuning.request import TuneRequest
from compileiq.tuning.tuner import Tuner

SGEMM = Path(__file__).resolve().parent.parent / "kernels" / "sgemm" / "sgemm.cu"


class ReversedWorkers(LocalWorkers):
    """Local threads whose batch results come back last first: a batch whose compiles finish in
    another order (timing decides it on a real machine)."""

    def run(self, jobs, more=None, before=None):
        return iter(list(super().run(jobs, more, before))[::-1])


def _trials(folder: Path, workers: type[LocalWorkers]) -> list[tuple[int, str, str]]:
    """The study's trials (id, config key, purpose) after a seeded static tune of sgemm (its whole default
    space: macros, nvcc and ptxas settings)."""
    spec, tools = load_spec(SGEMM), find_toolchain()
    space = tuning_space(spec, tools, TuneOptions(kernel=spec.source))
    request = TuneRequest(spec, space, "static", budget=25, search=SearchSettings("bayes", seed=1),
                          batch_size=8, simplify=False)
    store = Store.open(f"sqlite:///{folder}/{workers.__name__}.db")
    try:
        study = Tuner(request, store, tools, SharedWorkers(lambda: workers(2)), SilentProgress()).run().study
        return [(t.id, t.config_key, t.purpose) for t in store.trials(study.id)]
    finally:
        store.close()


def test_a_batch_finishing_in_another_order_gives_the_same_trials(tmp_path: Path) -> None:
    """Before, the searcher was told a batch's results in the order they finished, and the order
    it learns them in changes its proposals: same-seed runs of sgemm differed from trial 39 on."""
    plain, reversed_ = _trials(tmp_path, LocalWorkers), _trials(tmp_path, ReversedWorkers)
    assert plain == reversed_
    # The budget's 25 search trials, then the ablation's: the winner differs from the baseline, and
    # the ablation builds the steps between them even without simplify (a seed-1 winner of 2026-12-05
    # on; before, the search's winner was the baseline and nothing was ablated).
    purposes = [purpose for _, _, purpose in plain]
    assert purposes[:25] == ["search"] * 25
    assert set(purposes[25:]) <= {"ablation"}
