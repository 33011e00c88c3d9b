"""--json: stdout stays one JSON document while progress goes to stderr as plain lines, one per
trial and phase; Ray starts in the background while the baseline and the first batches compile on
local threads."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
from helpers import TINY_KERNEL, run_cli

from compileiq.build.compile import AssembleJob, BuildStatus, FrontendJob
from compileiq.build.workers import LocalWorkers, VariantJob, Workers
from compileiq.core.records import Study
from compileiq.core.toolchain import find_toolchain
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.tuning.progress import SilentProgress
from compileiq.tuning.startup import EarlyWorkers, PhaseProgress

ONLY = "ptxas.opt_level,ptxas.register_usage_level"
PHASE = re.compile(r"^(sources bundled|search loaded|first result \(compiled\)) \d+\.\d s$")


def test_json_keeps_stdout_one_document_and_streams_plain_progress_on_stderr(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    result = run_cli(["tune", "k.cu", "--workers", "local", "--budget", "4", "--batch-size", "3", "--json",
                      "--only", ONLY, "--db", "sqlite:///t.db", "--arch", "sm_90", "--study", "S"], cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.describe()
    assert json.loads(result.stdout)["search_trials"] == 4  # the whole of stdout is one document
    lines = result.stderr_lines
    assert lines[0].startswith("study S (#1): 0/4 trials already recorded"), result.describe()
    assert [line for line in lines if re.match(r"^\[\d/4\] #\d ", line)] != []
    assert len([line for line in lines if re.match(r"^\[\d/4\] #\d ", line)]) == 4, result.describe()
    assert {m[1] for line in lines if (m := PHASE.match(line))} == {"sources bundled", "search loaded",
                                                                    "first result (compiled)"}, result.describe()
    assert "stopped: budget 4" in lines, result.describe()
    assert "\x1b" not in result.stderr and "━" not in result.stderr  # plain lines, no bar


def test_json_errors_after_the_study_started_are_still_one_line(tmp_path: Path) -> None:
    """A kernel that does not build: its failed baseline trial is recorded, its progress dropped."""
    (tmp_path / "k.cu").write_text("__global__ void k(int* x) { *x = undefined_name; }\n")
    result = run_cli(["tune", "k.cu", "--workers", "local", "--budget", "4", "--json", "--only", ONLY,
                      "--db", "sqlite:///t.db", "--arch", "sm_90"], cwd=tmp_path)  # fmt: skip
    assert result.returncode == 1 and result.stdout == "", result.describe()
    assert len(result.stderr_lines) == 1 and "does not build with default settings" in result.stderr_lines[0]


def test_human_output_keeps_its_lines_when_the_run_fails(tmp_path: Path) -> None:
    """Without --json nothing is held back: the failed baseline's line precedes the error."""
    (tmp_path / "k.cu").write_text("__global__ void k(int* x) { *x = undefined_name; }\n")
    result = run_cli(["tune", "k.cu", "--workers", "local", "--budget", "4", "--only", ONLY,
                      "--db", "sqlite:///t.db", "--arch", "sm_90"], cwd=tmp_path)  # fmt: skip
    assert result.returncode == 1, result.describe()
    assert any("FAILED (" in line for line in result.stderr_lines), result.describe()
    assert result.stderr_lines[-1].startswith("error: ") and "does not build" in result.stderr_lines[-1]


class _Recorder(SilentProgress):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def started(self, study: Study, budget: int, finished: int) -> None:
        self.notes.append("started")

    def note(self, message: str) -> None:
        self.notes.append(message)


def test_phases_wait_for_the_study_line() -> None:
    recorder = _Recorder()
    phases = PhaseProgress(recorder)
    phases.phase("sources bundled", 0.25)
    assert recorder.notes == []  # a run that fails before its study says only its error
    phases.started(None, 4, 0)  # type: ignore[arg-type]
    phases.note("after")
    assert recorder.notes == ["started", "sources bundled 0.2 s", "after"]


def _jobs(tmp_path: Path, count: int) -> list[VariantJob]:
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    tools = find_toolchain()
    spec = load_spec(tmp_path / "k.cu", arch="sm_90")
    bundle = bundle_sources(spec, tools.nvcc)
    return [VariantJob(tag=i, frontend=FrontendJob(tools.nvcc, bundle, "sm_90", (), 60.0),
                       assemble=AssembleJob(tools.ptxas, "sm_90", (f"-O{i % 4}",), 60.0)) for i in range(count)]  # fmt: skip


