"""Rows to retry (an interrupted run's claims handed back, FAILED and retryable, built by the next
run) are not trials: `show` listed "9" trials for a study with 1 complete after a Ctrl-C (red team
round 49), and then the report still counted them, as failures (review rev49b F1). The list,
`show STUDY`, their --json and the markdown and HTML reports count the same trials (`TrialCounts`)
and name the rows to retry beside them, never as failures; the line is worded neutrally, since a
compiler timeout reopened is to retry too, and was compiled (F3). Real nvcc, real SQLite, the
store's own hand-back."""

from __future__ import annotations

import json
from pathlib import Path

from compileiq.core.space import canonical_key
from compileiq.store import Store
from tests.helpers import run_cli

KERNEL = "#ifndef A\n#define A 1\n#endif\n__global__ void kern(float* x) { x[threadIdx.x] = x[threadIdx.x] * A; }\n"


def test_rows_handed_back_by_a_stopped_run_are_not_counted_as_trials(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(KERNEL)
    (tmp_path / "tune.toml").write_text("[tune.defines]\nA = [1, 2, 3, 4, 5, 6]\n")
    db = f"sqlite:///{tmp_path / 't.db'}"
    run = run_cli(["tune", "k.cu", "--workers", "local", "--budget", "2", "--batch-size", "1", "--only", "define.A",
                   "--objective", "registers", "--db", db, "--out", str(tmp_path / "k.acf.toml")], tmp_path, timeout=600)
    assert run.returncode == 0, run.describe()
    store = Store.open(db)
    try:
        (study,) = store.list_studies()
        trials = store.trials(study.id)
        built = {t.config["define.A"] for t in trials}
        configs = [{**trials[0].config, "define.A": a} for a in (3, 4, 5, 6) if a not in built][:3]
        claimed = store.claim_trials(study.id, [(canonical_key(c), c) for c in configs], "tuner:4242")
        assert len(claimed) == 3
        # what an interrupted run does with its unfinished claims (tuning/claims.py)
        assert store.release_trials(study.id, "tuner:4242", "released: the tuner stopped early (KeyboardInterrupt)") == 3
    finally:
        store.close()
    count = len(trials)

    listed = run_cli(["show", "--db", db], tmp_path)
    assert listed.returncode == 0, listed.describe()
    assert f"{count} (+3 to retry)" in listed.stdout, listed.stdout
    (summary,) = json.loads(run_cli(["show", "--json", "--db", db], tmp_path).stdout)
    assert (summary["trials"], summary["to_retry"]) == (count, 3)

    shown = run_cli(["show", str(study.id), "--db", db], tmp_path)
    text = " ".join(shown.stdout.split())
    assert "3 trial(s) to retry (the next run on this study tries them again" in text, text
    assert "never compiled" not in text, text  # a compiler timeout reopened is to retry too, and was compiled
    assert "failed trial" not in text, text  # never built: no failure of the variant's
    data = json.loads(run_cli(["show", str(study.id), "--json", "--db", db], tmp_path).stdout)
    assert (data["study"]["trials"], data["to_retry"], data["failed"]) == (count, 3, [])

    # the reports count as `show` does: the same trials, the rows to retry beside them, no failure
    complete = sum(t.state.value == "complete" for t in trials)
    counted = f"{count} trials ({complete} complete, {count - complete} failed; 3 to retry)"
    md = run_cli(["report", str(study.id), "--db", db, "--format", "md", "--out", "-"], tmp_path)
    assert md.returncode == 0, md.describe()
    assert counted in md.stdout, md.stdout
    failures = md.stdout.split("## Failures by reason", 1)[1].split("##", 1)[0]
    assert "released" not in failures and "No trial failed." in failures, failures
    page = tmp_path / "r.html"
    html = run_cli(["report", str(study.id), "--db", db, "--out", str(page)], tmp_path)
    assert html.returncode == 0, html.describe()
    body = page.read_text()
    assert counted in body, body
    assert "released" not in body.split('id="failures"', 1)[1].split("<section", 1)[0]
