"""A disk that fills during a tune (issue "apply it blind", item 7): the scratch filesystem (TMPDIR)
or the database's. The fault is real: a small tmpfs that a stand-in ptxas fills on its third call
(then runs the real ptxas); everything else is real nvcc, ptxas and SQLite. Mounting needs root
(CAP_SYS_ADMIN): elsewhere these tests are skipped, saying so.

A full scratch disk fails the variants it hits with a reason that names it, as crashes (not cached:
the next run with room compiles them). A full database disk ends the run with one error line;
what was recorded before stays, and the claims it could not hand back are handed back by the next
run (nothing can be written to a full disk, not even a release).
"""

from __future__ import annotations

import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import TINY_KERNEL, run_cli

from compileiq.core.records import TrialState
from compileiq.store import Store

REAL_NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
REAL_PTXAS = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs, unmounted afterwards."""
    where = tmp_path / "disk"
    where.mkdir()
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)],
                                 capture_output=True, text=True, check=False)
    except OSError as error:
        pytest.skip(f"cannot mount a small filesystem to fill: {error}")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem to fill (needs root): {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def _filling_cuda(root: Path, disk: Path) -> Path:
    """CUDA_HOME whose ptxas fills `disk` on its third compile (once), then runs the real ptxas."""
    folder = root / "cuda" / "bin"
    folder.mkdir(parents=True)
    calls, filled = root / "ptxas-calls", root / "filled"
    scripts = {
        "nvcc": f'exec {REAL_NVCC} "$@"\n',
        "ptxas": (f'if [ "$1" = --version ]; then exec {REAL_PTXAS} --version; fi\n'
                  f"echo x >> {calls}\n"
                  f'if [ "$(wc -l < {calls})" -ge 3 ] && [ ! -e {filled} ]; then\n'
                  f"  touch {filled}; dd if=/dev/zero of={disk}/fill bs=4k 2>/dev/null\nfi\n"
                  f'exec {REAL_PTXAS} "$@"\n'),
    }
    for name, body in scripts.items():
        path = folder / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return folder.parent


def _tune(root: Path, db: Path, budget: int, env: dict[str, str]):
    kernel = root / "kernel" / "scale.cu"
    kernel.parent.mkdir(exist_ok=True)
    kernel.write_text(TINY_KERNEL)
    return run_cli(["tune", str(kernel), "--workers", "local", "--db", f"sqlite:///{db}", "--only",
                    "ptxas.opt_level", "--budget", str(budget)], cwd=root, env=env)


def _trials(db: Path):
    store = Store.open(f"sqlite:///{db}")
    try:
        return [t for s in store.list_studies() for t in store.trials(s.id)], store.builds_count()
    finally:
        store.close()


def test_a_full_scratch_disk_fails_its_variants_naming_it_and_the_next_run_compiles_them(
    tmp_path: Path, small_disk: Path
) -> None:
    db = tmp_path / "t.db"
    env = {"CUDA_HOME": str(_filling_cuda(tmp_path, small_disk)), "TMPDIR": str(small_disk)}
    result = _tune(tmp_path, db, 4, env)
    assert "Traceback" not in result.output, result.describe()
    trials, builds = _trials(db)
    assert trials and not [t for t in trials if t.state is TrialState.RUNNING], result.describe()
    failed = [t for t in trials if t.state is TrialState.FAILED]
    assert failed, result.describe()
    for trial in failed:  # the one whose ptxas filled the disk too, not "ptxas wrote an empty cubin"
        assert "no space left" in (trial.reason or "").lower(), (trial.reason, result.describe())
    complete = [t for t in trials if t.state is TrialState.COMPLETE]
    # one cached build per completed configuration at most (two may build the same code: the
    # default and -O3 spelled out, so code hashes undercount them): a failed one is not among them
    assert builds <= len({t.config_key for t in complete}), "a build that failed for want of space was cached"

    (small_disk / "fill").unlink()  # room again: the next run compiles what the full disk failed
    again = _tune(tmp_path, db, 4, {"CUDA_HOME": env["CUDA_HOME"]})
    assert again.returncode == 0, again.describe()
    trials, _ = _trials(db)
    retried = {t.number: t for t in trials}
    assert all(retried[t.number].state is TrialState.COMPLETE for t in failed), again.describe()


def test_a_full_database_disk_ends_the_run_in_one_line_and_the_next_run_takes_its_claims_back(
    tmp_path: Path, small_disk: Path
) -> None:
    db = small_disk / "t.db"
    env = {"CUDA_HOME": str(_filling_cuda(tmp_path, small_disk))}
    result = _tune(tmp_path, db, 6, env)
    assert "Traceback" not in result.output, result.describe()
    assert result.returncode != 0, result.describe()
    last = result.stderr_lines[-1]
    assert last.startswith("error: database") and "disk is full" in last, result.describe()
    assert "unfinished trials stay claimed" in result.stderr, result.describe()

    (small_disk / "fill").unlink()
    trials, _ = _trials(db)
    recorded = [t for t in trials if t.state is TrialState.COMPLETE]
    assert recorded, "nothing was recorded before the disk filled"
    again = _tune(tmp_path, db, 6, {"CUDA_HOME": env["CUDA_HOME"]})
    assert again.returncode == 0, again.describe()
    after, _ = _trials(db)
    by_number = {t.number: t for t in after}
    assert not [t for t in after if t.state is TrialState.RUNNING], again.describe()
    for trial in recorded:  # nothing recorded before the disk filled is lost or changed
        assert by_number[trial.number].state is TrialState.COMPLETE
        assert by_number[trial.number].value == trial.value


def test_a_scratch_disk_full_from_the_start_is_one_line_that_names_it(tmp_path: Path, small_disk: Path) -> None:
    subprocess.run(["dd", "if=/dev/zero", f"of={small_disk / 'fill'}", "bs=4k"], capture_output=True, check=False)
    result = _tune(tmp_path, tmp_path / "t.db", 2, {"TMPDIR": str(small_disk)})
    assert "Traceback" not in result.output, result.describe()
    assert result.returncode != 0 and len(result.stderr_lines) == 1, result.describe()
    assert f"no space left on the filesystem of {small_disk}" in result.stderr_lines[0], result.describe()
