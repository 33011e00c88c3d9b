"""The harness result parser, program metrics, output comparison and running fake executables."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers import clean_env

from compileiq.build.compile import BuildStatus, ExecutableJob, build_executable
from compileiq.core.processes import reap_stale_scratch
from compileiq.evaluate.confirm import confirm_args
from compileiq.evaluate.measure import (
    TIMING_ONLY,
    FakeMeasurer,
    OutputInfo,
    RunResult,
    compare_outputs,
    include_dir,
    parse_harness_output,
    parse_program_metric,
    run_executable,
    synthetic_result,
)
from compileiq.source.spec import SourceBundle

RESULT = {
    "compileiq_harness": 1, "status": "ok", "message": "", "device": "NVIDIA H200", "driver": "570.1",
    "sm_clock_default_mhz": 1755, "samples_ms": [0.5, 0.52, 0.51], "clocks_mhz": [1980, 1980, 1975],
    "dropped_low_clock": 1, "median_ms": 0.51, "iqr_ms": 0.01, "min_ms": 0.5, "event_median_ms": None,
    "graph_batch": 0, "outputs": [{"name": "y", "dtype": "float32", "count": 4, "sha256": "ab"}],
    "check": {"run": True, "passed": True, "max_abs_err": 0.0, "max_rel_err": 0.0},
    "phases_ms": {"cuda_context": 11800.5, "device_setup": 40.0, "inputs": 300.0, "warm_up": 26.0},
}


def test_parses_the_last_harness_line_among_other_output() -> None:
    stdout = "warming up\n{\"time_ms\": 3}\n" + json.dumps({**RESULT, "median_ms": 9}) + "\n" + json.dumps(RESULT) + "\ntrailer\n"
    result = parse_harness_output(stdout)
    assert result.ok and result.median_ms == 0.51 and result.samples_ms == (0.5, 0.52, 0.51)
    assert result.device == "NVIDIA H200" and result.clocks_mhz == (1980, 1980, 1975)
    assert result.outputs == (OutputInfo("y", "float32", 4, "ab"),)
    assert result.check.passed is True and result.dropped_low_clock == 1
    assert result.phases_ms == (("cuda_context", 11800.5), ("device_setup", 40.0), ("inputs", 300.0), ("warm_up", 26.0))


@pytest.mark.parametrize("stdout", ["", "garbage\n", '{"compileiq_harness": 1, "status": "ok", "med', "[1, 2]\n",
                                    '{"compileiq_harness": 1, "samples_ms": "x"}',
                                    '{"compileiq_harness": 1, "status": "ok", "phases_ms": [1, 2]}',
                                    '{"compileiq_harness": 1, "status": "ok", "phases_ms": {"cuda_context": "x"}}'])
def test_garbage_or_partial_output_is_an_error_result_not_an_exception(stdout: str) -> None:
    result = parse_harness_output(stdout)
    assert result.status == "error" and not result.ok and result.message


def test_an_unknown_status_is_an_error_and_null_median_is_not_ok() -> None:
    assert parse_harness_output(json.dumps({**RESULT, "status": "weird"})).status == "error"
    assert not parse_harness_output(json.dumps({**RESULT, "median_ms": None})).ok
    failed = parse_harness_output(json.dumps({**RESULT, "status": "check_failed"}))
    assert failed.status == "check_failed" and not failed.ok


def test_program_metric_from_json_or_regex() -> None:
    assert parse_program_metric('log\n{"time_ms": 1.5}\n{"time_ms": 2.25}\n') == 2.25
    assert parse_program_metric("kernel took 3.5 ms\n", r"took ([0-9.]+) ms") == 3.5
    assert parse_program_metric("no number\n", r"took ([0-9.]+) ms") is None
    assert parse_program_metric('{"time_ms": "nan"}') is None
    assert parse_program_metric("nothing") is None


def _dump(*arrays: np.ndarray) -> tuple[bytes, list[OutputInfo]]:
    infos = [OutputInfo(f"o{i}", str(a.dtype), a.size, "") for i, a in enumerate(arrays)]
    return b"".join(a.tobytes() for a in arrays), infos


def test_identical_outputs_pass_and_close_ones_pass_within_tolerance() -> None:
    base = np.linspace(-1, 1, 100, dtype=np.float32)
    dump, infos = _dump(base, np.arange(10, dtype=np.int32))
    assert compare_outputs(dump, infos, dump, infos, 1e-5, 1e-6).passed
    near, _ = _dump(base * np.float32(1 + 1e-6), np.arange(10, dtype=np.int32))
    check = compare_outputs(dump, infos, near, infos, 1e-5, 1e-6)
    assert check.passed and 0 < check.max_rel_err < 1e-5


def test_outside_tolerance_fails_with_the_error_in_the_reason() -> None:
    base = np.ones(8, dtype=np.float64)
    dump, infos = _dump(base)
    off, _ = _dump(base * 1.01)
    check = compare_outputs(dump, infos, off, infos, 1e-5, 1e-6)
    assert not check.passed and check.max_rel_err == pytest.approx(0.01)
    assert check.reason.startswith("wrong result:") and "max rel err 0.01" in check.reason


def test_nan_never_passes_even_against_nan() -> None:
    base = np.array([1.0, np.nan], dtype=np.float32)
    dump, infos = _dump(base)
    assert not compare_outputs(dump, infos, dump, infos, 1.0, 1.0).passed
    good, _ = _dump(np.array([1.0, 2.0], dtype=np.float32))
    bad, _ = _dump(np.array([1.0, np.nan], dtype=np.float32))
    assert not compare_outputs(good, infos, bad, infos, 1.0, 1.0).passed


def test_dtype_count_or_length_mismatch_fails() -> None:
    dump, infos = _dump(np.zeros(4, dtype=np.float32))
    other, other_infos = _dump(np.zeros(4, dtype=np.int32))
    assert not compare_outputs(dump, infos, other, other_infos, 1e-5, 1e-6).passed
    assert not compare_outputs(dump, infos, dump[:-4], infos, 1e-5, 1e-6).passed
    assert not compare_outputs(dump, infos, dump + b"\0", infos, 1e-5, 1e-6).passed


def test_half_and_int8_outputs_compare() -> None:
    dump, infos = _dump(np.array([0.5, -1.0], dtype=np.float16), np.array([-3, 7], dtype=np.int8))
    assert compare_outputs(dump, infos, dump, infos, 0, 0).passed
    other, _ = _dump(np.array([0.5, -1.0], dtype=np.float16), np.array([-3, 8], dtype=np.int8))
    assert not compare_outputs(dump, infos, other, infos, 0, 0.5).passed


def _script(body: str) -> bytes:
    return f"#!/bin/sh\n{body}\n".encode()


def test_run_executable_reads_json_and_dump() -> None:
    line = json.dumps(RESULT)
    exe = _script(f"""
