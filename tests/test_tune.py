"""The tuning loop end to end: real nvcc/ptxas, a real SQLite store, local compile threads."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import SPILLING_KERNEL, TINY_KERNEL, run_cli

from compileiq import app
from compileiq.build.compile import parse_resources
from compileiq.core.processes import run_tool
from compileiq.core.records import TrialState
from compileiq.core.toolchain import find_toolchain
from compileiq.results import acf
from compileiq.store import Store
from compileiq.tuning.progress import SilentProgress

SPILLER = SPILLING_KERNEL
SUBSPACE = ("ptxas.maxrregcount", "ptxas.override_directive_values", "ptxas.opt_level")


@pytest.fixture()
def spiller(tmp_path):
    source = tmp_path / "fir.cu"
    source.write_text(SPILLER)
    return source


def _options(tmp_path, kernel, **overrides):
    base = {"kernel": kernel, "objective": "spills", "budget": 16, "workers": "local", "db": f"sqlite:///{tmp_path}/t.db",
                "out": tmp_path / "fir.acf.toml", "only": SUBSPACE}
    return app.TuneOptions(**{**base, **overrides})


def _spills_by_hand(kernel: Path, flags: list[str]) -> int:
    """What a user would do: nvcc $(compileiq flags FILE) -cubin -Xptxas -v kernel.cu."""
    tools = find_toolchain()
    out = kernel.with_suffix(".cubin")
    run = run_tool([tools.nvcc, *flags, "-cubin", "-Xptxas=-v", str(kernel), "-o", str(out)], 120)
    assert run.returncode == 0, run.output
    return sum(e.spill_bytes for e in parse_resources(run.output, {}))


def test_tuning_removes_spills_and_the_acf_reproduces_them_by_hand(tmp_path, spiller):
    report = app.tune(_options(tmp_path, spiller), SilentProgress())
    baseline, chosen = report.result.baseline, report.result.chosen
    assert baseline.metrics["spill_bytes"] > 0
    assert chosen.value < baseline.value
    written = acf.read(report.acf_path)
    assert written.objective["kind"].startswith("static estimate")
    assert _spills_by_hand(spiller, list(written.flags())) == chosen.metrics["spill_bytes"]
    assert _spills_by_hand(spiller, [f"-arch={written.arch}"]) == baseline.metrics["spill_bytes"]


def test_the_acf_keeps_only_settings_that_matter(tmp_path, spiller):
    report = app.tune(_options(tmp_path, spiller), SilentProgress())
    simplification = report.result.simplification
    assert simplification is not None
    controls = acf.read(report.acf_path).controls
    assert set(controls) == set(simplification.kept)
    for name in simplification.kept:  # each kept setting matters: dropping it loses the result
        without = {k: v for k, v in report.result.chosen.config.items()}
        without[name] = report.space.parameter(name).default
        store = Store.open(f"sqlite:///{tmp_path}/t.db")
        trial = next(t for t in store.trials(report.result.study.id) if t.config == without)
        store.close()
        assert trial.value > report.result.chosen.value or trial.code_hash != report.result.chosen.code_hash


def test_an_identical_rerun_compiles_only_the_check_of_what_its_acf_cites(tmp_path, spiller):
    first = app.tune(_options(tmp_path, spiller), SilentProgress())
    assert first.result.counters.compiler_calls > 0
    again = app.tune(_options(tmp_path, spiller), SilentProgress())
    counters = again.result.counters
    # every compile checks a row the ACF cites: the baseline and the choice, and the rows its
    # simplification (one per setting tried) and ablation (each step's remaining flips) read; nothing else
    simplified, ablation = first.result.simplification, first.result.ablation
    tried = len(simplified.kept) + len(simplified.dropped) if simplified is not None else 0
    steps = len(ablation.steps) if ablation is not None else 0
    assert counters.compiler_calls == counters.verify_calls
    assert counters.verify_frontend_calls == 1 and counters.verify_ptxas_calls <= 2 + tried + steps * (steps + 1) // 2
    # the rows one step of the decision reads are rebuilt together, as parallel as the workers (they were
    # rebuilt one workers' run each: a rerun paid every check serially)
    assert counters.verify_batches < counters.verify_ptxas_calls
    assert again.result.counters.new_trials == 0
    assert again.result.chosen.config == first.result.chosen.config


def test_another_objective_reuses_the_build_cache(tmp_path, spiller):
    app.tune(_options(tmp_path, spiller, strategy="exhaustive", budget=12), SilentProgress())
    other = app.tune(_options(tmp_path, spiller, strategy="exhaustive", budget=12, objective="registers",
                              out=tmp_path / "other.acf.toml"), SilentProgress())  # another study: its own ACF
    assert other.result.counters.build_cache_hits >= 12
    assert other.result.counters.frontend_calls <= other.result.counters.verify_calls  # only to check the choice


def _modes_kernel(tmp_path):
    """A kernel whose tuned macro MODE = 2 hits #error: half of any space over it cannot build."""
    folder = tmp_path / "modes"
    folder.mkdir()
    (folder / "modes.cu").write_text(
        "#ifndef MODE\n#define MODE 1\n#endif\n#if MODE == 2\n#error MODE 2 is not supported\n#endif\n"
        "__global__ void k(float* x) { x[threadIdx.x] *= MODE; }\n"
    )
    (folder / "tune.toml").write_text("[tune.defines]\nMODE = [1, 2]\n")
    return folder


