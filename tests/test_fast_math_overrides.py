"""A shipped option that overrides what --use_fast_math implies (`-ftz=false --use_fast_math` keeps
denormals) is the build that ships: the baseline, the ACF's arguments and every format of `flags`
spell it out, so the ACF builds the shipped code (rev50 finding 1), and the gate rebuilds that
baseline and names it so (rev50b findings 1 and 5), with real nvcc."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest
import tomli_w
from helpers import compile_commands_file, run_cli, tuned_from_command

from compileiq.core import implied
from compileiq.core.space_files import load_space
from compileiq.core.toolchain import find_toolchain
from compileiq.gating import check as gating
from compileiq.results import acf
from compileiq.source.kernel import bundle_sources

KERNEL = """\
extern "C" __global__ void scale(float* x, const float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = sqrtf(x[i]) / y[i] + x[i] * y[i];
}
"""
NUMERICS = re.compile(r"-(ftz|prec_div|prec_sqrt|fmad)=(\d)")


def _numerics(flags: list[str], folder: Path) -> set[tuple[str, str]]:
    """What nvcc hands cicc for these flags (`nvcc -dryrun`)."""
    done = subprocess.run(["nvcc", "-dryrun", *flags, "-c", "k.cu"], cwd=folder, capture_output=True, text=True,
                          check=True)
    return set(NUMERICS.findall(done.stderr))


def _ptx(flags: list[str], folder: Path) -> str:
    subprocess.run(["nvcc", *flags, "-ptx", "-o", "k.ptx", "k.cu"], cwd=folder, check=True)
    return "\n".join(line for line in (folder / "k.ptx").read_text().splitlines() if not line.startswith("//"))


@pytest.mark.parametrize("shipped, spelled", [
    ("-ftz=false --use_fast_math", "--ftz=false"),
    ("--use_fast_math --prec-div=true", "--prec-div=true"),
    ("--use_fast_math --prec-sqrt=true", "--prec-sqrt=true"),
    ("--use_fast_math --fmad=false", "--fmad=false"),
])
def test_an_override_of_fast_math_is_built_as_shipped(tmp_path: Path, shipped: str, spelled: str) -> None:
    tuned_from_command(tmp_path, f"nvcc {shipped} -arch=sm_90 -c k.cu", source=KERNEL)
    everything = run_cli(["flags", "k.acf.toml", "--all"], cwd=tmp_path)
    assert everything.returncode == 0, everything.describe()
    flags = shlex.split(everything.stdout)
    assert spelled in flags and "--use_fast_math" in flags
    shipped_flags = [*shlex.split(shipped), "-arch=sm_90"]
    assert _numerics(flags, tmp_path) == _numerics(shipped_flags, tmp_path)
    assert _ptx(flags, tmp_path) == _ptx(shipped_flags, tmp_path)  # the same code, not only the same options
    for form in ("args", "optf", "cmake", "bazel", "json"):  # each format that is appended to the command too
        shown = run_cli(["flags", "k.acf.toml", "--format", form], cwd=tmp_path)
        assert shown.returncode == 0 and spelled in shown.stdout, (form, shown.describe())
    read = acf.read(tmp_path / "k.acf.toml")
    assert spelled in read.argv and read.evidence["baseline"] == read.evidence["best"]


def test_a_config_spells_out_only_what_contradicts_fast_math() -> None:
    space = load_space("13.0")
    values = {"nvcc.use_fast_math": True, "nvcc.ftz": False, "nvcc.prec_div": False, "nvcc.fmad": True}
    assert implied.overridden(values) == {"nvcc.ftz"}
    config = space.default_config().with_values(values)
    assert implied.spelled_out(space, values).frontend_args(config) == ("--use_fast_math", "--ftz=false",
                                                                        "--prec-div=false")
    assert implied.overridden({"nvcc.use_fast_math": False, "nvcc.ftz": False}) == frozenset()
    assert space.config_from_nvcc_args(["--ftz=false"]) == space.default_config()


MACRO_KERNEL = """\
#ifndef TM
#define TM 4
#endif
extern "C" __global__ void scale(float* x, const float* y, int n) {
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * TM;
    for (int j = 0; j < TM; ++j)
        if (i + j < n) x[i + j] = sqrtf(x[i + j]) / y[i + j] + x[i + j] * y[i + j];
}
"""


def test_the_gate_rebuilds_the_shipped_baseline_tune_recorded(tmp_path: Path) -> None:
    """The gate rebuilt a shipped `-ftz=false --use_fast_math` as `--use_fast_math` alone (ftz on):
    not the build `tune` measured, so the `evidence` rule never checked the ACF's [evidence.baseline],
    and an edited one passed (rev50b finding 1). The shipped -DTM=8 (one of tune.toml's) with it."""
    (tmp_path / "tune.toml").write_text("[tune.defines]\nTM = [4, 8]\n")
    out = tuned_from_command(tmp_path, "nvcc -DTM=8 -ftz=false --use_fast_math -arch=sm_90 -c k.cu", source=MACRO_KERNEL)
    target = gating.locate(out, tmp_path / "k.cu")
    tools = find_toolchain()
    bundle = bundle_sources(target.spec, tools.nvcc)
    baseline = gating.rebuild_defaults(target, tools, bundle, gating.rebuild(target, tools, bundle))
    assert "--ftz=false" in baseline.frontend_args and "-DTM=8" in baseline.frontend_args, baseline
    recorded = target.acf.evidence["baseline"]
    assert baseline.build is not None and baseline.build.code_hash == recorded["code_hash"], baseline
    # the baseline's evidence edited: the same code gives other registers
    data = tomllib.loads(out.read_text())
    data["evidence"]["baseline"]["registers"] = int(recorded["registers"]) + 100
    (tmp_path / "forged.acf.toml").write_text(tomli_w.dumps(data))
    gated = run_cli(["gate", "forged.acf.toml", "--static", "--json"], cwd=tmp_path)
    assert gated.returncode == 1, gated.describe()
    found = {f["rule"]: f for f in json.loads(gated.stdout)["acfs"][0]["findings"]}
    assert found["evidence"]["severity"] == "error", found
    assert "baseline" in found["evidence"]["message"] and str(recorded["code_hash"])[:12] in found["evidence"]["message"]
    assert run_cli(["gate", "k.acf.toml", "--static"], cwd=tmp_path).returncode == 0  # the ACF as tune wrote it


def test_a_changed_command_says_the_value_its_build_has(tmp_path: Path) -> None:
    """`-ftz=false` dropped beside `--use_fast_math` turns ftz on; the gate said "nvcc.ftz false ->
    false (the default)" (rev50b finding 5)."""
    out = tuned_from_command(tmp_path, "nvcc -ftz=false --use_fast_math -arch=sm_90 -c k.cu", source=KERNEL)
    compile_commands_file(tmp_path, "nvcc --use_fast_math -arch=sm_90 -c k.cu")
    gated = run_cli(["gate", out.name, "--static", "--json"], cwd=tmp_path)
    assert gated.returncode in (0, 1), gated.describe()
    stale = next(f for f in json.loads(gated.stdout)["acfs"][0]["findings"] if f["rule"] == "stale-settings")
    assert "(nvcc.ftz false -> true (implied by --use_fast_math))" in stale["message"], stale


@pytest.mark.parametrize("now, change", [
    ("nvcc --use_fast_math -ftz=true -arch=sm_90 -c k.cu", None),  # implied already: the same build
    ("nvcc --use_fast_math --prec-div=false -arch=sm_90 -c k.cu", None),
    ("nvcc --use_fast_math -ftz=false -arch=sm_90 -c k.cu", "nvcc.ftz true (implied by --use_fast_math) -> false"),
])
def test_a_command_that_spells_out_what_fast_math_implies_is_no_change(tmp_path: Path, now: str,
                                                                       change: str | None) -> None:
    """`-ftz=true` added beside `--use_fast_math` (which implies it) warned "nvcc.ftz true (implied
    by --use_fast_math) -> true", as if the build had changed (fix51C finding 2); `-ftz=false` still warns."""
    out = tuned_from_command(tmp_path, "nvcc --use_fast_math -arch=sm_90 -c k.cu", source=KERNEL)
    compile_commands_file(tmp_path, now)
    gated = run_cli(["gate", out.name, "--static", "--json"], cwd=tmp_path)
    assert gated.returncode in (0, 1), gated.describe()
    stale = [f for f in json.loads(gated.stdout)["acfs"][0]["findings"] if f["rule"] == "stale-settings"]
    if change is None:
        assert not stale and gated.returncode == 0, stale
    else:
        assert len(stale) == 1 and f"({change})" in stale[0]["message"], stale


def test_a_command_that_ships_the_choice_with_what_fast_math_implies_spelled_out_applies_it(tmp_path: Path) -> None:
    """An ACF that chose `--use_fast_math` from the defaults, applied as `--use_fast_math -ftz=true`
    (the same build), is the ACF applied, not a changed command."""
    (tmp_path / "k.cu").write_text(KERNEL)
    compile_commands_file(tmp_path, "nvcc -arch=sm_90 -c k.cu")
    tuned = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--allow-numerics", "--only",
                     "nvcc.use_fast_math", "--strategy", "exhaustive", "--objective", "instructions", "--workers",
                     "local", "--db", f"sqlite:///{tmp_path}/t.db", "--out", "k.acf.toml"], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    assert tomllib.loads((tmp_path / "k.acf.toml").read_text())["controls"] == {"nvcc.use_fast_math": True}
    compile_commands_file(tmp_path, "nvcc --use_fast_math -ftz=true -arch=sm_90 -c k.cu")
    gated = run_cli(["gate", "k.acf.toml", "--static", "--json"], cwd=tmp_path)
    assert gated.returncode == 0, gated.describe()
    assert not [f for f in json.loads(gated.stdout)["acfs"][0]["findings"] if f["rule"] == "stale-settings"]
