"""Static objectives never recommend harm (issue 14, items 8-10), with real nvcc/ptxas.

- every function ptxas reports counts: a `__noinline__` callee's spills are the kernel's spills;
- a GPU-free objective may not add spill bytes over the compiler defaults, nor lower ptxas's
  optimisation at all; `static` worsens no static metric; ties go to the defaults;
- `compileiq gate` fails an ACF that is worse than the defaults without a recorded gain.

tests/corpus_harm/ holds register-hungry kernels where the lowest register cap spills:
a GEMM tile (8 x 8 accumulators per thread), a reaction-rate network with 48 live species, and
a tiny kernel whose `__noinline__` callee spills in its own frame; and Rodinia's hotspot (third-party,
its header names where from), whose lower `-O` changes nothing.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from helpers import run_cli

from compileiq import app
from compileiq.build.compile import AssembleJob, FrontendJob, assemble, emit_ptx, parse_resources
from compileiq.core.processes import run_tool
from compileiq.core.records import Trial, TrialState
from compileiq.core.space_files import load_space
from compileiq.core.toolchain import find_toolchain
from compileiq.evaluate import eligibility
from compileiq.evaluate.metrics import StaticEvaluator
from compileiq.gating import check as gating
from compileiq.gating import rules as gate_rules
from compileiq.results import acf
from compileiq.results.acf import AcfContent
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.tuning.progress import SilentProgress

CORPUS = Path(__file__).resolve().parent / "corpus_harm"
WARM = Path(__file__).resolve().parent / "corpus_warm"  # public kernels by others (its README)
KERNELS = Path(__file__).resolve().parents[1] / "kernels"
HARM_SPACE = ("ptxas.maxrregcount", "ptxas.override_directive_values", "ptxas.opt_level",
              "ptxas.allow_expensive_optimizations")
STATIC = ("static", "spills", "registers", "occupancy", "instructions")
LOW_CAP = {"ptxas.maxrregcount": 24, "ptxas.override_directive_values": True}


def _by_hand(kernel: Path, flags: list[str], tmp_path: Path) -> tuple[int, int]:
    """(spill bytes of every function, max registers of the entries) from `nvcc -cubin -Xptxas=-v`,
    as a user would read them."""
    tools = find_toolchain()
    include = [f"-I{KERNELS.parent / 'compileiq' / 'include'}"]
    out = tmp_path / f"{kernel.stem}.cubin"
    run = run_tool([tools.nvcc, *flags, *include, "-cubin", "-Xptxas=-v", str(kernel), "-o", str(out)], 300)
    assert run.returncode == 0, run.output
    report = parse_resources(run.output, {})
    return sum(f.spill_bytes for f in report), max(f.registers for f in report if f.entry)


def _tune(kernel: Path, tmp_path: Path, objective: str, **overrides: Any) -> app.TuneReport:
    options = {"kernel": kernel, "objective": objective, "budget": 10, "workers": "local",
               "db": f"sqlite:///{tmp_path}/t.db", "out": tmp_path / f"{kernel.stem}.{objective}.acf.toml",
               "only": HARM_SPACE, **overrides}
    return app.tune(app.TuneOptions(**options), SilentProgress())


# --- item 8: callee spills count ---------------------------------------------------------------


def test_a_noinline_callees_spills_are_the_kernels_spills(tmp_path):
    spec = load_spec(CORPUS / "noinline_callee.cu")
    tools = find_toolchain()
    ptx = emit_ptx(FrontendJob(tools.nvcc, bundle_sources(spec), "sm_90", (), 120))
    build = assemble(AssembleJob(tools.ptxas, "sm_90", (), 120), ptx)
    (kernel,) = [f for f in build.entries if f.entry]
    (callee,) = [f for f in build.entries if not f.entry]
    assert (kernel.name, kernel.spill_bytes, kernel.registers) == ("noinline_callee", 0, 128)
    assert (callee.name, callee.spill_store_bytes, callee.spill_load_bytes) == ("_Z6fir128PKfii", 60, 60)
    evaluation = StaticEvaluator("spills", spec).evaluate(build, load_space(tools.nvcc_version).default_config())
    assert evaluation.value == 120 and evaluation.metrics["spill_bytes"] == 120
    assert evaluation.metrics["registers"] == 128  # the callee has no register line of its own
    assert _by_hand(CORPUS / "noinline_callee.cu", ["-arch=sm_90"], tmp_path) == (120, 128)


def test_the_registers_objective_does_not_buy_registers_with_callee_spills(tmp_path):
    report = _tune(CORPUS / "noinline_callee.cu", tmp_path, "registers", budget=6, strategy="exhaustive",
                   only=("ptxas.maxrregcount", "ptxas.override_directive_values"))
    baseline, chosen = report.result.baseline, report.result.chosen
    assert baseline.metrics["spill_bytes"] == 120
    assert any(t.metrics.get("spill_bytes", 0) > 120 for t in report.result.trials)  # capped: the callee spills more
    assert chosen.metrics["spill_bytes"] <= 120


# --- item 8: no added spills, end to end -------------------------------------------------------


@pytest.mark.parametrize("objective", ["registers", "occupancy"])
@pytest.mark.parametrize("kernel", ["tile_gemm", "chemistry"])
def test_register_objectives_never_add_spills_over_the_defaults(tmp_path, kernel, objective):
    source = CORPUS / f"{kernel}.cu"
    report = _tune(source, tmp_path, objective, budget=8)
    trials = report.result.trials
    baseline = report.result.baseline
    assert baseline.metrics["spill_bytes"] == 0
    spilling = [t for t in trials if t.state is TrialState.COMPLETE and t.metrics["spill_bytes"] > 0]
    assert spilling, "the search never tried a spilling cap: the test would prove nothing"
    assert all(t.value is not None and t.state is TrialState.COMPLETE for t in spilling)  # recorded, not failed
    written = acf.read(report.acf_path)
    assert written.evidence["best"]["spill_bytes"] == 0
    assert written.evidence["vs_defaults"]["spill_bytes"] == {"defaults": 0, "chosen": 0}
    assert _by_hand(source, list(written.flags()), tmp_path)[0] == 0
    result = run_cli(["gate", str(report.acf_path)], cwd=tmp_path)
    assert result.returncode == 0, result.describe()


def test_a_third_party_kernel_whose_every_cap_spills_keeps_its_defaults(tmp_path):
    """Rodinia's CFD flux kernel in double precision (tests/corpus_warm, written by others): 102
    registers and no spills at the defaults; every cap of the space below that spills, so
    `registers` tries them, records each with its spills, and keeps the compiler's defaults."""
    source = WARM / "cfd_euler3d_double" / "cfd_euler3d_double.cu"
    report = _tune(source, tmp_path, "registers", budget=24, strategy="exhaustive",
                   only=("ptxas.maxrregcount", "ptxas.override_directive_values"))
    baseline, trials = report.result.baseline, report.result.trials
    assert (baseline.metrics["registers"], baseline.metrics["spill_bytes"]) == (102, 0)
    capped = [t for t in trials if t.state is TrialState.COMPLETE and t.metrics["registers"] < 102]
    assert len(capped) >= 5, "the exhaustive search tried the caps below 102"
    assert all(t.metrics["spill_bytes"] > 0 for t in capped)  # every fewer-register build spills
    written = acf.read(report.acf_path)
    assert written.controls == {} and written.evidence["best"]["registers"] == 102
    assert _by_hand(source, ["-arch=sm_90", "-maxrregcount=96"], tmp_path)[0] > 0  # as ptxas -v tells a user