def test_a_failing_variant_is_data_not_fatal(tmp_path):
    """Half of the space cannot build (a tuned macro hits #error): recorded with the compiler's
    message, told to the searcher as a penalty, and the run still finds its best."""
    folder = _modes_kernel(tmp_path)
    options = _options(tmp_path, folder / "modes.cu", strategy="exhaustive", budget=16, objective="instructions",
                       only=("ptxas.opt_level",))
    report = app.tune(options, SilentProgress())
    failed = [t for t in report.result.trials if t.state is TrialState.FAILED]
    complete = [t for t in report.result.trials if t.state is TrialState.COMPLETE]
    assert len(failed) == 4 and len(complete) == 4  # 2 macros x 4 opt levels
    assert all(t.config["define.MODE"] == 2 and "MODE 2 is not supported" in t.reason for t in failed)
    assert report.result.chosen.config["define.MODE"] == 1


def test_the_run_says_under_its_table_that_variants_failed(tmp_path):
    """Failed variants are data, and the run says so: the summary used to count them among the
    search trials without a word (a [launch] name that only some macro values build looked like a
    search that had scored every value)."""
    folder = _modes_kernel(tmp_path)
    done = run_cli(["tune", "modes.cu", "--workers", "local", "--strategy", "exhaustive", "--budget", "16",
                    "--objective", "instructions", "--only", "ptxas.opt_level", "--db", f"sqlite:///{tmp_path}/f.db",
                    "--out", str(tmp_path / "modes.acf.toml")], cwd=folder)
    assert done.returncode == 0, done.stderr
    note = next(line for line in done.stdout.splitlines() if "failed trial" in line)
    assert note.startswith("note: 4 failed trial(s), e.g. #") and "MODE 2 is not supported" in note
    assert "compileiq show modes-instructions-" in note
    # the command printed works as printed from any folder: it names the run's database (run with
    # --db, from another folder it found no study and made a store/compileiq.db there)
    command = "compileiq show " + note.rsplit("(compileiq show ", 1)[1].removesuffix(" lists every reason)")
    assert command.endswith(f"--json --db sqlite:///{tmp_path}/f.db"), command
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shown = run_cli(shlex.split(command)[1:], cwd=elsewhere)
    assert shown.returncode == 0, shown.describe()
    assert json.loads(shown.stdout)["failed"], shown.stdout  # the reasons it promises
    assert not (elsewhere / "store").exists()


def _two_launched_kernels(tmp_path):
    """Two kernels with their own [launch.NAME] tables, one of them a tuned macro's expression."""
    folder = tmp_path / "two"
    folder.mkdir()
    (folder / "two.cu").write_text(
        "#ifndef WARPS\n#define WARPS 6\n#endif\n"
        "__global__ void hist(float* x) { x[threadIdx.x] += WARPS; }\n"
        "__global__ void merge(float* x) { x[threadIdx.x] *= 2; }\n")
    (folder / "tune.toml").write_text('[tune.defines]\nWARPS = [6, 4]\n[launch.hist]\nblock_size = "WARPS*32"\n'
                                      "[launch.merge]\nblock_size = 128\ndynamic_smem = 1024\n")
    return folder


