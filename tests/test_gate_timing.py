"""`gate --device` times an ACF against the same baseline its static rules judge against, with
real nvcc builds of a harness program and a fake GPU at the process boundary (no GPU here)."""

from __future__ import annotations

import contextlib
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import tomli_w
from test_timing import KERNEL

from compileiq import app
from compileiq.core.toolchain import find_toolchain
from compileiq.evaluate.measure import FakeMeasurer, RunResult, synthetic_result
from compileiq.evaluate.timing import HarnessTiming
from compileiq.gating import check as gating
from compileiq.gating.timing_rules import compare_timing
from compileiq.source.kernel import bundle_sources
from compileiq.tuning.progress import SilentProgress


def _tune_scale(folder: Path, name: str = "scale", source: str = KERNEL, unroll: str = "[4, 2, 1]") -> None:
    """NAME.cu tuned in `folder` (UNROLL 4 first in tune.toml, fewest instructions): NAME.acf.toml."""
    (folder / f"{name}.cu").write_text(source)
    (folder / "tune.toml").write_text(f"[tune.defines]\nUNROLL = {unroll}\n")
    options = app.TuneOptions(kernel=Path(f"{name}.cu"), objective="instructions", budget=3, workers="local",
                              strategy="exhaustive", only=("define.UNROLL",), db=f"sqlite:///{folder}/t.db",
                              out=Path(f"{name}.acf.toml"), arch="sm_90")
    with contextlib.chdir(folder):
        app.tune(options, SilentProgress())


def test_a_timed_gate_builds_the_baseline_tune_started_from(tmp_path: Path) -> None:
    """tune.toml lists UNROLL 4 first, so tune's baseline (and the static rules') has UNROLL=4; the
    ACF chose fewer instructions. The timed gate used to keep the ACF's macros in its 'defaults' build, so it never
    timed what the tuned macro gained or lost; its reference is now the rules' baseline."""
    _tune_scale(tmp_path)
    target = gating.locate(tmp_path / "scale.acf.toml", tmp_path / "scale.cu")
    chosen = target.acf.controls["define.UNROLL"]
    assert chosen != 4  # the premise: the ACF departs from the first value
    tools = find_toolchain()
    bundle = bundle_sources(target.spec, tools.nvcc)
    baseline = gating.rebuild_defaults(target, tools, bundle, gating.rebuild(target, tools, bundle))
    assert baseline.name == "the compiler defaults" and "-DUNROLL=4" in baseline.frontend_args

    built_with: list[int] = []

    def gpu(executable: bytes, args: object) -> RunResult:
        marker = re.search(rb"ciq-variant-UNROLL=(\d+);", executable)
        assert marker is not None
        built_with.append(int(marker.group(1)))
        return RunResult(synthetic_result([1.0] * 3), b"", 0, False, 0.01)

    samplers = HarnessTiming(FakeMeasurer(gpu)).samplers(target, baseline)
    samplers.acf(3), samplers.default(3)
    assert built_with == [chosen, 4]


def test_a_timed_gate_holds_the_rebuild_to_the_confirmed_median(tmp_path: Path) -> None:
    """A runtime ACF records `best` (the chosen build's one screening run) and `confirmed_median`
    (its median over every confirmation round). On the RTX A4000's recorded runtimes a screening
    run sat up to 9% above the chosen build's steady median (two clock states in the recording), so a
    gate held to `best` let a 10% slower rebuild through; it is held to the confirmed median."""
    _tune_scale(tmp_path)
    path = tmp_path / "scale.acf.toml"
    data = tomllib.loads(path.read_text())
    data["objective"].update(name="time", unit="ms", best=1.0, confirmed_median=1.09)  # as a time tune writes it
    path.write_text(tomli_w.dumps(data))
    target = gating.locate(path, tmp_path / "scale.cu")
    tools = find_toolchain()
    bundle = bundle_sources(target.spec, tools.nvcc)
    baseline = gating.rebuild_defaults(target, tools, bundle, gating.rebuild(target, tools, bundle))
    gpu = FakeMeasurer(lambda executable, args: RunResult(synthetic_result([1.0] * 3), b"", 0, False, 0.01))
    assert HarnessTiming(gpu).samplers(target, baseline).recorded_median == 1.09
    del data["objective"]["confirmed_median"]  # an ACF of an earlier version: its screening run
    path.write_text(tomli_w.dumps(data))
    assert HarnessTiming(gpu).samplers(gating.locate(path, tmp_path / "scale.cu"), baseline).recorded_median == 1.0


