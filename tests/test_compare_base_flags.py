"""`report --compare` of two studies of one kernel built with other base flags named only two
hashes of the study key ("study key (sources + flags + tune.toml + shipped settings)"): the user
could not tell what differs. It names the base flags only in each study and whether the sources
are the same, as each study's run recorded them, and says "not recorded" of a run that recorded
none or a damaged record (a shared database's rows are untrusted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import LOOP_KERNEL, TINY_KERNEL, compile_commands_file, forge_run, run_cli

from compileiq.core.records import StudyKey, TrialState
from compileiq.report.compare import compare
from compileiq.store import Store


def _tuned(tmp_path: Path, name: str, flags: list[str]) -> None:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "k.cu").write_text(TINY_KERNEL)
    (folder / "tune.toml").write_text(f"nvcc_flags = {json.dumps(flags)}\n")
    done = run_cli(["tune", "k.cu", "--budget", "4", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}",
                    "--study", name, "--out", "k.acf.toml"], cwd=folder)
    assert done.returncode == 0, done.describe()


def test_a_comparison_of_two_tunes_with_other_base_flags_names_the_flags(tmp_path: Path) -> None:
    _tuned(tmp_path, "fast", ["-O3", "-std=c++17", "-lineinfo"])
    _tuned(tmp_path, "plain", ["-std=c++17", "-O2"])
    url = f"sqlite:///{tmp_path / 't.db'}"
    result = run_cli(["report", "--compare", "fast", "plain", "--db", url, "-o", "-", "--format", "md"], tmp_path)
    assert result.returncode == 0, result.describe()
    text = result.stdout
    assert "| base flags only in this study | -O3 -lineinfo | -O2 |" in text, text
    assert "| sources (files and paths, flags aside) | the same | the same |" in text, text
    assert "base flags: only in A: -O3 -lineinfo; only in B: -O2; same sources." in text, text
    page = run_cli(["report", "--compare", "fast", "plain", "--db", url, "-o", "c.html"], tmp_path)
    assert page.returncode == 0, page.describe()
    html = (tmp_path / "c.html").read_text()
    assert "<td>base flags only in this study</td><td>-O3 -lineinfo</td><td>-O2</td>" in html
    assert "base flags: only in A: -O3 -lineinfo; only in B: -O2; same sources." in html


def _study(store: Store, name: str, key: str) -> int:
    study = store.get_or_create_study(StudyKey(
        kernel="k", source_sha256=key * 32, space_id="nvcc-13.0+ptxas-13.0", space_sha256="cd" * 32,
        toolchain="cuda_13.0.r13.0", arch="sm_90", evaluator="static", objective="spills"), name)
    config = {"ptxas.opt_level": "default"}
    trial = store.claim_trials(study.id, [(json.dumps(config), config)], "test")[0]
    store.finish_trial(trial.id, state=TrialState.COMPLETE, value=0.0, reason=None,
                       metrics={"spill_bytes": 0, "registers": 8, "occupancy": 1.0, "instructions": 10, "stack_bytes": 0},
                       code_hash="0" * 64, compile_seconds=0.1)
    return study.id


@pytest.mark.parametrize(("recorded_a", "recorded_b", "row", "sentence"), [
    (["-O3", "-std=c++17"], ["-std=c++17", "-O3"], ("base flags", "-O3 -std=c++17", "-std=c++17 -O3"),
     "the same base flags in another order: A -O3 -std=c++17; B -std=c++17 -O3"),
    (["-O3"], ["-O3"], ("base flags", "the same", "the same"), "the same base flags"),
    (["-O3"], None, ("base flags", "-O3", "not recorded"), "base flags: B not recorded"),
    (["-O3"], ["-O3\x1b[2J"], ("base flags", "-O3", "not recorded"), "base flags: B not recorded"),
    (["-O3"], "-O3", ("base flags", "-O3", "not recorded"), "base flags: B not recorded"),
    (["-O3"], ["x" * 201], ("base flags", "-O3", "not recorded"), "base flags: B not recorded"),
    (["-O3"], ["-O3"] * 300, ("base flags", "-O3", "not recorded"), "base flags: B not recorded"),
    (["-O3"], [], ("base flags only in this study", "-O3", "(none)"), "base flags: only in A: -O3; only in B: (none)"),
])
def test_recorded_base_flags_are_read_back_defensively(tmp_path: Path, recorded_a: object, recorded_b: object,
                                                         row: tuple[str, str, str], sentence: str) -> None:
    db = tmp_path / "t.db"
    store = Store.open(f"sqlite:///{db}")
    try:
        ids = _study(store, "a", "ab"), _study(store, "b", "ef")
    finally:
        store.close()
    files = {"a": "1" * 64, "b": "not a hash"}
    for study_id, name, flags in zip(ids, "ab", (recorded_a, recorded_b), strict=True):
        forge_run(db, {"source_files_sha256": files[name], **({} if flags is None else {"base_flags": flags})},
                  study_id=study_id)
    store = Store.open(f"sqlite:///{db}", create=False)
    try:
        c = compare(store, "a", "b")
    finally:
        store.close()
    assert c.inputs is not None
    assert row in c.differ, c.differ
    assert ("sources (files and paths, flags aside)", "sha256 111111111111…", "not recorded") in c.differ
    assert f"{sentence}; sources: B not recorded." in c.inputs_note(), c.inputs_note()


def test_studies_with_equal_keys_name_no_flags(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 't.db'}")
    try:
        _study(store, "a", "ab")
        other = store.get_or_create_study(StudyKey(
            kernel="k", source_sha256="ab" * 32, space_id="nvcc-13.0+ptxas-13.0", space_sha256="cd" * 32,
            toolchain="cuda_13.1", arch="sm_90", evaluator="static", objective="spills"), "b")
        config = {"ptxas.opt_level": "default"}
        trial = store.claim_trials(other.id, [(json.dumps(config), config)], "test")[0]
        store.finish_trial(trial.id, state=TrialState.COMPLETE, value=0.0, reason=None, metrics={"spill_bytes": 0},
                           code_hash="0" * 64, compile_seconds=0.1)
        c = compare(store, "a", "b")
    finally:
        store.close()
    assert c.inputs is None and c.inputs_note() == ""
    assert not any(r[0].startswith(("base flags", "sources")) for r in c.differ)


def _from_command(tmp_path: Path, name: str, command: str, *options: str) -> None:
    """LOOP_KERNEL in tmp_path/name tuned from `command` (its compile_commands.json entry) as study
    `name` in tmp_path/t.db."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "k.cu").write_text(LOOP_KERNEL)
    compile_commands_file(folder, command)
    done = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--workers", "local",
                    "--db", f"sqlite:///{tmp_path / 't.db'}", "--study", name, "--out", "k.acf.toml", *options],
                   cwd=folder)
    assert done.returncode == 0, done.describe()


