"""The CI gate: real nvcc/ptxas, a real ACF from `tune`, the real `compileiq gate` command.

A 32-tap FIR kernel is tuned (it does not spill); the gate passes on it. Its source is then
replaced by the 128-tap version, which spills under the same settings: the gate fails naming
`spills`, the same way every time. The GPU statistic is checked with synthetic samplers.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import shlex
import shutil
import textwrap
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import typer
from helpers import CliResult, run_cli, with_kernel_arch

from compileiq import app
from compileiq.cli import cli
from compileiq.core.errors import UsageError
from compileiq.core.static_score import StaticMetrics
from compileiq.evaluate.stats import Verdict
from compileiq.gating import check as gating
from compileiq.gating import ci_reports, timing_rules
from compileiq.gating import rules as gate_rules

FIR = textwrap.dedent(
    """
    extern "C" __global__ void __launch_bounds__(256, 2) fir(const float* in, float* out, int n) {
        float taps[TAPS];
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        #pragma unroll
        for (int k = 0; k < TAPS; ++k) taps[k] = in[(i * 7 + k * 13) % n];
        float acc = 0.0f;
        #pragma unroll
        for (int k = 0; k < TAPS; ++k) acc += taps[k] * taps[TAPS - 1 - k] * taps[(k * 37) % TAPS];
        #pragma unroll
        for (int k = 0; k < TAPS; ++k) out[(i + k * 4099) % n] = taps[(k * 11) % TAPS] + acc;
    }
    """
)
SMALL, SPILLING = FIR.replace("TAPS", "32"), FIR.replace("TAPS", "128")  # 128: 424 + 628 spill bytes
ACF, KERNEL = "k/fir.acf.toml", "k/fir.cu"
RETUNE = ("compileiq tune k/fir.cu --objective spills --arch sm_90 --budget 6 "
          "--only ptxas.maxrregcount,ptxas.override_directive_values,ptxas.opt_level --db sqlite:///{db} "
          "--out k/fir.acf.toml --force")


class Quiet:
    def started(self, study, budget, finished):
        pass

    def trial(self, outcome, best):
        pass

    def note(self, message):
        pass


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    """A workspace with k/fir.cu (32 taps) and k/fir.acf.toml written by a real tune run in it."""
    workspace = tmp_path_factory.mktemp("gate")
    (workspace / "k").mkdir()
    (workspace / KERNEL).write_text(SMALL)
    options = app.TuneOptions(kernel=Path(KERNEL), objective="spills", budget=6, workers="local",
                              db=f"sqlite:///{workspace}/t.db", out=Path(ACF), arch="sm_90",
                              only=("ptxas.maxrregcount", "ptxas.override_directive_values", "ptxas.opt_level"))
    with contextlib.chdir(workspace):
        app.tune(options, Quiet())
    return workspace


@pytest.fixture()
def spilling(tuned, tmp_path) -> Path:
    """A copy of the tuned workspace whose kernel source now spills under the ACF's settings."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    (workspace / KERNEL).write_text(SPILLING)
    return workspace


def _gate(workspace: Path, *args: str) -> CliResult:
    return run_cli(["gate", *args], cwd=workspace)


def _junit(path: Path) -> ET.Element:
    root = ET.parse(path).getroot()
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == "compileiq-gate"
    return suite


def _one_line_usage_error(result: CliResult, *says: str) -> None:
    assert result.returncode == 2, result.describe()
    assert len(result.stderr_lines) == 1 and result.stderr_lines[0].startswith("error: "), result.describe()
    assert "Traceback" not in result.output
    for text in says:
        assert text in result.stderr_lines[0], result.describe()


def test_a_fresh_acf_passes(tuned):
    result = _gate(tuned, ACF, "--junit", "gate.xml", "--markdown", "gate.md")
    assert result.returncode == 0, result.describe()
    assert "gate PASS: 1/1" in result.stdout
    suite = _junit(tuned / "gate.xml")
    assert (suite.get("tests"), suite.get("failures")) == ("1", "0")
    assert suite.find("testcase/failure") is None
    assert "No findings" in (tuned / "gate.md").read_text()


def test_a_report_refused_up_front_stops_the_gate_and_missing_folders_are_created(tuned, tmp_path):
    """What reference.md says of the reports (doc51: it said only "exits 2 after writing the
    others"): a path refused before the rebuild (here under a file) stops the gate, writing none;
    a report's missing folders are created."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    (workspace / "afile").write_text("x\n")
    refused = _gate(workspace, ACF, "--static", "--markdown", "afile/g.md", "--junit", "ok.xml")
    _one_line_usage_error(refused, "--markdown cannot write afile/g.md")
    assert not (workspace / "ok.xml").exists()
    made = _gate(workspace, ACF, "--static", "--markdown", "new/dir/g.md", "--junit", "other/g.xml")
    assert made.returncode == 0, made.describe()
    assert (workspace / "new" / "dir" / "g.md").is_file() and (workspace / "other" / "g.xml").is_file()


def test_changed_tune_toml_settings_are_a_stale_finding(tuned, tmp_path):
    """The ACF records its tune.toml settings' sha256 (issue 24, item 4): a launch fact changed since
    (the source untouched) scores occupancy for another launch, so the gate says so."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    (workspace / "k" / "tune.toml").write_text("block_size = 64\n")
    result = _gate(workspace, ACF, "--static")
    retune = RETUNE.format(db=tuned / "t.db")
    assert ("warn stale-settings: the kernel's tune.toml settings changed since the ACF was tuned: block_size 256 -> "
            "64; ") in result.stdout, result.describe()
    assert result.stdout.count(f"; re-tune: {retune}\n") == 1, result.describe()
    assert "stale-source" not in result.stdout
    assert "stale-settings" not in _gate(tuned, ACF, "--static").stdout


