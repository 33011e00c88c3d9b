"""The measuring actor on CPU-only Ray (num_gpus=0) with fake executables: a variant that
crashes, kills its actor, or freezes it is recorded as a failed run and the actor comes back."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from compileiq.evaluate.measuring_actors import GpuMeasurerActor, open_gpu_measurers

pytestmark = pytest.mark.slow

LINE = json.dumps({"compileiq_harness": 1, "status": "ok", "device": "fake", "samples_ms": [1.0],
                   "median_ms": 1.0, "outputs": []})
GOOD = f"#!/bin/sh\necho '{LINE}'\n".encode()


@pytest.fixture(scope="module")
def actor() -> Iterator[GpuMeasurerActor]:
    saved = dict(os.environ)
    [measurer] = open_gpu_measurers(None, count=1, num_gpus=0, grace_s=3.0)
    try:
        yield measurer
    finally:
        import ray

        measurer.close()
        ray.shutdown()
        os.environ.clear()
        os.environ.update(saved)


def test_a_good_variant_is_timed(actor: GpuMeasurerActor) -> None:
    run = actor.measure(GOOD, [], 30)
    assert run.failure is None and run.harness.median_ms == 1.0 and actor.device == "fake"


def test_a_crashing_variant_leaves_the_actor_alone(actor: GpuMeasurerActor) -> None:
    restarts = actor.restarts
    run = actor.measure(b"#!/bin/sh\nkill -SEGV $$\n", [], 30)
    assert run.failure and run.failure.startswith("crashed: killed by signal 11")
    assert actor.restarts == restarts


def test_a_variant_that_kills_its_actor_is_recorded_and_the_actor_restarts(actor: GpuMeasurerActor) -> None:
    restarts = actor.restarts
    run = actor.measure(b"#!/bin/sh\nkill -KILL $PPID\nsleep 1\n", [], 30)
    assert run.failure and "measuring actor died" in run.failure
    assert actor.restarts == restarts + 1
    assert actor.measure(GOOD, [], 60).failure is None


def test_a_frozen_actor_is_killed_after_timeout_plus_grace_and_restarted(actor: GpuMeasurerActor) -> None:
    restarts = actor.restarts
    run = actor.measure(b"#!/bin/sh\nkill -STOP $PPID\nsleep 1\n", [], 1.0)
    assert run.timed_out and run.failure and run.failure.startswith("timeout")
    assert 3.5 < run.seconds < 30 and actor.restarts == restarts + 1
    assert actor.measure(GOOD, [], 60).failure is None
