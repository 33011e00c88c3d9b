"""A build that ships a lower ptxas optimisation level than the ACF was tuned at fails the gate
(user findings, fault 3): `gate --compile-commands` of a build that applies the ACF and adds
`-Xptxas -O1` passed (exit 0) with a `stale-settings` warning, though the code that ships is not the
code the ACF's evidence cites, and that warning listed the ACF's own applied choice as a change.
Real nvcc/ptxas, real SQLite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers import run_cli
from tests.test_applied_acf_baseline import KERNEL, _database, _tune  # BLOCK 512 preferred to 128


def _project(folder: Path) -> None:
    (folder / "k.cu").write_text(KERNEL)
    (folder / "tune.toml").write_text('entries = ["k"]\nblock_size = "BLOCK"\n\n[tune.defines]\nBLOCK = [128, 512]\n')


def _gate(folder: Path, acf: str, database: str, *rules: str) -> tuple[int, dict[str, dict[str, Any]], str]:
    done = run_cli(["gate", acf, "--static", "--json", "--compile-commands", database, "--markdown", "g.md",
                    "--junit", "g.xml", *(f"--rule={rule}" for rule in rules)], cwd=folder)
    assert done.returncode in (0, 1), done.describe()
    found = {f["rule"]: f for f in json.loads(done.stdout)["acfs"][0]["findings"]}
    return done.returncode, found, done.output + (folder / "g.md").read_text() + (folder / "g.xml").read_text()


def test_a_shipped_build_that_lowers_the_ptxas_level_fails_and_names_only_real_drift(tmp_path: Path) -> None:
    _project(tmp_path)
    acf = _tune(tmp_path, _database(tmp_path, "compile_commands.json"), "k.acf.toml")
    assert acf["controls"] == {"define.BLOCK": 512}, acf["controls"]
    flags = run_cli(["flags", "k.acf.toml"], cwd=tmp_path)  # the build with the ACF's flags pasted in
    assert flags.returncode == 0, flags.describe()

    code, found, shown = _gate(tmp_path, "k.acf.toml", _database(tmp_path, "applied.json", flags.stdout.strip()))
    assert (code, found) == (0, {}), found  # the ACF applied: nothing to say

    lowered = _database(tmp_path, "lowered.json", f"{flags.stdout.strip()} -Xptxas -O1")
    code, found, shown = _gate(tmp_path, "k.acf.toml", lowered)
    assert code == 1, found
    fails = found["lowered-optimisation"]
    assert fails["severity"] == "error", fails
    assert "lowered.json ships -Xptxas -O1 (ptxas.opt_level 1), below the ACF's ptxas.opt_level 3 (the default)" in (
        fails["message"]), fails
    assert shown.count("lowered-optimisation") >= 4, shown  # the terminal, the markdown, the JUnit failure
    stale = found["stale-settings"]  # still a re-tune warning, naming only what changed besides the ACF's choice
    assert stale["severity"] == "warn" and "(ptxas.opt_level 3 (the default) -> 1)" in stale["message"], stale
    assert "define.BLOCK" not in stale["message"], stale

    code, found, _ = _gate(tmp_path, "k.acf.toml", "lowered.json", "lowered-optimisation=warn")
    assert code == 0 and found["lowered-optimisation"]["severity"] == "warn", found


def test_a_build_that_still_ships_the_level_the_acf_was_tuned_from_is_not_lowered(tmp_path: Path) -> None:
    """Tuned from a build with -Xptxas -O1 (its baseline): that command, the ACF not applied yet,
    lowers nothing the ACF was tuned from; -O0 there lowers it below both."""
    _project(tmp_path)
    _tune(tmp_path, _database(tmp_path, "compile_commands.json", "-Xptxas -O1"), "k.acf.toml")
    code, found, _ = _gate(tmp_path, "k.acf.toml", "compile_commands.json")
    assert code == 0 and "lowered-optimisation" not in found, found
    code, found, _ = _gate(tmp_path, "k.acf.toml", _database(tmp_path, "o0.json", "-Xptxas -O0"))
    assert code == 1, found
    assert "ships -Xptxas -O0 (ptxas.opt_level 0), below the ACF's ptxas.opt_level 1" in (
        found["lowered-optimisation"]["message"]), found