def test_a_changed_build_flag_is_no_changed_source(tuned, tmp_path):
    """The source bundle's hash holds the base flags with the files (a study's identity): a flag added
    to tune.toml, the source untouched, is a changed setting (naming the flag), never `stale-source`,
    which sent a reviewer looking for a source diff that did not exist (user50, fault 1)."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    (workspace / "k" / "tune.toml").write_text('nvcc_flags = ["-DFOO=1"]\n')
    result = _gate(workspace, ACF, "--static")
    assert result.returncode == 0, result.describe()
    assert "stale-source" not in result.stdout, result.describe()
    assert "warn stale-settings: the ACF's base flags are not the kernel's (tune.toml): it lacks -DFOO=1" in result.stdout
    (workspace / KERNEL).write_text(SMALL + "// edited\n")  # and the source too: both said
    both = _gate(workspace, ACF, "--static")
    assert "warn stale-source: the kernel source changed since the ACF was tuned" in both.stdout, both.describe()
    assert "stale-settings" in both.stdout, both.describe()


@pytest.mark.parametrize("flags", ['"-I", "inc"', '"-isystem", "sys"'])
def test_an_added_include_folder_is_no_changed_source(tuned, tmp_path, flags):
    """A folder added to tune.toml's flags, the source untouched, is a changed setting: an -isystem
    one was `stale-source` (its folder kept in the sources read as tuned), an -I one not (rev50b #4)."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    (workspace / "k" / flags.split('"')[-2]).mkdir()
    (workspace / "k" / "tune.toml").write_text(f"nvcc_flags = [{flags}]\n")
    result = _gate(workspace, ACF, "--static")
    assert result.returncode == 0, result.describe()
    assert "stale-source" not in result.stdout, result.describe()
    assert "warn stale-settings: the kernel's build flags changed since the ACF was tuned (its sources did not)" in \
        result.stdout, result.describe()


def test_a_spilling_source_fails_on_spills_the_same_way_every_time(spilling, tuned):
    retune = RETUNE.format(db=tuned / "t.db")  # the hint repeats the database the ACF was tuned in
    runs = [_gate(spilling, ACF, "--junit", f"gate{i}.xml", "--markdown", f"gate{i}.md") for i in (1, 2)]
    for result in runs:
        assert result.returncode == 1, result.describe()
        assert "error spills: spill bytes appeared: 0 -> 1052 (recorded 0 B, measured 1052 B)" in result.stdout
        assert "warn stale-source: the kernel source changed since the ACF was tuned (recorded " in result.stdout
        assert result.stdout.count(f"; re-tune: {retune}\n") == 1, result.describe()
        assert "\\x0a" not in result.stdout  # the table's findings are lines, not one line joined by an escape
    assert runs[0].stdout == runs[1].stdout
    assert (spilling / "gate1.md").read_bytes() == (spilling / "gate2.md").read_bytes()
    assert (spilling / "gate1.xml").read_bytes() == (spilling / "gate2.xml").read_bytes()
    suite = _junit(spilling / "gate1.xml")
    assert suite.get("failures") == "1"
    failure = suite.find("testcase/failure")
    assert failure is not None and failure.get("message", "").startswith("spills: spill bytes appeared")
    assert retune in (suite.findtext("testcase/system-out") or "")
    assert "| `spills` | error | 0 B | 1052 B |" in (spilling / "gate1.md").read_text()


def _retune_line(result: CliResult) -> list[str]:
    found = [line.split("re-tune: ", 1)[1] for line in result.stdout.splitlines() if "re-tune: " in line]
    assert found, result.describe()
    return shlex.split(found[0])


def _tune_params(argv: list[str]) -> dict:
    """The options `compileiq tune` gets from argv, parsed by the real CLI parser (nothing runs)."""
    group: Any = typer.main.get_command(cli)
    ctx = group.make_context("compileiq", argv[1:], resilient_parsing=False)
    protected = getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", None) or []
    name, command, rest = group.resolve_command(ctx, [*protected, *ctx.args])
    assert name == "tune"
    return dict(command.make_context(name, rest, parent=ctx, resilient_parsing=False).params)


def test_the_retune_line_pasted_retunes_the_acf_in_place(spilling, tuned):
    """Issue 25, item 4: the gate given a roundabout ACF path prints a re-tune line with the paths
    as seen from here, the ACF's study and database; pasted (with a small budget), it runs and
    replaces the stale ACF with one of the new source."""
    result = _gate(spilling, "./k/../k/fir.acf.toml", "--static")
    argv = _retune_line(result)
    params = _tune_params(argv)
    assert (str(params["kernel"]), str(params["out_file"])) == ("k/fir.cu", "k/fir.acf.toml"), argv
    assert params["study"] is None and params["force"] and params["db"] == f"sqlite:///{tuned / 't.db'}", argv
    # the space the ACF was tuned in (--only), not the whole default space: the line used to drop it
    assert params["only"] == "ptxas.maxrregcount,ptxas.override_directive_values,ptxas.opt_level", argv
    before = (spilling / ACF).read_text()
    done = run_cli([*argv[1:], "--budget", "3", "--workers", "local", "--only", "ptxas.opt_level"], cwd=spilling)
    assert done.returncode == 0, done.describe()
    assert (spilling / ACF).read_text() != before
    assert _gate(spilling, ACF, "--static", "--rule", "spills=off").returncode == 0


def test_the_retune_line_keeps_a_study_the_user_named(spilling, tuned):
    """A study named by the user (--study) stays recognisable: its name plus the kernel's state now
    (the old study cannot take the new source), the same for both gate runs, and the pasted line works."""
    acf = spilling / ACF
    acf.write_text(re.sub(r'(?m)^study = ".*"$', 'study = "fir-prod"', acf.read_text()))
    lines = [_retune_line(_gate(spilling, ACF, "--static")) for _ in range(2)]
    assert lines[0] == lines[1]
    study = _tune_params(lines[0])["study"]
    assert re.fullmatch(r"fir-prod-[0-9a-f]{8}", study), lines[0]
    done = run_cli([*lines[0][1:], "--budget", "2", "--workers", "local", "--only", "ptxas.opt_level"], cwd=spilling)
    assert done.returncode == 0, done.describe()
    assert f'study = "{study}"' in acf.read_text()


def test_a_rule_made_a_warning_passes_with_the_warning(spilling):
    result = _gate(spilling, ACF, "--rule", "spills=warn", "--rule", "code-changed=off", "--json")
    assert result.returncode == 0, result.describe()
    document = json.loads(result.stdout)
    assert document["verdict"] == "PASS"
    findings = {f["rule"]: f["severity"] for f in document["acfs"][0]["findings"]}
    assert findings == {"spills": "warn", "stale-source": "warn"}
    assert document["acfs"][0]["measured"]["spill_bytes"] == 1052
    for side in ("recorded", "measured"):  # every static metric the rules hold an ACF to, by its one name
        assert set(StaticMetrics.SCORED) <= set(document["acfs"][0][side]), document["acfs"][0][side]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--rule", "nope=warn"), ("unknown rule", "nope")),
        (("--rule", "spills=fatal"), ("severity must be one of error, warn, off",)),
        (("--kernel", "other/other.cu"), ("ACF of kernel 'fir'", "other/other.cu")),
    ],
)
def test_bad_options_are_one_line_usage_errors(tuned, args, says):
    (tuned / "other").mkdir(exist_ok=True)
    (tuned / "other" / "other.cu").write_text('extern "C" __global__ void other(float* x) { x[0] = 1.0f; }\n')
    _one_line_usage_error(_gate(tuned, ACF, *args), *says)


def test_a_garbage_acf_is_a_one_line_usage_error(tmp_path):
    (tmp_path / "junk.acf.toml").write_text("this is [not an ACF\n")
    (tmp_path / "empty.acf.toml").write_text("format = 1\n")
    _one_line_usage_error(_gate(tmp_path, "junk.acf.toml"), "junk.acf.toml", "not a readable ACF")
    (unchecked,) = gating.run(gating.GateOptions(acfs=(tmp_path / "empty.acf.toml",)), visible=lambda: False).results
    assert unchecked.bad_input and "not a valid ACF" in unchecked.findings[0].message


def test_a_missing_kernel_names_what_was_tried(tuned, tmp_path):
    shutil.copy(tuned / ACF, tmp_path / "fir.acf.toml")
    with pytest.raises(UsageError, match=r"kernel source not found \(tried \S+/fir.cu\); pass --kernel PATH"):
        gating.locate(tmp_path / "fir.acf.toml")


def test_a_kernel_that_no_longer_builds_fails_the_build_rule(spilling):
    (spilling / KERNEL).write_text(SMALL.replace("float acc = 0.0f;", "float acc = ;"))
    with contextlib.chdir(spilling):
        report = gating.run(gating.GateOptions(acfs=(Path(ACF),), device=False))
    (result,) = report.results
    assert report.exit_code == 1
    assert [f.rule for f in result.findings] == ["build", "stale-source"]
    assert result.findings[0].severity is gate_rules.Severity.ERROR and result.findings[0].recorded == "builds"


# --- the GPU statistic, with synthetic samplers ------------------------------------------------


