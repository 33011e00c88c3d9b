"""The build an ACF's own flags make is no stale baseline (user51, fault 1): after pasting `flags`
into the build (`--format cmake` adds the tuned macro's -D, at tune.toml's first value where the
tuning kept the baseline), `gate --compile-commands` of that build warned `stale-settings` forever
("define.RED_THREADS None (the default) -> 256", a Python None in the terminal, --markdown and
--junit), its re-tune advice made a new study that chose the same, and `space` said the build's
256 was "not the default" 256. Real nvcc/ptxas, real SQLite."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from tests.helpers import run_cli

# A fixed 48 KB tile per block: 4 blocks fit an SM's shared memory, so 512 threads a block reach
# full occupancy and 128 a quarter of it (the static objective prefers 512).
KERNEL = """\
#ifndef BLOCK
#define BLOCK 128
#endif
__global__ void __launch_bounds__(BLOCK) k(float* y, const float* x, int n) {
  __shared__ float s[12288];
  int i = blockIdx.x * BLOCK + threadIdx.x;
  for (int j = threadIdx.x; j < 12288; j += BLOCK) s[j] = x[(i + j) % n];
  __syncthreads();
  float a = 0.f;
  for (int j = 0; j < 12288; j += 97) a += s[(j + threadIdx.x) % 12288];
  if (i < n) y[i] = a;
}
"""


def _project(folder: Path, values: str, default: int = 128) -> None:
    """The kernel's own BLOCK is `default`: a command without -DBLOCK ships it, so tune.toml lists it first."""
    (folder / "k.cu").write_text(KERNEL.replace("#define BLOCK 128", f"#define BLOCK {default}"))
    (folder / "tune.toml").write_text(f'entries = ["k"]\nblock_size = "BLOCK"\n\n[tune.defines]\nBLOCK = {values}\n')


def _database(folder: Path, name: str, flags: str = "") -> str:
    command = f"nvcc -arch=sm_90 {flags} -c k.cu -o k.o".replace("  ", " ")
    (folder / name).write_text(json.dumps([{"directory": str(folder), "command": command, "file": "k.cu"}]))
    return name


def _tune(folder: Path, database: str, out: str) -> dict[str, Any]:
    done = run_cli(["tune", "k.cu", "--workers", "local", "--db", f"sqlite:///{folder / 't.db'}", "--budget", "2",
                    "--only", "define.BLOCK", "--compile-commands", database, "--out", out, "--force"], cwd=folder)
    assert done.returncode == 0, done.describe()
    return tomllib.loads((folder / out).read_text())


def _applied(folder: Path, acf: str, name: str) -> str:
    """The build with the ACF's flags pasted in, as `flags` prints them."""
    flags = run_cli(["flags", acf], cwd=folder)
    assert flags.returncode == 0, flags.describe()
    return _database(folder, name, flags.stdout.strip())


def _gate(folder: Path, acf: str, database: str) -> tuple[dict[str, dict[str, Any]], str]:
    done = run_cli(["gate", acf, "--static", "--json", "--compile-commands", database,
                    "--markdown", "g.md", "--junit", "g.xml"], cwd=folder)
    assert done.returncode in (0, 1), done.describe()
    found = {f["rule"]: f for f in json.loads(done.stdout)["acfs"][0]["findings"]}
    return found, done.output + (folder / "g.md").read_text() + (folder / "g.xml").read_text()


def test_the_acfs_macro_at_tune_tomls_first_value_pasted_in_is_the_same_baseline(tmp_path: Path) -> None:
    """The tuning keeps BLOCK=512, tune.toml's first value; `flags` gives -DBLOCK=512: the build it
    makes is the ACF's baseline (no warning), the same study, and `space` calls it the default."""
    _project(tmp_path, "[512, 128]", default=512)
    acf = _tune(tmp_path, _database(tmp_path, "compile_commands.json"), "k.acf.toml")
    assert acf["controls"]["define.BLOCK"] == 512, acf["controls"]
    applied = _applied(tmp_path, "k.acf.toml", "applied.json")
    assert "-DBLOCK=512" in (tmp_path / applied).read_text()

    found, shown = _gate(tmp_path, "k.acf.toml", applied)
    assert "stale-settings" not in found, found
    assert "None" not in shown, shown

    again = _tune(tmp_path, applied, "again.acf.toml")  # the re-tune a stale warning would ask for
    assert again["provenance"]["study"] == acf["provenance"]["study"], (again["provenance"], acf["provenance"])
    assert again["kernel"]["settings_sha256"] == acf["kernel"]["settings_sha256"]

    space = run_cli(["space", "k.cu", "--compile-commands", applied], cwd=tmp_path)
    assert space.returncode == 0, space.describe()
    assert "512 (your build; the default)" in space.stdout, space.stdout
    assert "define.BLOCK starts from your build's" not in space.output, space.output


def test_the_acfs_macro_at_another_value_pasted_in_is_the_acf_applied(tmp_path: Path) -> None:
    """The tuning chooses BLOCK=512 over tune.toml's first value 128: the build with -DBLOCK=512 is
    the ACF applied (no warning); one that ships 128 by hand beside it is no change either, and a
    build shipping another value is said in words, never Python's None."""
    _project(tmp_path, "[128, 512]")
    acf = _tune(tmp_path, _database(tmp_path, "compile_commands.json"), "k.acf.toml")
    assert acf["controls"]["define.BLOCK"] == 512, acf["controls"]

    found, shown = _gate(tmp_path, "k.acf.toml", _applied(tmp_path, "k.acf.toml", "applied.json"))
    assert "stale-settings" not in found, found
    found, shown = _gate(tmp_path, "k.acf.toml", _database(tmp_path, "first.json", "-DBLOCK=128"))
    assert "stale-settings" not in found, found  # tune.toml's first value spelled out: the same baseline

    tuned_at_512 = _tune(tmp_path, _database(tmp_path, "at512.json", "-DBLOCK=512"), "at512.acf.toml")
    found, shown = _gate(tmp_path, "at512.acf.toml", "compile_commands.json")
    stale = found["stale-settings"]
    assert "define.BLOCK 512 -> 128 (tune.toml's first value)" in stale["message"], stale
    assert "None" not in shown, shown
    assert tuned_at_512["provenance"]["study"] != acf["provenance"]["study"]  # another baseline, another study


def test_a_macro_held_at_its_shipped_first_value_is_built_with_its_define(tmp_path: Path) -> None:
    """--exclude holds BLOCK at the build's -DBLOCK=512 (tune.toml's first value): every build gets
    the -D, never the kernel's own #define (128: a quarter of the occupancy, cited as 512's). A
    command without the -D ships that 128: it was tuned as if it shipped 512; now it is refused."""
    _project(tmp_path, "[512, 128]")
    runs = {}
    for database in (_database(tmp_path, "plain.json"), _database(tmp_path, "applied.json", "-DBLOCK=512")):
        done = run_cli(["tune", "k.cu", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}", "--budget",
                        "1", "--exclude", "define.BLOCK", "--compile-commands", database, "--out", f"{database}.acf.toml"],
                       cwd=tmp_path)
        runs[database] = done
    plain, applied = runs["plain.json"], runs["applied.json"]
    assert plain.returncode == 2 and "your build has the kernel's own BLOCK=128" in plain.stderr, plain.describe()
    assert applied.returncode == 0, applied.describe()
    assert tomllib.loads((tmp_path / "applied.json.acf.toml").read_text())["evidence"]["baseline"]["occupancy"] == 1.0
