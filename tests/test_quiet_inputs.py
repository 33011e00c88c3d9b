"""Inputs that were accepted without a word (docs audit findings 2, 4 and 5): each now gets one
line and exit 2, as its like does."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import TINY_KERNEL, run_cli


def _one_line_error(done, *says: str) -> None:
    assert done.returncode == 2, done.describe()
    assert len(done.stderr_lines) == 1 and done.stderr_lines[0].startswith("error: "), done.describe()
    assert "Traceback" not in done.output
    for text in says:
        assert text in done.stderr_lines[0], done.describe()


@pytest.mark.parametrize("line", ['shipped = "anything"', 'archs_left_out = ["sm_80"]', 'arch_overridden = "x"',
                                  'system_dirs = ["/nonexistent"]', "tuned_defines = 1", "bogus_key = 1"])
def test_tune_toml_refuses_internal_field_names_as_unknown_keys(tmp_path, line):
    """tune.toml's keys were KernelSpec's fields: those the run sets itself were accepted, then ignored."""
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    (tmp_path / "tune.toml").write_text(line + "\n")
    done = run_cli(["space", "k.cu"], cwd=tmp_path)
    _one_line_error(done, f"tune.toml: {line.partition(' ')[0]}: unknown key")


def test_every_documented_tune_toml_key_is_still_read(tmp_path):
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    (tmp_path / "include").mkdir()
    (tmp_path / "tune.toml").write_text(
        'arch = "sm_90"\nentries = ["scale"]\nblock_size = 128\ndynamic_smem = 0\ninclude_dirs = ["include"]\n'
        'nvcc_flags = ["-std=c++17"]\ncompile_timeout_s = 60\nallow_numerics = false\nallow_semantics = false\n'
        'rtol = 1e-5\natol = 1e-6\nmode = "program"\nmetric_regex = "took ([0-9.]+) ms"\nrun_args = ["-n"]\n[defines]\nN = 4\n'
        '[tune.defines]\nU = [1, 2]\n[tune]\nrestrictions = ["U >= 1"]\n[launch.scale]\nblock_size = 128\n')
    done = run_cli(["space", "k.cu"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    workspace = tmp_path_factory.mktemp("pick")
    (workspace / "k.cu").write_text(TINY_KERNEL)
    done = run_cli(["tune", "k.cu", "--objective", "registers", "--budget", "2", "--workers", "local", "--study", "s",
                    "--db", "sqlite:///t.db"], cwd=workspace)
    assert done.returncode == 0, done.describe()
    return workspace


@pytest.mark.parametrize("view", [["show", "s"], ["show", "s", "--json"], ["show", "s", "--why"],
                                  ["report", "s", "-o", "r.html"]])
@pytest.mark.parametrize("rule", ["bogus", "first"])
def test_pick_on_a_single_objective_study_is_refused_as_tune_refuses_it(single, view, rule):
    done = run_cli([*view, "--pick", rule, "--db", "sqlite:///t.db"], cwd=single)
    _one_line_error(done, "--pick applies to several objectives: study s has one (registers)")
    assert not (single / "r.html").exists()


def test_pick_with_pareto_on_a_single_objective_study_still_picks(single):
    done = run_cli(["show", "s", "--pareto", "registers,instructions", "--pick", "first", "--db", "sqlite:///t.db"],
                   cwd=single)
    assert done.returncode == 0, done.describe()


@pytest.mark.parametrize("value", ["0", "-1", "604801", "nan"])
def test_stale_after_says_what_it_accepts(tmp_path, value):
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    done = run_cli(["tune", "k.cu", "--stale-after", value, "--budget", "1", "--workers", "local",
                    "--db", "sqlite:///t.db"], cwd=tmp_path)
    _one_line_error(done, "--stale-after must be greater than 0 and at most 604800 seconds, got ")