def _sampler(mean: float, seed: int, noise: float = 0.005):
    rng = random.Random(seed)
    return lambda k: [mean * (1.0 + rng.gauss(0.0, noise)) for _ in range(k)]


@pytest.mark.parametrize(("acf_mean", "verdict"), [(0.85, Verdict.FASTER), (1.0, Verdict.SAME), (1.15, Verdict.SLOWER)])
def test_timing_verdict_against_the_defaults(acf_mean, verdict):
    timing = timing_rules.compare_timing(timing_rules.TimingSamplers(_sampler(acf_mean, 1), _sampler(1.0, 2)))
    assert timing.vs_default.verdict is verdict
    assert timing.vs_recorded is None
    rules = [hit.rule for hit in timing_rules.timing_hits(timing)]
    assert rules == (["slower-than-default"] if verdict is Verdict.SLOWER else [])


def test_timing_against_the_recorded_value():
    same = timing_rules.compare_timing(timing_rules.TimingSamplers(_sampler(1.0, 1), _sampler(1.0, 2), recorded_median=1.0))
    assert same.vs_recorded is not None and same.vs_recorded.verdict is Verdict.SAME
    slower = timing_rules.compare_timing(timing_rules.TimingSamplers(_sampler(1.2, 1), _sampler(1.2, 2), recorded_median=1.0,
                                                                 recorded_is="objective.confirmed_median"))
    assert slower.vs_default.verdict is Verdict.SAME
    (hit,) = timing_rules.timing_hits(slower)
    # the finding names the time it was held to and where the ACF records it
    assert hit.rule == "slower-than-recorded" and "the recorded 1 ms (objective.confirmed_median)" in hit.message


def test_the_recorded_comparison_reads_the_acf_runs_of_the_first_again():
    """Each ACF block is a run of the measuring program (12 s each on the first GPU lent): the
    comparison with the recorded median reuses the blocks the comparison with the defaults ran."""
    runs: list[int] = []
    acf = _sampler(1.0, 1)

    def counted(k: int) -> list[float]:
        runs.append(k)
        return acf(k)

    timing = timing_rules.compare_timing(timing_rules.TimingSamplers(counted, _sampler(1.0, 2), recorded_median=1.0))
    assert timing.vs_recorded is not None and timing.vs_recorded.verdict is Verdict.SAME
    assert len(runs) == max(timing.vs_default.rounds, timing.vs_recorded.rounds) == 10


def test_timing_is_deterministic_for_a_seed():
    runs = [timing_rules.compare_timing(timing_rules.TimingSamplers(_sampler(1.01, 1, 0.03), _sampler(1.0, 2, 0.03)), seed=7)
            for _ in range(2)]
    assert runs[0] == runs[1]


class SlowerOnGpu:
    def samplers(self, target: gating.Target, baseline: gate_rules.Defaults) -> timing_rules.TimingSamplers:
        return timing_rules.TimingSamplers(_sampler(1.2, 1), _sampler(1.0, 2), recorded_median=1.0,
                                         recorded_is="objective.confirmed_median")


def test_a_slower_acf_fails_the_gate_in_timing_mode(tuned):
    notes: list[str] = []
    with contextlib.chdir(tuned):
        report = gating.run(gating.GateOptions(acfs=(Path(ACF),), device=True), timing=SlowerOnGpu(),
                            visible=lambda: True, progress=notes.append)
    # minutes of GPU runs on some machines: the gate says when timing starts and how it ended
    assert len(notes) == 2
    assert notes[0] == (f"{ACF}: timing its build against the compiler defaults on the GPU, interleaved (20 to 60 "
                        "runs of the measuring program)")
    assert notes[1].startswith(f"{ACF}: SLOWER 1.") and notes[1].endswith("rounds against the compiler defaults")
    (result,) = report.results
    assert report.mode == "timing" and report.exit_code == 1
    assert [f.rule for f in result.findings] == ["slower-than-default", "slower-than-recorded"]
    assert result.timing is not None and result.timing.vs_default.verdict is Verdict.SLOWER
    assert "the ACF build is SLOWER than the compiler defaults: SLOWER" in result.findings[0].message
    # every report says what time the build was held to, and where the ACF records it
    assert "Timing vs recorded (ACF/recorded, 1 ms (objective.confirmed_median)): SLOWER" in ci_reports.markdown(report)
    assert "Timing vs the compiler defaults (ACF/baseline): SLOWER" in ci_reports.markdown(report)  # or the build as shipped
    (acf_json,) = ci_reports.as_json(report)["acfs"]
    assert acf_json["timing"]["vs_recorded"]["recorded_ms"] == 1.0
    assert acf_json["timing"]["vs_recorded"]["recorded_is"] == "objective.confirmed_median"


def test_mode_resolution():
    fake = SlowerOnGpu()
    assert gating.resolve_mode(None, lambda: False, fake)[0] == "static"
    assert gating.resolve_mode(None, lambda: True, fake)[0] == "timing"
    assert gating.resolve_mode(False, lambda: True, fake)[0] == "static"
    assert gating.resolve_mode(None, lambda: True, None)[0] == "static"  # no timing source: static, said so
    with pytest.raises(UsageError, match="no GPU is visible"):
        gating.resolve_mode(True, lambda: False, fake)
    with pytest.raises(UsageError, match="no timing source"):
        gating.resolve_mode(True, lambda: True, None)


def test_severities_default_and_override():
    table = gate_rules.severities(["registers=error", "code-changed=off"])
    assert table["spills"] is gate_rules.Severity.ERROR and table["stale-source"] is gate_rules.Severity.WARN
    assert table["registers"] is gate_rules.Severity.ERROR and table["code-changed"] is gate_rules.Severity.OFF