def test_the_acf_records_each_kernels_own_launch_where_tune_toml_gives_them(tmp_path):
    """Two kernels with their own [launch.NAME] tables, one of them a tuned macro's expression: the
    evidence used to say `block_size = 256` (the top-level default, which scored nothing)."""
    folder = _two_launched_kernels(tmp_path)
    report = app.tune(_options(tmp_path, folder / "two.cu", objective="instructions", strategy="exhaustive",
                               only=("define.WARPS",), out=tmp_path / "two.acf.toml"), SilentProgress())
    written = acf.read(report.acf_path)
    for table in ("baseline", "best"):
        evidence = written.evidence[table]
        assert "block_size" not in evidence, evidence
        warps = 6 if table == "baseline" else report.result.chosen.config["define.WARPS"]
        assert evidence["launch_by_kernel"] == {"hist": {"block_size": warps * 32, "dynamic_smem": 0},
                                                "merge": {"block_size": 128, "dynamic_smem": 1024}}, evidence


def test_tune_json_gives_each_kernels_launch_as_the_acf_does(tmp_path):
    """`tune --json` said `metrics.block_size = 256` for the baseline and the choice (the top-level
    default, which scored nothing) while the ACF's launch_by_kernel gave each kernel's own."""
    folder = _two_launched_kernels(tmp_path)
    done = run_cli(["tune", "two.cu", "--workers", "local", "--strategy", "exhaustive", "--objective", "instructions",
                    "--only", "define.WARPS", "--db", f"sqlite:///{tmp_path}/t.db", "--out", str(tmp_path / "two.acf.toml"),
                    "--json"], cwd=folder)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    written = acf.read(tmp_path / "two.acf.toml").evidence
    for shown, table in ((document["baseline"], "baseline"), (document["best"], "best")):
        assert "block_size" not in shown["metrics"] and "launch" not in shown["metrics"], shown["metrics"]
        assert shown["metrics"]["launch_by_kernel"] == written[table]["launch_by_kernel"], (shown, written[table])
    assert document["baseline"]["metrics"]["launch_by_kernel"]["hist"] == {"block_size": 192, "dynamic_smem": 0}


def test_a_launch_table_names_the_instance_a_tuned_macro_picks(tmp_path):
    """A kernel template instantiated with a tuned macro: `[launch."reduce<double, BLOCK>"]` names
    each variant's instance (BLOCK=128: reduce<double, 128>). A literal `reduce<double, 256>` failed
    every other value ("names no kernel of the build"), and the template alone gave float and double
    the same shared memory."""
    folder = tmp_path / "tpl"
    folder.mkdir()
    (folder / "tpl.cu").write_text(
        "#ifndef BLOCK\n#define BLOCK 256\n#endif\n"
        "template <typename T, int B> __global__ void reduce(T* x) {\n"
        "  extern __shared__ char s[]; ((T*)s)[threadIdx.x] = x[threadIdx.x]; __syncthreads();\n"
        "  x[threadIdx.x] = ((T*)s)[B - 1 - threadIdx.x]; }\n"
        "template __global__ void reduce<float, BLOCK>(float*);\n"
        "template __global__ void reduce<double, BLOCK>(double*);\n")
    (folder / "tune.toml").write_text(
        '[tune.defines]\nBLOCK = [256, 128]\n'
        '[launch."reduce<double, BLOCK>"]\nblock_size = "BLOCK"\ndynamic_smem = "BLOCK*sizeof(double)"\n'
        '[launch."reduce<float, BLOCK>"]\nblock_size = "BLOCK"\ndynamic_smem = "BLOCK*sizeof(float)"\n')
    report = app.tune(_options(tmp_path, folder / "tpl.cu", objective="instructions", strategy="exhaustive",
                               only=("define.BLOCK",), out=tmp_path / "tpl.acf.toml"), SilentProgress())
    trials = {t.config["define.BLOCK"]: t for t in report.result.trials if t.purpose == "search"}
    assert all(t.state is TrialState.COMPLETE for t in trials.values()), [t.reason for t in trials.values()]
    launch = acf.read(report.acf_path).evidence["baseline"]["launch_by_kernel"]
    assert launch == {"reduce<float, 256>": {"block_size": 256, "dynamic_smem": 1024},
                      "reduce<double, 256>": {"block_size": 256, "dynamic_smem": 2048}}, launch
    assert sorted(trials[128].metrics["launch"].values()) == [[128, 512], [128, 1024]]


