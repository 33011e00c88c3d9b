"""What becomes an ACF was verified by the run that writes it (issue 24, item 4), on SQLite and a real
PostgreSQL and through `db export`/`db import`: one edited row, in range and well formed, used to
become the next tune's ACF. Now the baseline and the chosen trial are rebuilt before the ACF cites
them; a row that disagrees is quarantined (failed, with the reason and who recorded it, shown by
`show`) and the choice is made again. A poisoned cached build is replaced by the rebuild."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
import sqlalchemy as sa
from helpers import SPILLING_KERNEL, compile_commands_file, run_cli

from compileiq.core.records import Trial, TrialState
from compileiq.results import acf
from compileiq.store import Store
from compileiq.store.schema import builds, trials_table

ONLY = "ptxas.maxrregcount,ptxas.override_directive_values"
MALLORY = "mallory@laptop:666"


def _tune(folder: Path, url: str, *extra: str) -> str:
    result = run_cli(["tune", "k.cu", "--objective", "registers", "--only", ONLY, "--strategy", "exhaustive",
                      "--budget", "24", "--workers", "local", "--db", url, "--out", "k.acf.toml", *extra], cwd=folder)
    assert result.returncode == 0, result.describe()
    return result.output


def _trials(url: str, study: str = "1") -> list[Trial]:
    store = Store.open(url)
    try:
        return store.trials(store.find_study(study).id)
    finally:
        store.close()


def _victim(url: str, chosen: int) -> Trial:
    """A complete trial that is neither the baseline nor the ACF's, with machine code of its own."""
    trials = _trials(url)
    codes = {trials[0].code_hash, next(t.code_hash for t in trials if t.number == chosen)}
    return next(t for t in trials[1:] if t.state is TrialState.COMPLETE and t.code_hash not in codes)


def _forge(url: str, chosen: int) -> int:
    """Edit one row as a team member could: in range and well formed, claiming 1 register, no spills."""
    victim = _victim(url, chosen)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(trials_table.update().where(trials_table.c.id == victim.id).values(
            value=1.0, metrics={**victim.metrics, "registers": 1, "spill_bytes": 0}, worker=MALLORY))
    engine.dispose()
    return victim.number


def _check(folder: Path, url: str, before: dict[str, object], forged: int, output: str) -> None:
    found = acf.read(folder / "k.acf.toml")
    assert found.controls == before  # the real winner, as before the forgery
    assert f"trial #{forged} quarantined: its row says value 1 (spill_bytes" in output
    assert f"recorded by {MALLORY}" in output
    row = next(t for t in _trials(url) if t.number == forged)
    assert row.state is TrialState.FAILED and row.reason.startswith("quarantined: its row says value 1")
    shown = run_cli(["show", "1", "--db", url], cwd=folder)
    assert "quarantined" in shown.output, shown.describe()


@pytest.fixture
def kernel(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "k.cu").write_text(SPILLING_KERNEL)
    return folder


def test_a_forged_trial_row_never_becomes_the_acf(kernel: Path, store_url: str) -> None:
    _tune(kernel, store_url)
    first = acf.read(kernel / "k.acf.toml")
    forged = _forge(store_url, first.provenance["trial"])
    output = _tune(kernel, store_url)  # the same study: nothing new to search, only the choice
    _check(kernel, store_url, first.controls, forged, output)
    assert acf.read(kernel / "k.acf.toml").evidence["best"]["source"].startswith(("compiled by this run",
                                                                                 "recorded in"))


def test_a_forged_row_through_db_import_never_becomes_the_acf(kernel: Path, store_url: str, tmp_path: Path) -> None:
    laptop = f"sqlite:///{tmp_path / 'laptop.db'}"
    _tune(kernel, laptop)
    first = acf.read(kernel / "k.acf.toml")
    forged = _forge(laptop, first.provenance["trial"])
    exported = run_cli(["db", "export", "1", "--out", "study.json", "--db", laptop], cwd=kernel)
    assert exported.returncode == 0, exported.describe()
    imported = run_cli(["db", "import", "study.json", "--db", store_url], cwd=kernel)
    assert imported.returncode == 0, imported.describe()
    output = _tune(kernel, store_url)
    _check(kernel, store_url, first.controls, forged, output)