def _with_evidence_edited(tuned: Path, tmp_path: Path, table: str, key: str, value: object) -> Path:
    """A copy of the tuned workspace whose ACF's [evidence.TABLE] KEY is `value`, by hand (the
    text edited in place, the code hash left as it is)."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    text = (workspace / ACF).read_text()
    head, _, tail = text.partition(f"[evidence.{table}]\n")
    old = f"\n{key} = {tomllib.loads(text)['evidence'][table][key]!r}\n"
    assert old in "\n" + tail
    (workspace / ACF).write_text(head + f"[evidence.{table}]\n" + ("\n" + tail).replace(old, f"\n{key} = {value!r}\n", 1)[1:])
    return workspace


@pytest.mark.parametrize(("edit", "to", "shown"), [("registers", lambda v: v + 8, str),
                                                  ("occupancy", lambda v: v / 2, lambda v: f"{v:.1%}")])
def test_evidence_the_acfs_own_code_does_not_give_fails(tuned, tmp_path, edit, to, shown):
    """Recorded numbers edited with the code hash left as it is: the same machine code gives other
    numbers, so the evidence was edited (a worse recorded number let a real regression through
    unseen, and nothing was reported at all). Spill bytes are the spills objective's own: its
    objective.best must match them, so an ACF edited there is refused on reading."""
    best = tomllib.loads((tuned / ACF).read_text())["evidence"]["best"]
    workspace = _with_evidence_edited(tuned, tmp_path, "best", edit, to(best[edit]))
    result = _gate(workspace, ACF, "--static", "--json")
    assert result.returncode == 1, result.describe()
    findings = json.loads(result.stdout)["acfs"][0]["findings"]
    assert [(f["rule"], f["severity"]) for f in findings] == [("evidence", "error")], findings
    assert (f"the ACF records {edit} {shown(to(best[edit]))} for machine code that gives {edit} "
            f"{shown(best[edit])}") in findings[0]["message"]


def test_an_edited_baseline_evidence_fails_the_gate(tuned, tmp_path):
    """[evidence.baseline] edited to claim spills the defaults never had (a forged gain), its code
    hash left as it is: the gate rebuilds the baseline and the same code gives other numbers. It
    used to pass with "no findings"."""
    base = tomllib.loads((tuned / ACF).read_text())["evidence"]["baseline"]
    workspace = _with_evidence_edited(tuned, tmp_path, "baseline", "registers", 255)
    result = _gate(workspace, ACF, "--static", "--json")
    assert result.returncode == 1, result.describe()
    findings = json.loads(result.stdout)["acfs"][0]["findings"]
    assert [(f["rule"], f["severity"]) for f in findings] == [("evidence", "error")], findings
    assert (f"the ACF records registers 255 for the baseline's machine code, which gives registers {base['registers']}"
            in findings[0]["message"])


def _with_settings_hash(workspace: Path, value: str) -> None:
    text = (workspace / ACF).read_text()
    recorded = tomllib.loads(text)["kernel"]["settings_sha256"]
    (workspace / ACF).write_text(text.replace(f'settings_sha256 = "{recorded}"', f'settings_sha256 = "{value}"', 1))


@pytest.mark.parametrize("garbage", ["f" * 64, "0" * 64])
def test_a_forged_occupancy_behind_a_garbage_settings_hash_fails(tuned, tmp_path, garbage):
    """[evidence.baseline] occupancy edited (a forged occupancy gain) AND the settings hash set to one
    no settings give: the gate held occupancy only where the hash was the kernel's, so the forgery
    read as `stale-settings`, a warning, and passed. The evidence records the launch it was scored
    at: the same code there gives 100%, whatever the hash says."""
    base = tomllib.loads((tuned / ACF).read_text())["evidence"]["baseline"]
    assert (base["block_size"], base["dynamic_smem"]) == (256, 0), base
    workspace = _with_evidence_edited(tuned, tmp_path, "baseline", "occupancy", base["occupancy"] / 4)
    _with_settings_hash(workspace, garbage)
    result = _gate(workspace, ACF, "--static", "--json")
    assert result.returncode == 1, result.describe()
    findings = json.loads(result.stdout)["acfs"][0]["findings"]
    assert ("evidence", "error") in [(f["rule"], f["severity"]) for f in findings], findings
    edited = next(f["message"] for f in findings if f["rule"] == "evidence")
    assert (f"the ACF records occupancy {base['occupancy'] / 4:.1%} for the baseline's machine code, which gives "
            f"occupancy {base['occupancy']:.1%} at the launch it records (256 threads per block") in edited, edited


def test_a_changed_launch_in_tune_toml_is_only_stale_settings(tuned, tmp_path):
    """An honest ACF whose kernel's launch changed since (dynamic shared memory added in tune.toml):
    its recorded occupancy is what its code gives at the launch it records, so only `stale-settings`."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    (workspace / "k" / "tune.toml").write_text("dynamic_smem = 1024\n")
    result = _gate(workspace, ACF, "--static", "--json")
    assert result.returncode == 0, result.describe()
    findings = json.loads(result.stdout)["acfs"][0]["findings"]
    assert [(f["rule"], f["severity"]) for f in findings] == [("stale-settings", "warn")], findings
    assert "NOT vouched for" not in findings[0]["message"]


def test_a_teammates_block_size_is_no_occupancy_regression(tuned, tmp_path):
    """tune.toml's launch changed after the tuning (150,000 B of dynamic shared memory: one block per SM),
    the code the same: the gate FAILed "occupancy fell: 25.0% -> 12.5%", the recorded figure scored at
    the tuned launch against the rebuild's at the new one, two launches. The rebuild is held at the
    launch the ACF records; the launch change is stale-settings."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    (workspace / "k" / "tune.toml").write_text("dynamic_smem = 150000\n")
    result = _gate(workspace, ACF, "--static", "--json")
    assert result.returncode == 0, result.describe()
    acf = json.loads(result.stdout)["acfs"][0]
    assert acf["measured"]["code_hash"] == acf["recorded"]["code_hash"], acf
    assert acf["measured"]["occupancy"] < acf["recorded"]["occupancy"], acf  # two launches: no regression
    assert {(f["rule"], f["severity"]) for f in acf["findings"]} == {("stale-settings", "warn")}, acf["findings"]


def test_a_changed_launch_names_what_changed_not_the_hashes(tuned, tmp_path):
    """stale-settings for a tune.toml change said only `e6ff8770b27f -> aa4e482d3c0e`; a launch the
    ACF records is named, with what the ACF's build gives at the new one."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    (workspace / "k" / "tune.toml").write_text("block_size = 128\ndynamic_smem = 150000\n")
    acf = json.loads(_gate(workspace, ACF, "--static", "--json").stdout)["acfs"][0]
    [named] = [f for f in acf["findings"] if f["message"].startswith("the kernel's tune.toml settings changed")]
    assert (named["recorded"], named["measured"]) == ("block_size 256, dynamic_smem 0",
                                                      "block_size 128, dynamic_smem 150000"), named
    now, was = acf["measured"]["occupancy"], acf["recorded"]["occupancy"]
    assert (f"changed since the ACF was tuned: block_size 256 -> 128, dynamic_smem 0 -> 150000; at the new launch the "
            f"ACF's build gives occupancy {now:.1%} ({was:.1%} at the launch it records, 256 threads per block, 0 B "
            "dynamic shared memory)") in named["message"], named


def test_a_changed_entries_list_is_named():
    """The kernels scored ([kernel] entries) are named too; a change the ACF records nothing of keeps the hashes."""
    from compileiq.gating.recorded_launch import RecordedLaunch
    from compileiq.gating.rules import Measured, Recorded, static_hits

    recorded = Recorded(0, 32, 1.0, "c", "s", "t", settings_sha256="a" * 64, launch=RecordedLaunch(256, 0), entries=())
    now = Measured("s", "t", None, 0, 32, 1.0, "c", settings_sha256="b" * 64, launch=RecordedLaunch(256, 0),
                   entries=("fir",))
    [hit] = static_hits(recorded, now, "re-tune")
    assert hit.message.endswith('changed since the ACF was tuned: entries [] -> ["fir"]'), hit.message
    [hit] = static_hits(recorded, Measured("s", "t", None, 0, 32, 1.0, "c", settings_sha256="b" * 64,
                                           launch=RecordedLaunch(256, 0)), "re-tune")
    assert (hit.recorded, hit.measured) == ("a" * 12, "b" * 12), hit


def _without_launch_lines(workspace: Path, *keys: str, table: str | None = None) -> None:
    """The ACF with its evidence tables' `keys` lines deleted (only `table`'s, where given)."""
    text, kept, current = (workspace / ACF).read_text(), [], ""
    for line in text.splitlines(keepends=True):
        current = line.strip()[len("[evidence."):-1] if line.startswith("[evidence.") else current
        if not (line.split(" = ")[0] in keys and (table is None or current == table)):
            kept.append(line)
    (workspace / ACF).write_text("".join(kept))


def _evidence_findings(result: CliResult) -> list[str]:
    assert result.returncode == 1, result.describe()
    findings = json.loads(result.stdout)["acfs"][0]["findings"]
    assert ("evidence", "error") in [(f["rule"], f["severity"]) for f in findings], findings
    return [f["message"] for f in findings if f["rule"] == "evidence"]


