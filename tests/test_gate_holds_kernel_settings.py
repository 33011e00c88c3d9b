"""The gate holds an ACF to the kernel as it ships, not to what the ACF says of it: its fixed
macros to tune.toml's [defines], its tuned macros to tune.toml's [tune.defines] and restrictions,
its baseline to the compilation database that ships (`gate --compile-commands`); and an ACF applied
as `flags` says is recognised as applied, not warned about as a changed build."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from tests.helpers import LOOP_KERNEL, run_cli

MACRO_KERNEL = """\
#ifndef TAPS
#define TAPS 4
#endif
#ifndef BLOCK
#define BLOCK 128
#endif
__global__ void __launch_bounds__(BLOCK) k(float* y, const float* x, int n) {
  __shared__ float s[BLOCK];
  int i = blockIdx.x * BLOCK + threadIdx.x;
  float a[TAPS];
#pragma unroll
  for (int t = 0; t < TAPS; ++t) a[t] = x[(i + t * 7) % n];
  float acc = 0.f;
#pragma unroll
  for (int t = 0; t < TAPS; ++t)
#pragma unroll
    for (int u = 0; u < TAPS; ++u) acc += a[t] * a[u] * (t ^ u);
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = BLOCK / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[blockIdx.x] = s[0];
}
"""


def _tune(folder: Path, *args: str) -> Path:
    out = folder / "k.acf.toml"
    done = run_cli(["tune", "k.cu", "--workers", "local", "--db", f"sqlite:///{folder / 't.db'}", "--budget", "3",
                    "--out", str(out), *args], cwd=folder)
    assert done.returncode == 0, done.describe()
    return out


def _macro_project(folder: Path, taps: int, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "k.cu").write_text(MACRO_KERNEL)
    (folder / "tune.toml").write_text(f'arch = "sm_90"\nentries = ["k"]\nblock_size = "BLOCK"\n'
                                      f'[defines]\nTAPS = {taps}\n[tune.defines]\nBLOCK = [128, 256]\n{extra}')
    return folder


def _gate(folder: Path, acf: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    done = run_cli(["gate", str(acf), "--static", "--json", *args], cwd=folder)
    assert done.returncode in (0, 1, 2), done.describe()
    return done.returncode, json.loads(done.stdout)["acfs"][0], done.stderr


def _edited(acf: Path, name: str, edit: Any) -> Path:
    document = tomllib.loads(acf.read_text())
    edit(document)
    out = acf.parent / name
    out.write_text(tomli_w.dumps(document))
    return out


def test_an_acfs_fixed_macros_are_held_to_tune_tomls_defines(tmp_path: Path) -> None:
    """A red team's ACF forged -DTAPS=16 (tune.toml: 64) and added -DNDEBUG: the gate built both
    sides with the ACF's macros, like with like, and passed it clean while `flags` shipped them. Here
    the forger tunes a copy with TAPS = 16 and gives the ACF the real kernel's settings hash."""
    real = _tune(_macro_project(tmp_path / "real", 64), "--only", "define.BLOCK")
    forged_from = _tune(_macro_project(tmp_path / "forger", 16), "--only", "define.BLOCK")
    settings = tomllib.loads(real.read_text())["kernel"]["settings_sha256"]

    def forge(d: dict[str, Any]) -> None:
        d["kernel"]["settings_sha256"] = settings
        d["args"]["defines"] = [*d["args"]["defines"], "-DNDEBUG"]
        d["args"]["argv"] = [*d["args"]["argv"], "-DNDEBUG"]

    forged = _edited(forged_from, "forged.acf.toml", forge)
    shutil.copy(forged, tmp_path / "real" / "forged.acf.toml")
    code, result, _ = _gate(tmp_path / "real", tmp_path / "real" / "forged.acf.toml")
    rules = {f["rule"]: f for f in result["findings"]}
    assert "stale-settings" in rules, result
    message = rules["stale-settings"]["message"]
    assert "the ACF's fixed macros (args.defines) are not the kernel's: it records -DTAPS=16 -DNDEBUG" in message
    assert "lacks -DTAPS=64" in message, message
    # built with the kernel's TAPS = 64, its evidence does not hold; the source, settings hash (forged) and
    # toolchain being the kernel's, the code it cites is not what its settings rebuild: an error
    assert rules["uncited-code"]["severity"] == "error" and "code-changed" not in rules, result
    code, result, _ = _gate(tmp_path / "real", real)  # the real ACF: clean
    assert (code, result["findings"]) == (0, []), result


