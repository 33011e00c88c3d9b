"""Every kernel tune.toml's `entries` leave unscored is held to its own spills and occupancy, whatever
its name's length (a red team's file: a kernel named `victim_` and 210 x's was left out of each
kernel's tables, so `aa_short`'s spill savings hid its new spills, 72 -> 31112 B; tune chose the
build and the gate passed it), and a row's per-kernel tables name only kernels its build had."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compileiq.core import metric_ranges
from compileiq.evaluate.unscored import Unscored, by_name, unscored_harm, unscored_refusal
from compileiq.evaluate.unscored_views import registers_text, scoring_text
from tests.helpers import run_cli

SPILLING = """\
{
  float a[N];
  #pragma unroll
  for (int i = 0; i < N; ++i) a[i] = out[i*n + threadIdx.x];
  float s = 0.f;
  #pragma unroll
  for (int i = 0; i < N; ++i)
    #pragma unroll
    for (int j = 0; j < N; ++j) s += a[i]*a[j]*(i^j);
  #pragma unroll
  for (int i = 0; i < N; ++i) out[i*n+threadIdx.x] = a[i]*s;
}
"""
VICTIM = "victim_" + "x" * 210


def _kernel(name: str, spills_in: int, n: int) -> str:
    """A __launch_bounds__(1024, 2) kernel that spills (N = n) where MODE == spills_in, else barely."""
    return (f"__global__ void __launch_bounds__(1024, 2) {name}(float* out, int n)\n#if MODE == {spills_in}\n"
            f"{SPILLING.replace('N', str(n))}#else\n{SPILLING.replace('N', '8')}#endif\n")


LONG_NAMES = ("#ifndef MODE\n#define MODE 0\n#endif\n" + _kernel("scored_k", 0, 48) + _kernel("aa_short", 0, 48)
              + _kernel(VICTIM, 1, 40))
TOML = 'arch = "sm_90"\ncompile_timeout_s = 600\nentries = ["scored_k"]\n[tune.defines]\nMODE = [0, 1]\n'


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("long_names")
    (folder / "k.cu").write_text(LONG_NAMES)
    (folder / "tune.toml").write_text(TOML)
    done = run_cli(["tune", "k.cu", "--objective", "spills", "--budget", "4", "--only", "define.MODE",
                    "--db", "sqlite:///x.db", "--out", "k.acf.toml", "--workers", "local"], cwd=folder)
    assert done.returncode == 0, done.describe()
    return folder


def test_a_kernel_with_a_long_name_is_held_to_its_own_spills_in_tune_show_and_the_gate(tuned: Path) -> None:
    acf = (tuned / "k.acf.toml").read_text()
    assert '"define.MODE" = 0' in acf, acf  # MODE=1 makes the long-named kernel spill 72 -> 10632 B
    shown = json.loads(run_cli(["show", "1", "--db", "sqlite:///x.db", "--json"], cwd=tuned).stdout)
    refused = [t for t in shown["trials"] if t["config"].get("define.MODE") == 1]
    assert refused and "victim_xxx" in str(refused[0]["refused"]) and "72 -> 10632 B" in str(refused[0]["refused"])
    gated = run_cli(["gate", "k.acf.toml"], cwd=tuned)
    assert gated.returncode == 0, gated.describe()
    (tuned / "m1.acf.toml").write_text(acf.replace('"define.MODE" = 0', '"define.MODE" = 1')
                                       .replace('"-DMODE=0"', '"-DMODE=1"'))
    gated = run_cli(["gate", "m1.acf.toml", "--json"], cwd=tuned)
    findings = [f for r in json.loads(gated.stdout)["acfs"] for f in r["findings"]
                if f["rule"] == "worse-than-default" and "leave unscored" in f["message"]]
    assert gated.returncode == 1 and findings and "72 -> 10632 B" in findings[0]["message"], gated.stdout


def test_a_forged_row_naming_a_kernel_its_build_lacks_is_a_damaged_row(tuned: Path) -> None:
    shown = json.loads(run_cli(["show", "1", "--db", "sqlite:///x.db", "--json"], cwd=tuned).stdout)
    baseline = next(t for t in shown["trials"] if t["config"].get("define.MODE") == 0)["metrics"]
    forged: dict[str, Any] = json.loads(json.dumps(baseline))
    forged["unscored"]["registers"]["fake_k"] = 200
    assert (problem := metric_ranges.problem(forged)) and problem.startswith("unscored.registers"), problem
    assert Unscored.of(forged) is None
    assert "fake_k" not in str(registers_text(baseline, forged))
    # named in every table, but more kernels than the build had
    for key, value in (("registers", 200), ("kernel_spill_bytes", 0), ("kernel_occupancy", 1.0)):
        forged["unscored"][key]["fake_k"] = value
    assert (problem := metric_ranges.problem(forged)) and "more than kernels" in problem, problem


def test_long_labels_are_bounded_unique_and_the_same_in_every_build() -> None:
    from compileiq.evaluate.unscored import label

    # two overloads of a long template name: "plain (mangled)" is long, each gets its own label
    first, second = "_Z" + "9" * 3 + "x" * 250 + "Pf", "_Z" + "9" * 3 + "x" * 250 + "Pi"
    named = by_name("kernel_spill_bytes", [(first, 8), (second, 0), ("_Z5shortPf", 4)])
    assert len(named) == 3 and all(metric_ranges.is_kernel_name(n) for n in named), named
    assert by_name("kernel_spill_bytes", [(first, 99), (second, 1)]).keys() <= named.keys()
    assert label("k" * 200, "k") == "k" * 200 and len(label("k" * 201, "k")) < metric_ranges.MAX_KERNEL_NAME
    assert label("k" * 201, "a") != label("k" * 201, "b")


def test_a_named_kernels_spill_savings_never_hide_lost_occupancy_in_the_kernels_held_as_a_group() -> None:
    """Reviewer: `a` traded occupancy for fewer spills (allowed, judged on its own), and the unnamed
    kernels' lowest occupancy fell from 50% to 25% with no fewer spills; the group rule compared the
    totals, whose spills fell, and let it through."""
    before, now = _table({"a": 64}, 0, 3), _table({"a": 0}, 0, 3)
    before["unscored"] |= {"occupancy": 0.5, "kernel_occupancy": {"a": 1.0}}
    now["unscored"] |= {"occupancy": 0.25, "kernel_occupancy": {"a": 0.5}}
    harm = unscored_harm(Unscored.of(now), Unscored.of(before), False)  # type: ignore[arg-type]
    assert harm is not None and "50.0% -> 25.0%" in harm.text(), harm
    # the lowest is the named kernel's own trade (the others at 50% still): no harm in the rest
    now["unscored"] |= {"occupancy": 0.5, "kernel_occupancy": {"a": 0.5}}
    assert unscored_harm(Unscored.of(now), Unscored.of(before), False) is None  # type: ignore[arg-type]


def _table(spills: dict[str, int], rest: int, kernels: int) -> dict[str, Any]:
    """An `unscored` table naming `spills`, with `rest` spill bytes in kernels it does not name."""
    return {"entries": [{"name": "k", "entry": True}], "unscored": {
        "spill_bytes": sum(spills.values()) + rest, "occupancy": 1.0, "spilling": [], "kernels": kernels,
        "kernel_spill_bytes": spills, "kernel_occupancy": dict.fromkeys(spills, 1.0)}}


def test_named_kernels_savings_never_hide_new_spills_in_kernels_held_as_a_group() -> None:
    # past MAX_NAMED_KERNELS (or a row recorded before long names were) some kernels are named by none:
    # `a` spills 1000 B less, the unnamed ones 500 B more, the group total falls
    before, now = _table({"a": 1000}, 0, 3), _table({"a": 0}, 500, 3)
    held = Unscored.of(before)
    assert held is not None and held.unnamed == 2
    harm = unscored_harm(Unscored.of(now), held, False)  # type: ignore[arg-type]
    assert harm is not None and "0 -> 500 B" in harm.text(), harm
    assert unscored_refusal(now, held, "the compiler defaults", False) is not None
    # another instance of a kernel in each build (a macro's): held together, as before
    renamed = _table({"a": 0, "t<1>": 300}, 0, 2), _table({"a": 0, "t<2>": 200}, 0, 2)
    assert unscored_harm(Unscored.of(renamed[1]), Unscored.of(renamed[0]), False) is None  # type: ignore[arg-type]
    text = scoring_text(before, now, "static")
    assert text is not None and "each held to its own" not in text and "2 only as one group" in text, text