def test_a_timed_gate_runs_a_program_with_its_own_arguments_and_reads_the_time_it_prints(tmp_path: Path) -> None:
    """`mode = "program"`: the gate ran the harness's block options (and read harness samples) on a
    program with its own main. Now a block is one run, with the program's own arguments alone."""
    from test_timing import TIMED_PROGRAM

    _tune_scale(tmp_path, "prog", TIMED_PROGRAM, "[1, 2]")
    (tmp_path / "tune.toml").write_text('mode = "program"\nmetric_regex = "took ([0-9.]+) ms"\nrun_args = ["-n", "3"]\n'
                                        "[tune.defines]\nUNROLL = [1, 2]\n")
    target = gating.locate(tmp_path / "prog.acf.toml", tmp_path / "prog.cu")
    tools = find_toolchain()
    bundle = bundle_sources(target.spec, tools.nvcc)
    baseline = gating.rebuild_defaults(target, tools, bundle, gating.rebuild(target, tools, bundle))
    calls: list[tuple[str, ...]] = []

    def program(executable: bytes, args: object) -> RunResult:
        calls.append(tuple(args))  # type: ignore[arg-type]
        return RunResult(synthetic_result([]), b"", 0, False, 0.01, "took 1.25 ms\n")

    measurer = FakeMeasurer(program)
    samplers = HarnessTiming(measurer).samplers(target, baseline)
    assert samplers.samples == 1 and samplers.acf(1) == [1.25] and samplers.default(2) == [1.25, 1.25]
    assert calls == [("-n", "3")] * 3 and not any(measurer.dumps)
    timing = compare_timing(samplers)  # one run a block: 10 rounds are 20 runs of the program, not 200
    assert timing.vs_default.verdict.value == "SAME" and len(calls) == 3 + 2 * timing.vs_default.rounds == 23


def _program_gpu(calls: list[tuple[str, ...]]) -> FakeMeasurer:
    """A fake GPU for TIMED_PROGRAM: UNROLL 2 takes half the time of UNROLL 1, printed its own way."""
    import random

    def program(executable: bytes, args: object) -> RunResult:
        calls.append(tuple(args))  # type: ignore[arg-type]
        marker = re.search(rb"ciq-variant-UNROLL=(\d+);", executable)
        assert marker is not None
        ms = (2.0 if marker.group(1) == b"1" else 1.0) * random.uniform(0.995, 1.005)
        return RunResult(synthetic_result([]), b"", 0, False, 0.01, f"took {ms:.4f} ms\n")

    return FakeMeasurer(program)


PROGRAM_REGEX = "took ([0-9.]+) ms"


def _tune_program(folder: Path) -> str:
    """TIMED_PROGRAM tuned with --program --metric-regex (tune.toml names no mode): prog.acf.toml, t.db."""
    from test_timing import TIMED_PROGRAM

    (folder / "prog.cu").write_text(TIMED_PROGRAM)
    (folder / "tune.toml").write_text("[tune.defines]\nUNROLL = [1, 2]\n")
    options = app.TuneOptions(kernel=Path("prog.cu"), objective="time", budget=2, workers="local",
                              strategy="exhaustive", only=("define.UNROLL",), db=f"sqlite:///{folder}/t.db",
                              out=Path("prog.acf.toml"), arch="sm_90", program=True, metric_regex=PROGRAM_REGEX,
                              finalists=1)
    with contextlib.chdir(folder):
        app.tune(options, SilentProgress(), measurers=[_program_gpu([])])
    return PROGRAM_REGEX