def test_a_forged_occupancy_with_dynamic_smem_deleted_fails(tuned, tmp_path):
    """[evidence.baseline] occupancy halved (a forged gain), a garbage settings hash and every
    `dynamic_smem` deleted so that the ACF reads as one written before it was recorded: the gate said
    `stale-settings` "NOT vouched for", a warning, and exit 0. Its baseline and best were scored by one
    run at one launch (it tunes no macro), and no one amount of dynamic shared memory gives both."""
    evidence = tomllib.loads((tuned / ACF).read_text())["evidence"]
    workspace = _with_evidence_edited(tuned, tmp_path, "baseline", "occupancy", evidence["baseline"]["occupancy"] / 2)
    _with_settings_hash(workspace, "f" * 64)
    _without_launch_lines(workspace, "dynamic_smem")
    said = _evidence_findings(_gate(workspace, ACF, "--static", "--json"))
    assert any(f"no one amount of dynamic shared memory gives both the ACF's [evidence.best] occupancy "
               f"{evidence['best']['occupancy']:.1%} and its [evidence.baseline] "
               f"{evidence['baseline']['occupancy'] / 2:.1%} at the 256 threads per block" in m for m in said), said


def test_a_forged_occupancy_no_dynamic_smem_gives_fails(tuned, tmp_path):
    """An older ACF's occupancy (no dynamic_smem) that no amount of dynamic shared memory gives at its
    block size, nor the launch the kernel's settings give now (20%: 256 threads make eighths): evidence."""
    workspace = _with_evidence_edited(tuned, tmp_path, "baseline", "occupancy", 0.2)
    _with_settings_hash(workspace, "f" * 64)
    _without_launch_lines(workspace, "dynamic_smem")
    said = _evidence_findings(_gate(workspace, ACF, "--static", "--json"))
    assert any("no rebuild reproduces the ACF's [evidence.baseline] occupancy 20.0%: the same code gives it neither at "
               "the launch it records (256 threads per block, its dynamic shared memory not recorded) with any dynamic "
               "shared memory, nor at the launch the kernel's settings give now (25.0%)" in m for m in said), said


def test_a_forged_occupancy_with_its_launch_deleted_fails(tuned, tmp_path):
    """block_size and dynamic_smem both deleted from the forged table: it records no launch at all,
    and the launch the kernel's settings give now gives another figure: evidence, not a warning."""
    evidence = tomllib.loads((tuned / ACF).read_text())["evidence"]
    workspace = _with_evidence_edited(tuned, tmp_path, "baseline", "occupancy", evidence["baseline"]["occupancy"] / 2)
    _with_settings_hash(workspace, "f" * 64)
    _without_launch_lines(workspace, "dynamic_smem", "block_size", table="baseline")
    said = _evidence_findings(_gate(workspace, ACF, "--static", "--json"))
    assert any(f"[evidence.baseline] occupancy {evidence['baseline']['occupancy'] / 2:.1%} records no launch, so its "
               "occupancy cannot be checked after tune.toml's launch changed: the same code gives "
               f"{evidence['baseline']['occupancy']:.1%} at the launch" in m for m in said), said


def test_a_forged_occupancy_with_its_launch_edited_to_match_fails(tuned, tmp_path):
    """[evidence.baseline] occupancy quartered AND its dynamic_smem edited to a launch at which the same
    code gives that figure, under a garbage hash: every number was true at the launch it records, so
    the gate warned and passed a forged gain. One run scores baseline and best at one launch where
    the ACF tunes no macro: two launches are an edit."""
    evidence = tomllib.loads((tuned / ACF).read_text())["evidence"]
    assert evidence["baseline"]["occupancy"] == 0.25, evidence  # 128 registers: 2 blocks of 256 threads
    workspace = _with_evidence_edited(tuned, tmp_path, "baseline", "occupancy", 0.125)
    workspace = _with_evidence_edited(workspace, tmp_path / "again", "baseline", "dynamic_smem", 120000)  # 1 block
    _with_settings_hash(workspace, "f" * 64)
    said = _evidence_findings(_gate(workspace, ACF, "--static", "--json"))
    assert any("the ACF records its [evidence.baseline] at 256 threads per block, 120,000 B dynamic shared memory and "
               "its [evidence.best] at 256 threads per block, 0 B dynamic shared memory, but builds both with the same macros" in m
               for m in said), said


def test_an_older_acf_whose_settings_changed_elsewhere_passes_with_stale_settings(tuned, tmp_path):
    """An honest ACF written before dynamic_smem was recorded, its tune.toml changed since in a way
    that leaves its occupancy: the launch the kernel's settings give now reproduces every figure."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    _without_launch_lines(workspace, "dynamic_smem")
    (workspace / "k" / "tune.toml").write_text("dynamic_smem = 1024\n")
    result = _gate(workspace, ACF, "--static", "--json")
    assert result.returncode == 0, result.describe()
    findings = json.loads(result.stdout)["acfs"][0]["findings"]
    assert [(f["rule"], f["severity"]) for f in findings] == [("stale-settings", "warn")], findings


def test_an_older_acf_whose_launch_changed_says_its_occupancy_is_not_vouched_for(tmp_path):
    """An honest ACF tuned at 120,000 B of dynamic shared memory (12.5%), written before dynamic_smem
    was recorded; tune.toml's launch changed since (none now: 25%). Some amount of dynamic shared memory
    gives its figures at the block size it records, so a warning says they are not vouched for."""
    workspace = tmp_path / "ws"
    (workspace / "k").mkdir(parents=True)
    (workspace / KERNEL).write_text(SMALL)
    (workspace / "k" / "tune.toml").write_text("dynamic_smem = 120000\n")
    options = app.TuneOptions(kernel=Path(KERNEL), objective="spills", budget=2, workers="local",
                              db=f"sqlite:///{workspace}/t.db", out=Path(ACF), arch="sm_90",
                              only=("ptxas.opt_level",))
    with contextlib.chdir(workspace):
        app.tune(options, Quiet())
    _without_launch_lines(workspace, "dynamic_smem")
    (workspace / "k" / "tune.toml").unlink()
    result = _gate(workspace, ACF, "--static")
    assert result.returncode == 0, result.describe()
    assert ("warn stale-settings: the ACF's recorded occupancy ([evidence.best] 12.5%, [evidence.baseline] 12.5%) is "
            "NOT vouched for") in result.stdout, result.describe()


def test_an_older_acf_that_records_no_launch_says_so_when_the_launch_changed(tuned, tmp_path):
    """Review: an honest ACF written before launches were recorded (no block_size, no dynamic_smem), a
    teammate's tune.toml then giving a launch at which the same code scores other occupancy: the gate
    said "its evidence or its launch was edited". It still fails (an ACF is untrusted: deleting the
    launch must not turn a forged figure into a warning), saying why nobody can check it."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    _without_launch_lines(workspace, "dynamic_smem", "block_size")
    (workspace / "k" / "tune.toml").write_text("dynamic_smem = 120000\n")  # one block of 256 threads: 12.5%
    said = _evidence_findings(_gate(workspace, ACF, "--static", "--json"))
    assert any("records no launch, so its occupancy cannot be checked after tune.toml's launch changed: the same "
               "code gives 12.5% at the launch the kernel's settings give now; re-tune" in m for m in said), said
    assert not any("edited" in m for m in said), said


