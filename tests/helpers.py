"""Small shared helpers: run the real `compileiq` console command in a clean subprocess."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
# Variables that would point the command at another database or force colour into a pipe.
_DROPPED = (
    "COMPILEIQ_DB",
    "COMPILEIQ_SEARCH_SPACES",
    "FORCE_COLOR",
    "TTY_COMPATIBLE",
    "GITHUB_ACTIONS",
    "CLICOLOR_FORCE",
    "PY_COLORS",
)

TINY_KERNEL = """\
__global__ void scale(float* out, const float* in, float k, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = k * in[i] + 1.0f;
}
"""

# A loop whose code each ptxas optimisation level changes (its instruction count): a shipped -O
# level the search can beat or keep.
LOOP_KERNEL = """\
__global__ void k(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float s = 0.f;
  for (int j = 0; j < n; ++j) s += expf(x[(i + j) % n]) / x[j];
  if (i < n) y[i] = s;
}
"""


if TYPE_CHECKING:
    from compileiq.build.workers.ray_tasks import RayWorkers
    from compileiq.core.records import Trial


@contextmanager
def embedded_ray_workers(num_cpus: int = 2) -> Iterator[RayWorkers]:
    """An embedded Ray's workers for a test module; the environment restored afterwards."""
    from compileiq.build.workers.ray_tasks import RayWorkers

    saved = dict(os.environ)  # RayWorkers sets LOOPBACK_ENV in this process: undo it afterwards
    workers = RayWorkers(num_cpus=num_cpus)
    try:
        yield workers
    finally:
        workers.close()
        os.environ.clear()
        os.environ.update(saved)


def tiny_kernel_file(folder: Path, name: str) -> Path:
    """TINY_KERNEL written as folder/name (no tune.toml: the defaults)."""
    source = folder / name
    source.write_text(TINY_KERNEL)
    return source