def test_an_acf_tuned_with_program_on_the_command_line_is_gated_as_a_program(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tune --program --metric-regex R` (no mode in tune.toml) wrote an ACF that recorded neither,
    so `gate --device` timed the program as a harness (block options it never reads, samples it
    never prints) and could not pass. The ACF now records how it was timed; the gate times it so
    when told the same (--program --metric-regex R), and otherwise stops with the command to run,
    never using the ACF's own pattern (a forged one could read any number the program prints)."""
    regex = _tune_program(tmp_path)
    kernel = tomllib.loads((tmp_path / "prog.acf.toml").read_text())["kernel"]
    assert (kernel["mode"], kernel["metric_regex"]) == ("program", regex)
    # A program's screening run recorded median_ms None beside its time: the store refused such a
    # trial when the study was read back, and the ACF kept the defaults.
    assert "skipped trial" not in capsys.readouterr().err
    assert tomllib.loads((tmp_path / "prog.acf.toml").read_text())["controls"]["define.UNROLL"] == 2

    def gate(**how: object) -> gating.GateReport:
        calls: list[tuple[str, ...]] = []
        report = gating.run(gating.GateOptions(acfs=(tmp_path / "prog.acf.toml",), device=True, **how),  # type: ignore[arg-type]
                            HarnessTiming(_program_gpu(calls)), visible=lambda: True)
        assert calls and set(calls) == {()}  # the program's own (no) arguments: no harness options
        return report

    def refused(**how: object) -> str:  # bad input: reported, exit 2, nothing timed
        report = gating.run(gating.GateOptions(acfs=(tmp_path / "prog.acf.toml",), device=True, **how),  # type: ignore[arg-type]
                            HarnessTiming(_program_gpu([])), visible=lambda: True)
        (result,) = report.results
        assert result.bad_input and report.exit_code == 2
        return result.findings[0].message

    assert re.search(r"timed as a program read with 'took .*: run the gate with --program "
                     r"--metric-regex 'took \(\[0-9\.\]\+\) ms'", refused())
    assert "read with 'elapsed" in refused(program=True, metric_regex="elapsed ([0-9.]+)")  # another pattern
    told: list[str] = []  # static rules only: it still says how to gate and re-tune it as a program
    static = gating.run(gating.GateOptions(acfs=(tmp_path / "prog.acf.toml",), device=False), progress=told.append)
    assert static.mode == "static" and [f.rule for f in static.results[0].findings] == ["stale-settings"]
    assert [line for line in told if line.startswith("note: ") and "run the gate with --program --metric-regex" in line]
    (stale,) = static.results[0].findings  # its re-tune times the program as the ACF was tuned, not with the harness
    words = shlex.split(stale.command)
    at = words.index("--program")
    assert words[at:at + 5] == ["--program", "--metric-regex", regex, "--budget", "2"], words
    report = gate(program=True, metric_regex=regex)
    assert report.passed and report.mode == "timing"
    (timing,) = [result.timing for result in report.results]
    assert timing is not None and timing.vs_default.estimate == pytest.approx(0.5, rel=0.02)
    assert not [f for f in report.results[0].findings if f.rule == "stale-settings"]  # the settings it was tuned with
    target = gating.locate(tmp_path / "prog.acf.toml", program=True, metric_regex=regex)
    assert "--arch sm_90 --program --metric-regex 'took ([0-9.]+) ms' --budget" in gating.retune_command(
        target, gating.Measured("0" * 64, "build")
    )  # a stale program-mode ACF is re-tuned as a program


def test_program_mode_trials_an_earlier_version_recorded_are_read_back(tmp_path: Path) -> None:
    """An earlier compileiq recorded a program's run with the harness's median_ms, iqr_ms and
    min_ms as None; the store skipped such trials as damaged, so the study lost them on every
    read. They read back now, the missing timings as not reported (never as a number)."""
    import sqlalchemy as sa

    from compileiq.store import Store
    from compileiq.store.schema import trials_table

    _tune_program(tmp_path)
    url = f"sqlite:///{tmp_path}/t.db"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for row in conn.execute(sa.select(trials_table.c.id, trials_table.c.metrics)).all():
            old = {**row.metrics, "median_ms": None, "iqr_ms": None, "min_ms": None}
            conn.execute(trials_table.update().where(trials_table.c.id == row.id).values(metrics=old))
    engine.dispose()
    store = Store.open(url)
    try:
        trials = store.trials(store.find_study("1").id)
    finally:
        store.close()
    assert len(trials) == 2 and all(t.value is not None for t in trials)
    assert not any(key in t.metrics for t in trials for key in ("median_ms", "iqr_ms", "min_ms"))
