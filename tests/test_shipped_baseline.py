"""The baseline is the build you ship: with --compile-commands, the tuned flags of the file's real
command (fast math, ptxas -O, register caps) are where the search starts, the ACF records which
were searched and which were fixed, and says which shipped flags a choice turns off."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from compileiq.core.space_files import load_space
from compileiq.results import acf
from compileiq.source.compile_db import CompileDbError, read_command
from tests.helpers import CAPPED_KERNEL, LOOP_KERNEL, run_cli

SPACE = load_space("13.0")
KERNEL = LOOP_KERNEL


def _project(tmp_path: Path, command: str) -> Path:
    (tmp_path / "k.cu").write_text(KERNEL)
    (tmp_path / "compile_commands.json").write_text(
        json.dumps([{"directory": str(tmp_path), "command": command, "file": "k.cu"}]))
    return tmp_path / "compile_commands.json"


def test_the_tuned_flags_of_the_command_are_the_shipped_settings(tmp_path: Path) -> None:
    db = _project(tmp_path, "nvcc --use_fast_math -O3 -Xptxas -O3,-v -maxrregcount=64 -Xptxas -dlcm=cg "
                            "-Xcompiler -fPIC -lineinfo -c k.cu -o k.o")
    from compileiq.source.spec import ShippedSetting

    shipped = read_command(db, tmp_path / "k.cu", SPACE).shipped
    assert shipped is not None and shipped.origin == "compile_commands.json"
    assert shipped.settings == (ShippedSetting("nvcc.use_fast_math", True, "--use_fast_math"),
                                ShippedSetting("ptxas.opt_level", 3, "-Xptxas -O3,-v"),
                                ShippedSetting("ptxas.def_load_cache", "cg", "-Xptxas -dlcm=cg"))
    fixed = {f.flag: f.applied for f in shipped.fixed}
    assert fixed == {"-lineinfo": True, "-maxrregcount=64": True, "-O3": False, "-Xptxas -v": False,
                     "-Xcompiler -fPIC": False}  # nvcc's cap is a base flag: it caps cicc too


@pytest.mark.parametrize("flags, message", [
    ("-Xptxas '-O3;touch /tmp/pwned'", (r"'-Xptxas -O3;touch /tmp/pwned' sets ptxas.opt_level to a value the "
                                        r"search space does not have \(it has 0, 1, 2, 3\)")),
    ("-Xptxas=-v,$(id)", r"'-Xptxas=-v,\$\(id\)' is a ptxas option that is neither searched"),
    ("-Xptxas --sanitize=memcheck", r"'-Xptxas --sanitize=memcheck' is a ptxas option that is neither searched"),
    ("-Xptxas -maxrregcount=57", (r"'-Xptxas -maxrregcount=57' sets ptxas.maxrregcount to a value the search "
                                  r"space does not have \(it has default, 24, 32")),
    ("--jump-table-density=60", r"sets nvcc.jump_table_density to a value the search space does not have"),
    ("--ftz=true --ftz=false", r"'--ftz=true' and '--ftz=false' both set nvcc.ftz: keep one"),  # not checked which wins
])
def test_a_shipped_flag_compileiq_cannot_reproduce_is_one_clear_line(tmp_path: Path, flags: str, message: str) -> None:
    db = _project(tmp_path, f"nvcc {flags} -c k.cu")
    with pytest.raises(CompileDbError, match=message) as raised:
        read_command(db, tmp_path / "k.cu", SPACE)
    assert "\n" not in str(raised.value) and "compile_commands.json: the command for k.cu: " in str(raised.value)


def test_hostile_ptxas_text_in_the_command_stops_tune_before_any_compile(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    _project(tmp_path, f"nvcc -Xptxas '-O3,--def-load-cache=cg;touch {marker}' -c k.cu")
    done = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--workers", "local",
                    "--budget", "2", "--db", f"sqlite:///{tmp_path / 't.db'}"], cwd=tmp_path)
    assert done.returncode != 0 and not marker.exists(), done.describe()
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.describe()
    assert "--def-load-cache=cg;touch" in done.stderr and "search space does not have" in done.stderr


def _tune(tmp_path: Path, *args: str) -> dict[str, Any]:
    done = run_cli(["tune", "k.cu", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}", "--json", *args],
                   cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    return {**json.loads(done.stdout), "stderr": done.stderr}


def test_the_shipped_build_is_the_baseline_and_its_own_study(tmp_path: Path) -> None:
    _project(tmp_path, "nvcc --use_fast_math -O3 -Xptxas -O3 -Xcompiler=-fPIC -arch=sm_90 -c k.cu -o k.o")
    shipped = _tune(tmp_path, "--compile-commands", "compile_commands.json", "--budget", "3",
                    "--out", str(tmp_path / "shipped.acf.toml"))
    baseline = shipped["baseline"]
    assert isinstance(baseline, dict)
    assert baseline["config"]["nvcc.use_fast_math"] is True and baseline["config"]["ptxas.opt_level"] == 3
    assert baseline["number"] == 0 and shipped["baseline_label"] == "baseline (your build: compile_commands.json)"
    stderr = str(shipped["stderr"])
    assert ("baseline: your build (compile_commands.json); searched from its values: nvcc.use_fast_math=true "
            "(--use_fast_math), ptxas.opt_level=3 (-Xptxas -O3)") in stderr
    assert "not applied: -O3 (host optimisation level" in stderr and "-Xcompiler=-fPIC (host compiler" in stderr
    document = tomllib.loads((tmp_path / "shipped.acf.toml").read_text())
    table = document["baseline"]
    assert table["source"] == "compile_commands" and table["database"] == "compile_commands.json"
    assert table["searched"] == [{"setting": "nvcc.use_fast_math", "value": True, "flag": "--use_fast_math"},
                                 {"setting": "ptxas.opt_level", "value": 3, "flag": "-Xptxas -O3"}]
    assert {(f["flag"], f["applied"]) for f in table["fixed"]} == {("-O3", False), ("-Xcompiler=-fPIC", False),
                                                                   ("-arch=sm_90", True)}  # its arch: user49 F8
    assert set(table["shipped_flags"]) == {"--use_fast_math", "-Xptxas -O3", "-O3", "-Xcompiler=-fPIC", "-arch=sm_90"}
    # [evidence.vs_defaults] keeps its keys; what their "defaults" values are is said (user 48)
    assert document["evidence"]["vs_defaults"]["against"] == "your build as shipped (compile_commands.json)"
    page = run_cli(["report", shipped["study"]["name"], "--db", f"sqlite:///{tmp_path / 't.db'}",
                    "--out", str(tmp_path / "report.html")], cwd=tmp_path)
    html = (tmp_path / "report.html").read_text()
    assert page.returncode == 0 and shipped["baseline_label"] in html, page.describe()  # as the run names it
    assert "reset to the baseline" in html and "reset to the default." not in html  # not the compiler's
    read = acf.read(tmp_path / "shipped.acf.toml")
    assert read.shipped is not None and read.shipped.values() == {"nvcc.use_fast_math": True, "ptxas.opt_level": 3}
    defaults = _tune(tmp_path, "--budget", "3", "--out", str(tmp_path / "defaults.acf.toml"))
    assert defaults["study"]["name"] != shipped["study"]["name"]
    assert defaults["baseline"]["config"].get("nvcc.use_fast_math") in (None, False)
    assert defaults["baseline_label"] == "baseline (defaults)"
    assert "baseline" not in tomllib.loads((tmp_path / "defaults.acf.toml").read_text())


def test_flags_all_names_the_shipped_flags_it_leaves_out(tmp_path: Path) -> None:
    """User 48: `nvcc $(compileiq flags ACF --all)` (the README's recipe) silently dropped the
    shipped build's other arch, host -O3 and -Xcompiler=-fPIC (a fat binary without sm_80, a shared
    library that no longer links). They are still not printed (the ACF is untrusted and never vetted
    them as base flags), but a note on stderr names each one; stdout stays the flags alone."""
    _project(tmp_path, "nvcc -O3 -Xcompiler=-fPIC -gencode arch=compute_90,code=sm_90 "
                       "-gencode arch=compute_80,code=sm_80 -c k.cu -o k.o")
    out = tmp_path / "k.acf.toml"
    _tune(tmp_path, "--compile-commands", "compile_commands.json", "--budget", "2", "--out", str(out))
    every = run_cli(["flags", str(out), "--all"], cwd=tmp_path)
    assert every.returncode == 0 and "-O3" not in every.stdout and "-fPIC" not in every.stdout, every.describe()
    assert ("note: --all leaves out 3 flag(s) of your build as shipped that the ACF records as not applied "
            "(-O3, -Xcompiler=-fPIC, -gencode arch=compute_80,code=sm_80): keep them from the build's own command"
            ) in every.stderr, every.describe()
    for quiet in (["flags", str(out)], ["flags", str(out), "--all", "--format", "cmake"]):  # adds to the build's own
        assert "leaves out" not in run_cli(quiet, cwd=tmp_path).stderr


def _note_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(("note: ", "compileiq: "))]


def test_every_flags_format_carries_the_notes_args_prints(tmp_path: Path) -> None:
    """User 4: `flags --all` (args) named the shipped -Xcompiler -Wall and host -O3 it leaves out, and
    without --all the base -std=c++14, but `--format json` said `"note": ""` and nothing on stderr: a
    build from the JSON lost host -O3 (host code at -O0), silently. Every format now gives the notes
    of one source: stderr for all, the JSON's `notes` (the same lines) and `left_out` (the flags)."""
    _project(tmp_path, "nvcc -std=c++14 -Xcompiler -Wall -O3 -arch=sm_80 -c k.cu -o k.o")
    out = tmp_path / "k.acf.toml"
    _tune(tmp_path, "--compile-commands", "compile_commands.json", "--budget", "2", "--out", str(out))
    for every, kind, left in ((["--all"], "not_applied", ["-Xcompiler -Wall", "-O3"]), ([], "base", ["-std=c++14"])):
        args = run_cli(["flags", str(out), *every], cwd=tmp_path)
        document = run_cli(["flags", str(out), *every, "--format", "json"], cwd=tmp_path)
        assert args.returncode == 0 and document.returncode == 0, document.describe()
        lines = _note_lines(args.stderr)
        assert lines and all(flag in " ".join(lines) for flag in left), args.describe()
        found = json.loads(document.stdout)
        assert found["notes"] == lines == _note_lines(document.stderr), document.describe()
        assert found["left_out"] == [{"flag": flag, "kind": kind} for flag in left], found
        assert _note_lines(run_cli(["flags", str(out), *every, "--format", "optf"], cwd=tmp_path).stderr) == lines
    # a Bazel cuda_library with --all is a new target: it leaves them out too; a CMake source property
    # adds to the target's own command, which keeps them
    assert "(-Xcompiler -Wall, -O3)" in run_cli(["flags", str(out), "--all", "--format", "bazel"], cwd=tmp_path).stderr
    assert "leaves out" not in run_cli(["flags", str(out), "--all", "--format", "cmake"], cwd=tmp_path).stderr


