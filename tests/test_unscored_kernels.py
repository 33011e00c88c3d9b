"""tune.toml's `entries` narrow what the objective scores, but -Xptxas flags build every kernel of
the file: a choice may not make the kernels left unscored spill (or lose occupancy the rules
refuse), the gate holds an ACF to that, and where the entries changed since the tuning the gate
says the evidence was scored under other settings instead of accusing an edit (a user's HeCBench
scan: a register cap that helped `scan<int, 1024>` made 20 of its 40 kernels spill, gate passed)."""

from __future__ import annotations

import json
import shutil
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
import tomli_w

from compileiq.source.kernel import load_spec
from tests.helpers import run_cli

# `scored`: 32 registers at the defaults, 24 without a spill under a cap of 24; `other`: 116
# registers at the defaults, spilling under any cap of 96 or less.
KERNELS = """\
__global__ void scored(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0.f;
#pragma unroll
  for (int t = 0; t < 32; ++t) acc += x[i + t * n] * x[i + t * n + 1];
  y[i] = acc;
}
__global__ void other(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float a[20];
#pragma unroll
  for (int t = 0; t < 20; ++t) a[t] = x[(i + t * 7) % n];
  float acc = 0.f;
#pragma unroll
  for (int t = 0; t < 20; ++t)
#pragma unroll
    for (int u = 0; u < 20; ++u) acc += a[t] * a[u] * (t ^ u);
  y[i] = acc;
}
"""
TUNE_TOML = 'entries = ["scored"]\nblock_size = 256\n'


