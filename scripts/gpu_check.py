"""The GPU acceptance run, most informative step first; `--rehearse` runs every step that needs no GPU.

Steps (each with its own timeout, the whole under a deadline; a step that fails is recorded and
the run goes on):
  1. machine: nvidia-smi (GPU, driver, clocks) and nvcc's version;
  2. every bundled kernel: build its measuring executable with the compiler's defaults, run it
     with --check against its CPU reference, and report its A/A noise (IQR / median of samples);
  3. `compileiq tune --objective time` on a few kernels: the speedup of the chosen flags against
     the defaults with its 95% interval, or "kept baseline";
  4. `compileiq gate --device` on those fresh ACFs, repeated: how often an unchanged kernel fails;
  5. `pytest -m gpu` (it passed on the first lease; the tuning it never reached comes first now).
`--skip STEP...` leaves out steps an earlier run of the same lease already recorded.
It writes OUT/summary.md (the table for docs/gpu-results.md) and OUT/summary.json.
Rehearsal: steps 2-4 build and score statically (`--objective static`, `gate --static`) and
step 5 only collects the GPU tests, so everything but the GPU itself is exercised.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TUNE_KERNELS = ("reduction", "sgemm")  # the confirmed speedup to reproduce; the tiling screening to judge
CHECK_RUNS_S = 90.0  # at most this long on the kernels' --check runs; the rest is for tuning and gating
CONFIRM_PROCESSES = 45  # confirmation's A/A (20) and one finalist (20 to 60): measuring processes
GATE_PROCESSES = 25  # one `gate --device` of one ACF: 20 to 60 processes
LEASE_PROCESS_S = 5.0  # a measuring process on the second H200 lent: 1.4 to 7.1 s (12 s on the first)


@dataclass
class Check:
    out: Path
    rehearse: bool
    deadline: float
    sections: dict[str, Any] = field(default_factory=dict)
    process_s: list[float] = field(default_factory=list)  # wall time of each measuring process run

    def per_process_s(self) -> float:
        """What one measuring process costs on this machine: the median of those run so far."""
        runs = sorted(self.process_s)
        return runs[len(runs) // 2] if runs else LEASE_PROCESS_S

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, name: str, argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str] | None:
        """Run a command with its output logged under OUT; None when the deadline has passed."""
        limit = min(timeout_s, self.left())
        if limit < 5:
            return None
        try:
            done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=limit, cwd=ROOT)
        except subprocess.TimeoutExpired as expired:
            text = _text(expired.stdout) + _text(expired.stderr)
            done = subprocess.CompletedProcess(argv, 124, text, f"timed out after {limit:.0f} s")
        (self.out / f"{name}.log").write_text(f"$ {' '.join(argv)}\n-> {done.returncode}\n"
                                              f"{done.stdout}\n{done.stderr}")
        return done


def _text(value: str | bytes | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


def machine(check: Check) -> None:
    info: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    query = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total"
    smi = shutil.which("nvidia-smi")
    if smi:
        done = check.run("nvidia-smi", [smi, f"--query-gpu={query}", "--format=csv,noheader"], 30)
        info["gpu"] = done.stdout.strip() if done and done.returncode == 0 else "nvidia-smi failed"
    else:
        info["gpu"] = "none (rehearsal)" if check.rehearse else "nvidia-smi not found"
    done = check.run("nvcc-version", [shutil.which("nvcc") or "nvcc", "--version"], 30)
    info["nvcc"] = done.stdout.strip().splitlines()[-1] if done and done.stdout.strip() else "nvcc not found"
    info["python"] = sys.version.split()[0]
    check.sections["machine"] = info


def kernels(check: Check) -> None:
    """Build each bundled kernel's measuring executable; on a GPU run it with --check."""
    from compileiq.build.compile import ExecutableJob, build_executable
    from compileiq.source.kernel import bundle_sources, load_spec

    nvcc = shutil.which("nvcc") or "nvcc"
    specs = [load_spec(path) for path in sorted(ROOT.glob("kernels/*/*.cu"))]
    jobs = [ExecutableJob(nvcc, bundle_sources(s), s.arch, s.fixed_define_args(), (), 300) for s in specs]
    with ThreadPoolExecutor(max(os.cpu_count() or 1, 1)) as pool:
        builds = list(pool.map(build_executable, jobs))
    rows, stop_at = [], time.monotonic() + CHECK_RUNS_S
    for spec, build in zip(specs, builds):
        row: dict[str, Any] = {"kernel": spec.name, "build": "ok" if build.ok else build.message.splitlines()[0],
                               "build_s": round(build.seconds, 1)}
        if build.ok and not check.rehearse:
            if time.monotonic() < stop_at and check.left() > 10:
                row.update(_check_run(spec, build.executable, min(90.0, check.left())))
                if "process_s" in row:
                    check.process_s.append(row["process_s"])
            else:
                row["check"] = f"not run (the check's {CHECK_RUNS_S:.0f} s for --check runs were spent)"
        rows.append(row)
    check.sections["kernels"] = rows