def test_the_study_list_tells_apart_studies_of_one_file_shipped_with_other_flags(tmp_path: Path) -> None:
    """User 48: three studies of one unchanged kernels.cu, shipped with other -Xptxas flags, were
    listed by `show` as identical rows apart from the hash in their names."""
    for command in ("nvcc -Xptxas -O1 -arch=sm_90 -c k.cu", "nvcc -Xptxas -O2 -arch=sm_90 -c k.cu"):
        _project(tmp_path, command)
        _tune(tmp_path, "--compile-commands", "compile_commands.json", "--only", "ptxas.opt_level", "--budget", "2",
              "--out", str(tmp_path / "k.acf.toml"), "--force")
    _tune(tmp_path, "--only", "ptxas.opt_level", "--budget", "2", "--out", str(tmp_path / "k.acf.toml"), "--force")
    listed = run_cli(["show", "--db", f"sqlite:///{tmp_path / 't.db'}", "--json"], cwd=tmp_path)
    assert listed.returncode == 0, listed.describe()
    assert [s["baseline"] for s in json.loads(listed.stdout)] == [
        "your build (compile_commands.json): ptxas.opt_level=1", "your build (compile_commands.json): ptxas.opt_level=2",
        "defaults"]
    table = run_cli(["show", "--db", f"sqlite:///{tmp_path / 't.db'}"], cwd=tmp_path).stdout
    assert "┃ baseline " in table and "│ your build (compile_commands.json): ptxas.opt_level=2 │" in table, table


def test_a_choice_that_changes_a_shipped_setting_names_the_flags_to_remove(tmp_path: Path) -> None:
    """Shipped at ptxas -O0: every higher level is better and lowers nothing (the no-harm rules
    hold to the shipped build); the ACF and `flags` say to take -Xptxas -O0 out of the command."""
    _project(tmp_path, "nvcc -Xptxas -O0 -arch=sm_90 -c k.cu")
    out = tmp_path / "k.acf.toml"
    found = _tune(tmp_path, "--compile-commands", "compile_commands.json", "--only", "ptxas.opt_level",
                  "--objective", "instructions", "--budget", "4", "--out", str(out))
    assert found["baseline"]["config"] == {"ptxas.opt_level": 0}
    assert found["best"]["config"]["ptxas.opt_level"] in (1, 2, 3), found
    document = tomllib.loads(out.read_text())
    assert document["baseline"]["remove"] == ["-Xptxas -O0"]
    flags = run_cli(["flags", str(out)], cwd=tmp_path)
    assert flags.returncode == 0 and "-O0" not in flags.stdout, flags.describe()
    assert "remove from the kernel's compile command (compile_commands.json): -Xptxas -O0" in flags.stderr
    assert json.loads(run_cli(["flags", str(out), "--format", "json"], cwd=tmp_path).stdout)["remove"] == ["-Xptxas -O0"]
    assert "# compileiq: remove from the kernel's compile command" in run_cli(
        ["flags", str(out), "--format", "cmake"], cwd=tmp_path).stdout
    # a hand-edited ACF that drops the instruction is refused, one line
    assert document["evidence"]["vs_defaults"]["lowered_optimisation"] == []
    out.write_text(out.read_text().replace('remove = [\n    "-Xptxas -O0",\n]', "remove = []"))
    with pytest.raises(acf.AcfError, match=r"baseline.remove does not match its controls .* \['-Xptxas -O0'\]"):
        acf.read(out)