@pytest.fixture(scope="module")
def tuned_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two kernels tuned once for registers on the cap alone, `entries` naming `scored`."""
    folder = tmp_path_factory.mktemp("unscored")
    (folder / "k.cu").write_text(KERNELS)
    (folder / "tune.toml").write_text(TUNE_TOML)
    done = run_cli(["tune", "k.cu", "--arch", "sm_90", "--objective", "registers", "--only", "ptxas.maxrregcount",
                    "--budget", "11", "--no-simplify", "--workers", "local", "--db", "sqlite:///t.db",
                    "--out", "k.acf.toml"], cwd=folder)
    assert done.returncode == 0, done.describe()
    return folder


def _tuned(tuned_once: Path, tmp_path: Path) -> Path:
    """A copy of the tuned folder (a test edits it): its ACF."""
    shutil.copytree(tuned_once, tmp_path, dirs_exist_ok=True)
    return tmp_path / "k.acf.toml"


def test_a_choice_never_makes_the_kernels_entries_leave_unscored_spill(tuned_once: Path, tmp_path: Path) -> None:
    acf = tomllib.loads(_tuned(tuned_once, tmp_path).read_text())
    # the cap of 24 scores better (32 -> 24 registers, no spill in `scored`) but makes `other` spill
    assert acf["controls"].get("ptxas.maxrregcount", "default") in ("default", 128, 168, 255), acf["controls"]
    assert acf["kernel"]["entries"] == ["scored"], acf["kernel"]  # the kernel settings it was scored by
    shown = run_cli(["show", "1", "--db", "sqlite:///t.db", "--json"], cwd=tmp_path)
    assert shown.returncode == 0, shown.describe()
    document = json.loads(shown.stdout)
    assert document["objective"]["scored"]["entries"] == ["scored"], document["objective"]
    assert document["objective"]["scored"]["unscored_kernels"] == 1, document["objective"]
    capped = [t for t in document["trials"] if t["config"].get("ptxas.maxrregcount") == 24]
    assert capped and "leave unscored" in capped[0]["refused"] and "other" in capped[0]["refused"], capped
    table = run_cli(["show", "1", "--db", "sqlite:///t.db"], cwd=tmp_path)
    assert "scored only scored (tune.toml's entries)" in " ".join(table.stdout.split()), table.stdout


def test_the_gate_refuses_flags_that_make_unscored_kernels_spill(tuned_once: Path, tmp_path: Path) -> None:
    out = _tuned(tuned_once, tmp_path)
    document = tomllib.loads(out.read_text())
    document["controls"]["ptxas.maxrregcount"] = 24  # what the tuning chose before it held unscored kernels
    document["args"]["ptxas"] = ["--maxrregcount=24"]
    kept = [arg for arg in document["args"]["argv"] if "maxrregcount" not in arg]
    document["args"]["argv"] = [*kept, "-Xptxas=--maxrregcount=24"]
    capped = tmp_path / "capped.acf.toml"
    capped.write_text(tomli_w.dumps(document))
    gated = run_cli(["gate", "capped.acf.toml"], cwd=tmp_path)
    assert gated.returncode == 1, gated.describe()
    lines = [line for line in gated.stdout.splitlines() if "worse-than-default" in line and "leave unscored" in line]
    assert lines and "other" in lines[0], gated.stdout


def test_changed_entries_are_stale_settings_not_edited_evidence(tuned_once: Path, tmp_path: Path) -> None:
    out = _tuned(tuned_once, tmp_path)
    (tmp_path / "tune.toml").write_text("block_size = 256\n")  # `entries` removed: every kernel scored now
    gated = run_cli(["gate", out.name], cwd=tmp_path)
    assert "error evidence" not in gated.stdout and "was edited" not in gated.stdout, gated.stdout
    said = " ".join(gated.stdout.split())
    assert "warn stale-settings: the ACF's evidence was scored under other kernel settings" in said, gated.stdout
    assert "entries: [scored] when tuned, every kernel now" in said, gated.stdout


def test_a_forged_acf_cannot_claim_other_entries_to_hide_edited_evidence(tuned_once: Path, tmp_path: Path) -> None:
    out = _tuned(tuned_once, tmp_path)
    document = tomllib.loads(out.read_text())
    document["evidence"]["best"]["registers"] = 7  # edited evidence
    document["evidence"]["baseline"]["registers"] = 99
    document["objective"].update(baseline=99.0, best=7.0, improved=True)
    document["kernel"]["entries"] = ["nothing"]  # and the ACF's own word that the entries changed
    document["kernel"]["settings_sha256"] = "0" * 64
    out.write_text(tomli_w.dumps(document))
    gated = run_cli(["gate", out.name], cwd=tmp_path)
    assert gated.returncode == 1, gated.describe()
    assert "error evidence" in gated.stdout, gated.stdout


def test_an_acf_claiming_other_entries_with_their_public_settings_hash_cannot_hide_edited_evidence(
        tuned_once: Path, tmp_path: Path) -> None:
    """The settings hash of the kernel with other entries is public: an ACF that claims entries ["other"]
    with that hash, and edited evidence, passed with a stale-settings warning. Its numbers are held to
    the rebuild scored under the entries it claims: they match neither scoring, so its evidence was edited."""
    out = _tuned(tuned_once, tmp_path)
    document = tomllib.loads(out.read_text())
    claimed = replace(load_spec(tmp_path / "k.cu", arch=document["kernel"]["arch"]), entries=("other",))
    document["kernel"]["entries"] = ["other"]
    document["kernel"]["settings_sha256"] = claimed.settings_sha256s()[0]  # anyone can compute it
    forged = 200  # a baseline made worse (32 registers for `scored`, 116 for `other`), to forge the gain
    document["evidence"]["baseline"]["registers"] = forged
    document["objective"].update(baseline=float(forged), improved=True)
    out.write_text(tomli_w.dumps(document))
    gated = run_cli(["gate", out.name], cwd=tmp_path)
    assert gated.returncode == 1, gated.describe()
    said = " ".join(gated.stdout.split())
    assert "error evidence" in said and "for the baseline's machine code" in said, gated.stdout


def test_entries_changed_in_tune_toml_after_tuning_are_stale_settings(tuned_once: Path, tmp_path: Path) -> None:
    """The honest change: tune.toml's entries name the other kernel now; the ACF's evidence is what
    its build gives scored under the entries it records, so the gate says stale-settings, not an edit."""
    out = _tuned(tuned_once, tmp_path)
    (tmp_path / "tune.toml").write_text(TUNE_TOML.replace('"scored"', '"other"'))
    gated = run_cli(["gate", out.name], cwd=tmp_path)  # `other` scores 116 registers: the rules still say so
    assert gated.returncode in (0, 1), gated.describe()
    said = " ".join(gated.stdout.split())
    assert "error evidence" not in said and "was edited" not in said, gated.stdout
    assert "entries: [scored] when tuned, [other] now" in said, gated.stdout


def test_an_older_acf_without_entries_never_hides_edited_evidence(tuned_once: Path, tmp_path: Path) -> None:
    out = _tuned(tuned_once, tmp_path)
    document = tomllib.loads(out.read_text())
    del document["kernel"]["entries"]  # as an ACF written before entries were recorded
    document["evidence"]["best"]["registers"] = 7
    document["objective"].update(best=7.0, improved=True)
    out.write_text(tomli_w.dumps(document))
    (tmp_path / "tune.toml").write_text(TUNE_TOML + "rtol = 0.01\n")  # another setting changed since
    gated = run_cli(["gate", out.name], cwd=tmp_path)
    assert gated.returncode == 1 and "error evidence" in gated.stdout, gated.describe()
    assert "every kernel when tuned" not in " ".join(gated.stdout.split()), gated.stdout


def test_the_unscored_finding_says_what_was_measured_in_the_unit_of_its_reason(tuned_once: Path, tmp_path: Path) -> None:
    out = _tuned(tuned_once, tmp_path)
    document = tomllib.loads(out.read_text())
    document["controls"]["ptxas.maxrregcount"] = 24
    document["args"]["ptxas"] = ["--maxrregcount=24"]
    kept = [arg for arg in document["args"]["argv"] if "maxrregcount" not in arg]
    document["args"]["argv"] = [*kept, "-Xptxas=--maxrregcount=24"]
    (tmp_path / "capped.acf.toml").write_text(tomli_w.dumps(document))
    gated = run_cli(["gate", "capped.acf.toml", "--json"], cwd=tmp_path)
    findings = [f for r in json.loads(gated.stdout)["acfs"] for f in r["findings"]
                if f["rule"] == "worse-than-default" and "leave unscored" in f["message"]]
    assert findings, gated.stdout
    # the ACF's [evidence.baseline] holds no number for them: `recorded` says so, never a number measured now
    assert "not recorded" in findings[0]["recorded"], findings
    assert "ACF" in findings[0]["measured"] and "B" in findings[0]["measured"], findings


HELPER = """
#if HELPER
__global__ void __launch_bounds__(128) helper(float* y) { y[threadIdx.x] = 0.f; }
#endif
"""


def test_an_unscored_kernel_with_smaller_launch_bounds_never_fails_the_study(tmp_path: Path) -> None:
    # tune.toml's block_size = 256 is the entries'; a helper bounded at 128 threads is no launch of it
    (tmp_path / "k.cu").write_text(KERNELS + HELPER.replace("#if HELPER\n", "").replace("#endif\n", ""))
    (tmp_path / "tune.toml").write_text(TUNE_TOML)
    done = run_cli(["tune", "k.cu", "--arch", "sm_90", "--objective", "registers", "--only", "ptxas.maxrregcount",
                    "--budget", "3", "--no-simplify", "--workers", "local", "--db", "sqlite:///t.db",
                    "--out", "k.acf.toml"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    # tune's own summary says what was scored, as show, report and --json do
    assert "scored only scored (tune.toml's entries)" in " ".join(done.stdout.split()), done.stdout
    shown = json.loads(run_cli(["show", "1", "--db", "sqlite:///t.db", "--json"], cwd=tmp_path).stdout)
    assert shown["objective"]["scored"]["entries"] == ["scored"], shown["objective"]
    assert shown["objective"]["scored"]["unscored_kernels"] == 2, shown["objective"]


def test_a_variant_without_unscored_kernels_is_not_refused_for_want_of_their_metrics(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(KERNELS.split("__global__ void other")[0] + HELPER.replace("__launch_bounds__(128) ", ""))
    (tmp_path / "tune.toml").write_text(TUNE_TOML + "[tune.defines]\nHELPER = [1, 0]\n")
    done = run_cli(["tune", "k.cu", "--arch", "sm_90", "--objective", "registers", "--only", "define.HELPER",
                    "--budget", "2", "--no-simplify", "--workers", "local", "--db", "sqlite:///t.db",
                    "--out", "k.acf.toml"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    shown = json.loads(run_cli(["show", "1", "--db", "sqlite:///t.db", "--json"], cwd=tmp_path).stdout)
    without = [t for t in shown["trials"] if t["config"].get("define.HELPER") == 0]
    assert without and "no static metrics" not in str(without[0].get("refused")), without


@pytest.mark.parametrize("table", [
    {"spill_bytes": 1e999, "occupancy": 1.0, "spilling": [], "kernels": 1},
    {"spill_bytes": -1, "occupancy": 1.0, "spilling": [], "kernels": 1},
    {"spill_bytes": 0, "occupancy": float("nan"), "spilling": [], "kernels": 1},
    {"spill_bytes": 0, "occupancy": 1.5, "spilling": [], "kernels": 1},
    {"spill_bytes": 0, "occupancy": 1.0, "spilling": "abc", "kernels": 1},
    {"spill_bytes": 0, "occupancy": 1.0, "spilling": [], "kernels": True},
    "damaged",
    {"spill_bytes": 0, "occupancy": 1.0, "spilling": [], "kernels": 1, "registers": {"k": 256}},
    {"spill_bytes": 0, "occupancy": 1.0, "spilling": [], "kernels": 1, "registers": {"k": True}},
    {"spill_bytes": 0, "occupancy": 1.0, "spilling": [], "kernels": 1, "registers": {"k\x1b[2J": 3}},
    {"spill_bytes": 0, "occupancy": 1.0, "spilling": [], "kernels": 1, "registers": {"k" * 201: 3}},
    {"spill_bytes": 0, "occupancy": 1.0, "spilling": [], "kernels": 1, "registers": {f"k{i}": 3 for i in range(1001)}},
    {"spill_bytes": 0, "occupancy": 1.0, "spilling": [], "kernels": 1, "registers": [32]},
])
def test_a_damaged_unscored_table_is_a_damaged_row(table: object) -> None:
    from compileiq.core import metric_ranges
    from compileiq.evaluate.unscored import Unscored

    metrics = {"spill_bytes": 0, "occupancy": 1.0, "unscored": table}
    assert (problem := metric_ranges.problem(metrics)) and problem.startswith("unscored"), problem
    assert Unscored.of(metrics) is None  # never raises (OverflowError on 1e999 crashed show, report, tune)


def test_a_study_recorded_before_unscored_kernels_were_held_scores_its_baseline_again(
        tuned_once: Path, tmp_path: Path) -> None:
    import sqlite3

    _tuned(tuned_once, tmp_path)
    with sqlite3.connect(tmp_path / "t.db") as db:  # as an older compileiq recorded the study
        db.execute("UPDATE trials SET metrics = json_remove(metrics, '$.unscored')")
    again = run_cli(["tune", "k.cu", "--arch", "sm_90", "--objective", "registers", "--only", "ptxas.maxrregcount",
                     "--budget", "11", "--no-simplify", "--workers", "local", "--db", "sqlite:///t.db",
                     "--out", "k.acf.toml"], cwd=tmp_path)
    assert again.returncode == 0, again.describe()
    shown = json.loads(run_cli(["show", "1", "--db", "sqlite:///t.db", "--json"], cwd=tmp_path).stdout)
    assert shown["objective"]["scored"]["entries"] == ["scored"], shown["objective"]
    assert shown["objective"]["scored"]["unscored_kernels"] == 1, shown["objective"]
    gated = run_cli(["gate", "k.acf.toml"], cwd=tmp_path)
    assert gated.returncode == 0, gated.describe()


# `scored` as above; `mid`: 32 registers at the defaults, 24 without a spill (nor lost occupancy) under
# a cap of 24; `tiny`: 10 registers under any cap
REGISTER_KERNELS = KERNELS.split("__global__ void other")[0] + """\
__global__ void mid(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0.f;
#pragma unroll
  for (int t = 0; t < 24; ++t) acc += x[i + t * n] * x[i + t * n + 2];
  y[i] = acc;
}
__global__ void tiny(float* y) { y[threadIdx.x] = 1.f; }
"""


def test_every_view_says_what_the_chosen_flags_did_to_unscored_kernels_registers(tmp_path: Path) -> None:
    # a layernorm user: a cap that helps the scored kernel moves another's registers, no spill, no
    # occupancy lost, and no view said so
    (tmp_path / "k.cu").write_text(REGISTER_KERNELS)
    (tmp_path / "tune.toml").write_text(TUNE_TOML)
    done = run_cli(["tune", "k.cu", "--arch", "sm_90", "--objective", "registers", "--only", "ptxas.maxrregcount",
                    "--budget", "11", "--no-simplify", "--workers", "local", "--db", "sqlite:///t.db",
                    "--out", "k.acf.toml"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    shown = json.loads(run_cli(["show", "1", "--db", "sqlite:///t.db", "--json"], cwd=tmp_path).stdout)
    scored = shown["objective"]["scored"]
    changed = {c["kernel"]: (c["baseline"], c["chosen"]) for c in scored["registers_changed"]}
    assert set(changed) == {"mid"} and changed["mid"][0] == 32 and changed["mid"][1] < 32, scored
    said = f"other kernels' registers: mid 32 -> {changed['mid'][1]}"
    assert scored["registers_text"] == said, scored
    assert said in " ".join(done.stdout.split()), done.stdout  # tune's summary
    table = run_cli(["show", "1", "--db", "sqlite:///t.db"], cwd=tmp_path)
    assert said in " ".join(table.stdout.split()), table.stdout
    report = run_cli(["report", "1", "--db", "sqlite:///t.db", "--format", "md", "-o", "-"], cwd=tmp_path)
    assert said in " ".join(report.stdout.split()), report.stdout
    acf = tomllib.loads((tmp_path / "k.acf.toml").read_text())
    assert acf["evidence"]["vs_defaults"]["unscored_registers"] == said, acf["evidence"]["vs_defaults"]
    gated = run_cli(["gate", "k.acf.toml"], cwd=tmp_path)  # information, never a refusal
    assert gated.returncode == 0, gated.describe()


def test_register_changes_name_a_few_then_how_many_more_and_read_older_rows() -> None:
    from compileiq.evaluate.unscored_views import registers_text, scored

    def metrics(registers: dict[str, int] | None) -> dict[str, object]:
        table = {"spill_bytes": 0, "occupancy": 1.0, "spilling": [], "kernels": 5}
        return {"entries": [{"name": "k", "entry": True}],
                "unscored": table if registers is None else {**table, "registers": registers}}

    before = {"a": 10, "b": 20, "c": 30, "d": 40, "e": 50}
    after = {"a": 12, "b": 20, "c": 24, "d": 48, "e": 49}
    assert registers_text(metrics(before), metrics(after)) == \
        "other kernels' registers: d 40 -> 48, c 30 -> 24, a 10 -> 12, and 1 more"
    assert registers_text(metrics(before), metrics(before)) == "other kernels' registers: unchanged"
    older = registers_text(metrics(None), metrics(after))  # a row recorded before registers were
    assert older is not None and "not recorded" in older
    found = scored(metrics(None), None, "static")  # no chosen: no registers said
    assert found is not None and (found["entries"], found["unscored_kernels"]) == (["k"], 5), found
    assert "registers_text" not in found and found["held"], found


# A red team's file: `scored_k` and `bounded_k` the same __launch_bounds__(1024, 2) kernel, spilling
# at its 32 registers; `heavy_k` needs 64 registers (HN = 48) and spills under a cap of 48. The cap
# with --override-directive-values helps `scored_k` (and `bounded_k`: 1316 -> 216 B) more than it
# makes `heavy_k` spill (0 -> 588 B): held as one group (spill bytes summed) the unscored kernels
# looked better, the tuning chose it and the gate passed it.
BOUNDED = """\
__global__ void __launch_bounds__(1024, 2) NAME(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float a[48];
#pragma unroll
  for (int t = 0; t < 48; ++t) a[t] = x[(i + t * 7) % n];
  float acc = 0.f;
#pragma unroll
  for (int t = 0; t < 48; ++t)
#pragma unroll
    for (int u = 0; u < 48; u += 3) acc += a[t] * a[u] * (float)(t ^ u);
  y[i] = acc;
}
"""
PER_KERNEL = BOUNDED.replace("NAME", "scored_k") + BOUNDED.replace("NAME", "bounded_k") + """\
__global__ void heavy_k(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float acc[HN];
  for (int t = 0; t < HN; ++t) acc[t] = x[(i + t * 3) % n];
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < HN; ++t) acc[t] = acc[t] * acc[(t + r + 1) % HN] + x[(i + t + r) % n];
  float s = 0.f;
  for (int t = 0; t < HN; ++t) s += acc[t];
  y[i] = s;
}
"""
PER_KERNEL_TOML = """\
arch = "sm_90"
entries = ["scored_k"]
block_size = 256
[defines]
HN = 48
[launch.scored_k]
block_size = 256
dynamic_smem = 49152
"""
CAPPED = {"ptxas.maxrregcount": 48, "ptxas.override_directive_values": True}


def _per_kernel_tune(folder: Path, budget: str = "12") -> None:
    done = run_cli(["tune", "k.cu", "--db", "sqlite:///x.db", "--out", "k.acf.toml", "--workers", "local",
                    "--budget", budget, "--only", "ptxas.override_directive_values,ptxas.maxrregcount"], cwd=folder)
    assert done.returncode == 0, done.describe()


def test_each_unscored_kernel_is_held_to_its_own_spills_in_tune_and_the_gate(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(PER_KERNEL)
    (tmp_path / "tune.toml").write_text(PER_KERNEL_TOML)
    _per_kernel_tune(tmp_path)
    acf = tomllib.loads((tmp_path / "k.acf.toml").read_text())
    assert acf["controls"].get("ptxas.maxrregcount") != 48, acf["controls"]
    shown = json.loads(run_cli(["show", "1", "--db", "sqlite:///x.db", "--json"], cwd=tmp_path).stdout)
    capped = [t for t in shown["trials"] if all(t["config"].get(k) == v for k, v in CAPPED.items())]
    assert capped and "(heavy_k 0 -> 588 B)" in str(capped[0]["refused"]), capped
    table = run_cli(["show", "1", "--db", "sqlite:///x.db"], cwd=tmp_path)
    assert "each held to its own spills and occupancy" in " ".join(table.stdout.split()), table.stdout
    # the gate rebuilds the ACF and the defaults and compares them kernel by kernel
    document = tomllib.loads((tmp_path / "k.acf.toml").read_text())
    document["controls"] = dict(CAPPED)
    document["args"]["ptxas"] = ["--maxrregcount=48", "--override-directive-values"]
    document["args"]["argv"] = ["-Xptxas=--maxrregcount=48", "-Xptxas=--override-directive-values",
                                *document["args"]["argv"]]
    (tmp_path / "capped.acf.toml").write_text(tomli_w.dumps(document))
    gated = run_cli(["gate", "capped.acf.toml", "--json"], cwd=tmp_path)
    assert gated.returncode == 1, gated.describe()
    findings = [f for r in json.loads(gated.stdout)["acfs"] for f in r["findings"]
                if f["rule"] == "worse-than-default" and "leave unscored" in f["message"]]
    assert findings and "heavy_k 0 -> 588 B" in findings[0]["message"], gated.stdout
    assert findings[0]["measured"] == "heavy_k: defaults 0 B, ACF 588 B (unscored kernels)", findings


def test_an_unscored_row_recorded_before_each_kernels_facts_holds_the_group_and_says_so() -> None:
    from compileiq.evaluate.unscored import Unscored, unscored_refusal
    from compileiq.evaluate.unscored_views import scoring_text

    def metrics(spills: int, per_kernel: bool) -> dict[str, object]:
        table: dict[str, object] = {"spill_bytes": spills, "occupancy": 0.5, "spilling": ["a"], "kernels": 2}
        if per_kernel:
            table |= {"kernel_spill_bytes": {"a": spills, "b": 0}, "kernel_occupancy": {"a": 0.5, "b": 1.0}}
        return {"entries": [{"name": "k", "entry": True}], "unscored": table}

    older = Unscored.of(metrics(100, False))
    assert older is not None and not older.per_kernel
    why = unscored_refusal(metrics(200, True), older, "the compiler defaults", True)
    assert why is not None and "(0 -> 200 B: " not in why and "100 -> 200 B" in why and "as one group" in why, why
    text = scoring_text(metrics(100, False), None, "static")
    assert text is not None and "held as one group" in text, text
    # per kernel: `b` loses occupancy with no fewer spill bytes of its own, though `a` spills less
    now = metrics(50, True)
    now["unscored"]["kernel_occupancy"] = {"a": 0.5, "b": 0.25}  # type: ignore[index]
    now["unscored"]["occupancy"] = 0.25  # type: ignore[index]
    why = unscored_refusal(now, Unscored.of(metrics(100, True)), "the compiler defaults", False)
    assert why is not None and "b 100.0% -> 25.0%" in why, why


@pytest.mark.parametrize("per_kernel", [
    {"kernel_spill_bytes": {"k": -1}}, {"kernel_spill_bytes": {"k": 1.5}}, {"kernel_spill_bytes": [3]},
    {"kernel_occupancy": {"k": 1.5}}, {"kernel_occupancy": {"k": float("nan")}}, {"kernel_occupancy": {"k\x1b": 0.5}},
])
def test_a_damaged_per_kernel_unscored_table_is_a_damaged_row(per_kernel: dict[str, object]) -> None:
    from compileiq.core import metric_ranges
    from compileiq.evaluate.unscored import Unscored

    metrics = {"spill_bytes": 0, "occupancy": 1.0,
               "unscored": {"spill_bytes": 0, "occupancy": 1.0, "spilling": [], "kernels": 1} | per_kernel}
    assert (problem := metric_ranges.problem(metrics)) and problem.startswith("unscored.kernel_"), problem
    assert Unscored.of(metrics) is None


def test_an_overloaded_kernel_is_named_one_way_in_the_unscored_tables_the_acf_and_the_gate() -> None:
    """Overloads share the name tune.toml gives them: the unscored tables named each "foo (_Z3fooPi)"
    while the ACF's launch_by_kernel keyed it "_Z3fooPi", so one kernel read two ways in one file.
    Every place names it as `entry_names.kernel_names` does; the gate still reads an older ACF's keys."""
    from compileiq.evaluate.unscored import by_name
    from compileiq.evaluate.unscored_views import scored
    from compileiq.gating.recorded_launch import ScoredKernel, occupancy_at, recorded_launch
    from compileiq.results.evidence import launch_by_kernel, shown_metrics

    overloads = ("_Z3fooPi", "_Z3fooPf")
    expected = {"foo (_Z3fooPi)", "foo (_Z3fooPf)"}
    assert set(by_name("registers", [(name, 32) for name in overloads])) == expected
    metrics = {"launch": {"_Z3fooPi": [128, 0], "_Z3fooPf": [256, 0], "_Z3barPf": [64, 0]}}
    assert set(launch_by_kernel(metrics)) == expected | {"bar"}
    assert set(shown_metrics(metrics)["launch_by_kernel"]) == expected | {"bar"}
    entries = [{"name": name, "entry": True} for name in overloads]
    table = {"spill_bytes": 0, "occupancy": 1.0, "spilling": [], "kernels": 1}
    assert set(scored({"entries": entries, "unscored": table}, None, "static")["entries"]) == expected  # type: ignore[index]
    kernels = tuple(ScoredKernel(name, 32, 0) for name in (*overloads, "_Z3barPf"))
    now = occupancy_at(recorded_launch({"launch_by_kernel": launch_by_kernel(metrics)}), kernels, "sm_90")
    older = {"_Z3fooPi": {"block_size": 128, "dynamic_smem": 0}, "_Z3fooPf": {"block_size": 256, "dynamic_smem": 0},
             "bar": {"block_size": 64, "dynamic_smem": 0}}
    assert now is not None and occupancy_at(recorded_launch({"launch_by_kernel": older}), kernels, "sm_90") == now