# --- item 9: no lower optimisation level for a static number, ties to the defaults -------------


@pytest.mark.parametrize(
    ("source", "objective", "budget"),
    [
        (KERNELS / "softmax" / "softmax.cu", "instructions", 4),  # -O1: 448 instructions vs 504
        (KERNELS / "softmax" / "softmax.cu", "static", 4),
        (KERNELS / "spmv_sell" / "spmv_sell.cu", "instructions", 12),  # -O1: 120 vs 280 (x 3 BLOCK values)
        (KERNELS / "spmv_sell" / "spmv_sell.cu", "static", 12),
        (CORPUS / "chemistry.cu", "registers", 4),  # -O1: 112 registers vs 128
    ],
    ids=lambda v: v.stem if isinstance(v, Path) else str(v),
)
def test_a_lower_opt_level_never_wins_without_a_spill_or_occupancy_gain(tmp_path, source, objective, budget):
    """-O1 lowers the static number (instructions, registers) at the same occupancy and no spills:
    nothing a static objective may reward."""
    report = _tune(source, tmp_path, objective, budget=budget, strategy="exhaustive", only=("ptxas.opt_level",))
    result = report.result
    defaults = {k: v for k, v in result.baseline.config.items() if k != "ptxas.opt_level"}
    by_level = {t.config["ptxas.opt_level"]: t for t in result.trials
                if {k: v for k, v in t.config.items() if k != "ptxas.opt_level"} == defaults}
    assert set(by_level) == {0, 1, 2, 3}
    lower, base = by_level[1], by_level[3]
    assert lower.metrics["instructions" if objective != "registers" else "registers"] < base.metrics[
        "instructions" if objective != "registers" else "registers"]
    assert (lower.metrics["spill_bytes"], lower.metrics["occupancy"]) == (0, base.metrics["occupancy"])
    assert result.chosen.config["ptxas.opt_level"] == 3
    assert "ptxas.opt_level" not in acf.read(report.acf_path).controls