def _check_run(spec: Any, executable: bytes, timeout_s: float) -> dict[str, Any]:
    from compileiq.evaluate.measure import LocalMeasurer

    run = LocalMeasurer().measure(executable, [*spec.run_args, "--check"], timeout_s)
    harness = run.harness
    if not harness.ok:
        return {"check": f"{harness.status}: {harness.message or run.stdout[-200:]}"}
    median, iqr = harness.median_ms or 0.0, harness.iqr_ms or 0.0
    passed = harness.check.passed
    return {"check": "passed" if passed else f"FAILED ({harness.check})", "median_ms": median,
            "aa_noise": iqr / median if median else None, "samples": len(harness.samples_ms),
            "device": harness.device, "driver": harness.driver, "process_s": round(run.seconds, 2),
            "phases_ms": dict(harness.phases_ms)}


def tune(check: Check, names: list[str], budget: int) -> None:
    objective = "static" if check.rehearse else "time"
    rows = []
    for i, name in enumerate(names):
        acf_path = check.out / f"{name}.acf.toml"
        argv = [*_cli(), "tune", f"kernels/{name}/{name}.cu", "--objective", objective, "--budget", str(budget),
                "--workers", "local", "--db", f"sqlite:///{check.out / 'gpu-check.db'}", "--out", str(acf_path)]
        timeout_s = 300.0
        if not check.rehearse:  # one finalist: 40-80 runs of the measuring program, at seconds a run
            share = check.left() / (len(names) - i)  # the kernels still to tune share what is left
            search_s, timeout_s = _tune_time(share, check.per_process_s())
            argv += ["--finalists", "1", "--time-budget", f"{search_s:.0f}s"]
        done = check.run(f"tune-{name}", argv, timeout_s)
        rows.append({"kernel": name, **_tune_row(done, acf_path)})
    check.sections["tune"] = {"objective": objective, "budget": budget, "rows": rows}


def _tune_time(left_s: float, process_s: float) -> tuple[float, float]:
    """The search's time budget and the tune's timeout: what is left once a confirmation and one
    gate at this machine's cost per measuring process are set aside (the search gets 30 s at least)."""
    gate_s = GATE_PROCESSES * process_s
    search_s = max(30.0, left_s - (CONFIRM_PROCESSES * process_s + gate_s + 30.0))
    return search_s, max(60.0, left_s - gate_s - 10.0)


def _tune_story(text: str) -> dict[str, str]:
    """From a tune's output: its trial counts and why it stopped, and how long each step of the
    confirmation took (the A/A, then each finalist), e.g. "24 + 29"."""
    story = {}
    if found := re.search(r"^trials: (.*)$", text, re.MULTILINE):
        story["trials"] = found.group(1)
    if seconds := re.findall(r"^(?:A/A: |#\d+: ).* \((\d+) s\)$", text, re.MULTILINE):
        story["confirmation_s"] = " + ".join(seconds)
    return story


