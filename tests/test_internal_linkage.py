"""Kernels of internal linkage build the same on every build (user report 46, fault 1).

nvcc names a `static __global__` kernel under -rdc=true `__nv_static_NN__<hash>_...` and a kernel
in an anonymous namespace `_GLOBAL__N__<hash>_...` (with -rdc or without), where <hash> is a hash
of the source file's absolute path. compileiq compiles in a fresh scratch folder each time, so the
names, the code hash over them and every recorded entry name differed on each build: a rerun of
the same study quarantined the user's own baseline and winner, and `gate --static` on an untouched
ACF said code-changed. The path's part is now the same on every build, every folder, every host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from helpers import CliResult, run_cli

from compileiq.build.compile import AssembleJob, BuildStatus, FrontendJob, assemble, emit_ptx
from compileiq.build.linkage import PATH_HASH
from compileiq.core.records import Trial, TrialState
from compileiq.core.toolchain import find_toolchain
from compileiq.results import acf
from compileiq.source.entry_names import entry_matches, readable
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.store import Store
from compileiq.store.schema import builds, trials_table

KERNEL = """\
static __global__ void add(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 3.0f + 1.0f;
}
namespace {
__global__ void twice(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 2.0f * x[i];
}
}
void launch(float* x, int n) { add<<<(n + 255) / 256, 256>>>(x, n); twice<<<(n + 255) / 256, 256>>>(x, n); }
"""

TUNE_TOML = 'nvcc_flags = ["-rdc=true"]\nentries = ["add", "twice"]\n'


def _folder(root: Path, name: str, tune: str = TUNE_TOML) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "k.cu").write_text(KERNEL)
    (folder / "tune.toml").write_text(tune)
    return folder


def _build(folder: Path):  # type: ignore[no-untyped-def]
    tools = find_toolchain()
    ptx = emit_ptx(FrontendJob(tools.nvcc, bundle_sources(load_spec(folder / "k.cu")), "sm_90", (), 60))
    assert ptx.status is BuildStatus.OK, ptx.message
    build = assemble(AssembleJob(tools.ptxas, "sm_90", (), 60), ptx)
    assert build.ok, build.message
    return ptx, build


@pytest.mark.parametrize("tune", [TUNE_TOML, 'entries = ["add", "twice"]\n'], ids=["rdc", "whole-program"])
def test_the_same_source_and_flags_give_the_same_code_hash_and_names_on_every_build(tmp_path: Path, tune: str) -> None:
    one, two = _folder(tmp_path, "one", tune), _folder(tmp_path, "elsewhere", tune)  # another folder, as on another host
    builds = [_build(one), _build(one), _build(two)]
    ptx_texts = {ptx.ptx for ptx, _ in builds}
    hashes = {build.code_hash for _, build in builds}
    names = {tuple(e.name for e in build.entries) for _, build in builds}
    assert len(ptx_texts) == 1, "the PTX ptxas is given (and the shared builds' key) is the same"
    assert len(hashes) == 1 and len(names) == 1, (hashes, names)
    kernels = [e.name for e in builds[0][1].entries if e.entry]
    assert sorted(readable(name) for name in kernels) == ["add", "twice"], kernels
    assert all(any(entry_matches(name, wanted) for name in kernels) for wanted in ("add", "twice"))


def _tune(folder: Path, url: str, budget: int) -> CliResult:
    return run_cli(["tune", "k.cu", "--objective", "registers", "--only", "ptxas.maxrregcount", "--budget",
                    str(budget), "--workers", "local", "--db", url, "--out", "k.acf.toml", "--force"], cwd=folder)


def _trials(url: str) -> list[Trial]:
    store = Store.open(url)
    try:
        return store.trials(store.find_study("1").id)
    finally:
        store.close()


def test_a_rerun_of_a_study_with_static_kernels_under_rdc_quarantines_nothing(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "work", 'nvcc_flags = ["-rdc=true"]\n')
    url = f"sqlite:///{tmp_path / 'q.db'}"

    def tune(budget: int) -> CliResult:
        return _tune(folder, url, budget)

    first = tune(4)
    assert first.returncode == 0, first.describe()
    before = acf.read(folder / "k.acf.toml")
    for budget in (6, 8):  # the same study, run again with more budget: its own rows are its own
        again = tune(budget)
        assert again.returncode == 0, again.describe()
        assert "quarantined" not in again.output, again.describe()
    trials = _trials(url)
    assert not [t for t in trials if t.reason and "quarantined" in t.reason]
    assert trials[0].state is TrialState.COMPLETE
    after = acf.read(folder / "k.acf.toml")
    assert after.evidence["baseline"]["code_hash"] == before.evidence["baseline"]["code_hash"]
    gate = run_cli(["gate", "k.acf.toml", "--static"], cwd=folder)
    assert gate.returncode == 0 and "code-changed" not in gate.output, gate.describe()


def test_rows_and_cached_builds_recorded_with_scratch_names_are_brought_up_to_date_not_quarantined(
        tmp_path: Path) -> None:
    """A database written before the names were made the same: its rows differ from their rebuilds
    in those names and the code hash alone; they are updated, and its cached builds compiled again."""
    folder = _folder(tmp_path, "work", 'nvcc_flags = ["-rdc=true"]\n')
    url = f"sqlite:///{tmp_path / 'old.db'}"
    assert (first := _tune(folder, url, 4)).returncode == 0, first.describe()

    def scratch_named(metrics: dict[str, Any]) -> dict[str, Any]:
        entries = [{**e, "name": e["name"].replace(PATH_HASH, "1a93c0de")} for e in metrics["entries"]]
        assert entries != metrics["entries"]
        return {**metrics, "entries": entries}

    engine = sa.create_engine(url)
    with engine.begin() as conn:  # as an earlier compileiq recorded them: a scratch folder's names and code hash
        for row in conn.execute(sa.select(trials_table.c.id, trials_table.c.metrics)).all():
            conn.execute(trials_table.update().where(trials_table.c.id == row.id).values(
                metrics=scratch_named(row.metrics), code_hash="1a93" * 16))
        for key, metrics in conn.execute(sa.select(builds.c.key, builds.c.metrics)).all():
            conn.execute(builds.update().where(builds.c.key == key).values(metrics=scratch_named(metrics),
                                                                            code_hash="1a93" * 16))
    engine.dispose()
    again = _tune(folder, url, 6)
    assert again.returncode == 0 and "quarantined" not in again.output, again.describe()
    assert "build cache hits 0;" in again.output, again.describe()
    baseline = _trials(url)[0]
    assert baseline.state is TrialState.COMPLETE and baseline.code_hash != "1a93" * 16
    assert all(PATH_HASH in e["name"] for e in baseline.metrics["entries"])
    assert acf.read(folder / "k.acf.toml").evidence["baseline"]["code_hash"] == baseline.code_hash


def test_a_users_own_names_that_look_like_nvccs_are_left_as_they_are(tmp_path: Path) -> None:
    """The rewrite had no anchor: two kernels a user named `k__nv_static_1__deadbeef_a` and
    `k__nv_static_1__cafebabe_a` became one (ptxas: "Duplicate definition"); and a prefix with
    4,400 digits stopped tune with a traceback (Python's int of more than 4,300 digits). Both are
    legitimate kernels nvcc builds (a red team's)."""
    from compileiq.build.linkage import stable_ptx
    from compileiq.source.entry_names import linkage_free

    own = b".visible .entry k__nv_static_1__deadbeef_a(\n.visible .entry x__nv_static_1__cafebabe_a("
    assert stable_ptx(own) == own
    nvccs = b".visible .entry __nv_static_25__8f633831_4_k_cu_d589cb60__Z3addPf("
    assert stable_ptx(nvccs) == b".visible .entry __nv_static_25__00000000_4_k_cu_d589cb60__Z3addPf("
    huge = "__nv_static_" + "9" * 4400 + "__k"
    assert linkage_free(huge) == huge
    (tmp_path / "k.cu").write_text('extern "C" __global__ void k__nv_static_1__deadbeef_a(float* x) { x[threadIdx.x] += 1; }\n'
                                   'extern "C" __global__ void k__nv_static_1__cafebabe_a(float* x) { x[threadIdx.x] *= 3; }\n'
                                   f'extern "C" __global__ void {huge}(float* x) {{ x[threadIdx.x] -= 1; }}\n')
    done = run_cli(["tune", "k.cu", "--objective", "spills", "--budget", "2", "--workers", "local",
                    "--db", f"sqlite:///{tmp_path}/t.db", "--out", "k.acf.toml"], cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.describe()
