"""Rows an interrupted run handed back (claimed, never compiled: FAILED and retryable, built by the
next run) are not trials: `show` listed "9" trials for a study with 1 complete after a Ctrl-C
(red team round 49). The list, `show STUDY` and their --json count the trials and name the rows
handed back beside them. Real nvcc, real SQLite, the store's own hand-back."""

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
    assert f"{count} (+3 handed back)" in listed.stdout, listed.stdout
    (summary,) = json.loads(run_cli(["show", "--json", "--db", db], tmp_path).stdout)
    assert (summary["trials"], summary["handed_back"]) == (count, 3)

    shown = run_cli(["show", str(study.id), "--db", db], tmp_path)
    text = " ".join(shown.stdout.split())
    assert "3 trial(s) handed back by a run that stopped early, never compiled" in text, text
    assert "failed trial" not in text, text  # never built: no failure of the variant's
    data = json.loads(run_cli(["show", str(study.id), "--json", "--db", db], tmp_path).stdout)
    assert (data["study"]["trials"], data["handed_back"], data["failed"]) == (count, 3, [])