def test_a_poisoned_cached_build_is_rebuilt_and_replaced(kernel: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'team.db'}"
    _tune(kernel, url)
    first = acf.read(kernel / "k.acf.toml")
    trials = _trials(url)
    honest = {trials[0].code_hash, next(t.code_hash for t in trials if t.number == first.provenance["trial"])}
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # every other cached build now claims 1 register per thread
        rows = conn.execute(sa.select(builds.c.key, builds.c.metrics).where(builds.c.code_hash.not_in(honest))).all()
        for key, metrics in rows:
            entries = [{**e, "registers": 1, "spill_store_bytes": 0, "spill_load_bytes": 0} for e in metrics["entries"]]
            conn.execute(builds.update().where(builds.c.key == key).values(metrics={**metrics, "entries": entries}))
    assert rows
    output = _tune(kernel, url, "--study", "second", "--force")  # a new study of the same code: served by the cache
    assert "build cache hits 0;" not in output
    assert acf.read(kernel / "k.acf.toml").controls == first.controls
    assert "quarantined: its row says value 1" in output
    with engine.begin() as conn:
        after = dict(conn.execute(sa.select(builds.c.key, builds.c.metrics).where(builds.c.code_hash.not_in(honest))).all())
    engine.dispose()
    replaced = [key for key, metrics in after.items() if all(e["registers"] > 1 for e in metrics["entries"] if e.get("entry"))]
    assert replaced, "the rebuilt configs' cached builds hold the rebuild"


def test_a_forged_search_winner_is_quarantined_before_it_steers_the_simplification(kernel: Path, tmp_path: Path
                                                                                   ) -> None:
    """A forged row the choice starts from is rebuilt before it is simplified. Simplified first, it
    led to a real trial with its machine code (here the defaults': verified, so cited), and the
    forged row, never checked, stayed 'may be chosen' in show."""
    url = f"sqlite:///{tmp_path / 'team.db'}"
    _tune(kernel, url)
    first = acf.read(kernel / "k.acf.toml")
    trials = _trials(url)
    # a row with settings that change nothing (the defaults' machine code): a simplification drops them
    victim = next(t for t in trials[1:] if t.state is TrialState.COMPLETE and t.code_hash == trials[0].code_hash
                  and t.config["ptxas.maxrregcount"] != "default")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(trials_table.update().where(trials_table.c.id == victim.id).values(
            value=1.0, metrics={**victim.metrics, "registers": 1, "spill_bytes": 0}, worker=MALLORY))
    engine.dispose()
    output = _tune(kernel, url)
    _check(kernel, url, first.controls, victim.number, output)


def test_a_forged_candidate_to_time_is_rebuilt_before_the_acf_lists_it(tmp_path: Path) -> None:
    """The ACF's [[evidence.to_time]] lists trials a GPU user is told to time, with their numbers: a
    forged row (an import, a teammate) was listed as it was, never rebuilt (the red team's)."""
    kernel = Path(__file__).resolve().parent.parent / "kernels" / "spill_heavy" / "spill_heavy.cu"
    url = f"sqlite:///{tmp_path / 'team.db'}"
    args = ["tune", str(kernel), "--objective", "static", "--only", "ptxas.maxrregcount,ptxas.override_directive_values",
            "--budget", "8", "--workers", "local", "--db", url, "--out", "k.acf.toml"]  # 0 spills for half the occupancy
    first = run_cli(args, cwd=tmp_path)
    assert first.returncode == 0, first.describe()
    listed = acf.read(tmp_path / "k.acf.toml").evidence.get("to_time", [])
    assert listed, "the fixture needs candidates to time"
    victim = next(t for t in _trials(url) if t.number == listed[0]["trial"])
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(trials_table.update().where(trials_table.c.id == victim.id).values(
            metrics={**victim.metrics, "registers": 7, "instructions": 11}, worker=MALLORY))
    engine.dispose()
    again = run_cli(args, cwd=tmp_path)
    assert again.returncode == 0, again.describe()
    assert f"trial #{victim.number} quarantined" in again.output
    for entry in acf.read(tmp_path / "k.acf.toml").evidence.get("to_time", []):
        assert (entry.get("registers"), entry.get("instructions")) != (7, 11), entry