def _cli(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "COMPILEIQ_DB"} | {"NO_COLOR": "1"}
    return subprocess.Popen([sys.executable, "-m", "compileiq", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_killed_run_resumes_and_loses_nothing(tmp_path, spiller):
    args = ["tune", str(spiller), "--objective", "spills", "--budget", "40", "--batch-size", "4",
            "--workers", "local", "--only", ",".join(SUBSPACE), "--json"]
    process = _cli(*args, cwd=tmp_path)
    db = f"sqlite:///{tmp_path}/store/compileiq.db"
    deadline = time.monotonic() + 120
    before = []
    while time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.3)
        if Path(tmp_path / "store" / "compileiq.db").exists():
            store = Store.open(db)
            trials = [t for s in store.list_studies() for t in store.trials(s.id)]
            store.close()
            if sum(t.state is TrialState.COMPLETE for t in trials) >= 6:
                process.send_signal(signal.SIGKILL)
                process.wait()
                break
    assert process.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    store = Store.open(db)
    (study,) = store.list_studies()
    before = {t.config_key: t for t in store.trials(study.id)}
    store.close()
    in_flight = [t for t in before.values() if t.state is TrialState.RUNNING]
    finished = [t for t in before.values() if t.state is not TrialState.RUNNING]

    resumed = _cli(*args, "--resume", cwd=tmp_path)
    stdout, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr
    counters = json.loads(stdout)["counters"]

    store = Store.open(db)
    after = {t.config_key: t for t in store.trials(study.id)}
    store.close()
    for trial in finished:  # nothing finished before the kill was lost or redone
        assert after[trial.config_key].finished_at == trial.finished_at
        assert after[trial.config_key].value == trial.value
    for trial in in_flight:  # in-flight variants were retried to completion
        assert after[trial.config_key].state is not TrialState.RUNNING
    new_configs = len(after) - len(finished)
    assert counters["ptxas_calls"] - counters["verify_ptxas_calls"] <= new_configs
    assert sum(_counted(t) for t in after.values()) >= 40


def _counted(trial):
    return trial.state is TrialState.COMPLETE or (trial.state is TrialState.FAILED and not trial.retryable)


class Recorder(SilentProgress):
    def __init__(self):
        self.notes, self.outcomes = [], []

    def note(self, message):
        self.notes.append(message)

    def trial(self, outcome, best):
        self.outcomes.append(outcome)


def test_a_new_objective_starts_warm_from_earlier_studies(tmp_path, spiller):
    first = app.tune(_options(tmp_path, spiller, budget=16, batch_size=4, simplify=False), SilentProgress())
    complete = [t for t in first.result.trials if t.state is TrialState.COMPLETE]
    recorder = Recorder()
    second = app.tune(_options(tmp_path, spiller, budget=12, batch_size=4, objective="registers", simplify=False,
                               out=tmp_path / "other.acf.toml"),
                      recorder)
    assert f"warm start: {len(complete)} results from 1 earlier studies" in recorder.notes
    first_batch = recorder.outcomes[:4]
    assert {o.trial.config_key for o in first_batch} <= {t.config_key for t in complete}
    assert second.result.counters.build_cache_hits >= 4
    # the warm start's best (fewest registers among the first study's results that may win: no
    # more spills than the defaults, no lower -O without a spill or occupancy gain) was tried first
    base = next(t for t in complete if t.config_key == first.result.baseline.config_key).metrics
    best_known = min(t.metrics["registers"] for t in complete if t.metrics["spill_bytes"] <= base["spill_bytes"]
                     and (t.config["ptxas.opt_level"] == 3 or t.metrics["spill_bytes"] < base["spill_bytes"]
                          or t.metrics["occupancy"] > base["occupancy"]))
    assert min(o.trial.value for o in first_batch) == best_known
    assert {t.study_id for t in second.result.trials} == {second.result.study.id}  # not copied over


def test_another_arch_never_reuses_builds(tmp_path, spiller):
    app.tune(_options(tmp_path, spiller, strategy="exhaustive", budget=6), SilentProgress())
    other = app.tune(_options(tmp_path, spiller, strategy="exhaustive", budget=6, arch="sm_80",
                              out=tmp_path / "other.acf.toml"), SilentProgress())
    assert other.result.study.key.arch == "sm_80"
    assert other.result.counters.build_cache_hits == 0
    assert other.result.counters.ptxas_calls >= 6


def test_another_toolchain_build_never_reuses_builds(tmp_path, spiller, monkeypatch):
    app.tune(_options(tmp_path, spiller, strategy="exhaustive", budget=6), SilentProgress())
    real = find_toolchain()
    folder = tmp_path / "cuda" / "bin"
    folder.mkdir(parents=True)
    (folder / "nvcc").write_text(  # the same compiler, reporting another build string
        f'#!/bin/sh\nif [ "$1" = --version ]; then "{real.nvcc}" --version | sed "s/^Build /Build other-/"; '
        f'else exec "{real.nvcc}" "$@"; fi\n'
    )
    (folder / "ptxas").write_text(f'#!/bin/sh\nexec "{real.ptxas}" "$@"\n')
    for tool in folder.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    find_toolchain.cache_clear()
    try:
        other = app.tune(_options(tmp_path, spiller, strategy="exhaustive", budget=6, out=tmp_path / "other.acf.toml"),
                         SilentProgress())
    finally:
        find_toolchain.cache_clear()
    assert other.result.study.key.toolchain == f"other-{real.nvcc_build}"
    assert other.result.counters.build_cache_hits == 0
    assert other.result.counters.frontend_calls >= 1


def test_arch_on_the_command_line_says_what_it_overrides(tmp_path, spiller):
    """tune.toml says sm_90 and --arch sm_80 wins, as documented; the run says so (it built for
    sm_80 in silence, an easy way to tune for a GPU nobody meant)."""
    (tmp_path / "tune.toml").write_text('arch = "sm_90"\n')
    notes: list[str] = []

    class Notes(SilentProgress):
        def note(self, message: str) -> None:
            notes.append(message)

    report = app.tune(_options(tmp_path, spiller, arch="sm_80", budget=2), Notes())
    assert report.result.study.key.arch == "sm_80"
    assert "note: --arch sm_80 overrides the arch sm_90 that tune.toml gives" in notes
    notes.clear()
    app.tune(_options(tmp_path, spiller, arch="sm_90", budget=2, out=tmp_path / "same.acf.toml"), Notes())
    assert not [n for n in notes if "overrides the arch" in n]


def test_a_listed_macro_value_never_built_is_named(tmp_path):
    """Four block sizes listed, a budget that builds two: the run names the ones it never compiled
    (a user found one of Rodinia nw's four never tried in 136 trials, and nothing said so)."""
    (tmp_path / "k.cu").write_text(
        "#ifndef BLOCK\n#define BLOCK 64\n#endif\n__global__ void k(float* x) { x[threadIdx.x * BLOCK] += 1.f; }\n")
    (tmp_path / "tune.toml").write_text('block_size = "BLOCK"\n[tune.defines]\nBLOCK = [64, 128, 256, 512, 1024]\n')
    done = _cli("tune", "k.cu", "--workers", "local", "--budget", "2", "--batch-size", "1", "--only", "define.BLOCK",
                "--db", f"sqlite:///{tmp_path}/t.db", cwd=tmp_path)
    stdout, stderr = done.communicate(timeout=300)
    assert done.returncode == 0, stderr
    (line,) = [line for line in stdout.splitlines() if "never built in this study" in line]
    named = line.split(": ", 2)[2].split(" (")[0].split(", ")
    assert len(named) == 3 and all(n.startswith("BLOCK=") for n in named), line
    assert "BLOCK=64" not in named  # the baseline's value, built first


def test_show_says_which_trials_are_still_claimed(tmp_path):
    """A tuner killed mid-batch leaves claimed (running) trials: show said nothing of them, so the
    study looked smaller than its row count; it now names them and who holds them."""
    import sqlalchemy as sa

    from compileiq.store.schema import trials_table

    (tmp_path / "k.cu").write_text(SPILLER)
    done = _cli("tune", "k.cu", "--workers", "local", "--budget", "3", "--db", f"sqlite:///{tmp_path}/t.db", cwd=tmp_path)
    assert done.wait(timeout=300) == 0, done.communicate()[1]
    engine = sa.create_engine(f"sqlite:///{tmp_path}/t.db")
    with engine.begin() as conn:
        conn.execute(trials_table.update().where(trials_table.c.number == 2).values(
            state="running", value=None, worker="ghost:4242"))
    engine.dispose()
    shown = _cli("show", "1", "--db", f"sqlite:///{tmp_path}/t.db", cwd=tmp_path)
    stdout, _ = shown.communicate(timeout=120)
    assert "1 trial(s) running, claimed by ghost:4242" in " ".join(stdout.split()), stdout
    listed = _cli("show", "1", "--json", "--db", f"sqlite:///{tmp_path}/t.db", cwd=tmp_path)
    assert json.loads(listed.communicate(timeout=120)[0])["running"] == [{"number": 2, "worker": "ghost:4242"}]


def test_only_searches_the_macros_unless_it_names_one(tmp_path):
    """`--only ptxas.maxrregcount` searches the cap and every tuned macro (a user read reference.md as
    holding them; it now says which); naming a macro (here by --exclude) holds it at tune.toml's
    first value."""
    folder = _two_launched_kernels(tmp_path)
    for extra, warps in (((), {4, 6}), (("--exclude", "define.WARPS"), {6})):
        url = f"sqlite:///{tmp_path / f'{len(extra)}.db'}"
        done = run_cli(["tune", "two.cu", "--workers", "local", "--only", "ptxas.maxrregcount", *extra, "--budget", "8",
                        "--db", url, "--out", str(tmp_path / f"{len(extra)}.acf.toml")], cwd=folder)
        assert done.returncode == 0, done.stderr
        trials = json.loads(run_cli(["show", "1", "--db", url, "--json", "--top", "100"], cwd=folder).stdout)["trials"]
        assert {t["config"]["define.WARPS"] for t in trials} == warps, extra


def test_a_launch_past_the_shared_memory_a_block_may_have_is_named_not_scored(tmp_path):
    """A user's flash attention asked for 233,000 bytes of dynamic shared memory on sm_90, whose
    blocks may have 232,448: the baseline read 0% occupancy without a word, and the tuning was
    meaningless. No block of such a launch can start: the run says so and stops."""
    (tmp_path / "k.cu").write_text("extern __shared__ float s[];\n__global__ void k(float* x) { s[threadIdx.x] = "
                                   "x[threadIdx.x]; __syncthreads(); x[threadIdx.x] = s[255 - threadIdx.x]; }\n")
    (tmp_path / "tune.toml").write_text('arch = "sm_90"\n[launch.k]\nblock_size = 256\ndynamic_smem = 233000\n')
    done = run_cli(["tune", "k.cu", "--budget", "2", "--workers", "local", "--db", f"sqlite:///{tmp_path}/t.db",
                    "--out", "k.acf.toml"], cwd=tmp_path)
    assert done.returncode != 0 and not (tmp_path / "k.acf.toml").exists(), done.describe()
    assert ("k asks for 233,000 bytes of shared memory per block (0 static + 233,000 dynamic), more than the "
            "232,448 a block may have on sm_90: no block can start") in done.stderr_lines[-1], done.describe()
    (tmp_path / "tune.toml").write_text('arch = "sm_90"\n[launch.k]\nblock_size = 256\ndynamic_smem = 200000\n')
    fits = run_cli(["tune", "k.cu", "--budget", "2", "--workers", "local", "--db", f"sqlite:///{tmp_path}/t.db",
                    "--out", "k.acf.toml"], cwd=tmp_path)
    assert fits.returncode == 0, fits.describe()


def test_the_summary_counts_the_checking_rebuilds_as_their_own_counter(tmp_path):
    """A rerun rebuilds the rows its ACF cites that it did not build: that count is a part of the
    compiler calls, said as its own counter (it followed "same machine code 0" as "(11 of them ...)",
    which read as 11 of those 0: user50, fault 5)."""
    kernel = tmp_path / "scale.cu"
    kernel.write_text(TINY_KERNEL)
    args = ["tune", str(kernel), "--objective", "instructions", "--budget", "2", "--strategy", "exhaustive",
            "--only", "ptxas.opt_level", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}",
            "--out", str(tmp_path / "k.acf.toml"), "--force"]
    assert run_cli(args, cwd=tmp_path).returncode == 0
    again = run_cli(args, cwd=tmp_path)
    line = next((line for line in again.stdout.splitlines() if line.startswith("compiler calls: ")), "")
    found = re.search(r"same machine code \d+; rebuilt to check rows this run did not build: (\d+) of the (\d+) "
                      r"compiler calls$", line)
    assert found is not None and 0 < int(found[1]) <= int(found[2]), again.describe()
    assert line.startswith(f"compiler calls: {found[2]} ("), line
