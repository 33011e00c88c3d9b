"""The gate and a compile command that now builds for an arch the ACF's settings were never
checked on (CMake's CUDA_ARCHITECTURES "90" grown to "80;90"): the arch tuned is unchanged, so no
other stale check moved, and the gate passed with no finding."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from tests.helpers import run_cli
from tests.test_gate_register_cap import _tuned_then_gated

SM90 = "--generate-code=arch=compute_90,code=[compute_90,sm_90]"
SM80 = "--generate-code=arch=compute_80,code=[compute_80,sm_80]"


def _arch_findings(result: dict[str, Any]) -> list[str]:
    return [f["message"] for f in result["findings"] if f["rule"] == "stale-settings" and "builds for" in f["message"]]


def test_a_command_that_gains_an_arch_is_a_stale_settings_warning(tmp_path: Path) -> None:
    """`space` said "sm_80 left out (the chosen settings are not checked there)" of the new command;
    the gate said PASS with no finding."""
    acf, result = _tuned_then_gated(tmp_path, f"nvcc {SM90} -c k.cu -o k.o", f"nvcc {SM80} {SM90} -c k.cu -o k.o")
    assert acf["kernel"]["arch"] == "sm_90"
    [said] = _arch_findings(result)
    assert "the compile command in cc_drift.json now also builds for sm_80, which the ACF's settings were never " \
           "checked on (tuned for sm_90 only)" in said, said
    assert "compileiq tune" in " ".join(f["command"] for f in result["findings"] if f["message"] == said), result


def test_an_arch_left_out_at_tuning_time_is_no_new_finding(tmp_path: Path) -> None:
    """The ACF's [baseline] records sm_80 as left out: the reviewer was told then; nothing changed."""
    acf, result = _tuned_then_gated(tmp_path, f"nvcc {SM80} {SM90} -c k.cu -o k.o",
                                    f"nvcc {SM80} {SM90} -c k.cu -o k.o")
    assert acf["kernel"]["arch"] == "sm_90"
    assert not _arch_findings(result), result
    assert not [f for f in result["findings"] if f["rule"] == "stale-settings" and "sm_80" in f["message"]], result


def test_a_command_that_drops_the_arch_tuned_is_a_stale_settings_warning(tmp_path: Path) -> None:
    """Tuned for sm_90 from `--generate-code` for compute_80 and compute_90, the build narrowed to
    -arch=sm_80: the gate said PASS with no finding, and its re-tune command said --arch sm_90."""
    for name, shipped in (("narrowed", "nvcc -arch=sm_80 -c k.cu -o k.o"), ("deleted", f"nvcc {SM80} -c k.cu -o k.o")):
        (tmp_path / name).mkdir()
        acf, result = _tuned_then_gated(tmp_path / name, f"nvcc {SM80} {SM90} -c k.cu -o k.o", shipped, passes=False)
        assert acf["kernel"]["arch"] == "sm_90"
        [said] = [f for f in result["findings"] if "builds for sm_80, not the ACF's sm_90" in f["message"]]
        assert said["rule"] == "stale-settings" and (said["recorded"], said["measured"]) == ("sm_90", "sm_80"), said
        assert "--arch sm_90" not in said["command"], said


def test_an_acf_whose_why_says_its_arch_was_overridden_still_gets_the_dropped_arch_finding(tmp_path: Path) -> None:
    """Review: the gate read which -arch flags a later one overrode from the [[baseline.fixed]] `why`,
    a human-readable text anyone can edit: an ACF whose tuned -arch says "overridden by the later ..."
    hid that the command no longer builds the arch tuned. What nvcc overrides is read from the flags."""
    acf, _ = _tuned_then_gated(tmp_path, f"nvcc {SM80} {SM90} -c k.cu -o k.o", "nvcc -arch=sm_80 -c k.cu -o k.o",
                               passes=False)
    assert acf["kernel"]["arch"] == "sm_90"
    fixed = [f for f in acf["baseline"]["fixed"] if f["flag"] == SM90]
    assert fixed, acf["baseline"]["fixed"]
    for flag in fixed:
        flag["why"] = "overridden by the later -arch=sm_80: nvcc keeps the last -arch, so this one builds nothing"
    out = tmp_path / "store" / "k.acf.toml"
    out.write_text(tomli_w.dumps(acf))
    gated = run_cli(["gate", str(out), "--static", "--json", "--compile-commands", "cc_drift.json"], cwd=tmp_path)
    result = json.loads(gated.stdout)["acfs"][0]
    [said] = [f for f in result["findings"] if "builds for sm_80, not the ACF's sm_90" in f["message"]]
    assert said["rule"] == "stale-settings", said