def test_a_forged_point_never_moves_the_pick_on_a_front(tmp_path: Path) -> None:
    """The pick scales each objective over the front: one edited row, made the front's lowest
    instruction count at 255 registers, moved the knee to a trial with half the occupancy, and
    sat unchecked in the ACF's [[evidence.front]] (the red team's). Every point is rebuilt now."""
    kernel = Path(__file__).resolve().parent.parent / "kernels" / "spill_heavy" / "spill_heavy.cu"
    url = f"sqlite:///{tmp_path / 'team.db'}"
    args = ["tune", str(kernel), "--objective", "registers,instructions", "--only",
            "ptxas.maxrregcount,ptxas.opt_level,ptxas.override_directive_values", "--budget", "24",
            "--workers", "local", "--db", url, "--out", "k.acf.toml"]
    first = run_cli(args, cwd=tmp_path)
    assert first.returncode == 0, first.describe()
    before = acf.read(tmp_path / "k.acf.toml").evidence
    on_front = {point["trial"] for point in before["front"]}
    trials = _trials(url)
    fewest = min(t.metrics["instructions"] for t in trials if t.state is TrialState.COMPLETE)
    victim = next(t for t in trials[1:] if t.state is TrialState.COMPLETE and t.number not in on_front
                  and t.number != before["pick"]["trial"] and t.config.get("ptxas.opt_level", 3) == 3)  # may win
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(trials_table.update().where(trials_table.c.id == victim.id).values(
            metrics={**victim.metrics, "registers": 255, "instructions": fewest - 4, "spill_bytes": 0},
            value=255.0, worker=MALLORY))
    engine.dispose()
    again = run_cli(args, cwd=tmp_path)
    assert again.returncode == 0, again.describe()
    assert f"trial #{victim.number} quarantined" in again.output, again.describe()
    after = acf.read(tmp_path / "k.acf.toml").evidence
    assert victim.number not in {point["trial"] for point in after["front"]}
    assert after["pick"]["trial"] == before["pick"]["trial"]


def test_a_quarantined_baseline_is_said_to_be_replaced_by_the_rebuild_in_every_view(kernel: Path, tmp_path: Path
                                                                                     ) -> None:
    """User report 46, fault 2: the baseline's row, quarantined and replaced by the rebuild, was
    cited by the ACF as "compiled again by this run, which gave the same result" and shown as
    "baseline (verified by run 2)" while the run said quarantined."""
    url = f"sqlite:///{tmp_path / 'team.db'}"
    _tune(kernel, url)
    baseline = _trials(url)[0]
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # a shared row of the baseline that claims other code and fewer registers
        conn.execute(trials_table.update().where(trials_table.c.id == baseline.id).values(
            code_hash="f" * 64, metrics={**baseline.metrics, "registers": baseline.metrics["registers"] - 1},
            value=baseline.value - 1, worker=MALLORY))  # its value what its metrics give: else set aside on read
    engine.dispose()
    output = _tune(kernel, url)
    assert "trial #0 quarantined" in output
    row = _trials(url)[0]
    assert row.reason is not None and row.reason.startswith("quarantined row replaced by a rebuild")
    source = acf.read(kernel / "k.acf.toml").evidence["baseline"]["source"]
    assert "same result" not in source and "quarantined and replaced by it" in source, source
    assert MALLORY in source and row.code_hash == acf.read(kernel / "k.acf.toml").evidence["baseline"]["code_hash"]
    shown = run_cli(["show", "1", "--db", url], cwd=kernel)
    assert "quarantined and replaced by run 2's" in shown.output and "verified by run" not in shown.output, \
        shown.describe()
    data = json.loads(run_cli(["show", "1", "--db", url, "--json"], cwd=kernel).stdout)
    listed = next(t for t in data["trials"] if t["number"] == 0)
    assert listed["provenance"] == "quarantined and replaced by run 2's rebuild", listed


def test_a_row_edited_after_its_run_verified_it_is_no_longer_said_verified(kernel: Path, tmp_path: Path) -> None:
    """Red team (this round): a row's metrics no objective reads (instructions) edited in the shared
    database after the run that verified it: `show` still said "verified by run 1" beside the
    forged numbers, which the ACF citing the row contradicts. The run records what it checked."""
    url = f"sqlite:///{tmp_path / 'team.db'}"
    _tune(kernel, url)
    shown = json.loads(run_cli(["show", "1", "--db", url, "--json"], cwd=kernel).stdout)
    chosen = next(t for t in shown["trials"] if t["status"] == "chosen")
    assert chosen["provenance"] == "verified by run 1", chosen
    row = next(t for t in _trials(url) if t.number == chosen["number"])
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # the value still what its metrics give for the objective (registers)
        conn.execute(trials_table.update().where(trials_table.c.id == row.id).values(
            metrics={**row.metrics, "instructions": 20}))
    engine.dispose()
    shown = json.loads(run_cli(["show", "1", "--db", url, "--json"], cwd=kernel).stdout)
    listed = next(t for t in shown["trials"] if t["number"] == chosen["number"])
    assert listed["provenance"] == "edited since run 1 checked it: not vouched for", listed
    table = run_cli(["show", "1", "--db", url], cwd=kernel)
    assert "verified by run 1" not in table.output and "edited since run 1" in table.output, table.describe()