dump=""
while [ $# -gt 0 ]; do [ "$1" = --dump ] && dump="$2"; shift; done
printf 'abcd' > "$dump"
echo 'noise on stderr' >&2
echo '{line}'""")
    run = run_executable(exe, ["--quick"], 10)
    assert run.returncode == 0 and not run.timed_out and run.failure is None
    assert run.dump == b"abcd" and run.harness.median_ms == 0.51


def test_a_hanging_executable_is_killed_at_its_timeout() -> None:
    run = run_executable(_script("sleep 30 &\nsleep 30"), [], 0.5)
    assert run.timed_out and run.seconds < 10 and run.failure and run.failure.startswith("timeout")


def test_a_crashing_executable_is_reported() -> None:
    run = run_executable(_script("kill -SEGV $$"), [], 10)
    assert run.returncode == -11 and run.failure and run.failure.startswith("crashed")
    failed = run_executable(_script("echo oops; exit 3"), [], 10)
    assert failed.returncode == 3 and failed.failure and "no harness result" in failed.failure


def test_fake_measurer_replays_its_script() -> None:
    def script(exe: bytes, args: object) -> RunResult:
        return RunResult(synthetic_result([1.0, 2.0, 3.0]), b"", 0, False, 0.1)

    fake = FakeMeasurer(script)
    run = fake.measure(b"x", ["--quick"], 3)
    assert run.harness.median_ms == 2.0 and fake.calls == [(b"x", ("--quick",))] and fake.device == "fake GPU"
    assert math.isclose(run.harness.iqr_ms or 0, 1.0)


HARNESS_SOURCES = Path(__file__).parent / "cuda"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_harness_header_compiles_and_fails_cleanly_without_a_gpu(tmp_path: Path) -> None:
    source = (HARNESS_SOURCES / "harness_smoke.cu").read_bytes()
    bundle = SourceBundle("main.cu", (("main.cu", source),), (), "x")
    job = ExecutableJob(shutil.which("nvcc") or "nvcc", bundle, "sm_90", ("-Xcompiler=-Wall",), ("-O3",), 240)
    build = build_executable(job)
    assert build.status is BuildStatus.OK, build.message
    run = run_executable(build.executable, ["--bogus"], 30)
    assert run.returncode == 1 and run.harness.status == "error"
    assert "unknown harness option --bogus" in run.harness.message
    assert '"phases_ms":{}' in run.stdout and run.harness.phases_ms == ()  # it failed before its first phase


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_harness_takes_timing_only_blocks_and_refuses_them_with_a_check_or_a_dump(tmp_path: Path) -> None:
    """Confirmation blocks run `--timing-only` (copying back, hashing and dumping the outputs was
    most of a measuring process on the H200). Without a GPU the option must get as far as the CUDA
    start; with --check or --dump it is refused in one line. Its timing is tested in test_gpu."""
    source = (HARNESS_SOURCES / "harness_smoke.cu").read_bytes()
    bundle = SourceBundle("main.cu", (("main.cu", source),), (), "x")
    job = ExecutableJob(shutil.which("nvcc") or "nvcc", bundle, "sm_90", (), ("-O3",), 240)
    build = build_executable(job)
    assert build.status is BuildStatus.OK, build.message
    plain = run_executable(build.executable, [], 30)
    timed = run_executable(build.executable, [*confirm_args(5)], 30, dump=False)
    assert "unknown harness option" not in timed.harness.message
    assert timed.harness.message == plain.harness.message  # both stopped at the missing GPU
    for extra in (["--check"], ["--dump", str(tmp_path / "out.bin")]):
        refused = run_executable(build.executable, [TIMING_ONLY, *extra], 30, dump=False)
        assert refused.returncode == 1
        assert refused.harness.message == "--timing-only verifies no outputs: it takes neither --check nor --dump"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_gpu_checks_timed_program_builds_and_fails_without_a_gpu_as_a_program_does() -> None:
    """tests/cuda/program_timed.cu is what `pytest -m gpu` tunes in program mode on a lent GPU:
    it must build here (a lease is too short to find a compile error), and without a GPU it
    exits non-zero and prints no time, which program mode records as a failed run."""
    source = (HARNESS_SOURCES / "program_timed.cu").read_bytes()
    bundle = SourceBundle("prog.cu", (("prog.cu", source),), (), "x")
    for unroll in ("1", "8"):
        job = ExecutableJob(shutil.which("nvcc") or "nvcc", bundle, "sm_90", (f"-DUNROLL={unroll}",), ("-O3",), 240)
        build = build_executable(job)
        assert build.status is BuildStatus.OK, build.message
        run = run_executable(build.executable, [], 30, dump=False)
        assert run.returncode == 2 and parse_program_metric(run.stdout, r"elapsed: ([0-9.]+) ms") is None
    assert parse_program_metric("elapsed: 0.04210 ms\n", r"elapsed: ([0-9.]+) ms") == 0.0421  # its printf


def test_include_dir_holds_the_header() -> None:
    assert (include_dir() / "compileiq" / "harness.cuh").is_file()
    out = subprocess.run([str(Path(__import__("sys").executable).with_name("compileiq")), "include-dir"],
                         capture_output=True, text=True, check=True)
    assert Path(out.stdout.strip()) == include_dir()


def test_an_unknown_dtype_fails_the_check_instead_of_crashing():
    from compileiq.evaluate.measure import OutputInfo, compare_outputs

    odd = [OutputInfo("y", "f32", 1, "")]
    check = compare_outputs(b"\0" * 4, odd, b"\0" * 4, odd, 1e-5, 1e-6)
    assert not check.passed and "unknown dtype" in check.reason


HOST_PROBE = b"""#include <cstdio>
int main() {
#ifdef __OPTIMIZE__
  std::puts("host code optimised");
#else
  std::puts("host code at -O0");
#endif
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize(("base_args", "printed"), [((), "host code optimised"),
                                                    (("-Xcompiler=-O0",), "host code at -O0")])
def test_a_measuring_executable_has_optimised_host_code_unless_the_kernel_says_otherwise(
    base_args: tuple[str, ...], printed: str,
) -> None:
    """Its input generation, output hashing and CPU reference are host code: at nvcc's default
    (the host compiler's -O0) each measuring process on the first GPU lent was seconds slower."""
    bundle = SourceBundle("main.cu", (("main.cu", HOST_PROBE),), (), "x", base_args)
    build = build_executable(ExecutableJob(shutil.which("nvcc") or "nvcc", bundle, "sm_90", (), (), 240))
    assert build.status is BuildStatus.OK, build.message
    run = run_executable(build.executable, [], 30)
    assert run.returncode == 0 and printed in run.stdout


# -- review 49 F5: a measuring run's scratch goes with its process, killed or not --------------------

_MEASURER = """
import sys
from compileiq.evaluate.measure import run_executable
run_executable(sys.stdin.buffer.read(), [], 600, dump=False)
"""


def _measuring(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """A process measuring an executable that notes its folder and pid, then hangs; its TMPDIR,
    and the measured executable's folder once it runs."""
    scratch, noted = tmp_path / "tmp", tmp_path / "noted"
    scratch.mkdir()
    script = _script(f'echo "$$ $PWD" > {noted}.part && mv {noted}.part {noted}\nexec sleep 300')
    driver = subprocess.Popen([sys.executable, "-c", _MEASURER], stdin=subprocess.PIPE,
                              env=clean_env({"TMPDIR": str(scratch)}))
    assert driver.stdin is not None
    driver.stdin.write(script)
    driver.stdin.close()
    assert _wait_until(noted.exists, 60), "the executable never ran"
    # the guard starts just after the executable (it is told the executable's group): on a loaded
    # machine the executable can write its note first, or the guard be forked but not yet exec'd
    assert _wait_until(lambda: bool(_guards(driver.pid)), 60), "no guard beside the measuring process"
    _pid, folder = noted.read_text().split(maxsplit=1)
    return driver, Path(folder.strip()), scratch


def _guards(pid: int) -> list[int]:
    return [child for child, command in _children(pid) if " -I -S -c " in command]


def _wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def _children(pid: int) -> list[tuple[int, str]]:
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as stat:
                ppid = int(stat.read().rpartition(")")[2].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        if ppid == pid:
            found.append((int(name), command))
    return found


def test_a_killed_measuring_process_leaves_no_scratch(tmp_path: Path) -> None:
    # the variant executable and its whole output dump lived in a `compileiq-run-*` folder that no
    # cleanup knew: a driver or actor SIGKILLed mid-measurement (OOM, a CI timeout) left it for good
    driver, folder, scratch = _measuring(tmp_path)
    try:
        assert folder.parent == scratch and folder.name.startswith(f"compileiq-{driver.pid}-run-"), folder
        assert (folder / "variant").is_file()
    finally:
        driver.kill()
        driver.wait()
    assert _wait_until(lambda: not folder.exists(), 20), "the measuring run's scratch outlived its process"


def test_the_next_start_removes_a_measuring_scratch_whose_guard_died_too(tmp_path: Path) -> None:
    driver, folder, scratch = _measuring(tmp_path)
    try:
        for pid in _guards(driver.pid):
            os.kill(pid, signal.SIGKILL)
    finally:
        driver.kill()
        driver.wait()
    hung = int((tmp_path / "noted").read_text().split()[0])
    with contextlib.suppress(ProcessLookupError):
        os.kill(hung, signal.SIGKILL)  # nobody's now: the guard that would have killed it is gone
    assert folder.exists()  # what a whole process group killed at once (a container's end) leaves
    assert reap_stale_scratch(scratch) == [folder]
