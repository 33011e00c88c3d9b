"""The first minute of a run: Ray starts and the searcher loads in the background while the
baseline, and the batches after it until Ray is ready, compile on local threads; each start-up
phase is announced as it starts ("loading the search…") and reported with its
duration when it ends ("workers ready 3.1 s")."""

from __future__ import annotations

import atexit
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from compileiq.build.workers import BeforeAssemble, LocalWorkers, More, Transfers, Workers
from compileiq.tuning.progress import Outcome, Progress

if TYPE_CHECKING:
    from compileiq.build.compile import ExecutableBuild, ExecutableJob
    from compileiq.build.workers import VariantJob, VariantResult
    from compileiq.core.records import Study, Trial


class Phase:
    """A start-up phase under way; `done` reports its duration (once)."""

    def __init__(self, phases: PhaseProgress, doing: str) -> None:
        self.doing = doing
        self.ended = False
        self._phases = phases
        self._since = time.perf_counter()

    def done(self, name: str, seconds: float | None = None) -> None:
        """Report the end: `name` and the seconds since the start (or those given)."""
        if not self.ended:
            self.ended = True
            self._phases.phase(name, time.perf_counter() - self._since if seconds is None else seconds)


class PhaseProgress:
    """A Progress that also reports start-up phases. What is known before the run's first line
    (the study line) waits for it, so that a run that fails early prints one error line: a phase
    that started is shown at once only as a terminal's passing status line (see `LineProgress.status`),
    and announced in the log at the study line if it is still under way then."""

    def __init__(self, inner: Progress) -> None:
        self._inner = inner
        self._since = time.perf_counter()
        self._first = True
        self._held: list[str] = []
        self._running: list[Phase] = []  # started before the study line
        self._started = False
        self._lock = threading.Lock()

    def starting(self, doing: str) -> Phase:
        """Announce a phase as it starts ("bundling sources"); `Phase.done` reports its end."""
        phase = Phase(self, doing)
        with self._lock:
            if not self._started:
                self._running.append(phase)
                status = getattr(self._inner, "status", None)  # optional: a terminal's passing line
                if status is not None:
                    status(f"{doing}…")
                return phase
        self._inner.note(f"{doing}…")
        return phase

    def phase(self, name: str, seconds: float) -> None:
        self.note(f"{name} {seconds:.1f} s")

    def started(self, study: Study, budget: int, finished: int) -> None:
        self._inner.started(study, budget, finished)
        with self._lock:
            self._started, held, self._held = True, self._held, []
            held += [f"{phase.doing}…" for phase in self._running if not phase.ended]  # still under way
            self._running = []
        for message in held:
            self._inner.note(message)

    def trial(self, outcome: Outcome, best: Trial | None) -> None:
        self._inner.trial(outcome, best)
        if self._first:
            self._first = False
            self.phase(f"first result ({outcome.source})", time.perf_counter() - self._since)

    def note(self, message: str) -> None:
        with self._lock:
            if not self._started:
                self._held.append(message)
                return
        self._inner.note(message)