def test_batches_compile_locally_while_the_workers_start(tmp_path: Path) -> None:
    """The workers' start (Ray's, in a real run) is held here: the baseline and a whole batch
    compile on local threads meanwhile; a streaming call waits for the workers; once they are
    ready, the next batch goes to them and the ready phase is reported."""
    release, opened = threading.Event(), []

    def slow_open() -> Workers:
        release.wait(60)
        opened.append(LocalWorkers(2))
        return opened[0]

    recorder = _Recorder()
    phases = PhaseProgress(recorder)
    phases.started(None, 4, 0)  # type: ignore[arg-type]
    early = EarlyWorkers(slow_open, phases)
    jobs = _jobs(tmp_path, 6)
    try:
        workers = early()
        assert "starting" in workers.description
        (baseline,) = list(workers.run(jobs[:1]))  # done while the start is still blocked
        assert baseline.build.status is BuildStatus.OK and not opened
        batch = list(workers.run(jobs[1:3]))  # a batch does not wait either
        assert sorted(r.tag for r in batch) == [1, 2] and all(r.build.ok for r in batch) and not opened
        threading.Timer(0.5, release.set).start()
        streaming = workers.run(jobs[3:5], more=list)  # waits for the start (released in 0.5 s)
        assert opened and sorted(r.tag for r in streaming) == [3, 4]
        assert any(n.startswith("workers ready (local threads (2)) ") for n in recorder.notes), recorder.notes
        assert [r.tag for r in workers.run(jobs[5:])] == [5] and "starting" not in workers.description
    finally:
        release.set()
        early.close()


@pytest.mark.slow
def test_ray_takes_over_the_front_ends_compiled_while_it_started(tmp_path: Path) -> None:
    """The front end compiled on a local thread before Ray was ready is handed to Ray: its
    variants assemble there from that PTX, and no front end is compiled twice."""
    from helpers import embedded_ray_workers

    release = threading.Event()
    with embedded_ray_workers() as ray_workers:
        def slow_open() -> Workers:
            release.wait(60)
            return ray_workers

        early = EarlyWorkers(slow_open, PhaseProgress(SilentProgress()))
        jobs = _jobs(tmp_path, 4)  # one front end, four ptxas settings
        try:
            local = list(early.run(jobs[:2]))
            assert [r.ptx_compiled for r in local].count(True) == 1 and all(r.node == "" for r in local)
            release.set()
            early.ready()
            on_ray = list(early.run(jobs[2:]))
            assert all(r.build.ok and r.node for r in on_ray), on_ray  # assembled on Ray
            assert not any(r.ptx_compiled for r in on_ray)  # the local PTX, not a second nvcc -ptx
            assert ray_workers.transfers.ptx_puts == 1
        finally:
            release.set()
            early.close()  # shuts Ray down; the fixture's own shutdown after it is a no-op


def test_a_start_that_fails_is_reported_where_the_workers_are_needed(tmp_path: Path) -> None:
    from compileiq.build.workers import WorkersError

    def failing_open() -> Workers:
        raise WorkersError("cannot start Ray: no room")

    early = EarlyWorkers(failing_open, PhaseProgress(SilentProgress()))
    jobs = _jobs(tmp_path, 2)
    with pytest.raises(WorkersError, match="no room"):
        list(early().run(jobs))
    early.close()


