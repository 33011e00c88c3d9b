"""The gate's re-tune line says what it needs before it can run (a search space for this machine's
nvcc, the compilation database it names), names a database this machine has, and a stale-settings
finding says what the ACF records: real nvcc/ptxas, real `compileiq tune` and `compileiq gate`."""

from __future__ import annotations

import json
import shlex
import shutil
import tomllib
from pathlib import Path

from compileiq.core.toolchain import find_toolchain
from tests.helpers import LOOP_KERNEL, compile_commands_file, run_cli


def _project(folder: Path, db: Path) -> Path:
    """k.cu tuned from build/compile_commands.json into k.acf.toml, recorded in `db`."""
    folder.mkdir(parents=True)
    (folder / "k.cu").write_text(LOOP_KERNEL)
    (folder / "build").mkdir()
    compile_commands_file(folder / "build", f"nvcc -Xptxas -O3 -arch=sm_90 -c {folder / 'k.cu'} -o k.o",
                          str(folder / "k.cu"))
    done = run_cli(["tune", "k.cu", "--workers", "local", "--db", f"sqlite:///{db}", "--budget", "3",
                    "--compile-commands", "build/compile_commands.json", "--only", "ptxas.opt_level",
                    "--objective", "registers", "--out", "k.acf.toml"], cwd=folder)
    assert done.returncode == 0, done.describe()
    return folder / "k.acf.toml"


def _gate(folder: Path, *args: str, env: dict[str, str] | None = None) -> list[dict]:
    done = run_cli(["gate", "k.acf.toml", "--static", "--json", *args], cwd=folder, env=env)
    assert done.returncode in (0, 1), done.describe()
    return json.loads(done.stdout)["acfs"][0]["findings"]


def _newer_nvcc(folder: Path) -> dict[str, str]:
    """CUDA_HOME whose nvcc and ptxas are the real ones, reporting release 13.1 (`--version` only),
    as after a CUDA minor upgrade."""
    real = find_toolchain()
    (folder / "bin").mkdir(parents=True)
    for tool, path in (("nvcc", real.nvcc), ("ptxas", real.ptxas)):
        script = folder / "bin" / tool
        script.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then "{path}" --version | '
                          f'sed "s/release 13\\.0, V13\\.0/release 13.1, V13.1/; s/13\\.0\\.r13\\.0/13.1.r13.1/"; '
                          f'else exec "{path}" "$@"; fi\n')
        script.chmod(0o755)
    return {"CUDA_HOME": str(folder)}


def test_the_retune_line_after_a_cuda_upgrade_says_it_needs_a_search_space_and_the_database(tmp_path):
    """Report 54, item 4: under nvcc 13.1 the stale-toolchain finding printed a re-tune command that
    `tune` refuses (no search space for nvcc 13.1), naming the tuner's absolute database (another
    machine's in CI) and a compilation database the same report said is gone."""
    assert find_toolchain().nvcc_version == "13.0"  # the search spaces shipped here: 13.0 only
    tuned = tmp_path / "tuned.db"
    project = _project(tmp_path / "p", tuned).parent
    env = _newer_nvcc(tmp_path / "cuda")
    assert run_cli(["gate", "k.acf.toml", "--static", "--rule", "stale-toolchain=error"], cwd=project,
                   env=env).returncode == 1
    findings = _gate(project, env=env)
    stale = next(f for f in findings if f["rule"] == "stale-toolchain")
    command = stale["command"]
    space = "re-tuning needs a compileiq with a search space for nvcc 13.1 (this one has 13.0)"
    assert stale["needs"] == [space], stale  # said beside the command, never in it
    assert shlex.split(command)[:2] == ["compileiq", "tune"], command
    assert f"--db sqlite:///{tuned}" in command, command  # the database is on this machine: named
    # in a clone on another machine: no build folder, no tuner's database
    shutil.rmtree(project / "build")
    tuned.unlink()
    stale = next(f for f in _gate(project, env=env) if f["rule"] == "stale-toolchain")
    assert "regenerate build/compile_commands.json first (it is gone)" in stale["needs"], stale
    argv = shlex.split(stale["command"])
    assert "--db" not in argv and argv[:2] == ["compileiq", "tune"], stale  # the default: $COMPILEIQ_DB or store/
    # the text line: the needs in the message, and what follows "re-tune: " pasteable into a shell
    text = run_cli(["gate", "k.acf.toml", "--static"], cwd=project, env=env).stdout
    line = next(line for line in text.splitlines() if line.startswith("k.acf.toml: warn stale-toolchain"))
    said, _, pasted = line.partition("; re-tune: ")
    assert space in said and "regenerate build/compile_commands.json first (it is gone)" in said, line
    assert shlex.split(pasted)[:2] == ["compileiq", "tune"], line
    # with this machine's own nvcc, the line is the command alone once the database is regenerated
    (project / "build").mkdir()
    compile_commands_file(project / "build", f"nvcc -Xptxas -O3 -arch=sm_90 -c {project / 'k.cu'} -o k.o",
                          str(project / "k.cu"))
    (project / "k.cu").write_text(LOOP_KERNEL + "\n// changed\n")
    command = next(f for f in _gate(project) if f["rule"] == "stale-source")["command"]
    assert command.startswith("compileiq tune k.cu "), command
    done = run_cli([*shlex.split(command)[1:], "--budget", "2", "--workers", "local"], cwd=project)
    assert done.returncode == 0, done.describe()


def test_a_stale_settings_finding_records_the_acfs_hash_and_a_changed_tune_toml(tmp_path):
    """Report 54, item 7: for an ACF tuned with --compile-commands, gated where that database is gone,
    the stale-settings finding showed today's tune.toml's hash as "recorded", and a tune.toml added
    since was not reported (its siblings said "the kernel's tune.toml settings changed")."""
    acf = _project(tmp_path / "p", tmp_path / "t.db")
    project = acf.parent
    recorded = tomllib.loads(acf.read_text())["kernel"]["settings_sha256"][:12]
    shutil.rmtree(project / "build")
    before = [f for f in _gate(project) if f["rule"] == "stale-settings"]
    assert [(f["recorded"], f["measured"]) for f in before] == [(recorded, "not checked")], before
    (project / "tune.toml").write_text('arch = "sm_90"\nrtol = 0.01\n')
    after = [f for f in _gate(project) if f["rule"] == "stale-settings"]
    assert {f["recorded"] for f in after} == {recorded}, after
    assert any("the kernel's tune.toml settings changed since the ACF was tuned" in f["message"] for f in after), after
