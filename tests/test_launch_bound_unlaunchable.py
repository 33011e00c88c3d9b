"""A -Xptxas flag builds every kernel of the file: a register cap (with --override-directive-values)
that cuts the scored kernel's spills may leave another kernel unable to launch at the threads its own
__launch_bounds__ declares (255 registers x 1024 threads is past an SM's 65,536), while the occupancy
the rules read, taken at tune.toml's block_size, still looks launchable. A red team's tune chose such
flags for a file of overloads, templates and a long-named kernel, and the gate passed them: now tune
refuses the build (every objective) and the gate fails it (`launch-bound`), naming the kernel, its
bound and its registers."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import tomli_w

from compileiq.evaluate import eligibility
from compileiq.evaluate.launch_bound import Bounds, bound_refusal
from tests.helpers import run_cli

BODY = r"""#define BODY(T, acc, x, coef, y, i, n)                                   \
    T acc[TAPS];                                                          \
    _Pragma("unroll") for (int k = 0; k < TAPS; ++k) acc[k] = x[(i + k * 131) % n]; \
    _Pragma("unroll 1") for (int r = 0; r < 8; ++r) {                    \
        _Pragma("unroll") for (int k = 0; k < TAPS - 1; ++k)             \
            acc[k] = acc[k] * coef[k] + acc[k + 1] * coef[TAPS + k];      \
    }                                                                     \
    T s = 0;                                                              \
    _Pragma("unroll") for (int k = 0; k < TAPS; ++k) s += acc[k] * acc[(k * 7) % TAPS]; \
    y[i] = s;
