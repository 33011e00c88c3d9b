"""The gate and a compile command that now builds for an arch the ACF's settings were never
checked on (CMake's CUDA_ARCHITECTURES "90" grown to "80;90"): the arch tuned is unchanged, so no
other stale check moved, and the gate passed with no finding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