def test_every_view_says_what_the_chosen_flags_did_to_unscored_kernels_occupancy(tmp_path: Path) -> None:
    # a red team's `spills` run: the chosen cap halved an unscored kernel's occupancy (a trade the rules let
    # `spills` make for fewer spill bytes of its own) while every view said each was "held to its own spills
    # and occupancy" and none said what the flags did to its occupancy
    from tests.test_launch_bound_unlaunchable import BODY
    kernel = r"""
extern "C" __global__ void __launch_bounds__(256, 2)
NAME(const float* __restrict__ x, const float* __restrict__ coef, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
    BODY(float, acc, x, coef, y, i, n)
}
"""
    (tmp_path / "k.cu").write_text("#define TAPS 64\n" + BODY + kernel.replace("NAME", "hot") + kernel.replace("NAME", "warm"))
    (tmp_path / "tune.toml").write_text('arch = "sm_90"\nentries = ["hot"]\nblock_size = 256\n')
    done = run_cli(["tune", "k.cu", "--objective", "spills", "--budget", "16", "--strategy", "random", "--seed", "3",
                    "--only", "ptxas.maxrregcount,ptxas.override_directive_values", "--workers", "local",
                    "--db", "sqlite:///t.db", "--out", "k.acf.toml"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    said = "other kernels' occupancy: warm 25.0% -> 12.5%"
    held = "1 other kernel(s) of the file each held to its own spills in the baseline, and to its occupancy unless " \
           "it spills less (never to 0%)"
    shown = json.loads(run_cli(["show", "1", "--db", "sqlite:///t.db", "--json"], cwd=tmp_path).stdout)
    scored = shown["objective"]["scored"]
    assert scored["occupancy_text"] == said and scored["occupancy_changed"] == [
        {"kernel": "warm", "baseline": 0.25, "chosen": 0.125}], scored
    assert scored["held"] == held.removeprefix("1 other kernel(s) of the file "), scored
    table = run_cli(["show", "1", "--db", "sqlite:///t.db"], cwd=tmp_path)
    report = run_cli(["report", "1", "--db", "sqlite:///t.db", "--format", "md", "-o", "-"], cwd=tmp_path)
    for view in (done.stdout, table.stdout, report.stdout):  # tune's summary, show, the report
        assert said in " ".join(view.split()) and held in " ".join(view.split()), view
        assert "held to its own spills and occupancy" not in " ".join(view.split()), view
    acf = tomllib.loads((tmp_path / "k.acf.toml").read_text())
    assert acf["evidence"]["vs_defaults"]["unscored_occupancy"] == said, acf["evidence"]["vs_defaults"]


def test_what_unscored_kernels_are_held_to_is_said_per_objective() -> None:
    from compileiq.evaluate.unscored_views import occupancy_text, scoring_text

    def metrics(occupancy: float) -> dict[str, object]:
        return {"entries": [{"name": "hot", "entry": True}], "unscored": {
            "spill_bytes": 0, "occupancy": occupancy, "spilling": [], "kernels": 1, "registers": {"warm": 40},
            "kernel_spill_bytes": {"warm": 0}, "kernel_occupancy": {"warm": occupancy}}}
    assert "each held to its own spills and occupancy in the baseline;" in str(scoring_text(metrics(0.5), metrics(0.5), "static"))
    assert "and to its occupancy unless it spills less" in str(scoring_text(metrics(0.5), metrics(0.25), "spills"))
    assert occupancy_text(metrics(0.5), metrics(0.5)) == "other kernels' occupancy: unchanged"
    assert occupancy_text(metrics(0.5), {"unscored": {"spill_bytes": 0, "occupancy": 1.0, "spilling": [], "kernels": 1}}) \
        == "other kernels' occupancy: not recorded (a result recorded before they were, or damaged)"