def _tune_row(done: subprocess.CompletedProcess[str] | None, acf_path: Path) -> dict[str, Any]:
    if done is None:
        return {"result": "skipped (deadline)"}
    story = _tune_story(f"{done.stdout}\n{done.stderr}")
    if done.returncode != 0 or not acf_path.is_file():
        lines = (done.stderr or done.stdout).strip().splitlines()
        return {"result": f"exit {done.returncode}: {lines[-1] if lines else ''}", **story}
    table = tomllib.loads(acf_path.read_text())
    objective = table.get("objective", {})
    flags = " ".join(table.get("args", {}).get("argv", [])) or "(defaults)"
    row = {"result": "ok", "baseline": objective.get("baseline"), "best": objective.get("best"), "flags": flags,
           **story}
    if "speedup" in objective:
        low, high = objective["speedup_interval_95"]
        row["speedup"] = f"{objective['speedup']:.3f} [{low:.3f}, {high:.3f}]"
    elif objective.get("verdict"):
        row["speedup"] = "1.000 (kept baseline)"
    return row


def gate(check: Check, names: list[str], repeats: int) -> None:
    mode = "--static" if check.rehearse else "--device"
    acfs = [str(check.out / f"{n}.acf.toml") for n in names if (check.out / f"{n}.acf.toml").is_file()]
    runs = []
    for i in range(repeats if acfs else 0):
        timeout_s = max(240.0, GATE_PROCESSES * len(acfs) * check.per_process_s() + 30.0)
        done = check.run(f"gate-{i}", [*_cli(), "gate", mode, "--json", *acfs], timeout_s)
        if done is None:
            break
        runs.append(_gate_run(done))
    failed = sum(r["failed"] for r in runs)
    total = sum(r["checked"] for r in runs)
    check.sections["gate"] = {"mode": mode, "repeats": len(runs), "acfs": len(acfs),
                              "false_alarms": f"{failed}/{total}", "runs": runs}


def _gate_run(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    try:
        report = json.loads(done.stdout)
        results = report.get("acfs", [])
        return {"exit": done.returncode, "checked": len(results),
                "failed": sum(1 for r in results if r.get("verdict") != "PASS"),
                "timings": [_timing_row(r) for r in results if r.get("timing")]}
    except json.JSONDecodeError:
        return {"exit": done.returncode, "checked": 0, "failed": 0, "error": done.stderr.strip()[-300:]}


def _timing_row(result: dict[str, Any]) -> dict[str, Any]:
    """One ACF's timed verdicts: against the baseline, and against the time the ACF recorded
    (which key: `objective.confirmed_median`, or `best` for an ACF without one)."""
    timing, row = result["timing"], {"acf": result.get("acf")}
    for side in ("vs_default", "vs_recorded"):
        if (c := timing.get(side)) is not None:
            row[side] = f"{c['verdict']} {c['ratio']:.3f}x [{c['low']:.3f}, {c['high']:.3f}] in {c['rounds']} rounds"
    if (recorded := timing.get("vs_recorded")) is not None:
        row["recorded"] = f"{recorded.get('recorded_ms')} ms ({recorded.get('recorded_is')})"
    return row


def pytest_gpu(check: Check) -> None:
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "tests/"]
    if check.rehearse:
        argv.append("--collect-only")
    done = check.run("pytest-gpu", argv, 240)
    last = (done.stdout.strip().splitlines() or ["(no output)"])[-1] if done else "skipped (deadline)"
    check.sections["pytest_gpu"] = {"exit": done.returncode if done else None, "summary": last}


def _cli() -> list[str]:
    """The installed console command (the kit's, on a GPU machine), else this Python's module."""
    found = shutil.which("compileiq")
    return [found] if found else [sys.executable, "-m", "compileiq"]