def test_a_row_whose_run_recorded_no_digest_is_never_said_verified(kernel: Path, tmp_path: Path) -> None:
    """Red team (this round): the run's `digests` deleted beside the edit of a row it verified (or a
    run of an older release, which recorded none): every view took the run at its word again and
    said "chosen (verified by run 1)" beside forged numbers its ACF contradicts. No digest, no vouch."""
    url = f"sqlite:///{tmp_path / 'team.db'}"
    _tune(kernel, url)
    chosen = acf.read(kernel / "k.acf.toml").provenance["trial"]
    row = next(t for t in _trials(url) if t.number == chosen)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(trials_table.update().where(trials_table.c.id == row.id).values(
            metrics={**row.metrics, "instructions": 20}))
        (decision,) = conn.execute(sa.text("select decision from runs where id = 1")).one()
        decision = json.loads(decision) if isinstance(decision, str) else decision
        assert decision.pop("digests", None), decision
        conn.execute(sa.text("update runs set decision = :d where id = 1"), {"d": json.dumps(decision)})
    engine.dispose()
    said = "checked by run 1, which recorded no digest: not vouched for"
    shown = json.loads(run_cli(["show", "1", "--db", url, "--json", "--top", "100"], cwd=kernel).stdout)
    assert all("verified by run" not in t["provenance"] for t in shown["trials"]), shown["trials"]
    listed = next(t for t in shown["trials"] if t["number"] == chosen)
    assert listed["status"] == "chosen" and listed["provenance"] == said, listed
    baseline = next(t for t in shown["trials"] if t["number"] == 0)
    assert baseline["provenance"] == said, baseline
    for args in (["show", "1"], ["show", "1", "--why"], ["show", "1", "--why", "--json"]):
        out = run_cli([*args, "--db", url], cwd=kernel)
        assert out.returncode == 0 and "verified by run" not in out.output, out.describe()
    assert "chosen (checked by run 1, which recorded no" in run_cli(["show", "1", "--db", url], cwd=kernel).output
    for form in ("md", "html"):
        made = run_cli(["report", "1", "--format", form, "-o", f"r.{form}", "--db", url], cwd=kernel)
        assert made.returncode == 0, made.describe()
        assert "verified by run" not in (kernel / f"r.{form}").read_text()
    assert said in (kernel / "r.html").read_text()


MACRO_KERNEL = """\
extern "C" __global__ void __launch_bounds__(256, 2) fir(const float* in, float* out, int n) {
    float taps[TAPS];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    #pragma unroll
    for (int k = 0; k < TAPS; ++k) taps[k] = in[(i * 7 + k * 13) % n];
    float acc = 0.0f;
    #pragma unroll
    for (int k = 0; k < TAPS; ++k) acc += taps[k] * taps[TAPS - 1 - k] * taps[(k * 37) % TAPS];
    acc *= SCALE;
    #pragma unroll
    for (int k = 0; k < TAPS; ++k) out[(i + k * 4099) % n] = taps[(k * 11) % TAPS] + acc;
}
"""