def test_a_hand_edited_kernel_arch_is_bad_input_for_the_gate_and_flags(tuned, tmp_path):
    """kernel.arch edited from sm_90 to sm_80: the gate rebuilt for sm_80, warned that the code
    changed and passed, and `flags` printed -arch=sm_80 for settings chosen on sm_90. Both now
    refuse it as bad input (exit 2, one line): its evidence records the arch it was built for."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    document = tomllib.loads((workspace / ACF).read_text())
    assert document["evidence"]["best"]["arch"] == document["evidence"]["baseline"]["arch"] == "sm_90"
    (workspace / ACF).write_text(with_kernel_arch((workspace / ACF).read_text(), "sm_80"))
    assert tomllib.loads((workspace / ACF).read_text())["kernel"]["arch"] == "sm_80"
    said = "kernel.arch = 'sm_80', but evidence.best was built for 'sm_90'"
    gated = _gate(workspace, ACF, "--static", "--json")
    assert gated.returncode == 2, gated.describe()
    assert said in json.loads(gated.stdout)["acfs"][0]["findings"][0]["message"]
    _one_line_usage_error(run_cli(["flags", ACF], cwd=workspace), said)


def test_an_acf_that_cannot_be_checked_is_in_every_report_beside_the_others(tuned, tmp_path):
    """One ACF whose kernel is gone: exit 2 with its one error line, and the JUnit and markdown
    reports are still written, with the other ACF's verdict (no report at all was written, so a
    CI summary step had nothing to show exactly when it was needed)."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    gone = workspace / "k" / "gone.acf.toml"
    text = (workspace / ACF).read_text()
    assert 'path = "fir.cu"' in text
    gone.write_text(text.replace('path = "fir.cu"', 'path = "moved/fir.cu"').replace('source = "fir.cu"',
                                                                                   'source = "moved.cu"'))
    result = _gate(workspace, ACF, "k/gone.acf.toml", "--static", "--junit", "g.xml", "--markdown", "g.md")
    assert result.returncode == 2, result.describe()
    assert [line for line in result.stderr_lines if line.startswith("error: ")] == [
        result.stderr_lines[-1]] and "kernel source not found" in result.stderr_lines[-1], result.describe()
    suite = _junit(workspace / "g.xml")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "0", "1")
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert cases[ACF].find("failure") is None and cases[ACF].find("error") is None
    error = cases["k/gone.acf.toml"].find("error")
    assert error is not None and "kernel source not found" in (error.get("message") or "")
    page = (workspace / "g.md").read_text()
    assert "## compileiq gate: ERROR" in page and "1 could not be checked (bad input)" in page
    assert f"### {ACF}: PASS" in page and "### k/gone.acf.toml: ERROR" in page



def test_an_acf_whose_kernel_no_longer_preprocesses_is_a_bad_input_row_beside_the_others(tuned, tmp_path):
    """A PR removed a header one kernel includes: `nvcc -M` failed outside every per-ACF handler,
    so the whole gate stopped (rc 2, stdout empty under --json, an error naming only `fir.cu`) and
    the other ACF got no verdict. Now that ACF is an ERROR row naming it, the other is gated."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    (workspace / "k2").mkdir()
    shutil.copy(workspace / ACF, workspace / "k2" / "fir.acf.toml")
    (workspace / "k2" / "h.cuh").write_text("#define HH 1\n")
    (workspace / "k2" / "fir.cu").write_text('#include "h.cuh"\n' + SMALL)
    (workspace / "k2" / "h.cuh").rename(workspace / "k2" / "h.bak")  # removed or renamed in a PR
    result = _gate(workspace, "k2/fir.acf.toml", ACF, "--static", "--json", "--junit", "g.xml", "--markdown", "g.md")
    assert result.returncode == 2, result.describe()
    assert "Traceback" not in result.output
    document = json.loads(result.stdout)
    assert (document["verdict"], document["exit_code"]) == ("ERROR", 2), document
    rows = {row["acf"]: row for row in document["acfs"]}
    assert (rows["k2/fir.acf.toml"]["verdict"], rows[ACF]["verdict"]) == ("ERROR", "PASS"), document
    [finding] = rows["k2/fir.acf.toml"]["findings"]
    assert finding["rule"] == "bad-input" and finding["message"].startswith("k2/fir.acf.toml: "), finding
    assert "h.cuh" in finding["message"], finding
    [error] = [line for line in result.stderr_lines if line.startswith("error: ")]
    assert error == f"error: {finding['message']}", result.describe()
    suite = _junit(workspace / "g.xml")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "0", "1")
    page = (workspace / "g.md").read_text()
    assert f"### {ACF}: PASS" in page and "### k2/fir.acf.toml: ERROR" in page
    table = _gate(workspace, "k2/fir.acf.toml", ACF, "--static")
    assert table.returncode == 2 and ACF in table.stdout and "k2/fir.acf.toml" in table.stdout, table.describe()


def test_the_retune_line_of_a_database_with_a_password_reads_it_from_the_environment(tuned, tmp_path):
    """The ACF shows a URL's password as ***: pasted, that command failed to log in. It now says
    --db "$COMPILEIQ_DB" (unset, `--db ""` is a one-line error, never the default database)."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    text = (workspace / ACF).read_text()
    url = "postgresql+psycopg://team:***@127.0.0.1:5432/tuning"
    (workspace / ACF).write_text(re.sub(r'(?m)^database = ".*"$', f'database = "{url}"', text, count=1))
    with contextlib.chdir(workspace):
        target = gating.locate(Path(ACF))
        command = gating.retune_command(target, gating.Measured("0" * 64, "build"))
    assert ' --db "$COMPILEIQ_DB" ' in command and "***" not in command, command
    assert shlex.split(command.replace('"$COMPILEIQ_DB"', "URL"))[-4:] == ["URL", "--out", ACF, "--force"]