def test_the_static_objective_ignores_instruction_counts(tmp_path):
    """Same spills and occupancy is no improvement, whatever the instruction count: the ACF keeps
    the defaults (the search tried caps and levels that change the code but not those two)."""
    report = _tune(CORPUS / "tile_gemm.cu", tmp_path, "static", budget=8)
    result = report.result
    base = result.baseline.metrics
    same = [t for t in result.trials if t.state is TrialState.COMPLETE and t.code_hash != result.baseline.code_hash
            and (t.metrics["spill_bytes"], t.metrics["occupancy"]) == (base["spill_bytes"], base["occupancy"])]
    assert same and any(t.metrics["instructions"] != base["instructions"] for t in same)
    assert all(t.value == result.baseline.value for t in same)
    better = [t for t in result.trials if t.value is not None and t.value < result.baseline.value
              and eligibility.refusal(t.config, t.metrics, eligibility.Reference.of(result.baseline, "static")) is None]
    if not better:
        assert result.chosen is result.baseline and acf.read(report.acf_path).controls == {}


def _trial(number: int, value: float | None, config: dict[str, Any], **metrics: Any) -> Trial:
    state = TrialState.COMPLETE if value is not None else TrialState.FAILED
    return Trial(number, 1, number, str(number), config, state, value, None, False,
                 {"spill_bytes": 0, "occupancy": 0.5, **metrics}, f"code{number}", 0.1, None, None, "w")  # type: ignore[arg-type]