"""
# `hot` (scored) spills under its bound of 256 x 2; the double overload of `ov` has 64 registers at its
# bound of 1024 threads, and 255 under --maxrregcount=255 --override-directive-values
MULTI = "#define TAPS 64\n" + BODY + r"""
extern "C" __global__ void __launch_bounds__(256, 2)
hot(const float* __restrict__ x, const float* __restrict__ coef, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
    BODY(float, acc, x, coef, y, i, n)
}
__global__ void ov(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = y[i] * 2.f; }
__global__ void __launch_bounds__(1024, 1)
ov(const double* __restrict__ x, const double* __restrict__ coef, double* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
    BODY(double, acc, x, coef, y, i, n)
}
template <int N> __global__ void tk(float* y) { y[threadIdx.x] += N; }
template __global__ void tk<1>(float*);
"""
TUNE_TOML = 'arch = "sm_90"\nentries = ["hot"]\nblock_size = 256\n'
UNLAUNCHABLE = {"ptxas.maxrregcount": 255, "ptxas.override_directive_values": True}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("launchbound")
    (folder / "multi.cu").write_text(MULTI)
    (folder / "tune.toml").write_text(TUNE_TOML)
    done = run_cli(["tune", "multi.cu", "--objective", "spills", "--budget", "16", "--strategy", "random", "--seed", "3",
                    "--only", "ptxas.maxrregcount,ptxas.override_directive_values", "--workers", "local",
                    "--db", "sqlite:///x.db", "--out", "m.acf.toml"], cwd=folder)
    assert done.returncode == 0, done.describe()
    return folder


def test_tune_refuses_flags_that_leave_a_kernel_unable_to_launch_at_its_launch_bounds(tuned: Path) -> None:
    acf = tomllib.loads((tuned / "m.acf.toml").read_text())
    assert acf["controls"] != UNLAUNCHABLE, acf["controls"]
    shown = json.loads(run_cli(["show", "1", "--db", "sqlite:///x.db", "--json"], cwd=tuned).stdout)
    capped = [t for t in shown["trials"] if all(t["config"].get(k) == v for k, v in UNLAUNCHABLE.items())]
    assert capped, [t["config"] for t in shown["trials"]]
    refused = str(capped[0]["refused"])
    assert "cannot launch" in refused and "ov (_Z2ovPKdS0_Pdi) at its __launch_bounds__ of 1024 threads: 255 " \
        "registers per thread (baseline 64)" in refused, refused


def test_the_gate_fails_flags_that_leave_a_kernel_unable_to_launch_at_its_launch_bounds(tuned: Path) -> None:
    findings = _gated_with(tuned / "m.acf.toml", UNLAUNCHABLE, ["--maxrregcount=255", "--override-directive-values"])
    assert "ov (_Z2ovPKdS0_Pdi) at its __launch_bounds__ of 1024 threads: 255 registers" in findings[0]["message"]


def _metrics(registers: int, threads: int = 1024) -> dict[str, object]:
    return {"spill_bytes": 0, "occupancy": 0.5, "bounds": {"arch": "sm_90", "kernels": {"wide": [threads, registers, 0]}}}


def test_every_objective_refuses_it_time_screening_too() -> None:
    for objective in ("static", "spills", "time"):
        reference = eligibility.Reference(0, 0.5, {}, objective, bounds=Bounds.of(_metrics(64)))
        why = eligibility.refusal({}, _metrics(255), reference.screening() if objective == "time" else reference)
        assert why and "wide at its __launch_bounds__ of 1024 threads: 255 registers" in why, (objective, why)
        assert eligibility.refusal({}, _metrics(64), reference) is None


def test_only_a_launch_the_baseline_could_make_is_held_and_older_or_forged_rows_read_as_none() -> None:
    assert bound_refusal(_metrics(255), Bounds.of(_metrics(255))) is None  # the baseline could not launch it either
    assert bound_refusal(_metrics(255), Bounds.of({"spill_bytes": 0})) is None  # a row recorded before bounds were
    assert bound_refusal({"spill_bytes": 0}, Bounds.of(_metrics(64))) is not None  # a variant with none: refused
    for forged in ({"arch": "sm_90; rm", "kernels": {}}, {"arch": "sm_90", "kernels": {"k": [4096, 1, 0]}},
                   {"arch": "sm_90", "kernels": {"k": [256, True, 0]}}, "x"):
        assert Bounds.of({"bounds": forged}) is None, forged


# a tuned macro sets the bound: each build launches at the bound its own build declares
MACRO_BOUND = "#define TAPS 64\n#ifndef BLOCK\n#define BLOCK 512\n#endif\n" + BODY + r"""
extern "C" __global__ void __launch_bounds__(BLOCK)
hot(const double* __restrict__ x, const double* __restrict__ coef, double* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
    BODY(double, acc, x, coef, y, i, n)
}
"""
MACRO_TUNE = 'arch = "sm_90"\nblock_size = "BLOCK"\n[tune.defines]\nBLOCK = [512, 128, 1024]\n'


@pytest.fixture(scope="module")
def macro_bound(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("macrobound")
    (folder / "k.cu").write_text(MACRO_BOUND)
    (folder / "tune.toml").write_text(MACRO_TUNE)
    done = run_cli(["tune", "k.cu", "--objective", "spills", "--budget", "3", "--only", "define.BLOCK",
                    "--workers", "local", "--db", "sqlite:///x.db", "--out", "k.acf.toml"], cwd=folder)
    assert done.returncode == 0, done.describe()
    return folder


def test_a_build_whose_macro_lowers_its_bound_is_held_at_its_own_bound_not_the_baselines(macro_bound: Path) -> None:
    # BLOCK=128: 255 registers x 128 threads launches (the baseline's bound of 512 would not), and spills least
    acf = tomllib.loads((macro_bound / "k.acf.toml").read_text())
    assert acf["controls"] == {"define.BLOCK": 128}, acf["controls"]
    shown = json.loads(run_cli(["show", "1", "--db", "sqlite:///x.db", "--json"], cwd=macro_bound).stdout)
    assert not [t for t in shown["trials"] if "cannot launch" in str(t["refused"])], shown["trials"]


def test_the_gate_holds_a_build_whose_macro_raises_its_bound_at_its_own_bound(macro_bound: Path) -> None:
    # BLOCK=1024 with 128 registers forced: it fits the baseline's 512 threads, never its own 1024
    document = tomllib.loads((macro_bound / "k.acf.toml").read_text())
    document["controls"] = {"define.BLOCK": 1024, "ptxas.maxrregcount": 128, "ptxas.override_directive_values": True}
    document["args"] = {"frontend": ["-DBLOCK=1024"], "ptxas": ["--maxrregcount=128", "--override-directive-values"],
                        "defines": [], "argv": ["-DBLOCK=1024", "-Xptxas=--maxrregcount=128",
                                                "-Xptxas=--override-directive-values"]}
    (macro_bound / "wide.acf.toml").write_text(tomli_w.dumps(document))
    gated = run_cli(["gate", "wide.acf.toml", "--json"], cwd=macro_bound)
    assert gated.returncode == 1, gated.describe()
    findings = [f for r in json.loads(gated.stdout)["acfs"] for f in r["findings"] if f["rule"] == "launch-bound"]
    assert findings, gated.stdout
    assert "hot at its __launch_bounds__ of 1024 threads: 128 registers per thread (baseline 128 at its bound of " \
        "512 threads)" in findings[0]["message"], findings[0]["message"]


def test_each_build_is_launched_at_the_bound_it_declares() -> None:
    narrow = {"spill_bytes": 0, "bounds": {"arch": "sm_90", "kernels": {"k": [128, 255, 0]}}}
    wide = {"spill_bytes": 0, "bounds": {"arch": "sm_90", "kernels": {"k": [1024, 128, 0]}}}
    baseline = Bounds.of({"bounds": {"arch": "sm_90", "kernels": {"k": [512, 128, 0]}}})
    assert bound_refusal(narrow, baseline) is None
    why = bound_refusal(wide, baseline)
    assert why and "k at its __launch_bounds__ of 1024 threads: 128 registers per thread (baseline 128 at its " \
        "bound of 512 threads)" in why, why


LOWERED = r"""__global__ void small(float* y) { y[threadIdx.x] *= 2.f; }
__global__ void __launch_bounds__(1024) big(float* y) { y[threadIdx.x] += 1.f; }
"""
LOWERS = {"ptxas.maxntid": 256, "ptxas.override_directive_values": True}


@pytest.fixture(scope="module")
def lowered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`nvcc -arch=sm_90 -cubin -Xptxas --maxntid=256,--override-directive-values` builds big's cubin with
    a max of 256 threads per block (EIATTR_MAX_THREADS) at the same 8 registers: its PTX .maxntid and
    registers, all the launch-bound check read, still said 1024 threads, launchable."""
    folder = tmp_path_factory.mktemp("lowered")
    (folder / "lb.cu").write_text(LOWERED)
    (folder / "tune.toml").write_text('arch = "sm_90"\nentries = ["small"]\nblock_size = 64\n')
    done = run_cli(["tune", "lb.cu", "--objective", "static", "--budget", "12", "--allow-semantics", "--strategy",
                    "random", "--seed", "1", "--only", "ptxas.maxntid,ptxas.override_directive_values",
                    "--workers", "local", "--db", "sqlite:///x.db", "--out", "lb.acf.toml"], cwd=folder)
    assert done.returncode == 0, done.describe()
    return folder