@pytest.mark.parametrize("edit, message", [
    ('value = true, flag = "--use_fast_math"', r"settings: 'nvcc.use_fast_math' = '57' is not in the search space"),
    # -O3 is a base flag where it changes the device code (`host_check`); a host compiler option never
    ('flag = "-Xcompiler=-fPIC"\napplied = false',
     r"baseline.fixed\[1\]: '-Xcompiler=-fPIC' is applied but not an allowed base flag"),
    ('source = "compile_commands"', r"baseline must be a table with source = \"compile_commands\""),
])
def test_an_acf_baseline_table_is_untrusted_input(tmp_path: Path, edit: str, message: str) -> None:
    path = tmp_path / "k.acf.toml"
    text = _written_acf(tmp_path)
    replacement = {'value = true, flag = "--use_fast_math"': 'value = "57", flag = "--use_fast_math"',
                   'flag = "-Xcompiler=-fPIC"\napplied = false': 'flag = "-Xcompiler=-fPIC"\napplied = true',
                   'source = "compile_commands"': 'source = "$(id)"'}[edit]
    assert edit in text
    path.write_text(text.replace(edit, replacement))
    with pytest.raises(acf.AcfError, match=message) as raised:
        acf.read(path)
    assert "\n" not in str(raised.value)


def test_an_acf_without_a_baseline_table_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "k.acf.toml"
    text = _written_acf(tmp_path)
    path.write_text(text[: text.index("[baseline]")])
    read = acf.read(path)
    assert read.shipped is None and read.remove == ()


_WRITTEN: dict[str, str] = {}


def _written_acf(tmp_path: Path) -> str:
    """One real ACF of a shipped fast-math build (tuned once per test session)."""
    if "text" not in _WRITTEN:
        _project(tmp_path, "nvcc --use_fast_math -O3 -Xcompiler=-fPIC -arch=sm_90 -c k.cu")
        _tune(tmp_path, "--compile-commands", "compile_commands.json", "--budget", "2", "--allow-numerics",
              "--out", str(tmp_path / "written.acf.toml"))
        _WRITTEN["text"] = (tmp_path / "written.acf.toml").read_text()
    return _WRITTEN["text"]


def test_a_shipped_setting_that_makes_no_difference_is_kept_not_simplified_away(tmp_path: Path) -> None:
    """Simplification resets a setting to its baseline value: the shipped -dlcm=cg ties with the
    compiler's default cache mode on instructions, so the choice keeps it (resetting it to the
    compiler default would tell the project to change a flag for nothing)."""
    _project(tmp_path, "nvcc -Xptxas -O0,-dlcm=cg -arch=sm_90 -c k.cu")
    out = tmp_path / "k.acf.toml"
    found = _tune(tmp_path, "--compile-commands", "compile_commands.json", "--only",
                  "ptxas.opt_level,ptxas.def_load_cache", "--objective", "instructions", "--budget", "24",
                  "--out", str(out))
    assert found["baseline"]["config"] == {"ptxas.opt_level": 0, "ptxas.def_load_cache": "cg"}
    assert found["best"]["config"]["ptxas.def_load_cache"] == "cg", found["best"]
    assert found["best"]["config"]["ptxas.opt_level"] != 0
    assert acf.read(out).controls.get("ptxas.def_load_cache") == "cg"


def test_the_gate_holds_an_acf_to_the_build_it_was_tuned_from(tmp_path: Path) -> None:
    """Shipped at ptxas -O1, the choice keeps -O1 (-O2/-O3 give the same instruction count): no
    lower level than the shipped build it was tuned from, so the gate finds nothing (it held the
    ACF to the compiler's -O3 and its settings to a spec without the shipped build)."""
    _project(tmp_path, "nvcc -Xptxas -O1 -arch=sm_90 -c k.cu")
    out = tmp_path / "k.acf.toml"
    found = _tune(tmp_path, "--compile-commands", "compile_commands.json", "--only", "ptxas.opt_level",
                  "--objective", "instructions", "--budget", "4", "--out", str(out))
    assert found["best"]["config"] == {"ptxas.opt_level": 1}, found["best"]
    gated = run_cli(["gate", str(out), "--static", "--json"], cwd=tmp_path)
    assert gated.returncode == 0, gated.describe()
    assert json.loads(gated.stdout)["acfs"][0]["findings"] == [], gated.stdout


def test_a_shipped_setting_left_out_of_the_search_is_held_at_its_shipped_value(tmp_path: Path) -> None:
    """--only/--exclude that left out a setting the build ships were refused: `--only define.X` on a
    build with `-Xptxas -O3` (the compiler's own default) had to search every -O level too (a user's
    PolyBench 2DCONV: 108 builds for 27 block sizes). Now the setting is held at its shipped value in
    every build, as a macro left out is held at tune.toml's first value."""
    _project(tmp_path, "nvcc --use_fast_math -Xptxas -O3 -Xptxas -dlcm=cg -arch=sm_90 -c k.cu")
    for number, option in enumerate((["--only", "ptxas.register_usage_level"],
                                     ["--exclude", "nvcc.use_fast_math,ptxas.opt_level,ptxas.def_load_cache"])):
        out = tmp_path / f"k{number}.acf.toml"
        found = _tune(tmp_path, "--compile-commands", "compile_commands.json", *option, "--strategy", "exhaustive",
                      "--budget", "400", "--no-simplify", "--out", str(out))
        shown = run_cli(["show", found["study"]["name"], "--db", f"sqlite:///{tmp_path / 't.db'}", "--json",
                         "--top", "1000"], cwd=tmp_path)
        trials = json.loads(shown.stdout)["trials"]
        held = {(t["config"]["nvcc.use_fast_math"], t["config"]["ptxas.opt_level"],
                 t["config"]["ptxas.def_load_cache"]) for t in trials}
        assert held == {(True, 3, "cg")}, (option, held)
        if option[0] == "--only":  # the register usage levels alone: 0..10 (5 the baseline's)
            assert sorted(t["config"]["ptxas.register_usage_level"] for t in trials) == list(range(11)), trials
        argv = tomllib.loads(out.read_text())["args"]["argv"]
        assert "--use_fast_math" in argv and "-Xptxas=--def-load-cache=cg" in argv and not any("-O" in a for a in argv), argv