def test_the_winner_rule_strictly_better_then_closest_to_the_defaults():
    defaults = {"a": 0, "b": 0, "ptxas.opt_level": 3}
    baseline = _trial(0, 10.0, defaults)
    far = _trial(1, 8.0, {"a": 1, "b": 1, "ptxas.opt_level": 3})
    near = _trial(2, 8.0, {"a": 1, "b": 0, "ptxas.opt_level": 3})
    tie = _trial(3, 10.0, {"a": 1, "b": 0, "ptxas.opt_level": 3})
    spills = _trial(4, 1.0, {"a": 0, "b": 1, "ptxas.opt_level": 3}, spill_bytes=64)
    low_o = _trial(5, 2.0, {"a": 0, "b": 0, "ptxas.opt_level": 1})
    low_o_gain = _trial(6, 7.0, {"a": 0, "b": 0, "ptxas.opt_level": 1}, occupancy=0.75)
    reference = eligibility.Reference.of(baseline, "registers")
    assert reference is not None

    def refuse(t: Trial) -> str | None:
        return eligibility.refusal(t.config, t.metrics, reference)

    assert eligibility.choose([baseline, tie], baseline, refuse) is baseline
    assert eligibility.choose([baseline, far, near, tie], baseline, refuse) is near
    assert eligibility.choose([baseline, far, near, spills, low_o], baseline, refuse) is near
    assert eligibility.choose([baseline, near, low_o_gain], baseline, refuse) is near  # a gain does not justify -O1
    assert "adds spill bytes" in (refuse(spills) or "")
    assert "lowers optimisation (ptxas.opt_level=1)" in (refuse(low_o) or "")
    assert "only a measured runtime can justify it" in (refuse(low_o_gain) or "")
    assert "lowers occupancy" in (refuse(_trial(7, 1.0, defaults, occupancy=0.25)) or "")
    screening = reference.screening()  # --objective time measures a lower level that has a static gain
    assert eligibility.refusal(low_o_gain.config, low_o_gain.metrics, screening) is None
    assert "with no spill or occupancy gain" in (eligibility.refusal(low_o.config, low_o.metrics, screening) or "")


def test_static_worsens_no_metric_and_the_others_trade_occupancy_only_for_spills():
    defaults = {"a": 0, "ptxas.opt_level": 3}
    baseline = _trial(0, 10.0, defaults, spill_bytes=16, occupancy=1.0)
    traded = _trial(1, 1.0, {"a": 1, "ptxas.opt_level": 3}, spill_bytes=0, occupancy=0.375)
    for objective, refused in (("static", True), ("spills", False), ("registers", False), ("occupancy", False)):
        reference = eligibility.Reference.of(baseline, objective)
        assert reference is not None
        reason = eligibility.refusal(traded.config, traded.metrics, reference)
        assert (reason is not None) is refused, (objective, reason)
    reason = eligibility.refusal(traded.config, traded.metrics, eligibility.Reference.of(baseline, "static"))
    assert reason == "lowers occupancy (100.0% -> 37.5%) for fewer spill bytes: a trade-off `static` never makes " \
                     "without a GPU"


def test_candidates_to_time_are_the_trade_offs_a_gpu_must_judge():
    defaults = {"a": 0, "ptxas.opt_level": 3}
    baseline = _trial(0, 16000.0, defaults, spill_bytes=16, occupancy=1.0)
    chosen = _trial(1, 8000.0, {"a": 1, "ptxas.opt_level": 3}, spill_bytes=8, occupancy=1.0)
    traded = _trial(2, 625.0, {"a": 2, "ptxas.opt_level": 3}, spill_bytes=0, occupancy=0.375)
    lowered = _trial(3, 4000.0, {"a": 1, "ptxas.opt_level": 1}, spill_bytes=4, occupancy=1.0)
    worse = _trial(4, 9000.0, {"a": 0, "ptxas.opt_level": 2}, spill_bytes=9, occupancy=1.0)
    spills = _trial(5, 1.0, {"a": 3, "ptxas.opt_level": 3}, spill_bytes=64, occupancy=1.0)
    same_code = _trial(6, 625.0, {"a": 2, "ptxas.opt_level": 3, "b": 1}, spill_bytes=0, occupancy=0.375)
    same_code = Trial(**{**same_code.__dict__, "code_hash": traded.code_hash})
    trials = [baseline, chosen, traded, lowered, worse, spills, same_code]
    refuse = eligibility.study_refusal(baseline, "static", True)
    assert eligibility.choose(trials, baseline, refuse) is chosen
    found = eligibility.candidates_to_time(trials, chosen, baseline, "static")
    assert found == (traded, lowered)  # best first, one per machine code; not `worse`, not `spills`
    assert eligibility.candidates_to_time(trials, chosen, baseline, "spills") == (lowered,)  # spills may trade
    assert eligibility.candidates_to_time(trials, chosen, baseline, "time") == ()


