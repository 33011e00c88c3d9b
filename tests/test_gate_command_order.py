"""The gate and a compile command that only moves its flags, the numbers a worse-than-default
finding names, and a database an ACF outside any git checkout names (third-party builds: CMake
moved `-std=c++17`; `compileiq_apply` appends the ACF's flags; a cuda-samples folder with no .git)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from tests.helpers import LOOP_KERNEL, run_cli

# a stencil whose registers ptxas -O1 keeps at 32 (full occupancy at 256 threads) and -O3 takes to 40 (75%)
STENCIL = """\
__global__ void k(const float* p, const float* a, float* b, int nx, int ny, int nz, float c0, float c1, float c2,
                   float c3, float c4, float c5, float c6, float c7) {
  int i = blockDim.x * blockIdx.x + threadIdx.x, j = blockDim.y * blockIdx.y + threadIdx.y;
  int c = i + j * nx, xy = nx * ny;
  int w = i == 0 ? c : c - 1, e = i == nx - 1 ? c : c + 1, n = j == 0 ? c : c - nx, s = j == ny - 1 ? c : c + nx;
  float t1 = a[c], t2 = a[c], t3 = a[c + xy];
  for (int k = 1; k < nz - 1; ++k) {
    t1 = t2; t2 = t3; t3 = a[c + xy];
    b[c] = c0 * t2 + c1 * a[w] + c2 * a[e] + c3 * a[s] + c4 * a[n] + c5 * t1 + c6 * t3 + c6 * 80.0f;
    c += xy; w += xy; e += xy; n += xy; s += xy;
  }
}
"""
BASE = "nvcc -DNDEBUG --extended-lambda -std=c++17 -rdc=true -Ia -Ib -arch=sm_90"


def _database(folder: Path, command: str, name: str = "compile_commands.json") -> None:
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps([{"directory": str(folder), "command": command, "file": "k.cu"}]))


def _tune(folder: Path, *args: str) -> Path:
    out = folder / "store" / "k.acf.toml"
    done = run_cli(["tune", "k.cu", "--workers", "local", "--db", f"sqlite:///{folder / 't.db'}", "--budget", "2",
                    "--out", str(out), *args], cwd=folder)
    assert done.returncode == 0, done.describe()
    return out


def _gate(folder: Path, acf: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    done = run_cli(["gate", str(acf), "--static", "--json", *args], cwd=folder)
    assert done.returncode in (0, 1), done.describe()
    return done.returncode, json.loads(done.stdout)["acfs"][0], done.stderr


def _kernel(folder: Path, checkout: bool = True) -> None:
    """The kernel and two include folders, in a git checkout (`.git`) unless `checkout` is False."""
    if checkout:
        (folder / ".git").mkdir()
    (folder / "k.cu").write_text(LOOP_KERNEL)
    for sub in ("a", "b"):
        (folder / sub).mkdir(exist_ok=True)


def test_a_command_that_only_moves_its_flags_is_no_change(tmp_path: Path) -> None:
    """CMake moved -std=c++17 before the arch flags: the gate warned stale-settings ("gives its
    flags in another order ... re-tune") for a build of the same code. Order still counts where it
    changes the build: the include folders (a header in both is read from the first)."""
    _kernel(tmp_path)
    _database(tmp_path, f"{BASE} -c k.cu -o k.o")
    acf = _tune(tmp_path, "--compile-commands", "compile_commands.json", "--only", "ptxas.opt_level")
    code, result, _ = _gate(tmp_path, acf)
    assert (code, result["findings"]) == (0, []), result
    _database(tmp_path, "nvcc -std=c++17 -arch=sm_90 -rdc=true -Ia -Ib --extended-lambda -DNDEBUG -c k.cu -o k.o")
    code, result, _ = _gate(tmp_path, acf)
    assert (code, result["findings"]) == (0, []), result
    _database(tmp_path, f"{BASE.replace('-Ia -Ib', '-Ib -Ia')} -c k.cu -o k.o")
    code, result, _ = _gate(tmp_path, acf)
    stale = [f["message"] for f in result["findings"] if f["rule"] == "stale-settings"]
    assert any("searches its include folders in another order" in m for m in stale), result


def test_a_build_that_applies_the_acf_with_its_flags_moved_is_applied(tmp_path: Path) -> None:
    """`compileiq_apply` appends the ACF's flags to a command whose base flags CMake reordered: the
    gate warned stale-settings where ci.md promises the note `applied: ...`."""
    _kernel(tmp_path)
    _database(tmp_path, f"{BASE} -Xptxas -O0 -c k.cu -o k.o")
    acf = _tune(tmp_path, "--compile-commands", "compile_commands.json", "--only", "ptxas.opt_level",
                "--objective", "instructions")
    choice = tomllib.loads(acf.read_text())["controls"].get("ptxas.opt_level", 3)
    _database(tmp_path, f"nvcc -std=c++17 -arch=sm_90 -rdc=true -Ia -Ib --extended-lambda -DNDEBUG "
                        f"-Xptxas=-O{choice} -c k.cu -o k.o")  # -Xptxas -O0 removed, the ACF's choice appended
    code, result, stderr = _gate(tmp_path, acf)
    assert (code, result["findings"]) == (0, []), result
    assert any(note.startswith("applied: the compile command in compile_commands.json builds the ACF's choice")
               for note in result["notes"]), result
    assert "applied:" in stderr


def test_a_database_an_acf_outside_any_checkout_names_says_why_it_was_not_read(tmp_path: Path) -> None:
    """tune wrote store/k.acf.toml in a folder with no .git, its database in build/: the gate said
    the database was "outside the ACF's checkout", of a checkout that does not exist."""
    _kernel(tmp_path, checkout=False)
    _database(tmp_path, f"{BASE} -c k.cu -o k.o", "build/compile_commands.json")
    acf = _tune(tmp_path, "--compile-commands", "build/compile_commands.json", "--only", "ptxas.opt_level")
    code, result, _ = _gate(tmp_path, acf)
    [message] = [f["message"] for f in result["findings"] if f["rule"] == "stale-settings"]
    assert "is outside the ACF's folder, store, which is in no git checkout" in message, message
    assert "pass --compile-commands with the database that ships (build/compile_commands.json, if that is it)" \
        in message, message
    code, result, _ = _gate(tmp_path, acf, "--compile-commands", "build/compile_commands.json")
    assert (code, result["findings"]) == (0, []), result


def test_a_worse_than_default_finding_names_each_number_for_what_it_is(tmp_path: Path) -> None:
    """The build that ships gained -Xptxas -O1: the finding said "(recorded as shipped 100.0%,
    measured 75.0%)", where the ACF records 75.0% for the shipped build and both numbers were
    measured now (the shipped build's and the ACF's)."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "k.cu").write_text(STENCIL)
    _database(tmp_path, "nvcc -arch=sm_90 -c k.cu -o k.o")
    acf = _tune(tmp_path, "--compile-commands", "compile_commands.json", "--only", "nvcc.jump_table_density",
                "--objective", "static")
    assert tomllib.loads(acf.read_text())["evidence"]["baseline"]["occupancy"] == 0.75
    _database(tmp_path, "nvcc -Xptxas -O1 -arch=sm_90 -c k.cu -o k.o")
    code, result, _ = _gate(tmp_path, acf)
    found = {(f["rule"], f["recorded"]): f for f in result["findings"]}
    worse = found[("worse-than-default", "as shipped 75.0%")]
    assert (code, worse["measured"]) == (1, "as shipped 100.0%, ACF 75.0%"), result
    assert "(100.0% -> 75.0%)" in worse["message"], worse
    lowered = next(f for f in result["findings"] if f["rule"] == "lowered-optimisation")
    assert lowered["measured"] == "ptxas.opt_level 1", lowered  # the build that ships, now