def test_a_forged_no_gain_row_never_keeps_a_setting_in_the_simplification(tmp_path: Path) -> None:
    """A red team's two rows: the search's winner honest (TAPS=16 with SCALE=5: other machine code, the
    same static metrics as SCALE=3) and the winner less SCALE=5 forged as "no gain". The simplification
    read the forged row, kept SCALE=5 ("the result depends on it") and the gate passed the ACF clean:
    a setting of the forger's choice that no static metric sees. Every row a drop rests on is rebuilt
    now; the forged one is replaced by its rebuild, and SCALE goes back to the baseline's 3."""
    (tmp_path / "k.cu").write_text(MACRO_KERNEL)
    (tmp_path / "tune.toml").write_text("[tune.defines]\nTAPS = [128, 16]\nSCALE = [3, 5]\n")
    url = f"sqlite:///{tmp_path / 'team.db'}"
    tune = ["tune", "k.cu", "--only", "define.TAPS,define.SCALE", "--strategy", "exhaustive", "--budget", "8",
            "--workers", "local", "--db", url, "--out", "k.acf.toml"]  # fmt: skip
    first = run_cli(tune, cwd=tmp_path)
    assert first.returncode == 0, first.describe()
    trials = {(t.config["define.TAPS"], t.config["define.SCALE"]): t for t in _trials(url)}
    baseline, target = trials[(128, 3)], trials[(16, 3)]
    assert target.value < baseline.value and target.value == trials[(16, 5)].value  # the tie the forgery breaks
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # the winner less SCALE=5, forged as the baseline's result
        conn.execute(trials_table.update().where(trials_table.c.id == target.id).values(
            value=baseline.value, metrics=baseline.metrics, code_hash="f" * 64, worker=MALLORY))
    engine.dispose()
    again = run_cli(tune, cwd=tmp_path)  # the same study: nothing left to search, only the choice
    assert again.returncode == 0, again.describe()
    found = acf.read(tmp_path / "k.acf.toml")
    assert found.controls == {"define.TAPS": 16, "define.SCALE": 3}, again.output
    assert f"trial #{target.number} quarantined" in again.output and f"recorded by {MALLORY}" in again.output
    row = next(t for t in _trials(url) if t.number == target.number)
    assert row.code_hash == trials[(16, 3)].code_hash is not None and row.code_hash != "f" * 64
    assert row.value == target.value  # the rebuild's result, recorded in its place
    gate = run_cli(["gate", "k.acf.toml"], cwd=tmp_path)
    assert gate.returncode == 0, gate.describe()


ABLATION_KERNEL = """\
extern "C" __global__ void fir(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    for (int r = 0; r < LOOPS; ++r) {
        #pragma unroll
        for (int k = 0; k < TAPS; ++k) acc += in[(i * 7 + k * 13 + r) % n] * (k + 1);
    }
#if EXTRA
    #pragma unroll
    for (int k = 0; k < 8; ++k) acc = acc * 0.5f + in[(i + k * 31) % n];
#endif
    out[i % n] = acc;
}
"""


def test_a_forged_row_on_the_ablation_path_never_skews_the_contributions(tmp_path: Path) -> None:
    """Three macros the choice changes, so the ablation builds configurations the simplification never
    reads (one setting flipped from the baseline). One of them forged just short of the winner put
    its setting first with nearly the whole gain and another's contribution below zero, in the ACF
    and `show --why`; every row the ablation reads is rebuilt now, the forged one replaced."""
    (tmp_path / "k.cu").write_text(ABLATION_KERNEL)
    (tmp_path / "tune.toml").write_text("[tune.defines]\nTAPS = [32, 16]\nLOOPS = [2, 1]\nEXTRA = [1, 0]\n")
    url = f"sqlite:///{tmp_path / 'team.db'}"
    tune = ["tune", "k.cu", "--objective", "instructions", "--only", "define.TAPS,define.LOOPS,define.EXTRA",
            "--strategy", "exhaustive", "--budget", "8", "--workers", "local", "--db", url, "--out", "k.acf.toml"]

    def contributions() -> dict[str, float]:
        return {c["setting"]: c["contribution"] for c in acf.read(tmp_path / "k.acf.toml").evidence["contribution"]}

    first = run_cli(tune, cwd=tmp_path)
    assert first.returncode == 0, first.describe()
    honest = contributions()
    assert len(honest) == 3 and all(value > 0 for value in honest.values()), honest
    trials = {(t.config["define.TAPS"], t.config["define.LOOPS"], t.config["define.EXTRA"]): t for t in _trials(url)}
    victim, chosen = trials[(16, 2, 1)], trials[(16, 1, 0)]
    assert victim.value is not None and chosen.value is not None and victim.value > chosen.value + 2
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # just short of the winner: the ablation's first step, not the search's winner
        conn.execute(trials_table.update().where(trials_table.c.id == victim.id).values(
            value=chosen.value + 1, metrics={**victim.metrics, "instructions": int(chosen.value) + 1},
            code_hash="f" * 64, worker=MALLORY))
    engine.dispose()
    again = run_cli(tune, cwd=tmp_path)
    assert again.returncode == 0, again.describe()
    assert f"trial #{victim.number} quarantined" in again.output, again.output
    assert contributions() == honest
    row = next(t for t in _trials(url) if t.number == victim.number)
    assert row.value == victim.value and row.code_hash == victim.code_hash  # the rebuild's, in its place