MACRO_KERNEL = """\
#ifndef TA
#define TA 1
#endif
__global__ void k(float* a, int n) {
  float s = 0.f;
  for (int i = 0; i < n; i += TA) s += a[i] * a[i + 1];
  a[threadIdx.x] = s / 3.0f;
}
"""


@pytest.mark.parametrize("shipped, only", [
    ("--ftz=true", "define.TA"),  # the case reference.md names: the shipped flag held, the macros searched
    ("--use_fast_math", "define.TA"),
    ("--ftz=true", "nvcc.ftz,define.TA"),  # both named: the numerics setting came after the macro as well
])
def test_only_a_macro_on_a_build_shipping_a_front_end_flag_writes_an_acf_the_gate_passes(
        tmp_path: Path, shipped: str, only: str) -> None:
    """The ACF's argv was written in the searched space's order (the macro first, the held shipped
    flag appended after it) but read back in the compiler's (nvcc flags, then -D): every trial ran,
    then "args.argv does not match its controls (edited by hand?)" and no ACF."""
    (tmp_path / "k.cu").write_text(MACRO_KERNEL)
    (tmp_path / "tune.toml").write_text("[tune.defines]\nTA = [1, 2]\n")
    (tmp_path / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(tmp_path), "file": "k.cu",
          "arguments": ["nvcc", shipped, "-arch=sm_90", "-c", "k.cu", "-o", "k.o"]}]))
    out = tmp_path / "k.acf.toml"
    _tune(tmp_path, "--compile-commands", "compile_commands.json", "--only", only, "--budget", "4", "--out", str(out))
    written = tomllib.loads(out.read_text())["args"]
    assert shipped in written["argv"] and shipped in written["frontend"], written
    assert acf.read(out).argv == tuple(written["argv"])
    gated = run_cli(["gate", str(out), "--static", "--compile-commands", "compile_commands.json", "--json"],
                    cwd=tmp_path)
    assert gated.returncode == 0, gated.describe()
    assert json.loads(gated.stdout)["acfs"][0]["findings"] == [], gated.stdout


def test_a_command_without_tuned_flags_says_the_baseline_is_the_compiler_defaults(tmp_path: Path) -> None:
    from compileiq.source.shipped import describe

    db = _project(tmp_path, "nvcc -lineinfo -Xcompiler -Wall -c k.cu")
    shipped = read_command(db, tmp_path / "k.cu", SPACE).shipped
    assert shipped is not None and shipped.settings == ()
    assert describe(shipped) == [
        ("baseline: your build (compile_commands.json); it sets no searched setting, so the compiler defaults; "
         "fixed, applied to every build: -lineinfo"),
        "not applied: -Xcompiler -Wall (host compiler warning option: device code is unchanged)"]