def compileiq_command() -> str:
    """The console script installed beside this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).with_name("compileiq")
    found = str(beside) if beside.is_file() else shutil.which("compileiq")
    if found is None:
        raise RuntimeError("the compileiq console command is not installed")
    return found


def venv_tool(name: str, hint: str) -> str:
    """A command installed beside this interpreter (the venv's), else the one on PATH; the test
    fails with `hint` when there is neither."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        import pytest

        pytest.fail(f"{name} is not installed: {hint}")
    return found


def slow_toolchain(folder: Path, seconds: float) -> dict[str, str]:
    """CUDA_HOME with the real nvcc and a ptxas that sleeps before every compile."""
    import stat

    from compileiq.core.toolchain import find_toolchain

    tools = find_toolchain()
    (folder / "bin").mkdir(parents=True)
    scripts = {
        "nvcc": f'#!/bin/sh\nexec "{tools.nvcc}" "$@"\n',
        "ptxas": f'#!/bin/sh\ncase "$*" in *--version*) ;; *) sleep {seconds} ;; esac\nexec "{tools.ptxas}" "$@"\n',
    }
    for name, text in scripts.items():
        path = folder / "bin" / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return {"CUDA_HOME": str(folder)}


def sleeping_compiles(folder: Path) -> list[int]:
    """The compiles still running from the slow toolchain in `folder` (`slow_toolchain`): the pids
    of their ptxas wrapper's `sleep`."""
    found = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            if str(folder).encode() in Path(f"/proc/{pid}/environ").read_bytes() and \
                    Path(f"/proc/{pid}/comm").read_text().strip() == "sleep":
                found.append(pid)
        except OSError:
            continue
    return found


@contextmanager
def write_locked(database: Path) -> Iterator[None]:
    """SQLite's write lock held by another connection while inside: a write of a run waits for it
    (up to its 30 s busy timeout), as behind another tuner's transaction."""
    import sqlite3

    busy = sqlite3.connect(database, isolation_level=None)
    try:
        busy.execute("BEGIN IMMEDIATE")
        yield
    finally:
        busy.rollback()
        busy.close()


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without compileiq/colour settings, plus NO_COLOR and TERM=dumb."""
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED}
    env.update(NO_COLOR="1", TERM="dumb", COLUMNS="200")
    env.update(extra or {})
    return env


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


@dataclass(frozen=True)
class CliResult:
    args: tuple[str, ...]
    returncode: int
    stdout: str  # ANSI escapes removed
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.strip().splitlines() if line.strip()]

    def describe(self) -> str:
        return f"compileiq {' '.join(self.args)} -> {self.returncode}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


def run_cli(
    args: Sequence[str],
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
    prefix: Sequence[str] = (),
) -> CliResult:
    """Run `compileiq ARGS` (optionally under a wrapper such as loopback-only) in `cwd`."""
    done = subprocess.run(
        [*prefix, compileiq_command(), *args],
        cwd=cwd,
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return CliResult(tuple(args), done.returncode, strip_ansi(done.stdout), strip_ansi(done.stderr))


def with_kernel_arch(acf_text: str, arch: str) -> str:
    """An ACF's text with its `[kernel]` table's arch edited to `arch` (the rest as it was)."""
    edited, count = re.subn(r'(\[kernel\]\n(?:(?!\[)[^\n]*\n)*?arch = )"[^"]*"', rf'\g<1>"{arch}"', acf_text, count=1)
    assert count == 1, acf_text
    return edited


def compile_commands_file(folder: Path, command: str, file: str = "k.cu") -> Path:
    """folder/compile_commands.json: a compilation database of the one `command`, compiling `file` in `folder`."""
    database = folder / "compile_commands.json"
    database.write_text(json.dumps([{"directory": str(folder), "command": command, "file": file}]))
    return database


def space_from_database(folder: Path, database: Path) -> CliResult:
    """`compileiq space k.cu --compile-commands DATABASE` in `folder`, TINY_KERNEL written as k.cu
    (under a 60 s timeout: a named pipe opened for reading would block it)."""
    kernel = tiny_kernel_file(folder, "k.cu")
    return run_cli(["space", str(kernel), "--compile-commands", str(database)], cwd=folder, timeout=60)


def tune_in(folder: Path, *options: str, kernel: str = "k.cu", budget: int = 2) -> CliResult:
    """`compileiq tune KERNEL --budget N` in `folder` on local threads, its study in folder/t.db and
    its ACF folder/k.acf.toml; `options` come after those."""
    return run_cli(["tune", kernel, "--budget", str(budget), "--workers", "local", "--db",
                    f"sqlite:///{folder / 't.db'}", "--out", "k.acf.toml", *options], cwd=folder)


def tuned_from_command(folder: Path, command: str, *options: str, source: str, budget: int = 2) -> Path:
    """`source` written as folder/k.cu and tuned from `command` (its compile_commands.json entry)
    by `tune_in`, which must succeed: folder/k.acf.toml."""
    (folder / "k.cu").write_text(source)
    compile_commands_file(folder, command)
    tuned = tune_in(folder, "--compile-commands", "compile_commands.json", *options, budget=budget)
    assert tuned.returncode == 0, tuned.describe()
    return folder / "k.acf.toml"


def tuned_quickly(folder: Path, source: str, only: str, budget: int, tune_toml: str | None = None) -> Path:
    """`source` (and `tune_toml`) written in `folder` as k.cu and tuned on `only` for instructions on
    sm_90, study "s" in folder/t.db, no simplification; it must succeed: the folder."""
    (folder / "k.cu").write_text(source)
    if tune_toml is not None:
        (folder / "tune.toml").write_text(tune_toml)
    done = run_cli(["tune", "k.cu", "--budget", str(budget), "--workers", "local", "--no-simplify", "--objective",
                    "instructions", "--only", only, "--arch", "sm_90", "--db", "sqlite:///t.db",
                    "--study", "s", "--out", "k.acf.toml"], cwd=folder)
    assert done.returncode == 0, done.describe()
    return folder


# A kernel no test has tuned before: 128 live floats per thread under a 2-blocks-of-256 bound.
# ptxas 13.0 spills 424 + 628 bytes at its defaults; overriding the bound removes the spills, so a
# search's winner has non-default settings.
SPILLING_KERNEL = """\
extern "C" __global__ void __launch_bounds__(256, 2) fir(const float* in, float* out, int n) {
    float taps[128];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    #pragma unroll
    for (int k = 0; k < 128; ++k) taps[k] = in[(i * 7 + k * 13) % n];
    float acc = 0.0f;
    #pragma unroll
    for (int k = 0; k < 128; ++k) acc += taps[k] * taps[127 - k] * taps[(k * 37) % 128];
    #pragma unroll
    for (int k = 0; k < 128; ++k) out[(i + k * 4099) % n] = taps[(k * 11) % 128] + acc;
}
"""


def database_at(url: str, revision: str, trial: Mapping[str, object]) -> None:
    """A database as an earlier release left it: the schema at `revision`, one study and one trial
    (`trial`: the trial's columns besides study_id, number and worker)."""
    import sqlalchemy as sa
    from alembic import command
    from alembic.config import Config

    from compileiq.store import MIGRATIONS

    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            config = Config()
            config.set_main_option("script_location", str(MIGRATIONS))
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
            conn.exec_driver_sql(
                "INSERT INTO studies (name, kernel, source_sha256, space_id, space_sha256, toolchain, arch, evaluator,"
                " objective, next_number) VALUES ('old', 'saxpy', 'a', 's', 'b', 't', 'sm_90', 'static', 'spills', 1)"
            )
            columns = {"study_id": 1, "number": 0, "worker": "w", **trial}
            names = ", ".join(columns)
            conn.execute(sa.text(f"INSERT INTO trials ({names}) VALUES ({', '.join(':' + n for n in columns)})"),
                         columns)  # fmt: skip
    finally:
        engine.dispose()


def load_benchmark(name: str) -> ModuleType:
    """A script of benchmarks/ as a module (its own imports, such as `common`, found beside it);
    loaded once per process, registered under its name (its dataclasses look their module up)."""
    folder = str(Path(__file__).resolve().parent.parent / "benchmarks")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(folder) / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# 64 live floats per thread: under a 32-register cap, nvcc's -maxrregcount (which caps cicc too)
# and ptxas's --maxrregcount build different code (3,960 and 3,904 spill bytes with nvcc 13.0).
CAPPED_KERNEL = """\
extern "C" __global__ void fir(const float* in, float* out, int n) {
  float acc[64];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  for (int k = 0; k < 64; ++k) acc[k] = in[(i + k) % n];
  float s = 0;
  for (int r = 0; r < 8; ++r) for (int k = 0; k < 64; ++k) s += acc[k] * acc[(k + r) % 64];
  out[i] = s;
}
"""


def forge_run(db: Path, decision: object, study_id: int = 1) -> None:
    """Add a run row to the SQLite database `db` recording `decision` (any JSON text: a forged run)."""
    import sqlite3

    connection = sqlite3.connect(db)
    try:
        connection.execute("insert into runs (study_id, worker, limits, stopped, decision) values (?, 'evil:1', '{}', "
                           "'budget', ?)", (study_id, decision if isinstance(decision, str) else json.dumps(decision)))
        connection.commit()
    finally:
        connection.close()


def resealed(document: dict) -> str:
    """An export document with its checksum recomputed after an edit (as anyone can), as JSON text."""
    canonical = json.dumps(document["payload"], sort_keys=True, separators=(",", ":"))
    return json.dumps(dict(document, sha256=hashlib.sha256(canonical.encode()).hexdigest()))


def in_session(session: int) -> list[tuple[int, str]]:
    """The processes of that session still alive (pid, command line): what a run left behind."""
    found = []
    for name in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()
            if fields[0] != "Z" and int(fields[3]) == session:
                found.append((int(name), Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()))
        except (OSError, IndexError, ValueError):
            continue
    return found


def recorded_trials(db: str) -> list[Trial]:
    """Every trial of every study in the database at URL `db`, study by study."""
    from compileiq.store import Store

    store = Store.open(db)
    try:
        return [t for s in store.list_studies() for t in store.trials(s.id)]
    finally:
        store.close()


def tile_kernel(other: str, guard: str) -> str:
    """A kernel `k` whose register tile is the tuned macro TM (2 unless a -D sets it) and which adds
    the macro `other` in its loop; `guard` is the preprocessor text that handles `other` unset
    (a default, or an #error that proves the device pass saw the command's -D)."""
    return f"""\
#ifndef TM
#define TM 2
#endif
{guard}
__global__ void k(const float* __restrict__ a, float* __restrict__ out) {{
    float acc[TM];
#pragma unroll
    for (int t = 0; t < TM; ++t) acc[t] = a[threadIdx.x * TM + t];
#pragma unroll
    for (int s = 0; s < 8; ++s)
#pragma unroll
        for (int t = 0; t < TM; ++t) acc[t] = acc[t] * acc[(t + 1) % TM] + {other};
#pragma unroll
    for (int t = 0; t < TM; ++t) out[threadIdx.x * TM + t] = acc[t];
}}
"""


def shipped_registers(folder: Path, command: str) -> int:
    """The registers nvcc's own build of the compile `command` (run in `folder`) gives its kernel."""
    argv = [*shlex.split(command), "-o", "/dev/null", "-Xptxas", "-v"]
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, check=True)
    found = re.search(r"Used (\d+) registers", done.stderr)
    assert found, done.stderr
    return int(found[1])


def switched_kernel(big_unless: str) -> str:
    """A kernel `k` that keeps 4 floats unless `big_unless` (a preprocessor condition) is false,
    then 64 in a stack frame: 21 registers against 32 and 256 bytes on sm_90, so a -D or a PTX
    arch that reaches its device pass shows in the build."""
    return f"""\
#if {big_unless}
#define N 4
#else
#define N 64
#endif
__global__ void k(float* a, int n) {{
  float v[N];
  #pragma unroll
  for (int i = 0; i < N; ++i) v[i] = a[i * n + threadIdx.x];
  float s = 0;
  for (int j = 0; j < n; ++j) {{ s += v[j % N] * v[(j * 7) % N]; }}
  a[threadIdx.x] = s;
}}
"""


# a CMake project applying an ACF to a target k (format with cmake_dir: the package's folder, archs)
APPLY_PROJECT = """\
cmake_minimum_required(VERSION 3.24)
project(demo LANGUAGES CUDA)
find_package(compileiq CONFIG REQUIRED PATHS "{cmake_dir}" NO_DEFAULT_PATH)
add_library(k OBJECT k.cu)
set_property(TARGET k PROPERTY CUDA_ARCHITECTURES {archs})
compileiq_apply(TARGET k ACF k.acf.toml)
"""


def workspace_copy(tuned: Path, tmp_path: Path) -> Path:
    """A copy of a module's tuned workspace for one test to change."""
    import shutil

    copy = tmp_path / "ws"
    shutil.copytree(tuned, copy)
    return copy



def choice_notes(notes: list[str]) -> list[str]:
    """A view's notes of its choice, without the one every study of a kernel without tune.toml
    launch facts has (`results.launch_note`: occupancy scored at an assumed launch)."""
    return [note for note in notes if not note.startswith("tune.toml gives no launch facts")]