_COMMAND = "nvcc -O3 -std=c++17 --generate-code=arch=compute_90,code=[compute_90,sm_90] -Xptxas -O3 -lineinfo -x cu -c k.cu"


def test_a_register_cap_among_a_compile_commands_base_flags_is_named_in_the_comparison_and_the_list(
        tmp_path: Path) -> None:
    """A user tuned siboehm/SGEMM_CUDA from its compile command, and again with nvcc's -maxrregcount=64
    added: `report --compare` showed B's register cap as "ptxas.maxrregcount | 48 | (default)" and its
    baseline's as "-", and `show` listed both baselines as "your build (compile_commands.json)". The
    cap is a base flag of every build of B (the search leaves ptxas.maxrregcount out): each view now
    names it as one."""
    _from_command(tmp_path, "plain", _COMMAND, "--objective", "registers", "--only", "ptxas.maxrregcount",
                  "--strategy", "exhaustive", "--budget", "11")
    _from_command(tmp_path, "capped", f"{_COMMAND} -maxrregcount=64", "--budget", "4")
    url = f"sqlite:///{tmp_path / 't.db'}"
    result = run_cli(["report", "--compare", "plain", "capped", "--db", url, "-o", "-", "--format", "md"], tmp_path)
    assert result.returncode == 0, result.describe()
    text = result.stdout
    assert "| base flags only in this study | (none) | -maxrregcount=64 |" in text, text
    assert "| baseline ptxas.maxrregcount | default | -maxrregcount=64 (base flag) |" in text, text
    chosen = [line for line in text.splitlines() if line.startswith("| ptxas.maxrregcount |")]
    assert len(chosen) == 1 and chosen[0].endswith("| -maxrregcount=64 (base flag) |"), text
    assert "(default)" not in text, text
    assert "base flags: only in A: (none); only in B: -maxrregcount=64; same sources." in text, text
    page = run_cli(["report", "--compare", "plain", "capped", "--db", url, "-o", "c.html"], tmp_path)
    assert page.returncode == 0, page.describe()
    html = (tmp_path / "c.html").read_text()
    assert "<td>baseline ptxas.maxrregcount</td><td>default</td><td>-maxrregcount=64 (base flag)</td>" in html, html
    listed = run_cli(["show", "--db", url, "--json"], tmp_path)
    assert listed.returncode == 0, listed.describe()
    assert [s["baseline"] for s in json.loads(listed.stdout)] == [
        "your build (compile_commands.json)", "your build (compile_commands.json): base flag -maxrregcount=64"]
    table = run_cli(["show", "--db", url], tmp_path).stdout
    assert "│ your build (compile_commands.json): base flag -maxrregcount=64 │" in table, table