def test_the_gate_rebuilds_with_the_base_flags_of_the_compile_command(tmp_path: Path) -> None:
    """A command's -I folder and -D macro are the ACF's base flags: the gate rebuilds with them,
    so an ACF checked straight after tuning finds nothing (it rebuilt from tune.toml alone: the
    header not found, or the macro's default code, a false code-changed and stale warnings)."""
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "scale.h").write_text("#ifndef SCALE\n#define SCALE 1\n#endif\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "k.cu").write_text('#include "scale.h"\n' + KERNEL.replace("y[i] = s;", "y[i] = s * SCALE;"))
    (tmp_path / "compile_commands.json").write_text(json.dumps([{
        "directory": str(tmp_path), "file": "src/k.cu",
        "command": "nvcc -Iinclude -DSCALE=3 -lineinfo -maxrregcount=64 -arch=sm_90 -c src/k.cu -o k.o"}]))
    out = tmp_path / "k.acf.toml"
    tuned = run_cli(["tune", "src/k.cu", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}",
                     "--compile-commands", "compile_commands.json", "--budget", "4", "--out", str(out)], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    assert {"-DSCALE=3", "-I../include"} <= set(tomllib.loads(out.read_text())["base"]["nvcc_flags"])
    gated = run_cli(["gate", str(out), "--static", "--json"], cwd=tmp_path)
    assert gated.returncode == 0, gated.describe()
    assert json.loads(gated.stdout)["acfs"][0]["findings"] == [], gated.stdout
    # an edited source: the re-tune it prints starts from the same command, with the same budget
    (tmp_path / "src" / "k.cu").write_text((tmp_path / "src" / "k.cu").read_text() + "// edited\n")
    stale = run_cli(["gate", str(out), "--static"], cwd=tmp_path)
    assert stale.returncode == 0 and "stale-source" in stale.stdout, stale.describe()
    retune = next(line for line in stale.stdout.splitlines() if "compileiq tune" in line)
    assert "--compile-commands compile_commands.json --budget 4" in retune, retune
    # the command's flags reordered (a regenerated CMake database), the source as tuned: no changed
    # source, though the bundle's hash holds the flags in their order (user50, fault 1)
    (tmp_path / "src" / "k.cu").write_text((tmp_path / "src" / "k.cu").read_text().removesuffix("// edited\n"))
    database = tmp_path / "compile_commands.json"
    database.write_text(database.read_text().replace("-DSCALE=3 -lineinfo", "-lineinfo -DSCALE=3"))
    reordered = run_cli(["gate", str(out), "--static"], cwd=tmp_path)
    assert reordered.returncode == 0 and "stale-source" not in reordered.stdout, reordered.describe()




def test_the_gate_says_when_the_compile_command_that_ships_changed(tmp_path: Path) -> None:
    """A user's llm.c build gained -Xptxas -O1 and a -D: `tune` made a new study of it, while the
    gate passed the old ACF with no warning, its baseline no longer the build that ships."""
    _project(tmp_path, "nvcc --use_fast_math -std=c++17 -arch=sm_90 -c k.cu -o k.o")
    out = tmp_path / "k.acf.toml"
    _tune(tmp_path, "--compile-commands", "compile_commands.json", "--only", "nvcc.use_fast_math,ptxas.opt_level",
          "--budget", "2", "--out", str(out))

    def gate(command: str | None) -> tuple[int, list[dict[str, Any]]]:
        if command is not None:
            _project(tmp_path, command)
        done = run_cli(["gate", str(out), "--static", "--json"], cwd=tmp_path)
        assert done.returncode in (0, 1), done.describe()
        return done.returncode, json.loads(done.stdout)["acfs"][0]["findings"]

    # linker, host and report options change no study: nothing to say
    assert gate("nvcc --use_fast_math -std=c++17 -arch=sm_90 -lcublas -Xptxas -v -Xcompiler -fPIC -c k.cu") == (0, [])
    code, found = gate("nvcc --use_fast_math -std=c++17 -Xptxas -O1 -DSOMETHING=1 -arch=sm_90 -c k.cu -o k.o")
    rules = [(f["rule"], f["severity"]) for f in found]  # the lower level ships other code than the evidence's: fails
    assert code == 1 and rules == [("lowered-optimisation", "error"), ("stale-settings", "warn")], found
    assert ("the compile command in compile_commands.json changed since the ACF was tuned (adds -DSOMETHING=1; "
            "ptxas.opt_level 3 (the default) -> 1): the ACF's baseline is no longer the build that ships") in found[1]["message"]
    assert "--compile-commands compile_commands.json" in found[1]["command"], found
    code, found = gate("nvcc -std=c++17 -arch=sm_80 -c k.cu -o k.o")
    stale = next(f for f in found if f["rule"] == "stale-settings")
    assert "nvcc.use_fast_math true -> false (the default); builds for sm_80, not the ACF's sm_90" in stale["message"]
    if tomllib.loads(out.read_text())["controls"].get("nvcc.use_fast_math"):  # fast math nobody ships now: an error
        assert code == 1 and [f["severity"] for f in found if f["rule"] == "risk-not-allowed"] == ["error"], found
    code, found = gate("nvcc --use_fast_math -std=c++17 -Xptxas --sanitize=memcheck -arch=sm_90 -c k.cu")
    assert "the compile command the ACF was tuned from cannot be read now" in found[0]["message"], found
    (tmp_path / "compile_commands.json").unlink()
    code, found = gate(None)
    assert code == 0 and [(f["rule"], f["severity"]) for f in found] == [("stale-settings", "warn")], found
    assert "the compile command the ACF was tuned from, compile_commands.json, is gone" in found[0]["message"], found
    strict = run_cli(["gate", str(out), "--static", "--rule", "stale-settings=error"], cwd=tmp_path)
    assert strict.returncode == 1 and "is gone" in strict.stdout, strict.describe()
    # tuned with --arch for another arch than the command's: that is no change of the command
    _project(tmp_path, "nvcc --use_fast_math -std=c++17 -arch=sm_80 -c k.cu -o k.o")
    _tune(tmp_path, "--compile-commands", "compile_commands.json", "--only", "nvcc.use_fast_math", "--arch", "sm_90",
          "--budget", "2", "--out", str(out), "--force")
    assert gate(None) == (0, [])


def test_the_gate_holds_an_acf_to_the_build_its_compile_command_ships_now(tmp_path: Path) -> None:
    """A red team's ACF, tuned from a command shipping -Xptxas -O0, copied beside a project whose
    command ships the default -O3: the gate judged it against the -O0 its [baseline] recorded and
    passed it (a stale-settings warning at most), so an ACF lowered the build that ships."""
    _project(tmp_path, "nvcc -arch=sm_90 -Xptxas -O0 -c k.cu -o k.o")
    out = tmp_path / "k.acf.toml"
    _tune(tmp_path, "--compile-commands", "compile_commands.json", "--only", "ptxas.opt_level,ptxas.maxrregcount",
          "--budget", "2", "--out", str(out))
    assert "-O0" in run_cli(["flags", str(out)], cwd=tmp_path).stdout
    assert run_cli(["gate", str(out), "--static"], cwd=tmp_path).returncode == 0  # the build it was tuned from
    _project(tmp_path, "nvcc -arch=sm_90 -O3 -c k.cu -o k.o")
    done = run_cli(["gate", str(out), "--static", "--json"], cwd=tmp_path)
    assert done.returncode == 1, done.describe()
    found = {f["rule"]: f for f in json.loads(done.stdout)["acfs"][0]["findings"]}
    assert found["worse-than-default"]["severity"] == "error", found
    assert "lowers ptxas optimisation vs your build as shipped (compile_commands.json)" in found[
        "worse-than-default"]["message"], found
    assert found["worse-than-default"]["recorded"] == "shipped optimisation", found  # was "defaults' optimisation"
    assert "ptxas.opt_level 0 -> 3 (the default)" in found["stale-settings"]["message"], found


SQUARES_KERNEL = """
__global__ void k(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float a[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) a[j] = x[i * 32 + j];
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 32; ++j)
#pragma unroll
    for (int m = 0; m < 32; ++m) s += a[j] * a[m] * (j ^ m);
  y[i] = s;
}
"""


def test_a_ci_clone_without_the_compilation_database_gates_the_acf_as_recorded(tmp_path: Path) -> None:
    """CMake writes compile_commands.json into the build folder, which a CI clone lacks: the gate
    rebuilt the shipped baseline from tune.toml alone, without the command's -maxrregcount=24, and
    failed a sound ACF for spills it never had (72 -> 6948 B). Where the command cannot be read, the
    ACF is gated as it records its flags and baseline, with a warning that they were not checked;
    an ACF whose [baseline] names no database at all is warned about the same way."""
    (tmp_path / "k.cu").write_text(SQUARES_KERNEL)
    (tmp_path / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(tmp_path), "command": "nvcc -maxrregcount=24 -arch=sm_90 -c k.cu -o k.o", "file": "k.cu"}]))
    out = tmp_path / "k.acf.toml"
    _tune(tmp_path, "--compile-commands", "compile_commands.json", "--only", "ptxas.opt_level", "--budget", "2",
          "--out", str(out))
    (tmp_path / "compile_commands.json").unlink()

    def findings() -> list[tuple[str, str, str]]:
        done = run_cli(["gate", str(out), "--static", "--json"], cwd=tmp_path)
        assert done.returncode == 0, done.describe()
        return [(f["rule"], f["severity"], f["message"]) for f in json.loads(done.stdout)["acfs"][0]["findings"]]

    [(rule, severity, message)] = findings()
    assert (rule, severity) == ("stale-settings", "warn") and "is gone" in message, message
    os.mkfifo(tmp_path / "compile_commands.json")  # read, it blocked the gate forever
    [(rule, severity, message)] = findings()
    assert (rule, severity) == ("stale-settings", "warn") and "is a named pipe" in message, message
    (tmp_path / "compile_commands.json").unlink()
    out.write_text("\n".join(line for line in out.read_text().splitlines() if not line.startswith("path = ")))
    [(rule, severity, message)] = findings()
    assert (rule, severity) == ("stale-settings", "warn"), message
    assert "the ACF's [baseline] names no compilation database" in message, message


def _spill_bytes(report: str) -> int:
    found = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    assert found is not None, report
    return int(found[1]) + int(found[2])


