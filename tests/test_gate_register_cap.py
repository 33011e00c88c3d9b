"""The gate and a compile command that gained nvcc's own -maxrregcount after the ACF was tuned with
an -Xptxas cap: nvcc hands ptxas its own cap after the -Xptxas one (13.0 `-dryrun`: `ptxas
--maxrregcount=40 -maxrregcount=32`), so the ACF applied to that command builds at the command's cap."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from tests.helpers import run_cli
from tests.test_gate_command_order import STENCIL


def _database(folder: Path, command: str, name: str) -> None:
    (folder / name).write_text(json.dumps([{"directory": str(folder), "command": command, "file": "k.cu"}]))


def _tuned_then_gated(folder: Path, tuned: str, shipped: str, passes: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """STENCIL tuned from the command `tuned`, then gated against `shipped`: (the ACF, the gate's result;
    `passes`: the gate exits 0, else it may fail too)."""
    (folder / ".git").mkdir()
    (folder / "k.cu").write_text(STENCIL)  # 40 registers (75% at 256 threads) unless capped lower
    _database(folder, tuned, "compile_commands.json")
    out = folder / "store" / "k.acf.toml"
    done = run_cli(["tune", "k.cu", "--workers", "local", "--db", f"sqlite:///{folder / 't.db'}", "--budget", "2",
                    "--out", str(out), "--compile-commands", "compile_commands.json", "--only",
                    "nvcc.jump_table_density", "--objective", "static"], cwd=folder)
    assert done.returncode == 0, done.describe()
    _database(folder, shipped, "cc_drift.json")
    gated = run_cli(["gate", str(out), "--static", "--json", "--compile-commands", "cc_drift.json"], cwd=folder)
    assert gated.returncode in ((0,) if passes else (0, 1)), gated.describe()
    return tomllib.loads(out.read_text()), json.loads(gated.stdout)["acfs"][0]


def test_the_commands_register_cap_overrides_the_acfs_in_its_measured_build(tmp_path: Path) -> None:
    """A first-time user's `sed s/-std=c++17/-std=c++17 -maxrregcount=32/`: the gate failed
    worse-than-default "as shipped 100.0%, ACF 75.0%", the ACF built at its own 40-register cap,
    a build that never ships (nvcc builds the command with the ACF's flags at 32 registers), and
    the stale-settings finding said the ACF's cap went "-> default"."""
    acf, result = _tuned_then_gated(tmp_path, "nvcc -arch=sm_90 -Xptxas --maxrregcount=40 -c k.cu -o k.o",
                                    "nvcc -maxrregcount=32 -arch=sm_90 -Xptxas --maxrregcount=40 -c k.cu -o k.o")
    assert acf["controls"]["ptxas.maxrregcount"] == 40
    assert (result["measured"]["registers"], result["measured"]["occupancy"]) == (32, 1.0), result
    assert not [f for f in result["findings"] if f["rule"] == "worse-than-default"], result
    [stale] = [f["message"] for f in result["findings"] if f["message"].startswith("the compile command in")]
    assert ("adds -maxrregcount=32, which overrides the ACF's ptxas.maxrregcount = 40 (-Xptxas=--maxrregcount=40): "
            "nvcc hands ptxas its own cap after any -Xptxas one") in stale, stale
    assert "-> default" not in stale, stale


def test_the_commands_register_cap_replaces_the_acfs_own_nvcc_cap(tmp_path: Path) -> None:
    """An ACF tuned from a command with nvcc's -maxrregcount=40, gated against that command now at
    -maxrregcount=32: the gate built the ACF at its recorded 40 registers, a build that never ships
    (nvcc builds the command with the ACF's flags at the command's cap, the last -maxrregcount given)."""
    acf, result = _tuned_then_gated(tmp_path, "nvcc -maxrregcount=40 -arch=sm_90 -c k.cu -o k.o",
                                    "nvcc -maxrregcount=32 -arch=sm_90 -c k.cu -o k.o")
    assert "-maxrregcount=40" in acf["base"]["nvcc_flags"]
    assert (result["measured"]["registers"], result["measured"]["occupancy"]) == (32, 1.0), result
    assert not [f for f in result["findings"] if f["rule"] == "worse-than-default"], result
    stale = " ".join(f["message"] for f in result["findings"] if f["rule"] == "stale-settings")
    assert "adds -maxrregcount=32, which replaces the ACF's -maxrregcount=40: " in stale, stale


def test_the_kernels_cap_is_a_clause_of_its_own_beside_other_missing_flags() -> None:
    """`lacks -O3 -maxrregcount=32, which they give, which overrides the ACF's ...`: the second
    "which" had no clear subject (the flags? -O3?); the cap now says so itself."""
    from compileiq.gating.rules import BaseFlagDifference, base_flag_hits
    from compileiq.source.base_flags import BaseFlags, overridden_cap

    own = BaseFlags(flags=("-O3", "-maxrregcount=32"))
    capped = overridden_cap(own, {"ptxas.maxrregcount": 40}, f"the kernel's {own.register_cap}")
    [hit] = base_flag_hits(BaseFlagDifference((), own.flags), "tune.toml", "re-tune", capped)
    assert ("it lacks -O3 -maxrregcount=32, which they give; the kernel's -maxrregcount=32 overrides the ACF's "
            "ptxas.maxrregcount = 40 (-Xptxas=--maxrregcount=40): ") in hit.message, hit.message
    assert "which they give, which" not in hit.message, hit.message


def test_a_command_that_drops_nvccs_cap_drops_it_from_the_acfs_measured_build(tmp_path: Path) -> None:
    """A teammate dropped nvcc's -maxrregcount=32 from the command: the gate built the ACF at its
    recorded 32-register cap (spilling where the user's kernel did) and failed worse-than-default
    against a build that never ships; the ACF's flags applied to the command (`flags`) give no cap.
    Here that build has the occupancy the default has, less than the ACF records (said: it is the build
    that ships), and is no worse than the default."""
    acf, result = _tuned_then_gated(tmp_path, "nvcc -maxrregcount=32 -arch=sm_90 -c k.cu -o k.o",
                                    "nvcc -arch=sm_90 -c k.cu -o k.o", passes=False)
    assert "-maxrregcount=32" in acf["base"]["nvcc_flags"]
    assert (result["measured"]["registers"], result["measured"]["occupancy"]) == (40, 0.75), result
    assert not [f for f in result["findings"] if f["rule"] == "worse-than-default"], result
    stale = " ".join(f["message"] for f in result["findings"] if f["rule"] == "stale-settings")
    assert "drops -maxrregcount=32, so the ACF's build was measured without it" in stale, stale


HELD = """\
__global__ void k(const float* a, float* out, int n) {
  float acc[HN];
  for (int i = 0; i < HN; i++) acc[i] = a[i * n + threadIdx.x];
  for (int r = 0; r < 4; r++) for (int i = 0; i < HN; i++) acc[i] = acc[(i * 7 + r) % HN] * 1.5f + acc[i];
  float s = 0;
  for (int i = 0; i < HN; i++) s += acc[i];
  out[threadIdx.x] = s;
}
"""


def test_a_ptxas_cap_the_command_gains_stays_in_the_acfs_measured_build(tmp_path: Path) -> None:
    """An ACF whose choice is the build as shipped (no cap), gated against the command plus
    `-Xptxas --maxrregcount=48`: the gate failed worse-than-default "as shipped 62.5%, ACF 37.5%", the
    ACF built uncapped, though `flags` appended to that command keeps the cap (48 registers, 62.5%)."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "k.cu").write_text(HELD)  # 72 registers (37.5% at 256 threads) uncapped
    (tmp_path / "tune.toml").write_text('arch = "sm_90"\nblock_size = 256\n\n[defines]\nHN = 56\n')
    _database(tmp_path, "nvcc -O3 -arch=sm_90 -c k.cu -o k.o", "compile_commands.json")
    out = tmp_path / "store" / "k.acf.toml"
    done = run_cli(["tune", "k.cu", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}", "--budget", "2",
                    "--out", str(out), "--compile-commands", "compile_commands.json", "--only", "ptxas.maxrregcount",
                    "--objective", "static"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    _database(tmp_path, "nvcc -O3 -arch=sm_90 -Xptxas --maxrregcount=48 -c k.cu -o k.o", "cc2.json")
    gated = run_cli(["gate", str(out), "--static", "--json", "--compile-commands", "cc2.json"], cwd=tmp_path)
    result = json.loads(gated.stdout)["acfs"][0]
    assert "ptxas.maxrregcount" not in tomllib.loads(out.read_text())["controls"]
    assert (result["measured"]["registers"], result["measured"]["occupancy"]) == (48, 0.625), result
    assert not [f for f in result["findings"] if f["rule"] in ("worse-than-default", "uncited-code")], result
    stale = " ".join(f["message"] for f in result["findings"] if f["rule"] == "stale-settings")
    assert "ptxas.maxrregcount default (the default) -> 48, which the ACF's flags leave in place" in stale, stale


def test_a_spill_under_the_commands_new_ptxas_cap_says_the_cap_is_the_commands(tmp_path: Path) -> None:
    """The compile command gained -Xptxas --maxrregcount=N after the tuning: the ACF's build keeps it
    (ptxas takes the last cap, and the ACF gives none), and its spills FAILed as the ACF's own fault,
    "spill bytes appeared: 0 -> N", never naming the command's cap."""
    _, result = _tuned_then_gated(tmp_path, "nvcc -arch=sm_90 -c k.cu -o k.o",
                                  "nvcc -arch=sm_90 -Xptxas --maxrregcount=24 -c k.cu -o k.o", passes=False)
    assert result["measured"]["command_cap"] == "-Xptxas --maxrregcount=24", result["measured"]
    [spills] = [f["message"] for f in result["findings"] if f["rule"] == "spills"]
    assert spills.endswith(" (with the compile command's -Xptxas --maxrregcount=24, which the ACF was not tuned "
                           "with)"), spills
    text = run_cli(["gate", "store/k.acf.toml", "--static", "--compile-commands", "cc_drift.json",
                    "--junit", "out/gate.xml"], cwd=tmp_path)
    [line] = [line for line in text.stdout.splitlines() if line.startswith("store/k.acf.toml: error spills: ")]
    assert "(with the compile command's -Xptxas --maxrregcount=24, which the ACF was not tuned with)" in line, line
    assert "error spills: spill bytes appeared" in (tmp_path / "out" / "gate.xml").read_text()
    assert "-Xptxas --maxrregcount=24, which the ACF" in (tmp_path / "out" / "gate.xml").read_text()