def test_a_rebuild_that_times_out_accuses_no_row(kernel: Path, tmp_path: Path) -> None:
    """A rebuild that timed out here (a loaded machine; compile_timeout_s stands in for one) is no
    evidence: it used to overwrite an honest row as "quarantined row replaced by a rebuild ... (recorded
    by alice)". Now the rows are left byte for byte as recorded and the run stops in one line, no ACF."""
    url = f"sqlite:///{tmp_path / 'team.db'}"
    _tune(kernel, url)
    engine = sa.create_engine(url)

    def rows() -> list[tuple[object, ...]]:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(sa.select(trials_table).order_by(trials_table.c.id))]

    before = rows()
    (kernel / "tune.toml").write_text("compile_timeout_s = 0.001\n")
    (kernel / "k.acf.toml").unlink()
    again = run_cli(["tune", "k.cu", "--objective", "registers", "--only", ONLY, "--strategy", "exhaustive",
                     "--budget", "24", "--workers", "local", "--db", url, "--out", "k.acf.toml"], cwd=kernel)
    assert again.returncode != 0
    error = [line for line in again.output.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and error[0].startswith("error: could not rebuild trial #0 to check it"), again.describe()
    assert "timeout" in error[0] and "Traceback" not in again.output
    assert "quarantined" not in again.output
    assert rows() == before
    assert not (kernel / "k.acf.toml").exists()
    engine.dispose()


def test_a_row_forged_only_in_its_stack_bytes_is_quarantined(kernel: Path, tmp_path: Path) -> None:
    """Review 49 F8: a rebuild had to reproduce only the four metrics the score reads, so a shared
    baseline row that claimed another stack frame, and nothing else, was "verified" and its stack_bytes
    went into the ACF's evidence. A rebuild now reproduces every static metric a row records."""
    url = f"sqlite:///{tmp_path / 'team.db'}"
    _tune(kernel, url)
    baseline = _trials(url)[0]
    honest = baseline.metrics["stack_bytes"]
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(trials_table.update().where(trials_table.c.id == baseline.id).values(
            metrics={**baseline.metrics, "stack_bytes": honest + 4096}, worker=MALLORY))
    engine.dispose()
    output = _tune(kernel, url)
    assert f"trial #0 quarantined: its row says value {baseline.value:g} (spill_bytes" in output, output
    assert f"stack_bytes {honest + 4096}" in output and f"recorded by {MALLORY}" in output
    assert acf.read(kernel / "k.acf.toml").evidence["baseline"]["stack_bytes"] == honest
    assert _trials(url)[0].metrics["stack_bytes"] == honest


# `scored_k` spills at MODE=0 and not at MODE=1; `vic`, which tune.toml's entries leave unscored, the reverse
_TWO_MODES = """\
#ifndef MODE
#define MODE 0
#endif
#define BODY(N) { float a[N]; _Pragma("unroll") for (int i = 0; i < N; ++i) a[i] = out[i*n + threadIdx.x]; \\
  float s = 0.f; _Pragma("unroll") for (int i = 0; i < N; ++i) _Pragma("unroll") for (int j = 0; j < N; ++j) \\
  s += a[i]*a[j]*(i^j); _Pragma("unroll") for (int i = 0; i < N; ++i) out[i*n+threadIdx.x] = a[i]*s; }
__global__ void __launch_bounds__(1024, 2) scored_k(float* out, int n) BODY((MODE == 0 ? 40 : 4))
__global__ void __launch_bounds__(1024, 2) vic(float* out, int n) BODY((MODE == 1 ? 40 : 4))
"""


@pytest.mark.parametrize(("number", "vic"), [(1, 0), (0, 99_999)])
def test_a_row_forged_only_in_its_unscored_kernels_table_is_quarantined(tmp_path: Path, number: int, vic: int) -> None:
    """Red team 6: a rebuild had to reproduce the static metrics alone, but the no-harm rules read a
    row's `unscored` table (the kernels tune.toml's entries leave unscored). A shared row of MODE=1
    edited to say `vic` spills no more than at the defaults (or the baseline's, to say it spills more
    there) was "rebuilt to check" and chosen: the ACF said -DMODE=1, which makes `vic` spill."""
    (tmp_path / "k.cu").write_text(_TWO_MODES)
    (tmp_path / "tune.toml").write_text('arch = "sm_90"\nentries = ["scored_k"]\n[tune.defines]\nMODE = [0, 1]\n')
    path = tmp_path / "team.db"
    args = ["tune", "k.cu", "--objective", "spills", "--budget", "4", "--only", "define.MODE", "--workers", "local",
            "--db", f"sqlite:///{path}", "--out", "k.acf.toml"]
    honest = run_cli(args, cwd=tmp_path)
    assert honest.returncode == 0 and "best flags: -DMODE=0" in honest.output, honest.describe()
    (tmp_path / "k.acf.toml").unlink()
    with closing(sqlite3.connect(path)) as db, db:  # as a team member could edit it: in range, well formed
        db.execute("UPDATE trials SET worker = ?, metrics = json_set(metrics, '$.unscored.kernel_spill_bytes.vic', ?, "
                   "'$.unscored.spill_bytes', ?) WHERE number = ?", (MALLORY, vic, vic, number))
    result = run_cli(args, cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    assert f"trial #{number} quarantined: its row says" in result.output, result.describe()
    assert f"vic's spill bytes: its row says {vic}, a rebuild here gives " in result.output, result.describe()
    assert f"recorded by {MALLORY}" in result.output and "best flags: -DMODE=0" in result.output, result.describe()
    assert acf.read(tmp_path / "k.acf.toml").controls == {"define.MODE": 0}
    row = next(t for t in _trials(f"sqlite:///{path}") if t.number == number)
    assert row.reason is not None and row.reason.startswith("quarantined"), row.reason
    assert row.metrics["unscored"]["kernel_spill_bytes"]["vic"] != vic or row.state is TrialState.FAILED


def test_thousands_of_unusable_rows_do_not_bury_the_output(tmp_path: Path) -> None:
    """red55 finding 4: each unusable row of a shared database printed its own warning (5,000 forged
    rows: 5,001 lines around the command's own). The first 20 are named, then one line says more
    follow, and one line at the end counts them."""
    (tmp_path / "k.cu").write_text(SPILLING_KERNEL)
    url = f"sqlite:///{tmp_path / 't.db'}"
    _tune(tmp_path, url)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        damaged = conn.execute(trials_table.update().where(trials_table.c.number > 0).values(metrics=[1])).rowcount
    engine.dispose()
    assert damaged > 20
    shown = run_cli(["show", "1", "--db", url], cwd=tmp_path)
    assert shown.returncode == 0, shown.describe()
    named = [line for line in shown.stderr_lines if line.startswith("warning: skipped trial #")]
    assert len(named) == 20, shown.describe()
    assert shown.stderr_lines[-1] == (f"warning: skipped {damaged - 20} more unusable row(s) of the database, "
                                      "after the 20 named above"), shown.describe()
    assert len(shown.stderr_lines) == 22, shown.describe()


def test_many_forged_rows_are_quarantined_in_one_batch_not_one_decision_each(kernel: Path, tmp_path: Path) -> None:
    """Red team 2, finding 1: a study holding many rows that claim better results than their configs
    give was checked one row a pass (rebuild the winner, quarantine it, decide again, rebuild the next),
    so 40 of them took a run from 20 s to 2 min 18 s and MAX_QUARANTINED of them most of an hour. Once
    one disagrees, every other row that could still be chosen is rebuilt in one batch now: twelve
    forgeries cost one more rebuild batch than an honest rerun, not twelve, and the ACF cites none."""
    url = f"sqlite:///{tmp_path / 'team.db'}"
    only = f"{ONLY},ptxas.def_load_cache"  # machine code of more kinds than ONLY's: twelve rows to forge
    tune = ["tune", "k.cu", "--objective", "registers", "--only", only, "--strategy", "exhaustive", "--budget", "24",
            "--workers", "local"]
    assert run_cli([*tune, "--db", url, "--out", "k.acf.toml"], cwd=kernel).returncode == 0
    first = acf.read(kernel / "k.acf.toml")
    trials = _trials(url)
    chosen = next(t for t in trials if t.number == first.provenance["trial"])
    victims = [t for t in trials[1:] if t.state is TrialState.COMPLETE and t.code_hash != chosen.code_hash][:12]
    assert len(victims) == 12, "the fixture needs twelve rows to forge"
    honest = f"sqlite:///{tmp_path / 'honest.db'}"
    (tmp_path / "honest.db").write_bytes((tmp_path / "team.db").read_bytes())
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # each claims fewer registers than anything real, and no spills
        for index, victim in enumerate(victims):
            conn.execute(trials_table.update().where(trials_table.c.id == victim.id).values(
                value=1.0 + index, metrics={**victim.metrics, "registers": 1 + index, "spill_bytes": 0},
                worker=MALLORY))
    engine.dispose()

    def rerun(database: str, out: str) -> tuple[dict[str, int], str]:
        result = run_cli([*tune, "--db", database, "--out", out, "--json"], cwd=kernel)
        assert result.returncode == 0, result.describe()
        return json.loads(result.stdout)["counters"], result.stderr

    clean, _ = rerun(honest, "honest.acf.toml")
    counters, output = rerun(url, "k.acf.toml")
    for victim in victims:
        assert f"trial #{victim.number} quarantined: its row says value" in output, output
        row = next(t for t in _trials(url) if t.number == victim.number)
        assert row.state is TrialState.FAILED and row.reason is not None and row.reason.startswith("quarantined")
    assert output.count("quarantined: its row says") == len(victims), output
    assert output.count("rebuilding in one batch") == 1, output
    # the winner's check found the first forgery, one batch found the other eleven
    assert counters["verify_batches"] <= clean["verify_batches"] + 2, (counters, clean)
    assert counters["verify_ptxas_calls"] <= clean["verify_ptxas_calls"] + len(trials), (counters, clean)
    found = acf.read(kernel / "k.acf.toml")
    assert found.controls == first.controls
    forged = {victim.number for victim in victims}
    assert found.provenance["trial"] not in forged
    assert found.evidence["best"]["source"].startswith(("compiled by this run", "recorded in")), found.evidence
    for entry in found.evidence.get("to_time", []):
        assert entry["trial"] not in forged, entry


OPTIMIZE_KERNEL = """\
__global__ void k(float *x) {
#ifdef __OPTIMIZE__
  float s = 0; for (int i = 0; i < 64; i++) s += x[i * threadIdx.x] * x[i]; x[threadIdx.x] = s;
#else
  x[threadIdx.x] = 1.0f;
#endif
}
"""


def test_a_forged_simplification_row_is_quarantined_once_and_its_recorder_named(tmp_path: Path) -> None:
    """Fix-rerun fault 1: a forged row of the simplification was quarantined (failed) by the winner's
    check, then judged again by the simplification's check as if "a failed build" were its claim: a
    second quarantine overwrote the first reason, blaming its recorder for a failed build. It is judged
    once now; the decision reads its rebuild, and its reason keeps the forged claim and its recorder."""
    (tmp_path / "k.cu").write_text(OPTIMIZE_KERNEL)
    compile_commands_file(tmp_path, "nvcc -O3 -arch=sm_90 -c k.cu -o k.o")
    url = f"sqlite:///{tmp_path / 'x.db'}"

    def tune(budget: int) -> str:
        done = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--objective", "registers",
                        "--budget", str(budget), "--workers", "local", "--db", url], cwd=tmp_path)
        assert done.returncode == 0, done.describe()
        return done.output

    tune(6)
    drops = [t for t in _trials(url) if t.purpose == "simplify" and t.state is TrialState.COMPLETE]
    victim = max(drops, key=lambda t: (t.value or 0, t.number))  # a drop that loses the gain: forged as the best
    engine = sa.create_engine(url)
    entries = [{**victim.metrics["entries"][0], "registers": 7}, *victim.metrics["entries"][1:]]
    with engine.begin() as conn:
        conn.execute(trials_table.update().where(trials_table.c.id == victim.id).values(
            value=7.0, metrics={**victim.metrics, "registers": 7, "entries": entries}, worker=MALLORY))
    engine.dispose()
    output = tune(8)
    assert f"trial #{victim.number} quarantined: its row says value 7" in output, output
    assert "its row says a failed build" not in output, output
    assert output.count(f"trial #{victim.number} quarantined:") == 1, output
    row = next(t for t in _trials(url) if t.number == victim.number)
    assert row.reason is not None and "its row says value 7" in row.reason and f"recorded by {MALLORY}" in row.reason
    assert row.value == victim.value  # the decision read the rebuild, recorded in its place