def test_a_shipped_nvcc_register_cap_is_the_baseline_as_it_builds(tmp_path: Path) -> None:
    """nvcc's -maxrregcount also caps the front end (cicc): it was read as ptxas's cap, so the
    baseline was another build than the one shipped (FDTD3d: 80 spill bytes it never has), and its
    candidates to time traded occupancy to remove them. It is a base flag now, and the search's
    ptxas cap, which nvcc would override, is not searched."""
    (tmp_path / "k.cu").write_text(CAPPED_KERNEL)
    command = "nvcc -arch=sm_90 -maxrregcount=32 -c k.cu -o k.o"
    (tmp_path / "compile_commands.json").write_text(
        json.dumps([{"directory": str(tmp_path), "command": command, "file": "k.cu"}]))
    out = tmp_path / "k.acf.toml"
    tuned = run_cli(["tune", "k.cu", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}",
                     "--compile-commands", "compile_commands.json", "--budget", "4", "--out", str(out)], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    assert "note: ptxas.maxrregcount is not searched: the base flags hold nvcc's -maxrregcount=32" in tuned.output
    shipped = subprocess.run(["nvcc", "-arch=sm_90", "-maxrregcount=32", "-Xptxas", "-v", "-cubin", "-o",
                              str(tmp_path / "shipped.cubin"), "k.cu"], cwd=tmp_path, capture_output=True, text=True, check=True)
    data = tomllib.loads(out.read_text())
    assert data["evidence"]["baseline"]["spill_bytes"] == _spill_bytes(shipped.stderr)
    assert "-maxrregcount=32" in data["base"]["nvcc_flags"]
    assert not any(name == "ptxas.maxrregcount" for name in data.get("controls", {})), data["controls"]
    flags = run_cli(["flags", str(out), "--all"], cwd=tmp_path)
    applied = subprocess.run(["nvcc", *flags.stdout.split(), "-Xptxas", "-v", "-cubin", "-o",
                              str(tmp_path / "tuned.cubin"), "k.cu"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert data["evidence"]["best"]["spill_bytes"] == _spill_bytes(applied.stderr)  # what the flags build
    # in two stages too: `--stage ptxas --all` hands ptxas nvcc's cap, as nvcc does (it gave none:
    # 0 spill bytes at 40 registers where the evidence and nvcc's build say otherwise)
    front = run_cli(["flags", str(out), "--all", "--stage", "frontend"], cwd=tmp_path).stdout.split()
    subprocess.run(["nvcc", *front, "-ptx", "k.cu", "-o", "k.ptx"], cwd=tmp_path, check=True)
    back = run_cli(["flags", str(out), "--all", "--stage", "ptxas"], cwd=tmp_path).stdout.split()
    assert "--maxrregcount=32" in back, back
    staged = subprocess.run(["ptxas", *back, "-v", "k.ptx", "-o", "staged.cubin"], cwd=tmp_path,
                            capture_output=True, text=True, check=True)
    assert _spill_bytes(staged.stderr) == data["evidence"]["best"]["spill_bytes"]
    # An ACF that adds a ptxas cap beside nvcc's (a red team's forgery, whose evidence the gate's
    # rebuild matched while nvcc builds at nvcc's cap) is refused on reading: tune never writes both.
    data["controls"] = {"ptxas.maxrregcount": 255}
    data["args"] |= {"ptxas": ["--maxrregcount=255"], "argv": ["-Xptxas=--maxrregcount=255", *data["args"]["defines"]]}
    (tmp_path / "forged.acf.toml").write_text(tomli_w.dumps(data))
    forged = run_cli(["gate", "forged.acf.toml", "--static"], cwd=tmp_path)
    assert forged.returncode == 2, forged.describe()
    assert "controls.ptxas.maxrregcount = 255 has no effect beside base.nvcc_flags' -maxrregcount=32" in forged.stderr
    refused = run_cli(["tune", "k.cu", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}",
                       "--compile-commands", "compile_commands.json", "--only", "ptxas.maxrregcount"], cwd=tmp_path)
    assert refused.returncode == 2 and "take it out of the build to tune the cap" in refused.stderr, refused.describe()


def test_a_candidate_to_time_is_timed_against_the_shipped_build(tmp_path: Path) -> None:
    """A study of the shipped build printed candidates' commands without `--compile-commands`
    (timed against the compiler defaults instead), and with it added `--only` was refused for
    leaving out a setting the build sets (a user's FDTD3d). The command now starts from the build
    and searches its settings too: it runs as printed."""
    kernel = Path(__file__).resolve().parent.parent / "kernels" / "spill_heavy" / "spill_heavy.cu"
    (tmp_path / "k.cu").write_text(kernel.read_text())
    (tmp_path / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(tmp_path), "command": "nvcc -arch=sm_90 -Xptxas -O3 -c k.cu -o k.o", "file": "k.cu"}]))
    db = f"sqlite:///{tmp_path / 't.db'}"
    tuned = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--only",
                     "ptxas.opt_level,ptxas.maxrregcount,ptxas.override_directive_values", "--budget", "24",
                     "--workers", "local", "--db", db, "--out", "k.acf.toml"], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    listed = acf.read(tmp_path / "k.acf.toml").evidence.get("to_time", [])
    assert listed, "the fixture needs a candidate to time (half the occupancy for no spills)"
    command = listed[0]["command"]
    assert command.startswith("compileiq tune k.cu --compile-commands compile_commands.json --objective time --only ")
    assert "ptxas.opt_level" in command.split("--only ")[1].split()[0]
    words = shlex.split(command)[2:]  # as printed, but static (no GPU here) and into another database
    words[words.index("time")] = "static"
    again = run_cli(["tune", *words, "--workers", "local", "--db", f"sqlite:///{tmp_path / 'u.db'}",
                     "--out", "u.acf.toml", "--no-simplify"], cwd=tmp_path)
    assert again.returncode == 0, again.describe()


@pytest.mark.parametrize("flags", ["-maxrregcount=32 -Xptxas --maxrregcount=40", "-Xptxas --maxrregcount=40 -maxrregcount=32"])
def test_nvccs_register_cap_beside_a_ptxas_one_is_the_build_as_nvcc_makes_it(tmp_path: Path, flags: str) -> None:
    """Both caps in one command stopped the run ("unknown parameter 'ptxas.maxrregcount'"), with no
    way round it: nvcc hands ptxas its own cap last, so 32 is the build's, and the -Xptxas one is
    recorded as overridden. With a cap in tune.toml too, the last one given is the one named."""
    (tmp_path / "k.cu").write_text(CAPPED_KERNEL)
    (tmp_path / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(tmp_path), "command": f"nvcc -arch=sm_90 {flags} -c k.cu -o k.o", "file": "k.cu"}]))
    out = tmp_path / "k.acf.toml"
    tuned = run_cli(["tune", "k.cu", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}",
                     "--compile-commands", "compile_commands.json", "--budget", "4", "--out", str(out)], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    assert "nvcc's -maxrregcount=32" in tuned.output
    shipped = subprocess.run(["nvcc", "-arch=sm_90", *flags.split(), "-Xptxas", "-v", "-cubin", "-o",
                              str(tmp_path / "shipped.cubin"), "k.cu"], cwd=tmp_path, capture_output=True, text=True,
                             check=True)
    data = tomllib.loads(out.read_text())
    assert data["evidence"]["baseline"]["spill_bytes"] == _spill_bytes(shipped.stderr)
    fixed = {entry["flag"]: entry for entry in data["baseline"]["fixed"]}
    assert "overridden by nvcc's -maxrregcount=32" in fixed["-Xptxas --maxrregcount=40"]["why"], fixed
    gated = run_cli(["gate", str(out), "--static"], cwd=tmp_path)
    assert gated.returncode == 0, gated.describe()
    (tmp_path / "tune.toml").write_text('nvcc_flags = ["-maxrregcount=64"]\n')  # and the command's 32 after it
    noted = run_cli(["tune", "k.cu", "--workers", "local", "--db", f"sqlite:///{tmp_path / 'u.db'}", "--compile-commands",
                     "compile_commands.json", "--budget", "2", "--out", "u.acf.toml", "--no-simplify"], cwd=tmp_path)
    assert "the base flags hold nvcc's -maxrregcount=32" in noted.output, noted.describe()