def test_tune_refuses_a_maxntid_that_overrides_a_kernels_launch_bounds_downward(lowered: Path) -> None:
    acf = tomllib.loads((lowered / "lb.acf.toml").read_text())
    assert not (acf["controls"].get("ptxas.override_directive_values") is True
                and acf["controls"].get("ptxas.maxntid", "default") != "default"
                and acf["controls"]["ptxas.maxntid"] < 1024), acf["controls"]
    shown = json.loads(run_cli(["show", "1", "--db", "sqlite:///x.db", "--json"], cwd=lowered).stdout)
    below = [t for t in shown["trials"] if t["config"].get("ptxas.override_directive_values") is True
             and t["config"].get("ptxas.maxntid") in (64, 128, 256, 512)]
    assert below, [t["config"] for t in shown["trials"]]
    for trial in below:
        cap = trial["config"]["ptxas.maxntid"]
        assert (f"ptxas --maxntid={cap} with --override-directive-values lowers big's __launch_bounds__ of 1024 "
                "threads") in str(trial["refused"]), trial
    kept = [t for t in shown["trials"] if t["config"].get("ptxas.override_directive_values") is not True]
    assert all("lowers big's" not in str(t["refused"]) for t in kept), kept


def test_the_gate_fails_a_maxntid_that_overrides_a_kernels_launch_bounds_downward(lowered: Path) -> None:
    findings = _gated_with(lowered / "lb.acf.toml", LOWERS, ["--maxntid=256", "--override-directive-values"])
    assert ("ptxas --maxntid=256 with --override-directive-values lowers big's __launch_bounds__ of 1024 threads"
            in findings[0]["message"]), findings


def _gated_with(acf_path: Path, controls: dict[str, object], ptxas: list[str]) -> list[dict[str, object]]:
    """The gate's `launch-bound` findings (at least one, an error: exit 1) on the ACF at `acf_path`
    edited to `controls` and their `ptxas` options, as an ACF that chose them reads."""
    document = tomllib.loads(acf_path.read_text())
    document["controls"] = dict(controls)
    document["args"]["ptxas"] = list(ptxas)
    names = [option.split("=")[0] for option in ptxas]
    kept = [arg for arg in document["args"]["argv"] if not any(name in arg for name in names)]
    document["args"]["argv"] = [*(f"-Xptxas={option}" for option in ptxas), *kept]
    edited = acf_path.with_name("edited.acf.toml")
    edited.write_text(tomli_w.dumps(document))
    gated = run_cli(["gate", edited.name, "--json"], cwd=acf_path.parent)
    assert gated.returncode == 1, gated.describe()
    findings = [f for r in json.loads(gated.stdout)["acfs"] for f in r["findings"] if f["rule"] == "launch-bound"]
    assert findings and findings[0]["severity"] == "error", gated.stdout
    return findings