def test_shipped_settings_are_told_from_base_flags_in_a_comparison(tmp_path: Path) -> None:
    """A compile command's --use_fast_math and -Xptxas -O1 are shipped settings (the search starts
    from them), not base flags: the comparison names them as shipped settings that differ and says
    the base flags are the same."""
    _from_command(tmp_path, "plain", "nvcc -std=c++17 -arch=sm_90 -c k.cu", "--budget", "2")
    _from_command(tmp_path, "fast", "nvcc -std=c++17 -arch=sm_90 --use_fast_math -Xptxas -O1 -c k.cu",
                  "--budget", "2")
    url = f"sqlite:///{tmp_path / 't.db'}"
    result = run_cli(["report", "--compare", "plain", "fast", "--db", url, "-o", "-", "--format", "md"], tmp_path)
    assert result.returncode == 0, result.describe()
    text = result.stdout
    assert "| base flags | the same | the same |" in text, text
    assert "| baseline ptxas.opt_level | 3 | 1 |" in text, text
    assert "| baseline nvcc.use_fast_math | false | true |" in text, text  # as show spells it, not Python's False
    assert ("base flags (fixed: every build gets them, never searched), tune.toml and shipped settings (the "
            "baseline's values of searched settings): the same base flags; shipped settings differ: "
            "nvcc.use_fast_math, ptxas.opt_level; same sources.") in text, text


def test_the_study_list_names_the_base_flags_that_tell_studies_of_one_kernel_apart(tmp_path: Path) -> None:
    """Studies of one file from commands of other -std: the list names each one's -std, not the
    -lineinfo both build with."""
    _from_command(tmp_path, "new", "nvcc -std=c++17 -lineinfo -arch=sm_90 -c k.cu", "--budget", "2")
    _from_command(tmp_path, "old", "nvcc -std=c++14 -lineinfo -arch=sm_90 -c k.cu", "--budget", "2")
    listed = run_cli(["show", "--db", f"sqlite:///{tmp_path / 't.db'}", "--json"], tmp_path)
    assert listed.returncode == 0, listed.describe()
    assert [s["baseline"] for s in json.loads(listed.stdout)] == [
        "your build (compile_commands.json): base flag -std=c++17",
        "your build (compile_commands.json): base flag -std=c++14"]


def test_a_comparison_of_two_files_of_one_name_says_which_file_each_study_is(tmp_path: Path) -> None:
    # a red team's a/k.cu and b/k.cu: `show` names them a/k.cu and b/k.cu, `report --compare` named neither
    for name, flags in (("a", ["-std=c++17"]), ("b", ["-std=c++17", "-DEXTRA=1"])):
        _tuned(tmp_path, name, flags)
    url = f"sqlite:///{tmp_path / 't.db'}"
    shown = run_cli(["show", "--db", url], tmp_path)
    assert "a/k.cu" in shown.stdout and "b/k.cu" in shown.stdout, shown.stdout
    result = run_cli(["report", "--compare", "a", "b", "--db", url, "-o", "-", "--format", "md"], tmp_path)
    assert result.returncode == 0, result.describe()
    assert result.stdout.startswith("# compileiq comparison: a (a/k.cu) vs b (b/k.cu)\n"), result.stdout
    assert "| kernel file | a/k.cu | b/k.cu |" in result.stdout, result.stdout
    assert "| a (a/k.cu) | static" in result.stdout, result.stdout
    page = run_cli(["report", "--compare", "a", "b", "--db", url, "-o", "c.html"], tmp_path)
    assert page.returncode == 0, page.describe()
    assert "<td>kernel file</td><td>a/k.cu</td><td>b/k.cu</td>" in (tmp_path / "c.html").read_text()
    # a forged run's path is never shown: b is read as recording none, and one path tells nothing apart (as show)
    forge_run(tmp_path / "t.db", {"kernel_path": "../etc/k.cu"}, study_id=2)
    forged = run_cli(["report", "--compare", "a", "b", "--db", url, "-o", "-", "--format", "md"], tmp_path)
    assert forged.returncode == 0 and "etc" not in forged.stdout, forged.stdout
    assert forged.stdout.startswith("# compileiq comparison: a vs b\n"), forged.stdout
    assert "kernel file" not in forged.stdout, forged.stdout