@pytest.mark.slow
def test_with_ray_the_first_result_comes_before_the_workers_are_ready(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    # --stream: a streaming run waits for Ray (a batch would compile locally until Ray is ready)
    result = run_cli(["tune", "k.cu", "--budget", "3", "--batch-size", "2", "--only", ONLY, "--db", "sqlite:///t.db",
                      "--arch", "sm_90", "--stream"], cwd=tmp_path, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.describe()
    lines = result.stderr_lines
    first = next(i for i, line in enumerate(lines) if line.startswith("[1/3] #0 "))
    ready = next(i for i, line in enumerate(lines) if line.startswith("workers ready (embedded local Ray"))
    assert first < ready, result.describe()
    assert "[compiled]" in lines[first]




@pytest.mark.slow
def test_a_run_says_where_its_variants_compiled_while_ray_started(tmp_path: Path) -> None:
    """User 48: a small run with the default embedded Ray printed "compiling on Ray (starting; ...)",
    never a "workers ready" line, and nothing at the end said that every trial compiled on local
    threads. The summary says where (the run still ends its Ray, started or not: not waiting left
    Ray's agents running a minute after it)."""
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    result = run_cli(["tune", "k.cu", "--budget", "3", "--only", ONLY, "--db", "sqlite:///t.db", "--arch", "sm_90"],
                     cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.describe()
    where = [line for line in result.stdout.splitlines() if line.startswith("compiled: ")]
    assert len(where) == 1 and re.fullmatch(  # Ray takes seconds to start: the first is all but certain
        r"compiled: (all 3 variant\(s\) on local threads; Ray (was still starting|became ready only after the last one)"
        r" and was not used"
        r"|\d variant\(s\) on local threads while Ray started, \d on Ray)", where[0]), result.describe()
    local = run_cli(["tune", "k.cu", "--budget", "3", "--only", ONLY, "--db", "sqlite:///l.db", "--arch", "sm_90",
                     "--workers", "local"], cwd=tmp_path)
    assert local.returncode == 0 and "compiled: " not in local.stdout, local.describe()  # nothing to explain


def test_the_search_loads_while_the_baseline_compiles(tmp_path: Path) -> None:
    """Issue 25.6: scikit-optimize took 5-40 s to import under load before the first line; it
    now loads on a thread of its own, so the baseline's result comes before it is needed."""
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    result = run_cli(["tune", "k.cu", "--workers", "local", "--budget", "3", "--only", ONLY,
                      "--db", "sqlite:///t.db", "--arch", "sm_90", "--study", "S"], cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.describe()
    lines = result.stderr_lines
    assert lines[0].startswith("study S (#1): "), result.describe()
    baseline = next(i for i, line in enumerate(lines) if line.startswith("[1/3] #0 "))
    loaded = next(i for i, line in enumerate(lines) if PHASE.match(line) and line.startswith("search loaded"))
    assert baseline < loaded, result.describe()


def test_a_terminal_sees_each_start_up_phase_as_it_starts(tmp_path: Path) -> None:
    """Before the study line a terminal shows what the run is doing (a passing status line)."""
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    result = run_cli(["tune", "k.cu", "--workers", "local", "--budget", "2", "--only", ONLY,
                      "--db", "sqlite:///t.db", "--arch", "sm_90", "--study", "S"], cwd=tmp_path,
                     env={"TTY_COMPATIBLE": "1", "TERM": "xterm"})  # fmt: skip
    assert result.returncode == 0, result.describe()
    study = result.stderr.index("study S (#1): ")
    assert 0 <= result.stderr.find("bundling sources (nvcc -M)…") < study, result.describe()


def test_a_phase_under_way_at_the_study_line_is_announced_there() -> None:
    recorder = _Recorder()
    phases = PhaseProgress(recorder)
    done, running = phases.starting("bundling sources"), phases.starting("loading the search")
    done.done("sources bundled", 0.25)
    assert recorder.notes == []  # a run that fails before its study says only its error
    phases.started(None, 4, 0)  # type: ignore[arg-type]
    running.done("search loaded", 1.0)
    phases.starting("later")
    assert recorder.notes == ["started", "sources bundled 0.2 s", "loading the search…", "search loaded 1.0 s",
                              "later…"]


def test_the_workers_line_comes_before_the_trials_it_compiles_and_a_spent_study_claims_no_warm_start(
        tmp_path: Path) -> None:
    """A user's runs printed "compiling on local threads (2)" after `[8/16]` (the cache hits of
    its batch were recorded first) and, rerunning a study that had all its trials, `warm start:
    ... tried first`, `stopped: budget 32`, then "compiling on local threads (2)" with 0 new trials."""
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    (tmp_path / "other.cu").write_text(TINY_KERNEL + "\n// another kernel's source\n")

    def tune(kernel: str, objective: str, budget: int) -> list[str]:
        done = run_cli(["tune", kernel, "--workers", "local", "--objective", objective, "--budget", str(budget),
                        "--batch-size", "4", "--only", ONLY, "--db", "sqlite:///t.db", "--arch", "sm_90",
                        "--out", f"{kernel}.{objective}.acf.toml"], cwd=tmp_path)
        assert done.returncode == 0, done.describe()
        return done.stderr_lines

    tune("k.cu", "registers", 3)
    lines = tune("k.cu", "instructions", 8)  # the builds of the first study: cache hits, then compiles
    trial = re.compile(r"^\[\d+/\d+\] #\d+ ")
    start = next(i for i, line in enumerate(lines) if " on local threads" in line)
    before = [line for line in lines[:start] if trial.match(line)]
    assert before and all("[build cache]" in line or "[same code as #" in line for line in before), lines
    assert lines[start] == (f"compiling on local threads (2): the build cache held this run's {len(before)} "
                            f"trial{'s' if len(before) != 1 else ''} before"), lines
    assert any("[compiled]" in line or "[same code as #" in line for line in lines[start:]), lines
    tune("other.cu", "registers", 4)
    again = tune("other.cu", "registers", 4)  # every trial recorded: nothing is searched
    assert not any(line.startswith("warm start") for line in again), again
    assert not any(line.startswith("compiling on") for line in again), again
    stop = next(i for i, line in enumerate(again) if line.startswith("stopped: budget 4"))
    assert all(line.startswith("rebuilding the rows the ACF cites") for line in again[stop:] if " on local" in line)