def test_a_trial_refused_for_its_level_alone_is_tried_again_at_the_default_level():
    defaults = {"a": 0, "ptxas.opt_level": 3, "ptxas.allow_expensive_optimizations": True}
    baseline = _trial(0, 672.0, defaults, spill_bytes=672)
    gained = _trial(1, 0.0, {"a": 1, "ptxas.opt_level": 0, "ptxas.allow_expensive_optimizations": False},
                    spill_bytes=0)
    no_gain = _trial(2, 672.0, {"a": 2, "ptxas.opt_level": 1, "ptxas.allow_expensive_optimizations": True},
                     spill_bytes=672)
    reference = eligibility.Reference.of(baseline, "spills")
    assert reference is not None
    assert eligibility.repairs([baseline, no_gain, gained], reference, defaults) == [
        {"a": 1, "ptxas.opt_level": 3, "ptxas.allow_expensive_optimizations": True}]


def test_lower_occupancy_passes_the_gate_only_with_fewer_spills_or_a_runtime_gain():
    acf_build = gate_rules.Measured("s", "t", None, spill_bytes=0, registers=200, occupancy=0.125, code_hash="c")
    traded = gate_rules.Defaults(None, spill_bytes=672, occupancy=0.25)
    assert gate_rules.default_hits(acf_build, traded) == []
    plain = gate_rules.Defaults(None, spill_bytes=0, occupancy=0.25)
    (hit,) = gate_rules.default_hits(acf_build, plain)
    assert hit.rule == "worse-than-default" and "lower occupancy" in hit.message
    claimed = gate_rules.Defaults(None, 0, 0.25, (), "confirmed speedup")
    assert gate_rules.default_hits(acf_build, claimed, timed=True) == []  # the timing rules check the gain
    (hit,) = gate_rules.default_hits(acf_build, claimed)  # an untrusted number a static gate cannot check
    assert hit.rule == "runtime-claim" and hit.message.startswith("lower occupancy than the compiler defaults")


def test_a_lower_level_passes_the_gate_only_with_a_recorded_runtime_gain():
    acf_build = gate_rules.Measured("s", "t", None, spill_bytes=0, registers=200, occupancy=0.5, code_hash="c")
    gained = gate_rules.Defaults(None, spill_bytes=672, occupancy=0.25, lowered=("ptxas.opt_level=1",))
    (hit,) = gate_rules.default_hits(acf_build, gained)  # fewer spills and more occupancy do not justify -O1
    assert hit.rule == "worse-than-default"
    assert hit.message == ("lowers ptxas optimisation vs the compiler defaults (ptxas.opt_level=1) with no recorded "
                           "runtime gain")
    timed = gate_rules.Defaults(None, 672, 0.25, ("ptxas.opt_level=1",), "confirmed runtime speedup 1.250x")
    assert gate_rules.default_hits(acf_build, timed, timed=True) == []
    (hit,) = gate_rules.default_hits(acf_build, timed)
    assert hit.rule == "runtime-claim"
    assert hit.message == ("lowers ptxas optimisation vs the compiler defaults (ptxas.opt_level=1): justified only by "
                           "the ACF's recorded confirmed runtime speedup 1.250x, which a gate without a GPU cannot "
                           "check (an ACF is untrusted): `compileiq gate --device` times it")


# --- item 10: the gate checks an ACF against the compiler defaults -----------------------------


