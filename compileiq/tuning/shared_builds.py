"""Work shared with other tuners on one database while a batch compiles: builds of the same PTX
and flags are made once (`SharedBuilds`), and claimed trials and builds are kept alive
(`Heartbeat`)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Self

from compileiq.build.compile import AssembleJob, Build, PtxResult
from compileiq.build.workers import POLL_S, WAIT, VariantJob, VariantResult, Wait
from compileiq.core.errors import CompileIQError
from compileiq.store import Store
from compileiq.tuning.build_records import build_from_record, deterministic


class SharedBuilds:
    """No ptxas run twice on the same PTX with the same flags, in this run or across tuners.

    Asked by the workers when a variant's PTX is ready (`before_assemble`): a build of the same
    PTX key made by this run, or recorded in the database by anyone (checked as any cached row),
    is used without running ptxas; otherwise the key is claimed in the database and compiled here,
    or, when another tuner holds a live claim, the variant waits for its build (asked again every
    POLL_S). Claims are beaten with the trials' heartbeat and released when the run fails; the
    recorded build deletes its claim in the same transaction (`Store.finish_trials`)."""

    def __init__(self, ptx_key: Callable[[AssembleJob, PtxResult], str], store: Store, worker: str, stale_after_s: float,
                 gone: Callable[[str], bool]) -> None:
        self._ptx_key, self._store, self._worker, self._stale_after_s = ptx_key, store, worker, stale_after_s
        self._gone = gone  # a tuner known to be gone (its process on this host ended): its claims are taken at once
        self._built: dict[str, tuple[Build, str]] = {}  # PTX key -> the build this run made or found, and
        # where it came from ("compiled": this run's ptxas; "build cache": recorded by anyone, checked as a cached row)
        self._building: dict[str, int] = {}  # PTX key -> the tag of the variant compiling it here
        self._keys: dict[int, str] = {}  # tag -> its PTX key
        self._answered: dict[int, str] = {}  # tag -> where its build came from ("compiled": this run's ptxas)
        self._polled: dict[str, float] = {}  # PTX key another tuner builds -> when the database was last asked
        self.claims: tuple[str, ...] = ()  # the database claims this run holds (read by the heartbeat thread)

    def before_assemble(self, jobs: Sequence[VariantJob], ptx: PtxResult) -> list[Build | None | Wait]:
        keys = [self._key(job, ptx) for job in jobs]
        now = time.monotonic()
        ask = {key for key in keys if key not in self._built and key not in self._building
               and now - self._polled.get(key, -math.inf) >= POLL_S}
        found = self._store.claim_builds(ask, self._worker, self._stale_after_s) if ask and self._worker else None
        if found is not None:
            for key, record in found.built.items():
                if deterministic(record):
                    self._built[key] = (build_from_record(record), "build cache")
            dead = {holder for holder in set(found.held.values()) if self._gone(holder)}
            for holder in dead:  # their claims are taken when asked again (after the next result, or POLL_S)
                self._store.release_build_claims([k for k, w in found.held.items() if w == holder], holder)
            self._polled.update((key, now) for key, holder in found.held.items() if holder not in dead)
        answers: list[Build | None | Wait] = []
        for job, key in zip(jobs, keys, strict=True):
            if key in self._built:
                build, self._answered[job.tag] = self._built[key]
                answers.append(build)
            elif key in self._building or (found is not None and key in found.held) or key not in ask:
                answers.append(WAIT)
            else:  # claimed here (or no database claims: a runner without a worker name)
                self._building[key] = job.tag
                answers.append(None)
        self.claims = tuple(self._building)
        return answers

    def _key(self, job: VariantJob, ptx: PtxResult) -> str:
        if job.tag not in self._keys:  # popped when its result arrives
            self._keys[job.tag] = self._ptx_key(job.assemble, ptx)
        return self._keys[job.tag]

    def assembled(self, result: VariantResult) -> tuple[str | None, str | None]:
        """Where the result's build came from (None: ptxas ran for it) and its PTX key."""
        key = self._keys.pop(result.tag, None)
        source = self._answered.pop(result.tag, None)
        if source is not None or key is None or self._building.get(key) != result.tag:
            return source, key
        del self._building[key]
        self.claims = tuple(self._building)
        if result.build.status.deterministic:
            self._built[key] = (replace(result.build, cubin=b""), "compiled")  # nothing reads it again
        elif self._worker:  # a compiler that timed out or crashed records nothing: let anyone try again
            self._store.release_build_claims([key], self._worker)
        return None, key

    def beat(self) -> None:
        """Keep this run's claims of builds alive (from the heartbeat thread)."""
        if self.claims and self._worker:
            self._store.heartbeat_build_claims(self.claims, self._worker)

    def release_all(self) -> None:
        """The run stops: give back the claims of builds it will not record."""
        held, self._building, self.claims = list(self._building), {}, ()
        self._keys.clear()
        self._answered.clear()
        if held and self._worker:
            try:
                self._store.release_build_claims(held, self._worker)
            except CompileIQError:
                pass  # the database went away: the claims go stale


class Heartbeat:
    """Keeps claimed trials alive from a background thread while they compile.

    A compile (or Ray's start-up) can outlast the stale timeout of other tuners on the study;
    beating only between results would let them take over trials that are still being worked on.
    """

    def __init__(self, store: Store, trial_ids: Sequence[int], every_s: float,
                 builds: SharedBuilds | None = None) -> None:
        self._store, self._ids, self._every_s, self._builds = store, list(trial_ids), every_s, builds
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="compileiq-heartbeat", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def add(self, trial_ids: Sequence[int]) -> None:
        """Beat for these trials too (claimed while the others compile)."""
        with self._lock:
            self._ids = [*self._ids, *trial_ids]

    def _beat(self) -> None:
        while not self._stop.wait(self._every_s):
            with self._lock:
                ids = self._ids
            try:
                self._store.heartbeat(ids)
                if self._builds is not None:  # the builds this run claimed: others wait for them
                    self._builds.beat()
            except CompileIQError:
                pass  # best effort: the loop itself reports a database that went away