def test_an_acfs_tuned_macros_are_held_to_tune_tomls_values_and_restrictions(tmp_path: Path) -> None:
    """A red team's ACF set define.BLOCK = 1000 (tune.toml: 128 or 256, `BLOCK <= 256`) and dropped
    its own copy of the restrictions: the gate passed it clean."""
    folder = _macro_project(tmp_path, 4, '[tune]\nrestrictions = ["BLOCK <= 256"]\n')
    acf = _tune(folder, "--only", "define.BLOCK")

    def block(value: int, drop: bool) -> Any:
        def edit(d: dict[str, Any]) -> None:
            d["controls"]["define.BLOCK"] = value
            d["args"]["frontend"] = [a if not a.startswith("-DBLOCK=") else f"-DBLOCK={value}" for a in d["args"]["frontend"]]
            d["args"]["argv"] = [a if not a.startswith("-DBLOCK=") else f"-DBLOCK={value}" for a in d["args"]["argv"]]
            if drop:
                d["kernel"].pop("restrictions", None)
            else:
                d["kernel"]["restrictions"] = ["BLOCK <= 1024"]
        return edit

    for name, drop in (("dropped.acf.toml", True), ("rewritten.acf.toml", False)):
        code, result, _ = _gate(folder, _edited(acf, name, block(512, drop)))
        assert code == 2 and result["verdict"] == "ERROR", result
        assert "its controls (define.BLOCK = 512) break 'BLOCK <= 256', a restriction of the kernel's tune.toml" in \
            result["findings"][0]["message"], result
    # a value the restriction allows but tune.toml does not list: a stale (or forged) setting, named
    code, result, _ = _gate(folder, _edited(acf, "listed.acf.toml", block(64, True)))
    stale = [f for f in result["findings"] if f["rule"] == "stale-settings"]
    assert stale and "define.BLOCK is set to a value tune.toml's [tune.defines] does not offer" in stale[0]["message"]
    assert (stale[0]["recorded"], stale[0]["measured"]) == ("define.BLOCK = 64", "tune.toml's define.BLOCK: 128, 256")


def _database(folder: Path, command: str, name: str = "compile_commands.json") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([{"directory": str(folder), "command": command, "file": "k.cu"}]))
    return path


def test_gate_compile_commands_a_hard_link_to_the_named_database_is_that_database(tmp_path: Path) -> None:
    """review F8: the gate asked whether --compile-commands names the ACF's database by resolving
    paths only, while the report options asked the same question with hard links too: a hard link
    to the very file the ACF names was a stale-settings warning with a re-tune line."""
    import os

    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    _database(tmp_path, "nvcc -Xptxas -O3 -arch=sm_90 -c k.cu -o k.o")
    acf = _tune(tmp_path, "--compile-commands", "compile_commands.json", "--only", "ptxas.opt_level",
                "--objective", "registers")
    (tmp_path / "ci").mkdir()
    os.link(tmp_path / "compile_commands.json", tmp_path / "ci" / "compile_commands.json")
    code, result, _ = _gate(tmp_path, acf, "--compile-commands", "ci/compile_commands.json")
    assert code == 0 and not [f for f in result["findings"] if f["rule"] == "stale-settings"], result

def test_gate_compile_commands_names_the_database_that_ships(tmp_path: Path) -> None:
    """A red team's ACF named a debug build's database (-Xptxas -O0) as its [baseline] and chose
    -O0: the gate held it to that database and passed it clean; the project ships -O3."""
    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    _database(tmp_path, "nvcc -Xptxas -O3 -arch=sm_90 -c k.cu -o k.o")
    _database(tmp_path, "nvcc -Xptxas -O0 -arch=sm_90 -c k.cu -o k.o", "debug/compile_commands.json")
    acf = _tune(tmp_path, "--compile-commands", "debug/compile_commands.json", "--only", "ptxas.opt_level",
                "--objective", "registers")
    code, result, stderr = _gate(tmp_path, acf)
    assert "held to the compile command for k.cu in debug/compile_commands.json (named by the ACF's [baseline]; " \
           "pass --compile-commands to name the one that ships)" in stderr, stderr
    assert any("debug/compile_commands.json" in note for note in result["notes"]), result
    code, result, stderr = _gate(tmp_path, acf, "--compile-commands", "compile_commands.json")
    found = {f["rule"]: f for f in result["findings"]}
    assert any(("the ACF's [baseline] names the compilation database debug/compile_commands.json, but the database "
                "that ships is compile_commands.json (--compile-commands)") in f["message"]
               for f in result["findings"] if f["rule"] == "stale-settings"), found
    assert ("held to the compile command for k.cu in compile_commands.json (--compile-commands; the ACF's [baseline] "
            "names debug/compile_commands.json)") in stderr, stderr
    if "ptxas.opt_level" in tomllib.loads(acf.read_text())["controls"]:  # it kept -O0 (or 1, 2): lowered now
        assert code == 1 and found["worse-than-default"]["severity"] == "error", found
    missing = run_cli(["gate", str(acf), "--static", "--compile-commands", "nope.json"], cwd=tmp_path)
    assert missing.returncode == 2 and "--compile-commands nope.json: file not found" in missing.stderr, \
        missing.describe()
    assert "Traceback" not in missing.stderr
    # an ACF tuned without a compile command, where the database that ships has one for its kernel
    (tmp_path / "t.db").unlink()
    plain = _tune(tmp_path, "--only", "ptxas.opt_level", "--force")
    code, result, _ = _gate(tmp_path, plain, "--compile-commands", "debug/compile_commands.json")
    assert any("the ACF was tuned without a compile command, but debug/compile_commands.json has one for k.cu "
               "(ships -Xptxas -O0)" in f["message"] for f in result["findings"]), result