class EarlyWorkers:
    """Opens the real workers (an embedded Ray) in a background thread from construction on. Until
    they are ready, a batch compiles on local threads instead of waiting (the baseline alone first,
    then whole batches: an embedded Ray takes seconds to start, on the same cores); a streaming run,
    which hands one call every variant of the search, waits for them. The front ends compiled
    locally are handed to the real workers when they take over, so none is compiled twice. Call
    it to get the workers."""

    def __init__(self, opener: Callable[[], Workers], phases: PhaseProgress, local_threads: int | None = None,
                 abort: Callable[[], object] | None = None) -> None:
        self._opener, self._local_threads, self._abort = opener, local_threads, abort
        self._started = time.perf_counter()
        self._ready = threading.Event()
        self._closing = threading.Event()
        self._aborted = False  # the start was stopped (Ctrl-C): never waited for
        self._workers: Workers | None = None
        self._error: BaseException | None = None
        self._local: LocalWorkers | None = None
        self._announced = False
        self._built = {"local": 0, "ray": 0}  # variants each side compiled: the run's summary says where
        self._ready_after = 0.0  # seconds the start took
        self._phases = phases
        self._phase = phases.starting("starting Ray workers")
        self._thread = threading.Thread(target=self._open, name="compileiq-workers-start", daemon=True)
        self._thread.start()

    def _open(self) -> None:
        """Open the workers, then keep them until `close`: this thread must outlive them, as
        Ray's own processes are tied to the thread that started them (they die with it)."""
        try:
            self._workers = self._opener()
        except Exception as error:  # noqa: BLE001 - re-raised where the workers are first needed
            self._error = error
        finally:
            self._ready_after = time.perf_counter() - self._started
            self._ready.set()
        self._closing.wait()
        if self._workers is not None:
            self._workers.close()

    def __call__(self) -> EarlyWorkers:
        return self  # itself a Workers (run, build_executables, close, description), ready at once

    @property
    def description(self) -> str:
        if self._ready.is_set() and self._workers is not None:
            return self._workers.description
        return "Ray (starting; meanwhile the first variants compile on local threads)"

    @property
    def transfers(self) -> Transfers:
        """What went to the real workers (the local threads ship nothing)."""
        return self._workers.transfers if self._workers is not None else Transfers()

    def run(self, jobs: Sequence[VariantJob], more: More | None = None,
            before: BeforeAssemble | None = None) -> Iterator[VariantResult]:
        if not self._ready.is_set() and (more is None or len(jobs) <= 1):
            if self._local is None:
                self._local = LocalWorkers(self._local_threads)
            return self._counted("local", self._local.run(jobs, more, before))
        return self._counted("ray", self.ready().run(jobs, more, before))

    def _counted(self, side: str, results: Iterator[VariantResult]) -> Iterator[VariantResult]:
        for result in results:
            self._built[side] += 1
            yield result

    @property
    def compiled_where(self) -> str | None:
        """Where the variants compiled, when local threads built any while Ray started: "compiled:
        all 48 variants on local threads; Ray was still starting and was not used" (a small run pays
        for a Ray it never used); None when Ray built them all."""
        local, ray = self._built["local"], self._built["ray"]
        if not local:
            return None
        if not ray:
            still = "was still starting" if not self._ready.is_set() else "became ready only after the last one"
            return f"compiled: all {local} variant(s) on local threads; Ray {still} and was not used"
        return f"compiled: {local} variant(s) on local threads while Ray started, {ray} on Ray"

    def build_executables(self, jobs: Sequence[ExecutableJob]) -> list[ExecutableBuild]:
        return self.ready().build_executables(jobs)

    def ready(self) -> Workers:
        """The real workers, waited for; the error that stopped them from starting, re-raised."""
        self._ready.wait()
        if self._error is not None:
            raise self._error
        assert self._workers is not None
        if not self._announced:
            self._announced = True
            self._phase.done(f"workers ready ({self._workers.description})", self._ready_after)
            adopt = getattr(self._workers, "adopt", None)  # Ray's: the local front ends' PTX, put once
            if adopt is not None and self._local is not None:
                adopt(self._local.emitted())
        return self._workers

    def close(self) -> None:
        """Close both; a start still in progress is waited for (then shut down, by its thread). Not
        waiting saved a small run seconds, but left Ray's agents running for a minute after the run
        (and, in a library process, Ray starting after `tune` returned): a run ends with its Ray.
        Closed as a Ctrl-C (or SIGTERM, see cli.signals) unwinds a run whose process then ends,
        `abort` stops the start instead: it kills what the start has launched, at once and again
        as the process exits (what Ray launched meanwhile is fate-shared with the start's thread,
        and dies with the process too), rather than waiting 10-30 s for a Ray no one will use."""
        if self._local is not None:
            self._local.close()
            self._local = None
        self._closing.set()
        if self._aborted or (self._abort is not None and not self._ready.is_set()
                             and isinstance(sys.exception(), KeyboardInterrupt)):
            if not self._aborted and self._abort is not None:
                self._aborted = True
                self._abort()
                atexit.register(self._abort)  # registered after Ray's own (at its import): runs before it
            return
        if self._thread.is_alive() and self._workers is not None and isinstance(sys.exception(), KeyboardInterrupt):
            self._phases.note("stopping: waiting for Ray to shut down")  # seconds, said at once
        self._thread.join()