def test_a_shipped_setting_named_in_only_is_searched_whatever_its_risk(tmp_path: Path) -> None:
    """The refusal told a user to name the build's --use_fast_math in --only; named, it was refused
    all the same (any --only counted as leaving it out; a user's llm.c adamw)."""
    db = _project(tmp_path, "nvcc -arch=sm_90 --use_fast_math -c k.cu -o k.o")
    args = ["tune", "k.cu", "--compile-commands", str(db), "--budget", "4", "--workers", "local",
            "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", "k.acf.toml", "--no-simplify"]
    named = run_cli([*args, "--only", "nvcc.use_fast_math,ptxas.register_usage_level"], cwd=tmp_path)
    assert named.returncode == 0, named.describe()


def test_space_reads_the_kernels_compile_command_as_tune_does(tmp_path: Path) -> None:
    """`space` had no --compile-commands: for a CMake project (no include_dirs in tune.toml, as the
    docs advise) it said the preprocessor failed on a header the command's -I finds (a user's adamw)."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "scale.h").write_text("#define SCALE 2.0f\n")
    (tmp_path / "k.cu").write_text('#include "scale.h"\n__global__ void k(float* x) { x[threadIdx.x] *= SCALE; }\n')
    (tmp_path / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(tmp_path), "command": "nvcc -arch=sm_90 -Iinc -maxrregcount=64 -c k.cu -o k.o", "file": "k.cu"}]))
    alone = run_cli(["space", "k.cu"], cwd=tmp_path)
    assert "preprocessor failed" in alone.stderr, alone.describe()
    read = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert read.returncode == 0 and "preprocessor failed" not in read.stderr, read.describe()
    assert "nvcc's -maxrregcount=64" in read.stderr, read.describe()
    lone = run_cli(["space", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert lone.returncode == 2 and "give the KERNEL.cu too" in lone.stderr, lone.describe()


def test_a_study_of_a_shipped_build_with_fast_math_moves_between_databases_whole(tmp_path: Path) -> None:
    """User report 46, fault 3: a shipped setting of a risk class not searched by default
    (--use_fast_math) is searched after the others (its study's space, and hash, in that order);
    `db import` rebuilt the space in the bundled order, so every trial was rejected ("not those of
    the study's search space"), exit 0, and an empty study was left behind."""
    _project(tmp_path, "nvcc --use_fast_math -Xptxas -O3 -arch=sm_90 -c k.cu -o k.o")
    shipped = _tune(tmp_path, "--compile-commands", "compile_commands.json", "--budget", "4",
                    "--out", str(tmp_path / "shipped.acf.toml"))
    study = str(shipped["study"]["name"]) if isinstance(shipped["study"], dict) else str(shipped["study"])
    source, target = f"sqlite:///{tmp_path / 't.db'}", f"sqlite:///{tmp_path / 'team.db'}"
    exported = run_cli(["db", "export", study, "--db", source, "-o", "study.json"], cwd=tmp_path)
    assert exported.returncode == 0, exported.describe()
    payload = json.loads((tmp_path / "study.json").read_text())["payload"]
    imported = run_cli(["db", "import", "study.json", "--db", target], cwd=tmp_path)
    assert imported.returncode == 0 and "rejected" not in imported.output, imported.describe()
    assert f"{len(payload['trials'])} trials added" in imported.output, imported.describe()
    shown = run_cli(["show", study, "--db", target, "--json"], cwd=tmp_path)
    assert shown.returncode == 0, shown.describe()
    assert json.loads(shown.stdout)["study"]["trials"] == len(payload["trials"])


def test_an_import_that_rejects_every_trial_fails_in_one_line_and_creates_no_study(tmp_path: Path) -> None:
    _project(tmp_path, "nvcc -Xptxas -O3 -arch=sm_90 -c k.cu -o k.o")
    shipped = _tune(tmp_path, "--compile-commands", "compile_commands.json", "--budget", "2")
    study = str(shipped["study"]["name"]) if isinstance(shipped["study"], dict) else str(shipped["study"])
    exported = run_cli(["db", "export", study, "--db", f"sqlite:///{tmp_path / 't.db'}", "-o", "study.json"],
                       cwd=tmp_path)
    assert exported.returncode == 0, exported.describe()
    document = json.loads((tmp_path / "study.json").read_text())
    for trial in document["payload"]["trials"]:  # a space no tune of this study searched
        trial["config"]["ptxas.opt_level"] = 7
    from compileiq.store.exchange import _checksum

    document["sha256"] = _checksum(None, document["payload"])
    (tmp_path / "bad.json").write_text(json.dumps(document))
    target = f"sqlite:///{tmp_path / 'team.db'}"
    imported = run_cli(["db", "import", "bad.json", "--db", target], cwd=tmp_path)
    assert imported.returncode != 0 and len(imported.stderr_lines) == 1, imported.describe()
    assert "Traceback" not in imported.output and "rejected" in imported.stderr, imported.describe()
    listed = run_cli(["show", study, "--db", target], cwd=tmp_path)
    assert listed.returncode != 0, listed.describe()  # no study of that name was created


def test_a_compilation_database_in_a_folder_with_a_space_is_recorded_and_read(tmp_path: Path) -> None:
    """Its path was left out of [baseline] (not a path nvcc may take) while the commands to time
    named it, so tune refused the ACF it had just written (a reviewer's); it is only ever printed,
    shell-quoted, and is recorded now."""
    (tmp_path / "build dir").mkdir()
    (tmp_path / "k.cu").write_text(CAPPED_KERNEL)
    (tmp_path / "build dir" / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(tmp_path), "command": "nvcc -arch=sm_90 -Xptxas -O3 -c k.cu -o k.o", "file": "k.cu"}]))
    done = run_cli(["tune", "k.cu", "--compile-commands", "build dir/compile_commands.json", "--only",
                    "ptxas.opt_level,ptxas.maxrregcount,ptxas.override_directive_values", "--budget", "16", "--workers",
                    "local", "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", "k.acf.toml"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    found = acf.read(tmp_path / "k.acf.toml")
    assert found.shipped is not None and found.shipped.path == "build dir/compile_commands.json"
    for entry in found.evidence.get("to_time", []):
        assert "--compile-commands 'build dir/compile_commands.json'" in entry["command"]


def test_a_shipped_build_of_fixed_flags_alone_is_named_alike_in_every_view(tmp_path: Path) -> None:
    """A command whose only device flags are fixed (nvcc's -maxrregcount, a base flag) sets no
    searched setting: its baseline row holds the defaults' values, so show and report called it
    "baseline (defaults)" (the report "baseline (your build)" where it set one) while the run said
    "your build: compile_commands.json". The run records where its baseline came from; every view
    names it as the run does."""
    _project(tmp_path, "nvcc -arch=sm_90 -maxrregcount=64 -c k.cu -o k.o")
    tuned = _tune(tmp_path, "--compile-commands", "compile_commands.json", "--budget", "3",
                  "--out", str(tmp_path / "k.acf.toml"))
    label = "baseline (your build: compile_commands.json)"
    assert tuned["baseline_label"] == label
    db, study = f"sqlite:///{tmp_path / 't.db'}", tuned["study"]["name"]
    shown = run_cli(["show", study, "--db", db, "--json"], cwd=tmp_path)
    assert shown.returncode == 0 and json.loads(shown.stdout)["baseline_label"] == label, shown.describe()
    for fmt, out in (("html", "r.html"), ("md", "r.md")):
        page = run_cli(["report", study, "--db", db, "--format", fmt, "--out", str(tmp_path / out)], cwd=tmp_path)
        text = (tmp_path / out).read_text()
        assert page.returncode == 0 and label in text and "baseline (defaults)" not in text, page.describe()
    document = tomllib.loads((tmp_path / "k.acf.toml").read_text())
    assert document["evidence"]["vs_defaults"]["gain"] == "none needed: your build as shipped (compile_commands.json)"
    # the same kernel tuned from the compiler defaults is another study, named as such everywhere
    bare = _tune(tmp_path, "--budget", "3", "--out", str(tmp_path / "bare.acf.toml"))
    assert bare["study"]["name"] != study and bare["baseline_label"] == "baseline (defaults)"
    shown = run_cli(["show", bare["study"]["name"], "--db", db, "--json"], cwd=tmp_path)
    assert json.loads(shown.stdout)["baseline_label"] == "baseline (defaults)", shown.describe()


def test_the_gate_judges_an_acf_by_one_reading_of_its_compile_command(tmp_path: Path) -> None:
    """The gate read the compile command when it located the ACF (the baseline it builds) and again
    after the rebuild (the stale-settings finding): a compile_commands.json rewritten while the gate
    ran (a CMake re-configure in the same CI job) gave one verdict a baseline from one reading and a
    finding from another. Rewritten once the ACF is located, the verdict is the first reading's."""
    from compileiq.gating import check as gating

    database = _project(tmp_path, "nvcc --use_fast_math -std=c++17 -arch=sm_90 -c k.cu -o k.o")
    out = tmp_path / "k.acf.toml"
    _tune(tmp_path, "--compile-commands", "compile_commands.json", "--only", "nvcc.use_fast_math,ptxas.opt_level",
          "--budget", "2", "--out", str(out))
    options = gating.GateOptions(acfs=(out,), device=False, compile_commands=database)
    heard: list[str] = []

    def reconfigure(line: str) -> None:  # the gate's note that it located the ACF: nothing is built yet
        if "held to the compile command" in line and not heard:
            heard.append(line)
            _project(tmp_path, "nvcc -std=c++17 -Xptxas -O1 -DSOMETHING=1 -arch=sm_90 -c k.cu -o k.o")

    with contextlib.chdir(tmp_path):
        clean = gating.run(options)
        rewritten = gating.run(options, progress=reconfigure)
        later = gating.run(options)
    assert heard, "the gate no longer says which database it holds the ACF to"
    [result] = rewritten.results
    assert [f.rule for f in clean.results[0].findings] == [] and rewritten.results == clean.results, result.findings
    # the next gate reads the database as it is now (and, where the ACF kept the fast math the
    # rewritten command dropped, also finds it unasked: risk-not-allowed; and its -O1 below the ACF's level)
    findings = later.results[0].findings
    [finding] = [f for f in findings if f.rule == "stale-settings"]
    assert "adds -DSOMETHING=1" in finding.message, finding
    assert {f.rule for f in findings} <= {"stale-settings", "risk-not-allowed", "lowered-optimisation"}, findings


def test_a_build_file_for_an_acf_with_nothing_tuned_sets_no_options_and_asks_for_no_base_flags(tmp_path: Path) -> None:
    """User (mergeSort): `flags ACF --format cmake` with nothing tuned wrote `COMPILE_OPTIONS ""`,
    which overwrites the options the build already set on that source; and its stderr said the
    build also needs the base flags, which the CMake target tuned from (--compile-commands) gives."""
    (tmp_path / "k.cu").write_text("__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n")
    (tmp_path / "compile_commands.json").write_text(json.dumps([{
        "directory": str(tmp_path), "file": "k.cu",
        "command": "nvcc -arch=sm_90 -std=c++17 -DNDEBUG -Xptxas -O3 -c k.cu -o k.o"}]))
    out = tmp_path / "k.acf.toml"
    _tune(tmp_path, "--compile-commands", "compile_commands.json", "--only", "ptxas.opt_level",
          "--objective", "registers", "--budget", "2", "--out", str(out))
    assert run_cli(["flags", str(out)], cwd=tmp_path).stdout.split() == ["-arch=sm_90"]  # nothing tuned
    cmake = run_cli(["flags", str(out), "--format", "cmake"], cwd=tmp_path)
    assert cmake.returncode == 0, cmake.describe()
    assert "COMPILE_OPTIONS" not in cmake.stdout and "# compileiq: nothing to apply" in cmake.stdout, cmake.describe()
    for fmt in ("cmake", "bazel"):
        said = run_cli(["flags", str(out), "--format", fmt], cwd=tmp_path)
        assert "base flag" not in said.stderr, said.describe()
    plain = run_cli(["flags", str(out)], cwd=tmp_path)
    assert "needs" not in plain.stderr and "your build's command (compile_commands.json) gave when tuned" in plain.stderr
    # a user read "append these" as the base flags: the note names what to append (user, HeCBench layernorm)
    assert "append the tuned flags to that command" in plain.stderr, plain.stderr