def test_the_same_command_in_another_database_is_no_stale_setting(tmp_path: Path) -> None:
    """CI builds in its own folder (ci/ beside the developer's build/): `gate --compile-commands
    ci/compile_commands.json` warned stale-settings with a re-tune line for every ACF, and failed
    under --rule stale-settings=error, though the kernel's command there was the very one it was
    tuned from. The commands are compared, not the paths: a note names both databases."""
    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    command = "nvcc -Xptxas -O2 -arch=sm_90 -c k.cu -o k.o"
    _database(tmp_path, command)
    acf = _tune(tmp_path, "--compile-commands", "compile_commands.json", "--only", "ptxas.opt_level",
                "--objective", "registers")
    _database(tmp_path, command.replace("-c", "-Xcompiler -fPIC -c").replace("k.o", "ci/k.o"), "ci/compile_commands.json")
    code, result, stderr = _gate(tmp_path, acf, "--compile-commands", "ci/compile_commands.json")
    assert code == 0 and result["findings"] == [], result
    assert "held to the compile command for k.cu in ci/compile_commands.json (--compile-commands; the ACF's " \
           "[baseline] names compile_commands.json)" in stderr, stderr
    strict = run_cli(["gate", str(acf), "--static", "--compile-commands", "ci/compile_commands.json",
                      "--rule", "stale-settings=error"], cwd=tmp_path)
    assert strict.returncode == 0, strict.describe()
    # a command that builds something else there is still said, naming both databases
    _database(tmp_path, command.replace("-O2", "-O1"), "ci/compile_commands.json")
    code, result, _ = _gate(tmp_path, acf, "--compile-commands", "ci/compile_commands.json")
    stale = [f["message"] for f in result["findings"] if f["rule"] == "stale-settings"]
    assert any("the ACF's [baseline] names the compilation database compile_commands.json, but the database that "
               "ships is ci/compile_commands.json" in m for m in stale), result
    assert any("ptxas.opt_level 2 -> 1" in m for m in stale), result


def test_an_acf_applied_as_flags_says_is_not_a_changed_build(tmp_path: Path) -> None:
    """A user removed the shipped flags `flags` named and added the ACF's: every later gate warned
    stale-settings ("changed since the ACF was tuned") and offered a re-tune that would throw the
    evidence away. The command now ships the ACF's choice: applied, judged against the recorded
    baseline; a command that is neither the recorded baseline nor the choice is still stale."""
    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    _database(tmp_path, "nvcc -Xptxas -O0 -arch=sm_90 -c k.cu -o k.o")
    acf = _tune(tmp_path, "--compile-commands", "compile_commands.json", "--only", "ptxas.opt_level",
                "--objective", "instructions")
    assert tomllib.loads(acf.read_text())["baseline"]["remove"] == ["-Xptxas -O0"]
    flags = run_cli(["flags", str(acf)], cwd=tmp_path)
    assert flags.returncode == 0, flags.describe()
    _database(tmp_path, f"nvcc {flags.stdout.strip()} -c k.cu -o k.o")  # -Xptxas -O0 removed, the ACF's flags added
    code, result, stderr = _gate(tmp_path, acf)
    assert (code, result["findings"]) == (0, []), result
    assert any(note.startswith("applied: the compile command in compile_commands.json builds the ACF's choice")
               for note in result["notes"]), result
    assert "applied:" in stderr
    choice = tomllib.loads(acf.read_text())["controls"].get("ptxas.opt_level", 3)
    other = next(level for level in (1, 2, 3) if level != choice)
    _database(tmp_path, f"nvcc -Xptxas -O{other} -arch=sm_90 -c k.cu -o k.o")
    code, result, _ = _gate(tmp_path, acf)
    stale = [f for f in result["findings"] if f["rule"] == "stale-settings"]
    assert stale and "changed since the ACF was tuned" in stale[0]["message"], result