def markdown(check: Check) -> str:
    s = check.sections
    m = s.get("machine", {})
    lines = [f"# compileiq GPU check{' (rehearsal: no GPU)' if check.rehearse else ''}", "",
             f"- date: {m.get('date')}",
             f"- GPU (name, driver, SM clock, max SM clock, mem clock, memory): {m.get('gpu')}", f"- nvcc: {m.get('nvcc')}", f"- python: {m.get('python')}",
             f"- command: `scripts/gpu-check.sh{' --rehearse' if check.rehearse else ''}`", "",
             "## Bundled kernels: build, --check against the CPU reference, A/A noise", "",
             "| kernel | build | check | median ms | A/A noise (IQR/median) | samples | process s | phases, ms |",
             "|---|---|---|---|---|---|---|---|"]
    for r in s.get("kernels", []):
        noise = f"{r['aa_noise']:.2%}" if r.get("aa_noise") is not None else "-"
        median = f"{r['median_ms']:.4f}" if r.get("median_ms") else "-"
        phases = ", ".join(f"{k} {v:.0f}" for k, v in r.get("phases_ms", {}).items()) or "-"
        lines.append(f"| {r['kernel']} | {r['build']} ({r['build_s']} s) | {r.get('check', '-')} | {median} | "
                     f"{noise} | {r.get('samples', '-')} | {r.get('process_s', '-')} | {phases} |")
    t = s.get("tune", {})
    lines += ["", f"## compileiq tune --objective {t.get('objective')} --budget {t.get('budget')}", "",
              "| kernel | result | baseline | best | speedup [95%] | flags | trials | confirmation s |",
              "|---|---|---|---|---|---|---|---|"]
    for r in t.get("rows", []):
        lines.append(f"| {r['kernel']} | {r['result']} | {r.get('baseline', '-')} | {r.get('best', '-')} | "
                     f"{r.get('speedup', '-')} | `{r.get('flags', '-')}` | {r.get('trials', '-')} | "
                     f"{r.get('confirmation_s', '-')} |")
    g, p = s.get("gate", {}), s.get("pytest_gpu", {})
    lines += ["", f"## compileiq gate {g.get('mode')} on the fresh ACFs, repeated {g.get('repeats')} times", "",
              f"Failures of unchanged kernels (false alarms): {g.get('false_alarms')}", ""]
    timed = [t for run in g.get("runs", []) for t in run.get("timings", [])]
    if timed:
        lines += ["| ACF | vs the baseline | vs the recorded time | recorded |", "|---|---|---|---|"]
        lines += [f"| {t['acf']} | {t.get('vs_default', '-')} | {t.get('vs_recorded', '-')} | {t.get('recorded', '-')} |"
                  for t in timed] + [""]
    lines += [f"## pytest -m gpu{' --collect-only' if check.rehearse else ''}", "", f"exit {p.get('exit')}: {p.get('summary')}", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rehearse", action="store_true")
    parser.add_argument("--kernels", nargs="*", default=list(TUNE_KERNELS), help="kernels to tune and gate")
    parser.add_argument("--budget", type=int, default=8)
    parser.add_argument("--gate-repeats", type=int, default=2)
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--skip", nargs="*", default=[], choices=["kernels", "pytest_gpu", "tune", "gate"],
                        help="steps already recorded by an earlier run of this lease")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    check = Check(args.out, args.rehearse, time.monotonic() + args.deadline_s)
    steps = [("machine", lambda: machine(check)), ("kernels", lambda: kernels(check)),
             ("tune", lambda: tune(check, args.kernels, args.budget)),
             ("gate", lambda: gate(check, args.kernels, 1 if args.rehearse else args.gate_repeats)),
             ("pytest_gpu", lambda: pytest_gpu(check))]
    for name, step in steps:
        if name in args.skip:
            continue
        started = time.monotonic()
        try:
            step()
        except Exception as error:  # noqa: BLE001 - a broken step is a finding, not the end of the check
            check.sections.setdefault("errors", []).append(f"{name}: {type(error).__name__}: {error}")
        print(f"== {name}: {time.monotonic() - started:.1f} s", flush=True)
    (args.out / "summary.json").write_text(json.dumps(check.sections, indent=2, default=str))
    summary = markdown(check)
    if errors := check.sections.get("errors"):
        summary += "\n## Errors\n\n" + "\n".join(f"- {e}" for e in errors) + "\n"
    (args.out / "summary.md").write_text(summary)
    print(summary)
    return 1 if check.sections.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
