"""The gate fails an ACF whose settings nobody asked for: a numerics-changing setting the build that
ships no longer sets and the tuning was not allowed to search (`risk-not-allowed`), and settings that
no longer rebuild the code the ACF's evidence cites though nothing it was tuned from changed
(`uncited-code`: its [controls]/[args] were edited). A user's report (user49) found both passing
with a warning at most, and the stale-settings wording of an edited macro garbled."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from tests.helpers import LOOP_KERNEL, run_cli

MACRO_KERNEL = """\
#ifndef BLOCK
#define BLOCK 128
#endif
__global__ void __launch_bounds__(BLOCK) k(float* y, const float* x, int n) {
  __shared__ float s[BLOCK];
  int i = blockIdx.x * BLOCK + threadIdx.x;
  s[threadIdx.x] = x[i % n] * 2.f;
  __syncthreads();
  for (int w = BLOCK / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[blockIdx.x] = s[0];
}
"""


def _database(folder: Path, command: str, name: str) -> Path:
    path = folder / name
    path.write_text(json.dumps([{"directory": str(folder), "command": command, "file": "k.cu"}]))
    return path


def _tune(folder: Path, out: str, *args: str) -> dict[str, Any]:
    done = run_cli(["tune", "k.cu", "--workers", "local", "--db", f"sqlite:///{folder / 't.db'}", "--budget", "2",
                    "--out", out, *args], cwd=folder)
    assert done.returncode == 0, done.describe()
    return tomllib.loads((folder / out).read_text())


def _gate(folder: Path, acf: str, *args: str) -> tuple[int, dict[str, dict[str, Any]]]:
    done = run_cli(["gate", acf, "--static", "--json", *args], cwd=folder)
    assert done.returncode in (0, 1), done.describe()
    return done.returncode, {f["rule"]: f for f in json.loads(done.stdout)["acfs"][0]["findings"]}


def _edited(folder: Path, acf: str, name: str, edit: Any) -> str:
    document = tomllib.loads((folder / acf).read_text())
    edit(document)
    (folder / name).write_text(tomli_w.dumps(document))
    return name


def test_fast_math_the_shipped_build_dropped_fails_the_gate(tmp_path: Path) -> None:
    """user49: an ACF tuned from a build with --use_fast_math keeps it; the team dropped fast math
    from the build, and `gate --compile-commands` passed the ACF, which turns it back on, with a
    stale-settings warning (exit 0)."""
    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    _database(tmp_path, "nvcc --use_fast_math -arch=sm_90 -c k.cu -o k.o", "compile_commands.json")
    _database(tmp_path, "nvcc -arch=sm_90 -c k.cu -o k.o", "no_fast_math.json")
    # --only: fast math is held at its shipped value in every build, so the ACF keeps it
    acf = _tune(tmp_path, "k.acf.toml", "--compile-commands", "compile_commands.json", "--only", "ptxas.opt_level")
    assert acf["controls"]["nvcc.use_fast_math"] is True, acf["controls"]
    assert acf["provenance"]["allowed_risks"] == [], acf["provenance"]  # recorded: numerics were not allowed

    assert _gate(tmp_path, "k.acf.toml", "--compile-commands", "compile_commands.json") == (0, {})
    code, found = _gate(tmp_path, "k.acf.toml", "--compile-commands", "no_fast_math.json")
    assert code == 1 and found["risk-not-allowed"]["severity"] == "error", found
    risk = found["risk-not-allowed"]
    assert (risk["recorded"], risk["measured"]) == ("nvcc.use_fast_math true", "ships false (the default)"), risk
    assert ("the ACF turns on --use_fast_math (nvcc.use_fast_math = true), a numerics-changing setting that the "
            "build that ships (no_fast_math.json) does not set and that its tuning was not allowed to search"
            ) in risk["message"], risk
    assert "--compile-commands no_fast_math.json" in risk["command"], risk  # a re-tune from the build that ships
    assert found["stale-settings"]["severity"] == "warn", found  # the changed command is still said as well
    assert _gate(tmp_path, "k.acf.toml", "--compile-commands", "no_fast_math.json",
                 "--rule", "risk-not-allowed=warn")[0] == 0  # a rule like the others

    # an older ACF (no allowed_risks) reads as it recorded its options: nothing allowed, or --allow-numerics
    older = _edited(tmp_path, "k.acf.toml", "older.acf.toml", lambda d: d["provenance"].pop("allowed_risks"))
    assert "risk-not-allowed" in _gate(tmp_path, older, "--compile-commands", "no_fast_math.json")[1]
    allowed = _edited(tmp_path, older, "older-allowed.acf.toml",
                      lambda d: d["provenance"].update(searched={"allow_numerics": True}))
    assert "risk-not-allowed" not in _gate(tmp_path, allowed, "--compile-commands", "no_fast_math.json")[1]

    # a study allowed numerics: its fast math was asked for
    acf = _tune(tmp_path, "allowed.acf.toml", "--compile-commands", "compile_commands.json", "--only",
                "ptxas.opt_level", "--allow-numerics")
    assert acf["provenance"]["allowed_risks"] == ["numerics"], acf["provenance"]
    code, found = _gate(tmp_path, "allowed.acf.toml", "--compile-commands", "no_fast_math.json")
    assert code == 0 and "risk-not-allowed" not in found, found
    # the project's tune.toml allows numerics now: the same
    (tmp_path / "tune.toml").write_text("allow_numerics = true\n")
    code, found = _gate(tmp_path, "k.acf.toml", "--compile-commands", "no_fast_math.json")
    assert "risk-not-allowed" not in found, found


def test_a_hand_edited_macro_that_does_not_rebuild_the_cited_code_fails_the_gate(tmp_path: Path) -> None:
    """user49: block_size_y 8 -> 16 in an ACF (one of tune.toml's values) passed with a code-changed
    warning, though [evidence.best] cites a trial built with 8; in Kernel Tuner kernels that value is
    the launch the host must make. The source, tune.toml and toolchain are unchanged: the ACF's
    settings are not the ones its evidence was measured with."""
    (tmp_path / "k.cu").write_text(MACRO_KERNEL)
    (tmp_path / "tune.toml").write_text('arch = "sm_90"\nentries = ["k"]\nblock_size = "BLOCK"\n'
                                        "[tune.defines]\nBLOCK = [128, 256, 64]\n")
    acf = _tune(tmp_path, "k.acf.toml", "--only", "define.BLOCK", "--strategy", "exhaustive", "--budget", "3")
    chosen = acf["controls"]["define.BLOCK"]
    other = next(v for v in (128, 256) if v != chosen)
    assert _gate(tmp_path, "k.acf.toml") == (0, {})

    def block(value: int) -> Any:
        def edit(d: dict[str, Any]) -> None:
            d["controls"]["define.BLOCK"] = value
            for key in ("frontend", "argv"):
                d["args"][key] = [a if not a.startswith("-DBLOCK=") else f"-DBLOCK={value}" for a in d["args"][key]]
        return edit

    code, found = _gate(tmp_path, _edited(tmp_path, "k.acf.toml", "edited.acf.toml", block(other)))
    assert code == 1 and found["uncited-code"]["severity"] == "error" and "code-changed" not in found, found
    assert ("the ACF's settings do not rebuild the code its evidence cites ([evidence.best] code_hash "
            f"{acf['evidence']['best']['code_hash'][:12]})") in found["uncited-code"]["message"], found
    assert "edited after it was written, or a header outside the kernel's bundle changed" in found[
        "uncited-code"]["message"], found

    # a value tune.toml does not offer: also named as stale-settings, its values said once
    done = run_cli(["gate", _edited(tmp_path, "k.acf.toml", "unlisted.acf.toml", block(32)), "--static"], cwd=tmp_path)
    line = next(x for x in done.stdout.splitlines() if x.startswith("unlisted.acf.toml: warn stale-settings:"))
    assert "define.BLOCK is set to a value tune.toml's [tune.defines] does not offer" in line, line
    assert "(recorded define.BLOCK = 32, measured tune.toml's define.BLOCK: 128, 256, 64)" in line, line
    assert line.count("128, 256, 64") == 1 and line.count("define.BLOCK = 32") == 1, line

    # the source changed: the code changes with it, a warning (stale-source says why)
    (tmp_path / "k.cu").write_text(MACRO_KERNEL.replace("y[blockIdx.x] = s[0];", "y[blockIdx.x] = s[0] + 1.f;"))
    code, found = _gate(tmp_path, "k.acf.toml")
    assert found["code-changed"]["severity"] == "warn" and "uncited-code" not in found, found
    assert "stale-source" in found, found