def test_flags_says_what_its_arch_builds_appended_to_the_commands_own(tmp_path: Path) -> None:
    """An ACF tuned (for sm_120) from `--gpu-architecture=compute_90 --gpu-code=sm_90,sm_120`: `flags`
    gives -arch=compute_90 -code=sm_120, which appended to that command keeps its -code list (nvcc keeps
    every -code, `nvcc --dryrun` builds sm_90 and sm_120): it once said that dropped sm_90. Now it says
    both are built, sm_90 unchecked; a single-arch ACF's -arch=sm_90 changes nothing and says nothing."""
    from tests.helpers import run_cli

    both = "nvcc --gpu-architecture=compute_90 --gpu-code=sm_90,sm_120 -c k.cu -o k.o"
    for name, tuned in (("multi", both), ("single", "nvcc -arch sm_90 -c k.cu -o k.o")):
        (tmp_path / name).mkdir()
        _tuned_then_gated(tmp_path / name, tuned, tuned, passes=False)
        done = run_cli(["flags", "store/k.acf.toml"], cwd=tmp_path / name)
        assert done.returncode == 0, done.describe()
        if name == "single":
            assert done.stdout.strip() == "-arch=sm_90" and "appended" not in done.stderr, done.describe()
            continue
        assert done.stdout.strip() == "-arch=compute_90 -code=sm_120", done.describe()
        assert ("-arch=compute_90 -code=sm_120 builds what the command builds, sm_90, sm_120 (from compute_90 PTX) "
                "(nvcc keeps the last -arch and builds every -code given; its -arch=compute_90 kept): the settings "
                "were checked on sm_120 only: sm_90 gets them unchecked") in " ".join(done.stderr.split()), done.describe()


def test_an_arch_word_gets_advice_tune_takes(tmp_path: Path) -> None:
    """`-arch=all` in the command: the gate said `re-tune with --arch all`, which `tune` refuses
    ("'all' is not an arch like 'sm_90'")."""
    for word in ("all", "native"):
        (tmp_path / word).mkdir()
        _, result = _tuned_then_gated(tmp_path / word, f"nvcc {SM90} -c k.cu -o k.o", f"nvcc -arch={word} -c k.cu -o k.o",
                                      passes=False)
        [said] = _arch_findings(result)
        assert f"--arch {word}" not in said, said
        assert f"-arch={word} builds for " in said and "re-tune with --arch sm_XY, one of them" in said, said


def test_a_command_that_keeps_the_arch_tuned_beside_a_newer_one_also_builds_it(tmp_path: Path) -> None:
    """-arch=sm_90 grown to `--gpu-architecture=compute_90 --gpu-code=sm_90,sm_120`: the gate said
    "builds for sm_120, not the ACF's sm_90" (sm_90 -> sm_120), though it builds both."""
    _, result = _tuned_then_gated(tmp_path, "nvcc -arch=sm_90 -c k.cu -o k.o",
                                  "nvcc --gpu-architecture=compute_90 --gpu-code=sm_90,sm_120 -c k.cu -o k.o", passes=False)
    assert not [f for f in result["findings"] if "not the ACF's sm_90" in f["message"]], result
    [said] = _arch_findings(result)
    assert "now also builds for sm_120" in said and "re-tune with --arch sm_120" in said, said


def test_an_overridden_arch_whose_why_says_it_was_left_out_still_gets_the_new_arch_finding(tmp_path: Path) -> None:
    """The gate read the archs left out at tuning time from the [[baseline.fixed]] `why` ("builds for ..."),
    text anyone can edit: an ACF whose overridden -arch=sm_80 (it built nothing) was reworded "builds for
    sm_80, not tuned" hid that the command now builds sm_80. What was left out is read from the flags."""
    acf, _ = _tuned_then_gated(tmp_path, "nvcc -arch=sm_80 -arch=sm_90 -c k.cu -o k.o",
                               f"nvcc {SM80} {SM90} -c k.cu -o k.o", passes=False)
    fixed = [f for f in acf["baseline"]["fixed"] if f["flag"] == "-arch=sm_80"]
    assert fixed and not fixed[0]["applied"], acf["baseline"]["fixed"]
    fixed[0]["why"] = "builds for sm_80, not tuned: the settings are chosen on sm_90 alone"
    out = tmp_path / "store" / "k.acf.toml"
    out.write_text(tomli_w.dumps(acf))
    gated = run_cli(["gate", str(out), "--static", "--json", "--compile-commands", "cc_drift.json"], cwd=tmp_path)
    [said] = _arch_findings(json.loads(gated.stdout)["acfs"][0])
    assert "now also builds for sm_80, which the ACF's settings were never checked on" in said, said


def test_an_acf_whose_tuned_arch_says_overridden_is_still_refused_as_edited(tmp_path: Path) -> None:
    """Reading an ACF skipped its "left out for building another arch (edited by hand?)" check on any
    [[baseline.fixed]] whose `why` began "overridden by the later ": an edit that set the flag for the
    arch tuned as not applied, so worded, was read as a sound ACF."""
    from compileiq.results import acf as acf_file

    acf, _ = _tuned_then_gated(tmp_path, f"nvcc {SM80} {SM90} -c k.cu -o k.o", f"nvcc {SM80} {SM90} -c k.cu -o k.o")
    [tuned] = [f for f in acf["baseline"]["fixed"] if f["flag"] == SM90]
    tuned["applied"] = False
    tuned["why"] = "overridden by the later -arch=sm_80: nvcc keeps the last -arch, so this one builds nothing"
    out = tmp_path / "store" / "k.acf.toml"
    out.write_text(tomli_w.dumps(acf))
    with pytest.raises(acf_file.AcfError, match=r"left out for building another arch \(edited by hand\?\)"):
        acf_file.read(out)
    gated = run_cli(["gate", str(out), "--static", "--compile-commands", "cc_drift.json"], cwd=tmp_path)
    assert gated.returncode != 0 and "edited by hand?" in gated.stderr + gated.stdout, gated.describe()
    assert "Traceback" not in gated.stderr, gated.describe()