def _hand_made_acf(workspace: Path, source: Path, controls: dict[str, Any],
                   objective: dict[str, Any] | None = None) -> Path:
    """An ACF written by hand with `controls`; its evidence is its own honest rebuild, so only a
    comparison with the defaults can fault it."""
    kernel = workspace / source.name
    kernel.write_bytes(source.read_bytes())
    spec, tools = load_spec(kernel), find_toolchain()
    space = load_space(tools.nvcc_version)
    config = space.default_config().with_values(controls)
    bundle = bundle_sources(spec)
    ptx = emit_ptx(FrontendJob(tools.nvcc, bundle, spec.arch, space.frontend_args(config), 300))
    build = assemble(AssembleJob(tools.ptxas, spec.arch, space.ptxas_args(config), 300), ptx)
    metrics = StaticEvaluator("spills", spec).evaluate(build, config).metrics
    best = {k: metrics[k] for k in ("spill_bytes", "registers", "occupancy")} | {"code_hash": build.code_hash}
    content = AcfContent(
        kernel=spec.name, source_name=kernel.name, source_path=kernel.name, source_sha256=bundle.sha256,
        arch=spec.arch, nvcc_version=tools.nvcc_version, ptxas_version=tools.ptxas_version,
        toolchain_build=tools.nvcc_build, space=space, config=config, fixed_defines=(),
        objective=objective or {"name": "registers", "kind": "static estimate"}, evidence={"best": best},
        provenance={"by": "hand"},
    )  # fmt: skip
    return acf.write(workspace / f"{spec.name}.acf.toml", content)


def test_the_gate_fails_an_acf_that_spills_more_than_the_defaults(tmp_path):
    path = _hand_made_acf(tmp_path, CORPUS / "tile_gemm.cu", LOW_CAP)
    spills, _ = _by_hand(CORPUS / "tile_gemm.cu", list(acf.read(path).flags()), tmp_path)
    assert spills > 0
    result = run_cli(["gate", path.name, "--static"], cwd=tmp_path)
    assert result.returncode == 1, result.describe()
    assert (f"error worse-than-default: spills more than the compiler defaults (0 -> {spills} B) with no recorded "
            "runtime gain (recorded defaults ") in result.stdout  # the ACF's word; both builds measured now:
    assert f"measured defaults 0 B, ACF {spills} B)" in result.stdout
    assert "lower occupancy" not in result.stdout  # 24 registers raise occupancy: spills alone fail it
    assert "error spills" not in result.stdout  # the ACF's own evidence is honest


def test_the_gate_fails_a_callee_that_spills_more_than_the_defaults(tmp_path):
    path = _hand_made_acf(tmp_path, CORPUS / "noinline_callee.cu", LOW_CAP)
    result = run_cli(["gate", path.name, "--static", "--json"], cwd=tmp_path)
    assert result.returncode == 1, result.describe()
    assert "spills more than the compiler defaults (120 -> " in result.stdout


def test_the_gate_fails_a_lower_opt_level_unless_a_runtime_gain_is_recorded(tmp_path):
    path = _hand_made_acf(tmp_path, CORPUS / "chemistry.cu", {"ptxas.opt_level": 1})
    with contextlib.chdir(tmp_path):
        report = gating.run(gating.GateOptions(acfs=(Path(path.name),), device=False))
    (result,) = report.results
    assert report.exit_code == 1
    assert [(f.rule, f.measured) for f in result.findings] == [("worse-than-default", "ptxas.opt_level=1")]
    assert result.findings[0].message.endswith("(ptxas.opt_level=1) with no recorded runtime gain")

    faster = {"name": "time", "kind": "runtime", "improved": True, "speedup": 1.25, "verdict": "faster"}
    _hand_made_acf(tmp_path, CORPUS / "chemistry.cu", {"ptxas.opt_level": 1}, objective=faster)
    passed = run_cli(["gate", path.name, "--static"], cwd=tmp_path)
    assert passed.returncode == 0, passed.describe()
    assert "warn runtime-claim: lowers ptxas optimisation" in passed.stdout  # said, not silently trusted
    strict = run_cli(["gate", path.name, "--static", "--rule", "runtime-claim=error"], cwd=tmp_path)
    assert strict.returncode == 1, strict.describe()


