"""Hostile compilers, processes and output files (issue 9): faults become failed trials with
reasons, transient failures are not cached, nothing outlives its timeout or the tuner, and
`--out` never replaces what it must not.

The faulty compilers are small shell scripts standing in for nvcc or ptxas at the process
boundary (CUDA_HOME points the tuner at them); everything else is real: nvcc, ptxas, SQLite.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import TINY_KERNEL, clean_env, compileiq_command, run_cli

from compileiq.build.compile import (
    AssembleJob,
    BuildStatus,
    ExecutableJob,
    FrontendJob,
    PtxResult,
    assemble,
    build_executable,
    emit_ptx,
)
from compileiq.build.cubin import CubinError, text_sections
from compileiq.build.workers import Transfers
from compileiq.core.output_file import OutputFileError
from compileiq.core.processes import reap_stale_scratch, run_tool
from compileiq.core.records import TrialState
from compileiq.core.space_files import load_space
from compileiq.results import acf
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.source.spec import KernelError
from compileiq.store import Store

REPO = Path(__file__).resolve().parent.parent
REAL_NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
REAL_PTXAS = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
LAST_ARG = 'out=$(for a; do [ "$prev" = -o ] && echo "$a"; prev="$a"; done)\n'  # the file after -o


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _fake_cuda(root: Path, ptxas: str | None = None, nvcc: str | None = None) -> Path:
    """A CUDA_HOME whose tools answer --version as the real ones and otherwise run `body`."""
    folder = root / "fake-cuda" / "bin"
    folder.mkdir(parents=True, exist_ok=True)
    for name, real, body in (("nvcc", REAL_NVCC, nvcc), ("ptxas", REAL_PTXAS, ptxas)):
        version = f'if [ "$1" = --version ]; then exec {real} --version; fi\n'
        _script(folder / name, version + (body or f'exec {real} "$@"\n'))
    return folder.parent


def _kernel(root: Path, toml: str = "") -> Path:
    folder = root / "kernel"
    folder.mkdir(exist_ok=True)
    (folder / "scale.cu").write_text(TINY_KERNEL)
    if toml:
        (folder / "tune.toml").write_text(toml)
    return folder / "scale.cu"


def _tune(root: Path, *args: str, env: dict[str, str] | None = None, db: str = "t.db"):
    command = ["tune", str(_kernel(root)), "--workers", "local", "--json", "--db", f"sqlite:///{root / db}",
               "--only", "ptxas.opt_level", "--out", str(root / "scale.acf.toml"), *args]
    return run_cli(command, cwd=root, env=env)


def _trials(root: Path, db: str = "t.db"):
    store = Store.open(f"sqlite:///{root / db}")
    try:
        return [t for s in store.list_studies() for t in store.trials(s.id)], store.builds_count()
    finally:
        store.close()


def _one_error_line(result) -> str:
    assert "Traceback" not in result.output, result.describe()
    assert result.returncode != 0, result.describe()
    assert len(result.stderr_lines) == 1, result.describe()
    return result.stderr_lines[0]


@pytest.fixture(scope="module")
def ptx(tmp_path_factory: pytest.TempPathFactory) -> PtxResult:
    folder = tmp_path_factory.mktemp("ptx")
    (folder / "k.cu").write_text(TINY_KERNEL)
    result = emit_ptx(FrontendJob(REAL_NVCC, bundle_sources(load_spec(folder / "k.cu")), "sm_90", (), 60))
    assert result.status is BuildStatus.OK, result.message
    return result


@pytest.fixture(scope="module")
def cubin(ptx: PtxResult) -> bytes:
    build = assemble(AssembleJob(REAL_PTXAS, "sm_90", (), 60), ptx)
    assert build.ok, build.message
    return build.cubin


# -- A. a compiler's bad output is a failed build with a reason ------------------------------------

PTXAS_FAULTS = {
    "segv": ("kill -SEGV $$\n", "ptxas was killed by SIGSEGV"),
    "sigkill": ("kill -KILL $$\n", "ptxas was killed by SIGKILL"),
    "abort": ("kill -ABRT $$\n", "ptxas was killed by SIGABRT"),
    "shell-reported-crash": ("exit 139\n", "status 139: a process it ran was killed by SIGSEGV"),
    "no-cubin": ("exit 0\n", "ptxas exited 0 but wrote no cubin"),
    "empty-cubin": (LAST_ARG + ': > "$out"\n', "ptxas exited 0 but wrote an empty cubin"),
    "garbage-cubin": (LAST_ARG + 'echo garbage > "$out"\n', "ptxas wrote an unreadable cubin: not a 64-bit"),
    "truncated-cubin": (LAST_ARG + f'{REAL_PTXAS} "$@" && head -c 300 "$out" > "$out.t" && mv "$out.t" "$out"\n',
                        "ptxas wrote an unreadable cubin: truncated"),
}


@pytest.mark.parametrize("fault", PTXAS_FAULTS)
def test_a_faulty_ptxas_is_a_crashed_build_tried_twice(fault: str, ptx: PtxResult, tmp_path: Path) -> None:
    body, expected = PTXAS_FAULTS[fault]
    calls = tmp_path / "calls"
    fake = _script(tmp_path / "ptxas", f"echo call >> {calls}\n" + body)
    build = assemble(AssembleJob(str(fake), "sm_90", (), 30), ptx)
    assert build.status is BuildStatus.CRASHED and not build.status.deterministic
    assert expected in build.message and "(tried 2 times)" in build.message
    assert calls.read_text().count("call") == 2
    assert build.cubin == b"" and build.code_hash is None


def test_a_crash_that_does_not_repeat_is_a_good_build(ptx: PtxResult, tmp_path: Path) -> None:
    once = tmp_path / "crashed-once"
    fake = _script(tmp_path / "ptxas", f"if [ ! -e {once} ]; then touch {once}; kill -SEGV $$; fi\n"
                                       f'exec {REAL_PTXAS} "$@"\n')
    build = assemble(AssembleJob(str(fake), "sm_90", (), 30), ptx)
    assert build.ok and build.code_hash and build.entries, build.message


NVCC_FAULTS = {
    "segv": ("kill -SEGV $$\n", "nvcc was killed by SIGSEGV"),
    "no-ptx": ("exit 0\n", "nvcc exited 0 but wrote no PTX"),
    "garbage-ptx": (LAST_ARG + 'echo "hello" > "$out"\n', "nvcc wrote an unreadable PTX: no .version directive"),
}


@pytest.mark.parametrize("fault", NVCC_FAULTS)
def test_a_faulty_front_end_is_a_crashed_build(fault: str, tmp_path: Path) -> None:
    body, expected = NVCC_FAULTS[fault]
    fake = _script(tmp_path / "nvcc", body)
    bundle = bundle_sources(load_spec(_kernel(tmp_path)))
    result = emit_ptx(FrontendJob(str(fake), bundle, "sm_90", (), 30))
    assert result.status is BuildStatus.CRASHED and expected in result.message
    assert assemble(AssembleJob(REAL_PTXAS, "sm_90", (), 30), result).status is BuildStatus.CRASHED


def test_a_measuring_executable_that_is_not_one_is_a_crashed_build(tmp_path: Path) -> None:
    fake = _script(tmp_path / "nvcc", LAST_ARG + 'printf "#!/bin/sh\\n" > "$out"\n')
    bundle = bundle_sources(load_spec(_kernel(tmp_path)))
    built = build_executable(ExecutableJob(str(fake), bundle, "sm_90", (), (), 30))
    assert built.status is BuildStatus.CRASHED and "nvcc wrote an unreadable executable: not an ELF" in built.message


def _corrupt(cubin: bytes, at: int, data: bytes) -> bytes:
    return cubin[:at] + data + cubin[at + len(data):]


CUBINS = {
    "empty": lambda c: b"",
    "magic-only": lambda c: b"\x7fELF",
    "32-bit": lambda c: _corrupt(c, 4, b"\x01"),
    "header-only": lambda c: c[:0x40],
    "half": lambda c: c[: len(c) // 2],
    "names-index-out-of-range": lambda c: _corrupt(c, 0x3E, b"\xff\xff"),
    "section-table-past-the-end": lambda c: _corrupt(c, 0x28, (len(c) * 4).to_bytes(8, "little")),
    "tiny-section-entries": lambda c: _corrupt(c, 0x3A, b"\x08\x00"),
}


@pytest.mark.parametrize("name", CUBINS)
def test_a_malformed_cubin_is_a_cubin_error(name: str, cubin: bytes) -> None:
    with pytest.raises(CubinError):
        text_sections(CUBINS[name](cubin))


def test_a_text_section_past_the_end_is_a_cubin_error(cubin: bytes) -> None:
    (code,) = text_sections(cubin).values()
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", cubin, 0x3A)
    headers = [shoff + i * shentsize for i in range(shnum)]
    (text,) = [h for h in headers if struct.unpack_from("<QQ", cubin, h + 0x18) == (cubin.find(code), len(code))]
    with pytest.raises(CubinError, match="past the end"):
        text_sections(_corrupt(cubin, text + 0x20, struct.pack("<Q", len(cubin))))


@pytest.mark.slow
def test_a_crashing_variant_is_a_failed_trial_and_the_run_goes_on(tmp_path: Path) -> None:
    crash_at_o0 = f'case " $* " in *" -O0 "*) kill -SEGV $$;; esac\nexec {REAL_PTXAS} "$@"\n'
    env = {"CUDA_HOME": str(_fake_cuda(tmp_path, ptxas=crash_at_o0))}
    result = _tune(tmp_path, "--strategy", "exhaustive", "--budget", "4", "--no-simplify", env=env)
    assert result.returncode == 0, result.describe()
    trials, cached = _trials(tmp_path)
    failed = [t for t in trials if t.state is TrialState.FAILED]
    assert [t.config["ptxas.opt_level"] for t in failed] == [0]
    assert failed[0].reason and failed[0].reason.startswith("crashed: ptxas was killed by SIGSEGV")
    assert not any(t.state is TrialState.RUNNING for t in trials)
    assert cached == 3  # the crash is not in the build cache


@pytest.mark.slow
def test_a_garbage_cubin_fails_the_baseline_with_a_reason_and_no_claim_left_running(tmp_path: Path) -> None:
    env = {"CUDA_HOME": str(_fake_cuda(tmp_path, ptxas=LAST_ARG + 'echo garbage > "$out"\n'))}
    line = _one_error_line(_tune(tmp_path, "--budget", "2", env=env))
    assert "does not build with default settings: crashed: ptxas wrote an unreadable cubin" in line
    trials, cached = _trials(tmp_path)
    assert trials and all(t.state is TrialState.FAILED for t in trials) and cached == 0


def test_a_ptxas_report_out_of_range_fails_the_trial_and_the_run_ends(tmp_path: Path) -> None:
    """A ptxas whose report says 9999 registers: the trial was recorded complete, read back as a
    damaged row, evaluated again, and so on without end (budget or not). It is a failed trial now."""
    rewrite = f'{REAL_PTXAS} "$@" 2>&1 | sed "s/Used [0-9]* registers/Used 9999 registers/" >&2\n'
    env = {"CUDA_HOME": str(_fake_cuda(tmp_path, ptxas=rewrite))}
    started = time.monotonic()
    line = _one_error_line(_tune(tmp_path, "--budget", "2", env=env))
    assert time.monotonic() - started < 120
    assert "does not build with default settings: compiler report out of range: registers = '9999' must be" in line
    trials, _ = _trials(tmp_path)
    assert [t.state for t in trials] == [TrialState.FAILED]


def test_a_compiler_whose_version_is_not_utf8_is_no_traceback(tmp_path: Path) -> None:
    """`nvcc --version` printing a byte that is not UTF-8 (a wrapper): a UnicodeDecodeError traceback."""
    cuda = _fake_cuda(tmp_path)
    _script(cuda / "bin" / "nvcc", f'if [ "$1" = --version ]; then {REAL_NVCC} --version; printf "\\377\\n"; '
                                   f'exit 0; fi\nexec {REAL_NVCC} "$@"\n')
    done = _tune(tmp_path, "--budget", "2", env={"CUDA_HOME": str(cuda)})
    assert "Traceback" not in done.output and done.returncode == 0, done.describe()


def test_launch_bounds_above_1024_bound_nothing(tmp_path: Path) -> None:
    """nvcc only warns about `__launch_bounds__(4096)`: the kernel was scored at 4096 threads per
    block, a row out of range, and the run looped on it forever."""
    folder = tmp_path / "lb"
    folder.mkdir()
    (folder / "k.cu").write_text("__global__ void __launch_bounds__(4096) add(float* a, const float* b, int n) {\n"
                                 "  int i = blockIdx.x * 4096 + threadIdx.x; if (i < n) a[i] += b[i] * 2.0f; }\n")
    done = run_cli(["tune", "k.cu", "--budget", "4", "--workers", "local", "--db", f"sqlite:///{tmp_path / 'lb.db'}",
                    "--out", str(tmp_path / "lb.acf.toml")], cwd=folder, timeout=120)
    assert done.returncode == 0, done.describe()
    assert "scored at 256 threads per block" in done.stdout and "warning: skipped" not in done.stderr


NON_FINITE = {
    "compile_timeout_s = inf": "compile_timeout_s",
    "compile_timeout_s = nan": "compile_timeout_s",
    "compile_timeout_s = -inf": "compile_timeout_s",
    "compile_timeout_s = 1e300": "compile_timeout_s",
    "rtol = inf": "rtol",
    "rtol = nan": "rtol",
    "atol = inf": "atol",
    "atol = -inf": "atol",
}


@pytest.mark.parametrize("line", NON_FINITE)
def test_non_finite_numbers_in_tune_toml_are_refused(line: str, tmp_path: Path) -> None:
    with pytest.raises(KernelError, match=f"tune.toml: {NON_FINITE[line]}: must be a"):
        load_spec(_kernel(tmp_path, line + "\n"))


def test_an_infinite_compile_timeout_is_one_line(tmp_path: Path) -> None:
    _kernel(tmp_path, "compile_timeout_s = inf\n")
    line = _one_error_line(_tune(tmp_path))
    assert "compile_timeout_s" in line and "positive number of seconds" in line


def test_an_infinite_stale_after_is_one_line(tmp_path: Path) -> None:
    line = _one_error_line(_tune(tmp_path, "--stale-after", "inf"))
    assert "--stale-after" in line


# -- B. timeouts and crashes are not cached: a longer timeout compiles ----------------------------


@pytest.mark.slow
def test_a_timeout_is_not_cached_and_a_longer_timeout_compiles(tmp_path: Path) -> None:
    _kernel(tmp_path, "compile_timeout_s = 0.01\n")
    line = _one_error_line(_tune(tmp_path, "--budget", "1"))
    assert "timeout: nvcc did not finish within 0.01 s and was killed (tried 2 times)" in line
    assert _trials(tmp_path)[1] == 0

    _kernel(tmp_path, "compile_timeout_s = 120\n")
    other = _tune(tmp_path, "--budget", "1", "--study", "another-study",
                  "--out", str(tmp_path / "other.acf.toml"))  # another study: its own ACF
    assert other.returncode == 0, other.describe()  # a new study: no cached timeout
    same = _tune(tmp_path, "--budget", "1")
    assert same.returncode == 0, same.describe()  # the same study retries its lost baseline
    trials, cached = _trials(tmp_path)
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE] and cached == 1


# -- C. nothing outlives its timeout or the tuner ---------------------------------------------------


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        if _running(pid):
            os.kill(pid, signal.SIGKILL)


def _pids(path: Path) -> list[int]:
    return [int(word) for word in path.read_text().split()] if path.exists() else []


@pytest.fixture
def stray(tmp_path: Path) -> Iterator[Path]:
    """A file the fake compilers write their pids to; whatever is left running is killed."""
    path = tmp_path / "pids"
    yield path
    _kill_all(_pids(path))


def test_a_descendant_that_escapes_the_group_cannot_hold_the_timeout(tmp_path: Path, stray: Path) -> None:
    fake = _script(tmp_path / "ptxas", f"setsid sleep 30 &\necho $! >> {stray}\necho started\nsleep 30\n")
    run = run_tool([str(fake)], timeout_s=1.0)
    assert run.timed_out and run.seconds < 6 and "started" in run.output
    assert _pids(stray) and not any(_running(pid) for pid in _pids(stray)), "the escaped descendant outlived the timeout"


# A daemon as a compiler wrapper starts one: it leaves the group (setsid), and so does the
# grandchild of a second one whose parent left first.
_DAEMONS = ("setsid sleep 300 &\necho $! >> {stray}\n"
            "setsid sh -c 'sleep 300 & echo $! >> {stray}; wait' &\necho $! >> {stray}\n"
            "while [ $(wc -w < {stray}) -lt 3 ]; do sleep 0.05; done\n")


def test_a_descendant_that_leaves_the_group_ends_with_the_compile(tmp_path: Path, stray: Path) -> None:
    fake = _script(tmp_path / "ptxas", _DAEMONS.format(stray=stray) + "echo done\nexit 0\n")
    run = run_tool([str(fake)], timeout_s=20.0)
    assert not run.timed_out and run.returncode == 0 and run.output.strip() == "done"
    assert len(_pids(stray)) == 3
    assert not any(_running(pid) for pid in _pids(stray)), "a descendant that left the group outlived the compile"
    assert not [pid for pid in _pids(stray) if Path(f"/proc/{pid}").exists()], "an ended descendant was left a zombie"


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["local", "ray"])
def test_a_descendant_that_leaves_the_group_ends_with_the_tune(workers: str, tmp_path: Path, stray: Path) -> None:
    daemons = _DAEMONS.format(stray=stray) + f'exec {REAL_PTXAS} "$@"\n'
    env = {"CUDA_HOME": str(_fake_cuda(tmp_path, ptxas=daemons))}
    # the last --workers counts; --stream: every variant after the baseline waits for Ray, none compiles locally
    result = _tune(tmp_path, "--budget", "4", "--workers", workers, "--stream", env=env)
    assert result.returncode == 0, result.describe()
    assert ("compiling on local threads" if workers == "local" else "workers ready (embedded local Ray") in result.output
    assert len(_pids(stray)) >= 3
    assert not any(_running(pid) for pid in _pids(stray)), "a descendant that left the group outlived the tune"


def test_a_compiler_that_exits_leaves_nothing_running(tmp_path: Path, stray: Path) -> None:
    fake = _script(tmp_path / "ptxas", f"sleep 30 &\necho $! >> {stray}\necho done\nexit 0\n")
    run = run_tool([str(fake)], timeout_s=20.0)
    assert not run.timed_out and run.returncode == 0 and run.output.strip() == "done"
    assert run.seconds < 6
    assert _wait_until(lambda: not any(_running(pid) for pid in _pids(stray)), 5)


def _wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def test_killing_the_tuner_kills_its_compilers_and_removes_its_scratch(tmp_path: Path, stray: Path) -> None:
    slow = f'echo $$ >> {stray}\nsleep 300 &\necho $! >> {stray}\nwait\n'
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = clean_env({"CUDA_HOME": str(_fake_cuda(tmp_path, ptxas=slow)), "TMPDIR": str(scratch)})
    argv = [compileiq_command(), "tune", str(_kernel(tmp_path)), "--workers", "local", "--budget", "1",
            "--db", f"sqlite:///{tmp_path / 't.db'}"]
    tuner = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait_until(lambda: len(_pids(stray)) >= 2, 120), "the fake ptxas never started"
        assert list(scratch.glob(f"compileiq-{tuner.pid}-*"))
    finally:
        tuner.kill()
        tuner.wait()
    assert _wait_until(lambda: not any(_running(pid) for pid in _pids(stray)), 10), "a compiler outlived the tuner"
    assert _wait_until(lambda: not list(scratch.glob(f"compileiq-{tuner.pid}-*")), 10)


def test_killing_the_tuner_kills_the_descendants_that_left_the_group(tmp_path: Path, stray: Path) -> None:
    slow = _DAEMONS.format(stray=stray) + "sleep 300\n"
    env = clean_env({"CUDA_HOME": str(_fake_cuda(tmp_path, ptxas=slow))})
    argv = [compileiq_command(), "tune", str(_kernel(tmp_path)), "--workers", "local", "--budget", "1",
            "--db", f"sqlite:///{tmp_path / 't.db'}"]
    tuner = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait_until(lambda: len(_pids(stray)) >= 3, 120), "the fake ptxas never started"
    finally:
        tuner.kill()
        tuner.wait()
    assert _wait_until(lambda: not any(_running(pid) for pid in _pids(stray)), 10), "a daemon outlived the tuner"


@pytest.mark.slow
def test_the_next_start_removes_scratch_of_dead_owners_only(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    scratch = tmp_path / "tmp"
    dead = scratch / f"compileiq-{gone.pid}-ptx-abc123"
    live = scratch / f"compileiq-{os.getpid()}-ptx-def456"
    legacy = scratch / "compileiq-sass-s9w9tj_e"  # older versions: no owner to check
    for folder in (dead, live, legacy):
        folder.mkdir(parents=True)
        (folder / "kernel.ptx").write_text("x")
    result = _tune(tmp_path, "--budget", "1", env={"TMPDIR": str(scratch)})
    assert result.returncode == 0, result.describe()
    assert not dead.exists() and live.exists() and legacy.exists()
    assert reap_stale_scratch(scratch) == []


# -- D. --out replaces only a regular file, and as an editor would ---------------------------------


def _content(config_values: dict | None = None) -> acf.AcfContent:
    space = load_space("13.0")
    return acf.AcfContent(
        kernel="k", source_name="k.cu", source_path="k.cu", source_sha256="ab" * 32, arch="sm_90",
        nvcc_version="13.0", ptxas_version="13.0", toolchain_build="cuda_13.0", space=space,
        config=space.default_config().with_values(config_values or {}), fixed_defines=(),
        objective={"name": "spills"}, evidence={}, provenance={},
    )


OUT_TARGETS = {
    "device": (lambda root: _device(root / "full"), "character device"),
    "directory": (lambda root: _folder(root / "folder"), "a directory"),
    "fifo": (lambda root: _fifo(root / "pipe"), "named pipe"),
    "under-a-file": (lambda root: _file(root / "plain") / "k.acf.toml", "not a directory"),
    "link-to-a-directory": (lambda root: _link(root / "to-dir", root), "a symbolic link"),
}


def _device(path: Path) -> Path:
    """A private /dev/full (the real one must never be at risk if a regression replaced it)."""
    if os.geteuid() != 0:
        pytest.skip("creating a device node needs root")
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    return path


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _file(path: Path) -> Path:
    path.write_text("x")
    return path


def _link(path: Path, target: Path) -> Path:
    path.symlink_to(target)
    return path


@pytest.mark.parametrize("name", OUT_TARGETS)
def test_out_refuses_what_is_not_a_regular_file_before_tuning(name: str, tmp_path: Path) -> None:
    make, says = OUT_TARGETS[name]
    target = make(tmp_path)
    before = os.stat(target, follow_symlinks=False) if os.path.lexists(target) else None
    result = run_cli(["tune", str(_kernel(tmp_path)), "--workers", "local", "--out", str(target),
                      "--db", f"sqlite:///{tmp_path / 't.db'}"], cwd=tmp_path)
    line = _one_error_line(result)
    assert result.returncode == 2 and says in line.lower() and str(target) in line, result.describe()
    if before is not None:
        assert os.stat(target, follow_symlinks=False).st_mode == before.st_mode
    assert not (tmp_path / "t.db").exists()  # refused before any work


def test_an_acf_is_never_written_through_a_symlink(tmp_path: Path) -> None:
    # A link's target may lie outside the folder named; a dangling one had the write create it,
    # folders and all. The link's own folder may be a link.
    real = acf.write(tmp_path / "real.acf.toml", _content())
    before = real.read_bytes()
    link = _link(tmp_path / "k.acf.toml", Path("real.acf.toml"))
    with pytest.raises(OutputFileError, match=f"cannot write {link}: it is a symbolic link"):
        acf.write(link, _content({"ptxas.opt_level": 1}))
    assert link.is_symlink() and os.readlink(link) == "real.acf.toml" and real.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.acf.toml", "real.acf.toml"]
    linked = _link(tmp_path / "linked", tmp_path)
    acf.write(linked / "real.acf.toml", _content({"ptxas.opt_level": 1}))
    assert acf.read(real).controls == {"ptxas.opt_level": 1}


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o664, 0o600])
def test_a_rewritten_acf_keeps_its_mode(mode: int, tmp_path: Path) -> None:
    path = acf.write(tmp_path / "k.acf.toml", _content())
    path.chmod(mode)
    acf.write(path, _content({"ptxas.opt_level": 2}))
    assert stat.S_IMODE(path.stat().st_mode) == mode


def test_a_new_acf_follows_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o027)
    try:
        path = acf.write(tmp_path / "k.acf.toml", _content())
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_symlink_loop_is_refused(tmp_path: Path) -> None:
    loop = _link(tmp_path / "a.acf.toml", tmp_path / "a.acf.toml")
    with pytest.raises(OutputFileError, match="a symbolic link"):
        acf.write(loop, _content())
    assert loop.is_symlink()


FULL_DISK = textwrap.dedent(
    """\
    import resource, signal, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from test_hostile_process import _content
    from compileiq.results import acf
    from compileiq.core.errors import CompileIQError
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))  # every write past 64 bytes: EFBIG
    try:
        acf.write(Path(sys.argv[1]), _content({"ptxas.opt_level": 0}))
    except CompileIQError as error:
        print("refused:", error)
    """
)


def test_a_failed_write_leaves_the_old_acf_and_no_temporary_file(tmp_path: Path) -> None:
    path = acf.write(tmp_path / "k.acf.toml", _content())
    before = path.read_bytes()
    done = subprocess.run([sys.executable, "-c", FULL_DISK, str(path), str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.startswith(f"refused: cannot write {path}: File too large"), done.stdout + done.stderr
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["k.acf.toml"]


# -- a compile task that raises leaves no claim running ------------------------------------------


class _BrokenWorkers:
    description = "workers whose compile task raises"
    transfers = Transfers()

    def run(self, jobs, more=None, before=None):
        raise RuntimeError("a bug in a compile task")
        yield  # a generator, like the real ones

    def build_executables(self, jobs):
        return []

    def close(self) -> None:
        pass


def test_a_compile_task_that_raises_hands_its_claims_back(tmp_path: Path) -> None:
    from compileiq.app import TuneOptions, tuning_space
    from compileiq.core.toolchain import find_toolchain
    from compileiq.tuning.progress import SilentProgress
    from compileiq.tuning.request import TuneRequest
    from compileiq.tuning.tuner import Tuner

    spec, tools = load_spec(_kernel(tmp_path)), find_toolchain()
    space = tuning_space(spec, tools, TuneOptions(kernel=spec.source, only=("ptxas.opt_level",)))
    store = Store.open(f"sqlite:///{tmp_path / 't.db'}")
    try:
        tuner = Tuner(TuneRequest(spec, space, "instructions", 3), store, tools, _BrokenWorkers, SilentProgress())
        with pytest.raises(RuntimeError):
            tuner.run()
        (study,) = store.list_studies()
        trials = store.trials(study.id)
    finally:
        store.close()
    assert trials and all(t.state is TrialState.FAILED and t.retryable for t in trials)
    assert all(t.reason == "not compiled: RuntimeError" for t in trials)


def test_a_compiler_past_its_memory_cap_fails_and_its_children_inherit_the_cap(tmp_path: Path) -> None:
    # The cap is set on the child once it runs; a process it starts afterwards (as nvcc starts
    # cc1plus and cicc) inherits it. 512 MiB under a 256 MiB cap: out of memory, not the machine's.
    # The child starts the grabber once its cap is there (argv[1]; 0: none to wait for): a fixed
    # 0.2 s was not enough where run_tool's thread was held between the start and the cap.
    grab = "b = bytearray(512 << 20); print('held', len(b))"
    child = ("import resource, subprocess, sys, time\n"
             "cap, deadline = int(sys.argv[1]), time.monotonic() + 30\n"
             "while cap and resource.getrlimit(resource.RLIMIT_DATA)[0] != cap and time.monotonic() < deadline:\n"
             "    time.sleep(0.01)\n"
             f"sys.exit(subprocess.call([sys.executable, '-c', {grab!r}]))\n")
    capped = run_tool([sys.executable, "-c", child, str(256 << 20)], 60, memory_bytes=256 << 20)
    assert capped.returncode != 0 and "MemoryError" in capped.output, capped
    free = run_tool([sys.executable, "-c", child, "0"], 60)
    assert free.returncode == 0 and "held 536870912" in free.output, free


@pytest.mark.parametrize("value", ["lots", "0", "nan", "1e9"])
def test_a_compiler_memory_setting_that_is_not_a_size_is_one_line(tmp_path: Path, value: str) -> None:
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    result = run_cli(["tune", "k.cu", "--budget", "1", "--workers", "local", "--db", f"sqlite:///{tmp_path / 'db'}"],
                     cwd=tmp_path, env={"COMPILEIQ_COMPILER_MEMORY_GIB": value})
    assert result.returncode == 2 and result.stderr_lines == [
        f"error: COMPILEIQ_COMPILER_MEMORY_GIB={value!r}: give the GiB a compiler process may hold, from 0.25 to 65536"
    ], result.describe()
    assert not (tmp_path / "db").exists()  # refused before the study was opened


# -- nvcc's own flag variables never enter a build -------------------------------------------------

FLAG_VARIABLES = {"NVCC_PREPEND_FLAGS": "-DTAINTED", "NVCC_APPEND_FLAGS": "-DTAINTED -lineinfo"}
IGNORED_WHY = ("compileiq builds with the recorded flags alone (nvcc would add these to every compile, flags no "
               "ACF records); put flags the code needs in tune.toml's nvcc_flags")
TAINTABLE = "#ifdef TAINTED\n#error a flag no ACF records reached the compiler\n#endif\n" + TINY_KERNEL


def test_nvcc_flag_variables_are_ignored_by_tune_and_gate_and_said_so(tmp_path: Path) -> None:
    # nvcc adds NVCC_PREPEND_FLAGS/NVCC_APPEND_FLAGS to every compile: with them the evidence an
    # ACF records (and the gate's rebuild) was not what its flags build. Here any compile they
    # reach (nvcc -M, the front end, the gate's rebuild) fails on the #error.
    (tmp_path / "k.cu").write_text(TAINTABLE)
    db = f"sqlite:///{tmp_path / 'db'}"
    tuned = run_cli(["tune", "k.cu", "--budget", "1", "--workers", "local", "--db", db, "--out", "k.acf.toml"],
                    cwd=tmp_path, env=FLAG_VARIABLES)
    assert tuned.returncode == 0 and "Traceback" not in tuned.output, tuned.describe()
    notes = [line for line in tuned.output.splitlines() if "NVCC_" in line]
    assert notes == [f"note: NVCC_PREPEND_FLAGS and NVCC_APPEND_FLAGS are set and ignored: {IGNORED_WHY}"], tuned.describe()
    assert "TAINTED" not in tuned.output and "TAINTED" not in (tmp_path / "k.acf.toml").read_text()
    gated = run_cli(["gate", "k.acf.toml"], cwd=tmp_path, env={"NVCC_APPEND_FLAGS": "-DTAINTED"})
    assert gated.returncode == 0, gated.describe()
    notes = [line for line in gated.stderr_lines if "NVCC_" in line]
    assert notes == [f"note: NVCC_APPEND_FLAGS is set and ignored: {IGNORED_WHY}"], gated.describe()
    clean = run_cli(["gate", "k.acf.toml"], cwd=tmp_path)
    assert clean.returncode == 0 and "NVCC_" not in clean.output, clean.describe()


CCBIN_WHY = ("compileiq builds with nvcc's default host compiler (NVCC_CCBIN picks another for every compile, and it "
             "preprocesses the device code too; no ACF records it)")


def test_nvcc_ccbin_is_ignored_by_tune_and_gate_and_said_so(tmp_path: Path) -> None:
    # NVCC_CCBIN picks nvcc's host compiler, which preprocesses the device code as well: a wrapper
    # there (here one adding -DTAINTED, which the kernel turns into an #error) changed every variant
    # alike, without a note, and the ACF's evidence cited code a clean build does not make.
    (tmp_path / "k.cu").write_text(TAINTABLE)
    wrapper = tmp_path / "bin" / "g++"
    wrapper.parent.mkdir()
    wrapper.write_text('#!/bin/sh\nexec g++ "$@" -DTAINTED\n')
    wrapper.chmod(0o755)
    db = f"sqlite:///{tmp_path / 'db'}"
    tuned = run_cli(["tune", "k.cu", "--budget", "1", "--workers", "local", "--db", db, "--out", "k.acf.toml"],
                    cwd=tmp_path, env={"NVCC_CCBIN": str(wrapper)})
    assert tuned.returncode == 0 and "Traceback" not in tuned.output, tuned.describe()
    notes = [line for line in tuned.output.splitlines() if "NVCC_" in line]
    assert notes == [f"note: NVCC_CCBIN is set and ignored: {CCBIN_WHY}"], tuned.describe()
    assert "TAINTED" not in tuned.output and "TAINTED" not in (tmp_path / "k.acf.toml").read_text()
    gated = run_cli(["gate", "k.acf.toml"], cwd=tmp_path, env={"NVCC_CCBIN": str(wrapper), "NVCC_APPEND_FLAGS": "-DX"})
    assert gated.returncode == 0, gated.describe()
    notes = [line for line in gated.stderr_lines if "NVCC_" in line]
    assert notes == [f"note: NVCC_APPEND_FLAGS and NVCC_CCBIN are set and ignored: {IGNORED_WHY}; and {CCBIN_WHY.removeprefix('compileiq builds ')}"]
