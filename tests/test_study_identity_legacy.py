"""A study's identity changed on 2026-12-06 (review 51, findings 3 and 4), with real nvcc/ptxas and
SQLite through the CLI: a shipped -D at tune.toml's first value is the build without it, and a
fast-math twin (`-use_fast_math -ftz=true`) the build its twin is, so neither is part of the
identity any more. A study recorded under the identity older releases gave the same build is
continued by `tune --resume`, with a note, not orphaned beside a new one; and the twins are one
study, as the gate calls them one build."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import CliResult, clean_env, compile_commands_file, run_cli

from compileiq.app import kernel_spec
from compileiq.core.records import StudyKey
from compileiq.core.toolchain import find_toolchain
from compileiq.source.kernel import bundle_sources
from compileiq.store import KEY_FIELDS, default_study_name

KERNEL = """\
#ifndef TM
#define TM 2
#endif
__global__ void k(const float* __restrict__ a, float* __restrict__ out) {
    float acc[TM];
#pragma unroll
    for (int t = 0; t < TM; ++t) acc[t] = sinf(a[threadIdx.x * TM + t]) / a[t];
#pragma unroll
    for (int t = 0; t < TM; ++t) out[threadIdx.x * TM + t] = acc[t] * acc[(t + 1) % TM];
}
"""
TUNE_TOML = 'arch = "sm_90"\nentries = ["k"]\nblock_size = 256\n\n[tune.defines]\nTM = [2, 4]\n'
CONTINUED = "recorded under this build's identity before 2026-12-06"
BEFORE = "188d609"  # the last commit that keyed studies the older way


def _kernel(folder: Path, command: str) -> None:
    (folder / "k.cu").write_text(KERNEL)
    (folder / "tune.toml").write_text(TUNE_TOML)
    compile_commands_file(folder, command)


def _tune(folder: Path, budget: int, *options: str) -> CliResult:
    done = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--workers", "local",
                    "--budget", str(budget), "--db", f"sqlite:///{folder}/t.db", "--out", "k.acf.toml", "--force",
                    *options], cwd=folder)
    assert done.returncode == 0, done.describe()
    return done


def _studies(folder: Path) -> list[tuple[int, str]]:
    with sqlite3.connect(folder / "t.db") as conn:
        return conn.execute("SELECT id, name FROM studies ORDER BY id").fetchall()


def _keyed_the_older_way(folder: Path) -> str:
    """Rewrite the database's one study as releases before 2026-12-06 keyed it: its identity hashes
    every searched setting the shipped command spells, a -D at tune.toml's first value included."""
    spec = kernel_spec(folder / "k.cu", None, folder / "compile_commands.json")
    assert spec.shipped is not None
    settings = {k: v for k, v in spec.settings().items() if k != "shipped"}
    settings["shipped"] = dict(sorted(spec.shipped.values().items()))
    sources = bundle_sources(spec, find_toolchain().nvcc).sha256
    identity = hashlib.sha256(json.dumps({"sources": sources, "settings": settings}, sort_keys=True).encode())
    with sqlite3.connect(folder / "t.db") as conn:
        conn.row_factory = sqlite3.Row
        row = conn.execute("SELECT * FROM studies").fetchone()
        key = replace(StudyKey(**{name: row[name] for name in KEY_FIELDS}), source_sha256=identity.hexdigest())
        assert key.source_sha256 != row["source_sha256"]  # the identity did change
        name = default_study_name(key)
        conn.execute("UPDATE studies SET name = ?, source_sha256 = ? WHERE id = ?", (name, key.source_sha256, row["id"]))
    return name


def test_resume_continues_the_study_a_first_value_define_was_recorded_under(tmp_path: Path) -> None:
    _kernel(tmp_path, "nvcc -O3 -arch=sm_90 -DTM=2 -c k.cu -o k.o")  # TM=2: tune.toml's first value
    _tune(tmp_path, 2)
    name = _keyed_the_older_way(tmp_path)
    resumed = _tune(tmp_path, 4, "--resume")
    assert f"study {name} (#1): 2/4 trials already recorded" in resumed.output, resumed.describe()
    assert CONTINUED in resumed.output
    assert _studies(tmp_path) == [(1, name)]  # nothing orphaned, no second study
    again = _tune(tmp_path, 5, "--resume")  # and it stays the one study
    assert f"study {name} (#1): 4/5 trials already recorded" in again.output, again.describe()
    assert _studies(tmp_path) == [(1, name)]


def test_a_study_under_the_new_identity_is_preferred_to_the_older_one(tmp_path: Path) -> None:
    _kernel(tmp_path, "nvcc -O3 -arch=sm_90 -DTM=2 -c k.cu -o k.o")
    first = _tune(tmp_path, 2)
    (newer,) = (n for _, n in _studies(tmp_path))
    assert f"study {newer} (#1)" in first.output
    older = _keyed_the_older_way(tmp_path)
    named = _tune(tmp_path, 2, "--study", older)  # a name given: that study, recorded the older way
    assert f"study {older} (#1): 2/2 trials already recorded" in named.output, named.describe()
    _tune(tmp_path, 1, "--study", newer)  # the new identity's own study, under its default name
    again = _tune(tmp_path, 3)
    assert f"study {newer} (#2)" in again.output, again.describe()
    assert CONTINUED not in again.output