def test_the_gate_passes_the_defaults_and_a_harmless_change(tmp_path):
    path = _hand_made_acf(tmp_path, CORPUS / "chemistry.cu", {"ptxas.maxrregcount": 255})
    result = run_cli(["gate", path.name, "--static"], cwd=tmp_path)
    assert result.returncode == 0, result.describe()


# --- what it must show: every static objective, bundled kernels and the corpus -----------------


def _kernel_sources() -> list[Path]:
    bundled = sorted(KERNELS.glob("*/*.cu"))
    return [*bundled, *sorted(CORPUS.glob("*.cu"))]


@pytest.mark.slow
@pytest.mark.parametrize("source", _kernel_sources(), ids=lambda p: p.stem)
def test_no_static_objective_writes_an_acf_worse_than_the_defaults(tmp_path, source):
    defaults = ["-arch=sm_90", *load_spec(source).fixed_define_args()]
    defaults_spills, _ = _by_hand(source, defaults, tmp_path)
    written = []
    for objective in STATIC:
        report = _tune(source, tmp_path, objective, budget=8, batch_size=8)
        found = acf.read(report.acf_path)
        spills, _ = _by_hand(source, list(found.flags()), tmp_path)
        vs_defaults = found.evidence["vs_defaults"]
        assert spills <= defaults_spills, (objective, found.controls, spills, defaults_spills)
        lowered = eligibility.lowered_optimisation(found.controls, report.space.default_config().as_dict())
        assert lowered == () and vs_defaults["lowered_optimisation"] == [], (objective, found.controls)
        best, base = found.evidence["best"], found.evidence["baseline"]
        if objective == "static":  # no static metric worse than the defaults'
            assert best["occupancy"] >= base["occupancy"] and best["spill_bytes"] <= base["spill_bytes"], best
        for entry in found.evidence.get("to_time", []):  # what was refused for a GPU to judge
            assert entry["command"].startswith("compileiq tune ") and " --objective time --only " in entry["command"]
            assert entry["value"] < found.objective["best"], (objective, entry)
        written.append(str(report.acf_path))
    result = run_cli(["gate", "--static", *written], cwd=tmp_path)
    assert result.returncode == 0, result.describe()


def test_an_optimisation_level_that_is_no_number_lowers_nothing() -> None:
    from compileiq.evaluate.eligibility import lowered_optimisation

    assert lowered_optimisation({"ptxas.opt_level": "default"}, {"ptxas.opt_level": 3}) == ()
    assert lowered_optimisation({"ptxas.opt_level": 1}, {"ptxas.opt_level": "x"}) == ()
    assert lowered_optimisation({"ptxas.opt_level": 1}, {"ptxas.opt_level": 3}) == ("ptxas.opt_level=1",)


