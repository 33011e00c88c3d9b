"""The GPU machine's offline kit: built here, installed with no network, and enough to run compileiq
without Ray. The rehearsal is the GPU check itself, run up to where a GPU would be needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests.helpers import TINY_KERNEL, run_cli

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_gpu_check_rehearsal_installs_the_kit_offline_and_runs_every_step_that_needs_no_gpu(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path / "out"), "GPU_CHECK_KERNELS": "reduction",
           "GPU_CHECK_BUDGET": "4", "GPU_CHECK_DEADLINE_S": "600"}
    done = subprocess.run(["bash", "scripts/gpu-check.sh", "--rehearse"], check=False, cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200, stdin=subprocess.DEVNULL)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    assert "compileiq imports offline" in log
    assert "ray is present" not in log  # the image has no Ray; local work must not need it
    kit_line = next(line for line in log.splitlines() if line.startswith("device kit:"))
    assert float(kit_line.split(",")[1].split()[0]) < 20, kit_line
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    built = {row["kernel"]: row["build"] for row in summary["kernels"]}
    assert built == {path.parent.name: "ok" for path in ROOT.glob("kernels/*/*.cu")}
    assert [row["result"] for row in summary["tune"]["rows"]] == ["ok"]
    assert summary["gate"]["false_alarms"] == "0/1"
    assert summary["pytest_gpu"]["exit"] == 0
    assert "errors" not in summary
    assert (tmp_path / "out" / "summary.md").read_text().startswith("# compileiq GPU check (rehearsal")


def _without_ray(tmp_path: Path) -> dict[str, str]:
    """An environment where `import ray` fails, as on the GPU image."""
    shadow = tmp_path / "no-ray"
    shadow.mkdir()
    (shadow / "ray.py").write_text('raise ImportError("No module named \'ray\'")\n')
    path = os.pathsep.join(p for p in [str(shadow), os.environ.get("PYTHONPATH", "")] if p)
    return {"PYTHONPATH": path}


def test_local_workers_tune_where_ray_cannot_be_imported(tmp_path: Path) -> None:
    kernel = tmp_path / "scale.cu"
    kernel.write_text(TINY_KERNEL)
    env = _without_ray(tmp_path)
    result = run_cli(["tune", str(kernel), "--workers", "local", "--objective", "static", "--budget", "3",
                      "--only", "ptxas.opt_level", "--db", f"sqlite:///{tmp_path / 'db.sqlite'}",
                      "--out", str(tmp_path / "scale.acf.toml")], cwd=tmp_path, env=env)
    assert result.returncode == 0, result.describe()
    assert (tmp_path / "scale.acf.toml").is_file()


def test_ray_workers_without_ray_say_how_to_get_it_in_one_line(tmp_path: Path) -> None:
    kernel = tmp_path / "scale.cu"
    kernel.write_text(TINY_KERNEL)
    result = run_cli(["tune", str(kernel), "--workers", "ray", "--budget", "2",
                      "--db", f"sqlite:///{tmp_path / 'db.sqlite'}"], cwd=tmp_path, env=_without_ray(tmp_path))
    assert result.returncode != 0
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr_lines if line.startswith("error")]
    assert errors == [result.stderr_lines[-1]], result.describe()
    assert "Ray is not installed" in errors[0] and "--workers local" in errors[0]


def _gpu_check_module() -> types.ModuleType:  # the script's module, loaded from its path
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_check", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_gpu_check_sizes_the_search_to_leave_a_confirmation_and_a_gate_at_the_measured_process_cost(
        tmp_path: Path) -> None:
    """On the first lease the tune was killed before its confirmation: its search now stops in time
    for a confirmation (45 processes) and one gate (25) at what a measuring process cost there."""
    import time

    module = _gpu_check_module()
    check = module.Check(tmp_path, False, time.monotonic() + 60)
    assert check.per_process_s() == module.LEASE_PROCESS_S  # nothing measured yet
    check.process_s += [2.0, 9.0, 3.0]
    assert check.per_process_s() == 3.0
    search_s, timeout_s = module._tune_time(450.0, 3.0)
    assert search_s == 450 - (45 * 3 + 25 * 3 + 30) and timeout_s == 450 - 75 - 10
    assert module._tune_time(300.0, 12.0)[0] == 30.0  # the search still screens something


def test_the_gpu_checks_summary_keeps_each_timed_gate_verdict_and_the_time_it_held_the_acf_to(tmp_path: Path) -> None:
    """The next lease's gate step records, per ACF, both timed verdicts and the recorded time (and
    its key) from `gate --json`, so a false alarm can be read back to its cause."""
    import time

    module = _gpu_check_module()
    comparison = {"verdict": "SAME", "ratio": 1.004, "low": 0.998, "high": 1.01, "rounds": 10, "delta": 0.02}
    report = {"acfs": [{"acf": "reduction.acf.toml", "verdict": "PASS", "timing": {
        "vs_default": {**comparison, "verdict": "FASTER", "ratio": 0.95, "low": 0.94, "high": 0.96},
        "vs_recorded": {**comparison, "recorded_ms": 0.21648, "recorded_is": "objective.confirmed_median"}}}]}
    run = module._gate_run(subprocess.CompletedProcess([], 0, json.dumps(report), ""))
    check = module.Check(tmp_path, False, time.monotonic() + 60,
                         {"gate": {"mode": "--device", "repeats": 1, "false_alarms": "0/1", "runs": [run]}})
    text = module.markdown(check)
    assert ("| reduction.acf.toml | FASTER 0.950x [0.940, 0.960] in 10 rounds | SAME 1.004x [0.998, 1.010] in 10 rounds "
            "| 0.21648 ms (objective.confirmed_median) |") in text


def test_the_gpu_check_keeps_a_tunes_trial_counts_and_what_its_confirmation_took() -> None:
    """The next lease judges screening (how many trials reached the GPU) and --timing-only blocks
    (how long the confirmation took) from the summary alone."""
    module = _gpu_check_module()
    text = ("A/A: the baseline against itself in 10 rounds, threshold ±2.0% (24 s)\n"
            "#46: FASTER, median speedup 1.032x, 95% [1.031, 1.033] in 10 rounds (29 s)\n"
            "trials: 7 search trials (budget 8) + 36 screened out before measuring; 103.9 s; stopped: budget 8\n")
    story = module._tune_story(text)
    assert story == {"trials": "7 search trials (budget 8) + 36 screened out before measuring; 103.9 s; stopped: budget 8",
                     "confirmation_s": "24 + 29"}
    assert module._tune_story("nothing to confirm") == {}