def test_an_instructions_acf_is_held_to_its_instruction_count(tmp_path):
    """--objective instructions alone: the gate read instructions only for several objectives, so
    an ACF whose instruction count (and objective numbers) were edited down passed."""
    (tmp_path / "k").mkdir()
    (tmp_path / KERNEL).write_text(SMALL)
    tuned = run_cli(["tune", KERNEL, "--objective", "instructions", "--budget", "4", "--workers", "local",
                     "--only", "ptxas.opt_level,ptxas.maxrregcount", "--db", f"sqlite:///{tmp_path}/t.db",
                     "--out", ACF], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    text = (tmp_path / ACF).read_text()
    best = tomllib.loads(text)["evidence"]["best"]["instructions"]
    head, _, tail = text.partition("[evidence.best]\n")
    head = head.replace(f"best = {float(best)!r}", f"best = {float(best - 100)!r}").replace("improved = false",
                                                                                          "improved = true")
    edited = head + "[evidence.best]\n" + tail.replace(f"\ninstructions = {best}\n", f"\ninstructions = {best - 100}\n", 1)
    assert edited.count(str(best - 100)) == 2, edited
    (tmp_path / ACF).write_text(edited)
    result = _gate(tmp_path, ACF, "--static", "--json")
    assert result.returncode == 1, result.describe()
    row = json.loads(result.stdout)["acfs"][0]
    rules = {f["rule"] for f in row["findings"]}
    assert {"instructions", "evidence"} <= rules, rules
    # the numbers the finding is about are in the report's recorded and measured metrics too
    assert (row["recorded"]["instructions"], row["measured"]["instructions"]) == (best - 100, best), row


def test_an_acf_recording_no_instruction_count_is_still_gated(tuned, tmp_path):
    """An ACF written before instruction counts were recorded: its evidence has spill bytes,
    registers and occupancy only. The gate reads it with the one reader of recorded metrics
    (`StaticMetrics`), which needs all four for a score: the count is absent, not a reason to
    refuse the ACF, and the report says it is unknown (null)."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    text = (workspace / ACF).read_text()
    edited = re.sub(r"(\[evidence\.(?:best|baseline)\]\n(?:[^\[\n][^\n]*\n)*?)instructions = \d+\n", r"\1", text)
    edited = re.sub(r"(\[evidence\.(?:best|baseline)\]\n(?:[^\[\n][^\n]*\n)*?)instructions = \d+\n", r"\1", edited)
    assert edited.count("\ninstructions = ") == text.count("\ninstructions = ") - 2, edited
    (workspace / ACF).write_text(edited)
    result = _gate(workspace, ACF, "--static", "--json")
    assert result.returncode == 0, result.describe()
    row = json.loads(result.stdout)["acfs"][0]
    assert row["verdict"] == "PASS" and row["recorded"]["instructions"] is None, row
    assert isinstance(row["measured"]["instructions"], int), row


def test_the_retune_line_repeats_only_parameter_names_an_acf_records():
    """`provenance.searched` is untrusted: names that are not parameters are never printed."""
    from compileiq.gating.retune import retune_space

    assert retune_space({"only": ["ptxas.opt_level", "define.BLOCK"], "allow_numerics": True, "strategy": "random",
                         "seed": 2}) == ["--only", "ptxas.opt_level,define.BLOCK", "--allow-numerics", "--strategy",
                                         "random", "--seed", "2"]
    assert retune_space({"strategy": "--run x", "seed": -1}) == [] and retune_space({"seed": True}) == []
    assert retune_space({"only": ["ptxas.opt_level", "x; touch pwned"], "exclude": "nvcc.lineinfo",
                         "allow_semantics": "yes"}) == []
    assert retune_space("--run") == []


def test_a_static_acf_that_gives_occupancy_for_fewer_spills_fails(tmp_path: Path) -> None:
    """`static` never trades occupancy for fewer spills; an ACF that says `static` and does (a
    `spills` choice relabelled, its evidence genuine) passed the gate, held to the `spills` rule."""
    kernel = Path(__file__).resolve().parent.parent / "kernels" / "spill_heavy" / "spill_heavy.cu"
    tuned = run_cli(["tune", str(kernel), "--objective", "spills", "--only", "ptxas.maxrregcount,ptxas.override_directive_values",
                     "--budget", "24", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}",
                     "--out", "k.acf.toml"], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    data = tomllib.loads((tmp_path / "k.acf.toml").read_text())
    vs = data["evidence"]["vs_defaults"]["occupancy"]
    assert vs["chosen"] < vs["defaults"], vs  # the fixture: the spills objective made the trade
    assert _gate(tmp_path, "k.acf.toml", "--static").returncode == 0
    objective = data["objective"]  # relabelled as a hand would: the name, unit and the static scores
    static = {table: data["evidence"][table]["spill_bytes"] * 1000 + round((1 - data["evidence"][table]["occupancy"])
                                                                            * 1000) for table in ("baseline", "best")}
    text = (tmp_path / "k.acf.toml").read_text().replace('name = "spills"', 'name = "static"', 1)
    text = text.replace(f'unit = "{objective["unit"]}"', 'unit = "score: spill bytes x 1000 + occupancy shortfall in per mille"')
    for table in ("baseline", "best"):
        text = text.replace(f"{table} = {objective[table]!r}\n", f"{table} = {float(static[table])!r}\n", 1)
    (tmp_path / "static.acf.toml").write_text(text)
    gated = _gate(tmp_path, "static.acf.toml", "--static")
    assert gated.returncode == 1, gated.describe()
    assert "for the `static` objective, which gives no occupancy for fewer spills" in gated.output, gated.describe()


def test_an_acf_whose_base_flags_are_not_the_kernels_is_judged_against_the_kernels_own_defaults(tmp_path):
    """A red team's ACF tuned with a register cap in its tune.toml (recorded in [base]) passed the
    gate of a kernel without one: the gate built the ACF and its "defaults" with the ACF's base
    flags and hashed its settings with them, so neither worse-than-default nor stale-settings
    fired. The base flags are the kernel's own now: the cap's spills are worse than its defaults."""
    (tmp_path / "k").mkdir()
    (tmp_path / KERNEL).write_text(FIR.replace("TAPS", "64").replace("__launch_bounds__(256, 2) ", ""))  # 96 registers
    (tmp_path / "k" / "tune.toml").write_text('nvcc_flags = ["-maxrregcount=32"]\n')
    tuned = run_cli(["tune", KERNEL, "--objective", "spills", "--budget", "2", "--workers", "local", "--arch", "sm_90",
                     "--db", f"sqlite:///{tmp_path / 't.db'}", "--out", ACF, "--only", "ptxas.opt_level"], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    assert tomllib.loads((tmp_path / ACF).read_text())["evidence"]["best"]["spill_bytes"] > 0
    assert _gate(tmp_path, ACF, "--static").returncode == 0  # against the settings it was tuned with
    (tmp_path / "k" / "tune.toml").write_text("")  # the victim's kernel: no cap
    result = _gate(tmp_path, ACF, "--static")
    assert result.returncode == 1, result.describe()
    assert "error worse-than-default: spills more than the compiler defaults (0 -> " in result.stdout, result.describe()
    assert result.stdout.count("warn stale-settings: the ") == 1, result.describe()  # one finding, the specific one
    assert "the ACF's base flags are not the kernel's (tune.toml): it records -maxrregcount=32" in result.stdout


def test_the_gate_markdown_escapes_html_from_an_acf(tuned, tmp_path):
    """A red team's ACF named its kernel `<img src=...><h1>All green: ship it</h1>`: the gate's
    markdown (a PR comment, a job summary) carried it as raw HTML. It is escaped as `report
    --format md` escapes it."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    acf = workspace / ACF
    html = '<img src="https://attacker.example/p.png"><h1>All green & ship it</h1>'
    acf.write_text(acf.read_text().replace('name = "fir"', f"name = {json.dumps(html)}", 1))
    result = _gate(workspace, ACF, "--static", "--markdown", "gate.md")
    assert result.returncode == 2, result.describe()
    written = (workspace / "gate.md").read_text()
    assert "<img" not in written and "<h1>" not in written, written
    assert "&lt;img src=\"https://attacker.example/p.png\">&lt;h1>All green &amp; ship it&lt;/h1>" in written


def test_the_gate_markdown_renders_links_images_and_mentions_from_an_acf_as_text(tuned, tmp_path):
    """Red team 48: an ACF's `format = "![pwn](https://...) [Approve here](https://...) @octocat"`
    reached the PR comment as a tracking image, a link and a mention (the bad-input message quotes
    it). Every markdown construct in untrusted text is escaped: it reads as the characters it is."""
    workspace = tmp_path / "ws"
    shutil.copytree(tuned, workspace)
    acf = workspace / ACF
    forged = "![pwn](https://e.example/p.png) [Approve here](https://e.example/x) @octocat *b* `c` opt_level _y_"
    acf.write_text(acf.read_text().replace("format = 1", f"format = {json.dumps(forged)}", 1))
    result = _gate(workspace, ACF, "--static", "--markdown", "gate.md")
    assert result.returncode == 2, result.describe()
    written = (workspace / "gate.md").read_text()
    assert ("!\\[pwn\\](https://e.example/p.png) \\[Approve here\\](https://e.example/x) @&#8203;octocat "
            "\\*b\\* \\`c\\` opt_level \\_y\\_") in written, written
    quoted = next(line for line in written.splitlines() if line.startswith("Could not be checked"))
    assert not re.search(r"(?<!\\)[][`*]|@octocat", quoted), quoted  # nothing left live


NOT_DATABASES = [
    ('{"x":1}', "not a compilation database: expected a JSON list of objects"),
    ('[{"directory": 5}]', "not a compilation database: an entry's \"directory\" or \"file\""),
    ("not json", "not a compilation database: Expecting value"),
    ("[1, 2]", "not a compilation database: expected a JSON list of objects"),
]


def test_gate_compile_commands_that_is_not_a_database_is_bad_input(tmp_path):
    """review F2: an ACF tuned without a compile command, gated with --compile-commands naming a
    file that is no compilation database, passed clean (read as "no command for this kernel").
    The user named it: the ACF is a bad-input row with `space`'s one line; a database with no
    entry for the kernel still gates the ACF as before."""
    kernels = Path(__file__).resolve().parent.parent / "kernels" / "reduction"
    (tmp_path / "r").mkdir()
    shutil.copy(kernels / "reduction.cu", tmp_path / "r")
    (tmp_path / "r" / "tune.toml").write_text((kernels / "tune.toml").read_text().replace(
        '"../../compileiq/include"', json.dumps(str(kernels.parent.parent / "compileiq" / "include"))))
    tuned = run_cli(["tune", "r/reduction.cu", "--budget", "2", "--workers", "local", "--db",
                     f"sqlite:///{tmp_path}/t.db", "--out", "r/reduction.acf.toml"], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    for text, says in NOT_DATABASES:
        (tmp_path / "bad.json").write_text(text)
        space = run_cli(["space", "r/reduction.cu", "--compile-commands", "bad.json"], cwd=tmp_path)
        _one_line_usage_error(space, f"bad.json: {says}")
        gated = _gate(tmp_path, "r/reduction.acf.toml", "--static", "--compile-commands", "bad.json")
        assert gated.returncode == 2, gated.describe()
        assert [line for line in gated.stderr_lines if line.startswith("error: ")] == space.stderr_lines, \
            gated.describe()
        assert "gate ERROR: 0/1 ACF(s) pass, 0 fail, 1 could not be checked (bad input)" in gated.output, \
            gated.describe()
    (tmp_path / "other.json").write_text(json.dumps([{"directory": ".", "file": "o.cu", "command": "nvcc -c o.cu"}]))
    other = _gate(tmp_path, "r/reduction.acf.toml", "--static", "--compile-commands", "other.json")
    assert other.returncode == 0 and "gate PASS: 1/1 ACF(s) pass" in other.output, other.describe()
    # a database with no entry for the kernel holds it to nothing: the gate said "held to the
    # compile command for reduction.cu in other.json", which has none (a reviewer's note)
    assert "held to the compile command" not in other.output, other.describe()
    assert "other.json (--compile-commands) gave no usable compile command for reduction.cu" in other.output, \
        other.describe()


def test_gate_compile_commands_that_is_not_a_database_is_bad_input_for_an_acf_tuned_from_one(tmp_path):
    """fix A: an ACF tuned from a compile command, gated with --compile-commands naming a file that is
    no compilation database (text, a JSON object, a list of non-entries), passed with a stale-settings
    warning ("cannot be read now"). The user named it: bad input, as for an ACF tuned without one."""
    from helpers import LOOP_KERNEL

    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    (tmp_path / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(tmp_path), "command": "nvcc -O3 -arch=sm_80 -c k.cu -o k.o", "file": "k.cu"}]))
    tuned = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--budget", "2", "--workers",
                     "local", "--db", f"sqlite:///{tmp_path}/t.db", "--out", "k.acf.toml"], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    for text, says in NOT_DATABASES:
        (tmp_path / "bad.json").write_text(text)
        gated = _gate(tmp_path, "k.acf.toml", "--static", "--compile-commands", "bad.json")
        assert gated.returncode == 2, gated.describe()
        [error] = [line for line in gated.stderr_lines if line.startswith("error: ")]
        assert error.startswith(f"error: bad.json: {says}"), gated.describe()
        assert "gate ERROR: 0/1 ACF(s) pass, 0 fail, 1 could not be checked (bad input)" in gated.output, \
            gated.describe()
        assert "stale-settings" not in gated.output, gated.describe()
    held = _gate(tmp_path, "k.acf.toml", "--static", "--compile-commands", "compile_commands.json")
    assert held.returncode == 0 and "gate PASS: 1/1 ACF(s) pass" in held.output, held.describe()