def test_expensive_optimisations_back_at_their_default_below_o2_are_a_lowering(tmp_path: Path) -> None:
    """"default" expensive optimisations are off below -O2: against a shipped `-O1
    --allow-expensive-optimizations=true` going back to "default" turns them off. The rule read only
    `false` as lowering (a red team's shipped build: the static search proposed such trials and the
    gate let them through); at -O1, `false` where "default" is off already lowers nothing."""
    from compileiq.evaluate.eligibility import lowered_optimisation, lowering_settings

    expensive, level = "ptxas.allow_expensive_optimizations", "ptxas.opt_level"
    shipped = {expensive: True, level: 1}
    assert lowered_optimisation({expensive: "default", level: 1}, shipped) == (f"{expensive}=default",)
    assert lowered_optimisation({expensive: "default", level: 3}, {expensive: True, level: 3}) == ()
    assert lowered_optimisation({expensive: False, level: 1}, {expensive: "default", level: 1}) == ()
    assert lowered_optimisation({expensive: False, level: 3}, {expensive: "default", level: 3}) == (f"{expensive}=False",)
    space = load_space("13.0")
    assert (expensive, "default") in lowering_settings(space, {**space.default_config().as_dict(), **shipped})
    (tmp_path / "k.cu").write_text((Path(__file__).parent.parent / "kernels/spill_heavy/spill_heavy.cu").read_text())
    (tmp_path / "compile_commands.json").write_text(__import__("json").dumps([{
        "directory": str(tmp_path), "file": "k.cu",
        "command": "nvcc -arch=sm_90 -Xptxas -O1,--allow-expensive-optimizations=true -c k.cu -o k.o"}]))
    result = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--objective", "instructions",
                      "--budget", "16", "--workers", "local", "--db", f"sqlite:///{tmp_path}/t.db", "--out", "k.acf.toml",
                      "--only", f"{expensive},{level},ptxas.register_usage_level"], cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    shown = run_cli(["show", acf.read(tmp_path / "k.acf.toml").provenance["study"], "--json", "--db",
                     f"sqlite:///{tmp_path}/t.db"], cwd=tmp_path)
    proposed = [t["config"] for t in __import__("json").loads(shown.stdout)["trials"] if t["number"] > 0]
    assert proposed and not [c for c in proposed if c[expensive] == "default" and c[level] < 2], proposed


def test_a_refused_search_result_whose_code_needs_no_lower_level_is_chosen(tmp_path: Path) -> None:
    """Rodinia's hotspot, budget 16 (a user's first run): the search's best occupancy came with
    `-O2`, which the simplification showed changes nothing. The same code at the default level was
    recorded, allowed and announced as the best, yet the ACF kept the defaults (the winner was taken
    from search trials alone). Now it is chosen, and `show` and the ACF name the same trial."""
    folder = tmp_path / "hotspot"
    folder.mkdir()
    (folder / "hotspot.cu").write_text((CORPUS / "hotspot.cu").read_text())
    result = run_cli(["tune", "hotspot.cu", "--budget", "16", "--workers", "local", "--db", f"sqlite:///{tmp_path}/t.db",
                      "--out", "h.acf.toml"], cwd=folder)
    assert result.returncode == 0, result.describe()
    found = acf.read(folder / "h.acf.toml")
    shown = run_cli(["show", found.provenance["study"], "--json", "--db", f"sqlite:///{tmp_path}/t.db"], cwd=folder)
    trials = __import__("json").loads(shown.stdout)["trials"]
    allowed = [t for t in trials if t["state"] == "complete" and t["refused"] is None]
    chosen = next(t for t in trials if t["status"] == "chosen")
    assert found.objective["best"] == chosen["value"] == min(t["value"] for t in allowed), (found.objective, chosen)
    assert found.objective["improved"] is True and found.evidence["best"]["occupancy"] == 1.0
    assert found.evidence["vs_defaults"]["lowered_optimisation"] == []
    assert chosen["config"]["ptxas.opt_level"] == 3  # the default level: nothing refused was needed


def test_a_variant_that_cannot_launch_is_refused_as_such():
    """Occupancy 0 (a launch expression asking for more shared memory than a block may have) used to
    read "lowers occupancy (37.5% -> 0.0%)", as if the kernel merely ran slower."""
    baseline = _trial(0, 0.0, {"a": 0}, spill_bytes=0)
    reference = eligibility.Reference.of(baseline, "static")
    assert reference is not None
    why = eligibility.refusal({"a": 1}, {"spill_bytes": 0, "occupancy": 0.0}, reference)
    assert why is not None and why.startswith("cannot launch (occupancy 0%")
