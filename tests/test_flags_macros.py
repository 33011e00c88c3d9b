"""`compileiq flags` holds an ACF's tuned macros to the kernel's tune.toml, as the gate does (user49
F2): a value tune.toml does not offer, or a configuration its restrictions refuse, is no tuned
configuration, and printing it would hand the build settings no tuning chose."""

from __future__ import annotations

import tomllib
from pathlib import Path

import tomli_w

from tests.helpers import run_cli

KERNEL = """\
#ifndef TA
#define TA 1
#endif
#ifndef TB
#define TB 1
#endif
__global__ void k(float* a, int n) {
  float s = 0.f;
  for (int i = 0; i < n; i += TA) s += a[i] * a[i + TB];
  a[threadIdx.x] = s / 3.0f;
}
"""
TUNE_TOML = '[tune.defines]\nTA = [1, 2, 4]\nTB = [1, 2]\n[tune]\nrestrictions = ["TA * TB <= 8"]\n'


def _tuned(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    (tmp_path / "k.cu").write_text(KERNEL)
    (tmp_path / "tune.toml").write_text(TUNE_TOML)
    out = tmp_path / "k.acf.toml"
    done = run_cli(["tune", "k.cu", "--workers", "local", "--budget", "3", "--only", "define.TA,define.TB",
                    "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", str(out)], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    controls = tomllib.loads(out.read_text())["controls"]
    return out, {name: controls[f"define.{name}"] for name in ("TA", "TB")}


def test_flags_refuses_a_macro_value_tune_toml_does_not_offer(tmp_path: Path) -> None:
    out, _ = _tuned(tmp_path)
    assert run_cli(["flags", str(out)], cwd=tmp_path).returncode == 0
    edited = _edited(out, {"TA": 3})  # hand-edited, argv with it: the ACF reads back valid
    for args in (["flags", str(edited)], ["flags", str(edited), "--all", "--format", "cmake"]):
        listed = run_cli(args, cwd=tmp_path)
        assert listed.returncode == 2 and listed.stdout == "", listed.describe()
        [line] = listed.stderr.strip().splitlines()
        assert "define.TA = 3 (tune.toml's define.TA: 1, 2, 4)" in line and "Traceback" not in line, line


def _edited(out: Path, values: dict[str, int]) -> Path:
    """The ACF with its macros set to `values`, controls and argv alike: it reads back valid."""
    document = tomllib.loads(out.read_text())
    for name, value in values.items():
        document["controls"][f"define.{name}"] = value
        document["args"]["argv"] = [f"-D{name}={value}" if a.startswith(f"-D{name}=") else a
                                    for a in document["args"]["argv"]]
    edited = out.with_name("edited.acf.toml")
    edited.write_text(tomli_w.dumps(document))
    return edited


def test_flags_refuses_macros_that_break_tune_tomls_restrictions_now(tmp_path: Path) -> None:
    out, _ = _tuned(tmp_path)
    edited = _edited(out, {"TA": 2, "TB": 2})  # values tune.toml offers, under its restrictions then
    assert run_cli(["flags", str(edited)], cwd=tmp_path).returncode == 0
    # tune.toml tightened since: the ACF's own copy of the restrictions still passes it
    (tmp_path / "tune.toml").write_text(TUNE_TOML.replace('"TA * TB <= 8"', '"TA * TB <= 8", "TA * TB != 4"'))
    listed = run_cli(["flags", str(edited)], cwd=tmp_path)
    assert listed.returncode == 2 and listed.stdout == "", listed.describe()
    [line] = listed.stderr.strip().splitlines()
    assert "a restriction of the kernel's tune.toml" in line and "TA * TB != 4" in line, line