def test_fast_math_twins_are_one_study(tmp_path: Path) -> None:
    _kernel(tmp_path, "nvcc -O3 -arch=sm_90 -use_fast_math -c k.cu -o k.o")
    _tune(tmp_path, 2)
    compile_commands_file(tmp_path, "nvcc -O3 -arch=sm_90 -use_fast_math -ftz=true -c k.cu -o k.o")
    twin = _tune(tmp_path, 3, "--resume")  # the same build: nvcc hands cicc and ptxas the same options
    (name,) = (n for _, n in _studies(tmp_path))
    assert f"study {name} (#1): 2/3 trials already recorded" in twin.output, twin.describe()
    assert CONTINUED not in twin.output
    gate = run_cli(["gate", "k.acf.toml", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert gate.returncode == 0 and "0 warning(s)" in gate.output, gate.describe()


def _tuned_by_the_older_release(tmp_path: Path, command: str) -> Path:
    """The kernel in tmp_path/k, tuned from `command` (budget 2) by the code of commit BEFORE, from
    `git archive` (skipped without the repository's history): its study in t.db, its ACF k.acf.toml."""
    root = Path(__file__).resolve().parent.parent
    if subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{BEFORE}^{{commit}}"],
                      capture_output=True, check=False).returncode != 0:
        pytest.skip(f"needs the repository's history (commit {BEFORE})")
    old = tmp_path / "old"
    old.mkdir()
    archive = subprocess.run(["git", "-C", str(root), "archive", BEFORE, "compileiq", "search_spaces"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    folder = tmp_path / "k"
    folder.mkdir()
    _kernel(folder, command)
    recorded = subprocess.run(
        [sys.executable, "-m", "compileiq", "tune", "k.cu", "--compile-commands", "compile_commands.json",
         "--workers", "local", "--budget", "2", "--db", f"sqlite:///{folder}/t.db", "--out", "k.acf.toml"],
        cwd=folder, env=clean_env({"PYTHONPATH": str(old)}), capture_output=True, text=True, timeout=300, check=False)
    assert recorded.returncode == 0, recorded.stderr
    return folder


def test_resume_continues_a_twin_study_the_older_release_recorded(tmp_path: Path) -> None:
    """The older release searched a shipped twin (`-ftz=true`) as a setting of its own: its study
    is on another space, continued on it."""
    folder = _tuned_by_the_older_release(tmp_path, "nvcc -O3 -arch=sm_90 -use_fast_math -ftz=true -c k.cu -o k.o")
    [(_, name)] = _studies(folder)
    resumed = _tune(folder, 3, "--resume")
    assert f"study {name} (#1): 2/3 trials already recorded" in resumed.output, resumed.describe()
    assert CONTINUED in resumed.output
    assert len(_studies(folder)) == 1


def test_the_gate_reads_an_older_acf_s_settings_as_unchanged(tmp_path: Path) -> None:
    """Its [kernel] settings_sha256 hashes the identity as the older release gave it: the same
    settings, not `stale-settings`; resumed, the older release's study is continued."""
    folder = _tuned_by_the_older_release(tmp_path, "nvcc -O3 -arch=sm_90 -DTM=2 -c k.cu -o k.o")
    gate = run_cli(["gate", "k.acf.toml", "--compile-commands", "compile_commands.json"], cwd=folder)
    assert gate.returncode == 0, gate.describe()
    assert "stale-settings" not in gate.output and "0 warning(s)" in gate.output, gate.describe()
    [(_, name)] = _studies(folder)
    resumed = _tune(folder, 3, "--resume")
    assert f"study {name} (#1): 2/3 trials already recorded" in resumed.output, resumed.describe()


def test_an_older_acf_is_not_replaced_by_a_smaller_run_without_force(tmp_path: Path) -> None:
    """The older release's ACF describes this kernel (its settings_sha256 is the identity that
    release gave it): another study's run into the same --out is refused as for any ACF, not taken
    for an ACF of the kernel as it no longer is (review 52, finding 1)."""
    folder = _tuned_by_the_older_release(tmp_path, "nvcc -O3 -arch=sm_90 -DTM=2 -c k.cu -o k.o")
    before = (folder / "k.acf.toml").read_text()
    other = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--workers", "local",
                     "--budget", "1", "--db", f"sqlite:///{folder}/t.db", "--out", "k.acf.toml", "--study", "other"],
                    cwd=folder)
    assert other.returncode == 2, other.describe()
    assert "not replacing the ACF" in other.output and "records study" in other.output, other.describe()
    assert (folder / "k.acf.toml").read_text() == before


def test_a_new_study_starts_warm_from_the_older_release_s_study(tmp_path: Path) -> None:
    """A study the older release recorded for this build is an earlier study of this kernel: a run
    of another objective starts from its results, and does not learn from it as another kernel's
    (review 52, finding 2)."""
    folder = _tuned_by_the_older_release(tmp_path, "nvcc -O3 -arch=sm_90 -DTM=2 -c k.cu -o k.o")
    spills = _tune(folder, 2, "--objective", "spills")
    assert "warm start: 2 results from 1 earlier studies" in spills.output, spills.describe()
    assert "other sources" not in spills.output, spills.describe()
    assert CONTINUED not in spills.output  # another objective: a study of its own
    assert len(_studies(folder)) == 2
