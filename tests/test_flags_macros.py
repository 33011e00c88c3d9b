"""`compileiq flags` holds an ACF's tuned macros to the kernel's tune.toml, as the gate does (user49
F2): a value tune.toml does not offer, or a configuration its restrictions refuse, is no tuned
configuration, and printing it would hand the build settings no tuning chose."""

from __future__ import annotations

import os
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
    """The ACF with its macros set to `values`, controls and [args] alike: it reads back valid."""
    document = tomllib.loads(out.read_text())
    for name, value in values.items():
        document["controls"][f"define.{name}"] = value
        for key in ("argv", "frontend"):
            document["args"][key] = [f"-D{name}={value}" if a.startswith(f"-D{name}=") else a
                                     for a in document["args"][key]]
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


def test_flags_never_holds_an_acf_to_a_kernel_found_from_the_current_folder(tmp_path: Path) -> None:
    """stop 52's reviewer (left open): the gate finds an ACF's kernel only beside the ACF, but
    `flags` (and the cmake snippet's source path, the include folders of `--all`) fell back to the
    recorded path from the current folder: an ACF copied alone into a build folder was held to
    whatever `k.cu` and tune.toml sat there, another project's, and refused (or, in cmake, set the
    tuned options on that other file)."""
    (tmp_path / "proj").mkdir()
    out, chosen = _tuned(tmp_path / "proj")
    build = tmp_path / "build"
    build.mkdir()
    alone = build / "k.acf.toml"
    alone.write_text(out.read_text())  # the kernel is not beside it: nothing to hold it to
    other = tmp_path / "other"  # another project, its own k.cu whose tune.toml offers none of these values
    other.mkdir()
    (other / "k.cu").write_text(KERNEL)
    (other / "tune.toml").write_text("[tune.defines]\nTA = [16]\nTB = [16]\n")
    listed = run_cli(["flags", str(alone)], cwd=other)
    assert listed.returncode == 0, listed.describe()
    assert f"-DTA={chosen['TA']}" in listed.stdout.split() and f"-DTB={chosen['TB']}" in listed.stdout.split()
    snippet = run_cli(["flags", str(alone), "--format", "cmake"], cwd=other)
    assert snippet.returncode == 0, snippet.describe()
    here = "${CMAKE_CURRENT_SOURCE_DIR}/"  # the snippet names files from the folder flags ran in
    assert f'"{here}k.cu"' not in snippet.stdout, snippet.stdout  # the tuned options on another file
    assert f'"{here}{os.path.relpath(build / "k.cu", other)}"' in snippet.stdout, snippet.stdout  # where the ACF says
    linked = other / "linked.acf.toml"  # a symlink to the ACF: its kernel is beside the file it leads to
    linked.symlink_to(out)
    snippet = run_cli(["flags", str(linked), "--format", "cmake"], cwd=other)
    assert snippet.returncode == 0 and f'"{here}{os.path.relpath(tmp_path / "proj" / "k.cu", other)}"' in snippet.stdout, (
        snippet.describe())
    edited = _edited(out, {"TA": 3})  # held to proj's tune.toml through the link
    linked.unlink()
    linked.symlink_to(edited)
    assert run_cli(["flags", str(linked)], cwd=other).returncode == 2


def test_the_python_apis_flags_refuses_what_the_command_refuses(tmp_path: Path) -> None:
    """stop 61's helper (left open): `compileiq.flags()` and `compileiq.flag_notes()` printed an ACF
    whose macros tune.toml no longer offers, which `compileiq flags` refuses: the API handed a
    build settings no tuning chose. Both now refuse it with the command's own line."""
    import pytest

    import compileiq
    from compileiq.core.errors import UsageError

    out, _ = _tuned(tmp_path)
    assert compileiq.flags(out).strip() == run_cli(["flags", str(out)], cwd=tmp_path).stdout.strip()
    edited = _edited(out, {"TA": 3})
    [line] = run_cli(["flags", str(edited)], cwd=tmp_path).stderr.strip().splitlines()
    for call in (compileiq.flags, compileiq.flag_notes):
        with pytest.raises(UsageError) as refused:
            call(edited)
        assert str(refused.value) in line and "define.TA = 3" in str(refused.value), (call, refused.value)