def test_gate_compile_commands_whose_command_for_the_kernel_cannot_be_read_is_bad_input(tmp_path):
    """user54 2: the CMake build that ships, after a careless paste of the cmake snippet, set the tuned
    macro twice (`-DN=4` and `-DN=2`): the gate handed that database (--compile-commands) could not
    read the kernel's command, warned "cannot be read now" and passed (exit 0), having checked
    nothing of the build that ships. The user named it: bad input, one line."""
    (tmp_path / "k.cu").write_text("#ifndef N\n#define N 1\n#endif\n"
                                   "__global__ void k(float* x) { for (int i = 0; i < N; ++i) x[i] += 1.0f; }\n")
    (tmp_path / "tune.toml").write_text("[tune.defines]\nN = [1, 2, 4]\n")

    def database(name: str, flags: str) -> None:
        (tmp_path / name).write_text(json.dumps(
            [{"directory": str(tmp_path), "command": f"nvcc -O3 -arch=sm_90 {flags} -c k.cu -o k.o", "file": "k.cu"}]))

    database("compile_commands.json", "-DN=4")
    tuned = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--budget", "2", "--workers",
                     "local", "--db", f"sqlite:///{tmp_path}/t.db", "--out", "k.acf.toml"], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    # the macro set twice builds its last -D (nvcc: N=2, "incompatible redefinition"): the gate checks that
    # build, held to the ACF's baseline of N=4 (no longer refused as unreadable: it is what ships)
    database("ships.json", "-DN=4 -DN=2")
    gated = _gate(tmp_path, "k.acf.toml", "--static", "--compile-commands", "ships.json")
    assert gated.returncode in (0, 1) and "stale-settings" in gated.output, gated.describe()
    database("ships.json", "-DN=4 -UN")  # the last word leaves N to the kernel's default: not what was tuned
    gated = _gate(tmp_path, "k.acf.toml", "--static", "--compile-commands", "ships.json")
    assert gated.returncode == 2, gated.describe()
    [error] = [line for line in gated.stderr_lines if line.startswith("error: ")]
    assert "--compile-commands: the gate cannot check the build that ships" in error, gated.describe()
    named = _gate(tmp_path, "k.acf.toml", "--static")  # the ACF's own database, as it was: no change
    assert named.returncode == 0, named.describe()
    # review rev54 5: a database with no command for the kernel at all (a monorepo configuration that
    # does not build it) is no unreadable command: it warns stale-settings, as before
    (tmp_path / "other.json").write_text(json.dumps(
        [{"directory": str(tmp_path), "command": "nvcc -O3 -arch=sm_90 -c other.cu -o other.o", "file": "other.cu"}]))
    elsewhere = _gate(tmp_path, "k.acf.toml", "--static", "--json", "--compile-commands", "other.json")
    assert elsewhere.returncode == 0, elsewhere.describe()
    [row] = json.loads(elsewhere.stdout)["acfs"]
    [finding] = [f for f in row["findings"] if "no compile command for k.cu" in f["message"]]
    assert (finding["rule"], finding["severity"], row["verdict"]) == ("stale-settings", "warn", "PASS"), row
