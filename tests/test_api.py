"""The Python API (`import compileiq`): the documented example runs as written; results are
frozen and typed; errors are the command's one-line errors; importing stays cheap."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import LOOP_KERNEL, TINY_KERNEL, clean_env

import compileiq
from compileiq.core.errors import UsageError
from compileiq.results.acf import AcfError

REPO = Path(__file__).resolve().parents[1]
_PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def api_examples() -> list[tuple[str, str]]:
    """Every ```python block that imports compileiq, in the README and in docs/."""
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for block in _PYTHON_BLOCK.findall(page.read_text(encoding="utf-8")):
            if "import compileiq" in block:
                found.append((page.relative_to(REPO).as_posix(), block))
    return found


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=clean_env(), capture_output=True, text=True,
                          timeout=600, check=False)


def test_the_python_api_is_documented_with_an_example() -> None:
    assert "docs/python-api.md" in [page for page, _ in api_examples()]


@pytest.mark.slow
@pytest.mark.parametrize(("page", "code"), api_examples(), ids=lambda value: value if value.endswith(".md") else "")
def test_documented_api_example_runs_as_written(tmp_path: Path, page: str, code: str) -> None:
    (tmp_path / "kernels").symlink_to(REPO / "kernels")  # "run from the repository root"
    done = _python(code, tmp_path)
    assert done.returncode == 0, f"{page}:\n{done.stdout}\n{done.stderr}"
    assert "spill_heavy: 672 -> 0 spill bytes" in done.stdout
    assert "set_source_files_properties(" in done.stdout and "gate: PASS" in done.stdout


def test_import_compileiq_loads_no_heavy_dependency() -> None:
    code = ("import sys, compileiq\n"
            "heavy = ('sqlalchemy', 'skopt', 'numpy', 'ray', 'typer', 'rich', 'compileiq.api')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m == 'compileiq.api'))")
    done = _python(code, REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_tune_and_gate_are_the_api_functions_even_after_the_modules_load() -> None:
    import compileiq.gating.check
    import compileiq.tuning.tuner
    from compileiq import api

    assert compileiq.tune is api.tune and compileiq.gate is api.gate


def test_tune_returns_frozen_typed_rows_and_calls_back_per_trial(tmp_path: Path) -> None:
    kernel = tmp_path / "scale.cu"
    kernel.write_text(TINY_KERNEL)
    seen: list[compileiq.TrialRow] = []
    result = compileiq.tune(
        kernel, objective="instructions", budget=3, strategy="exhaustive", workers="local",
        only=["ptxas.opt_level"], db=f"sqlite:///{tmp_path / 't.db'}", out=tmp_path / "scale.acf.toml",
        on_trial=seen.append)
    assert isinstance(result, compileiq.TuneResult)
    assert result.acf_path == tmp_path / "scale.acf.toml" and result.acf_path.is_file()
    assert [row.number for row in result.trials] == sorted(row.number for row in seen)
    assert result.baseline == result.trials[0] and result.baseline.config == {"ptxas.opt_level": 3}
    assert result.baseline_value == result.trials[0].value
    assert result.best_value == min(row.value for row in result.trials if row.value is not None)
    assert result.flags == compileiq.load_acf(result.acf_path).flags()
    assert result.trials[0].metrics["instructions"] > 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.best = result.baseline  # type: ignore[misc]
    with pytest.raises(TypeError):
        result.best.config["ptxas.opt_level"] = 0  # type: ignore[index]
    assert compileiq.flags(result.acf_path, format="optf").splitlines() == list(result.flags)


def test_tune_takes_several_objectives_and_the_pick_rule(tmp_path: Path) -> None:
    import tomllib

    kernel = tmp_path / "scale.cu"
    kernel.write_text(TINY_KERNEL)
    result = compileiq.tune(
        kernel, objective="registers,instructions", pick="first", budget=4, strategy="exhaustive",
        workers="local", only=["ptxas.opt_level"], db=f"sqlite:///{tmp_path / 't.db'}", out=tmp_path / "k.acf.toml")
    objective = tomllib.loads(result.acf_path.read_text())["objective"]
    assert objective["pick"] == "first" and objective["objectives"] == ["registers", "instructions"]
    with pytest.raises(UsageError, match="pick"):
        compileiq.tune(kernel, objective="registers,instructions", pick="middle", budget=4, workers="local",
                       db=f"sqlite:///{tmp_path / 't.db'}")


def test_bad_input_raises_the_commands_one_line_errors(tmp_path: Path) -> None:
    kernel = tmp_path / "scale.cu"
    kernel.write_text(TINY_KERNEL)
    with pytest.raises(UsageError, match="^budget must be at least 1, got 0"):  # this API's keyword, not --budget
        compileiq.tune(kernel, budget=0, workers="local", db=f"sqlite:///{tmp_path / 't.db'}")
    with pytest.raises(UsageError, match="^finalists applies to objective time"):
        compileiq.tune(kernel, finalists=2, workers="local", db=f"sqlite:///{tmp_path / 't.db'}")
    with pytest.raises(AcfError, match="ACF not found"):
        compileiq.load_acf(tmp_path / "missing.acf.toml")
    (tmp_path / "bad.acf.toml").write_text("format = 1\n")
    with pytest.raises(AcfError, match="not a valid ACF") as error:
        compileiq.flags(tmp_path / "bad.acf.toml")
    assert "\n" not in str(error.value)
    with pytest.raises(UsageError, match="give at least one ACF file"):
        compileiq.gate([])
    with pytest.raises(UsageError, match="budget must be a whole number, got '8'"):  # was a bare TypeError
        compileiq.tune(kernel, budget="8", workers="local", db=f"sqlite:///{tmp_path / 't.db'}")  # type: ignore[arg-type]


def test_gate_reports_an_unreadable_acf_beside_the_others_and_errors_name_keywords(tmp_path: Path) -> None:
    """As `compileiq gate`: an ACF that cannot be checked is an ERROR result, the others gated as
    usual, exit code 2 (it raised, and a script gating a folder lost every verdict: user50, fault 2);
    `flags`' errors name its keywords, not the command's --format/--stage (fault 3)."""
    kernel = tmp_path / "scale.cu"
    kernel.write_text(TINY_KERNEL)
    good = compileiq.tune(kernel, objective="instructions", budget=2, strategy="exhaustive", workers="local",
                          only=["ptxas.opt_level"], db=f"sqlite:///{tmp_path / 't.db'}",
                          out=tmp_path / "scale.acf.toml").acf_path
    (tmp_path / "bad.acf.toml").write_text("format = 1\n")
    report = compileiq.gate([good, tmp_path / "missing.acf.toml", tmp_path / "bad.acf.toml"], device=False)
    assert [r.verdict for r in report.results] == ["PASS", "ERROR", "ERROR"] and report.exit_code == 2
    assert "ACF not found" in report.results[1].findings[0].message
    assert "not a valid ACF" in report.results[2].findings[0].message
    assert compileiq.gate(good, device=False).exit_code == 0
    for keyword, says in (("format", "format must be one of args, optf"), ("stage", "stage must be all, frontend")):
        with pytest.raises(UsageError, match=f"^{says}"):
            compileiq.flags(good, **{keyword: "nope"})  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="^format cmake gives nvcc options: use stage all or frontend"):
        compileiq.flags(good, format="cmake", stage="ptxas")


class _BytesPath(os.PathLike):
    """A path whose __fspath__ gives bytes: os.fspath takes it, Path() and the NUL check did not."""

    def __fspath__(self) -> bytes:
        return b"scale.cu"

    def __repr__(self) -> str:
        return "<bytes path>"


@pytest.mark.parametrize(("call", "says"), [
    (lambda k: compileiq.tune(k, only=[1]), "only and exclude take parameter names"),
    (lambda k: compileiq.tune(k, db=5), "db must be a string, got 5"),
    (lambda k: compileiq.tune(k, objective=None), "objective must be a string, got None"),
    (lambda k: compileiq.tune(k, pick=5), "pick must be a string, got 5"),
    (lambda k: compileiq.tune(k, on_trial=5), "on_trial must be a function"),
    (lambda k: compileiq.tune(k, force="yes"), "force must be True or False"),
    (lambda k: compileiq.tune(None), "kernel must be a file path, got None"),
    (lambda k: compileiq.tune(k, out=5), "out must be a file path, got 5"),
    (lambda k: compileiq.load_acf("a\0b"), "path must be a file path"),
    (lambda k: compileiq.flags(42), "acf must be a file path, got 42"),
    (lambda k: compileiq.tune(_BytesPath()), "kernel must be a file path, got <bytes path>"),
    (lambda k: compileiq.tune(k, out=_BytesPath()), "out must be a file path"),
    (lambda k: compileiq.tune(k, compile_commands=_BytesPath()), "compile_commands must be a file path"),
    (lambda k: compileiq.load_acf(_BytesPath()), "path must be a file path"),
    (lambda k: compileiq.flags(_BytesPath()), "acf must be a file path"),
    (lambda k: compileiq.gate(_BytesPath()), "acfs must be a file path"),
    (lambda k: compileiq.gate([k], kernel=_BytesPath()), "kernel must be a file path"),
    (lambda k: compileiq.flags(k, with_base="False"), "with_base must be True or False, got 'False'"),
    (lambda k: compileiq.flags(k, with_arch=0), "with_arch must be True or False, got 0"),
    (lambda k: compileiq.gate(None), "acfs must be a path or paths"),
    (lambda k: compileiq.gate([k], rules=[1]), "rules must be NAME=SEVERITY texts, got 1"),
    (lambda k: compileiq.gate([k], kernel=5), "kernel must be a file path, got 5"),
    (lambda k: compileiq.gate([k], program="yes"), "program must be True or False"),
    (lambda k: compileiq.gate([k], compile_commands=5), "compile_commands must be a file path, got 5"),
])
def test_a_wrong_type_is_a_usage_error_naming_the_keyword(tmp_path: Path, call, says: str) -> None:
    """They raised TypeError, AttributeError or ValueError from deep inside (the red team's), one
    only after the baseline was compiled (on_trial=5)."""
    kernel = tmp_path / "scale.cu"
    kernel.write_text(TINY_KERNEL)
    with pytest.raises(UsageError, match=re.escape(says)):
        call(kernel)


def test_the_api_gate_takes_the_compilation_database_that_ships_and_program_mode(tmp_path: Path) -> None:
    """`compileiq.gate` had no compile_commands, program or metric_regex (docs/ci.md: give the gate
    the database that ships): a Python gate held an ACF tuned from a build shipping -Xptxas -O0 to
    that -O0 where CI ships -O3, and passed it. They go through the command's checks."""
    (tmp_path / "k.cu").write_text(LOOP_KERNEL)

    def database(name: str, command: str) -> Path:
        (tmp_path / name).mkdir()
        path = tmp_path / name / "compile_commands.json"
        path.write_text(json.dumps([{"directory": str(tmp_path), "command": command, "file": "k.cu"}]))
        return path

    tuned_from = database("tuned", "nvcc -arch=sm_90 -Xptxas -O0 -c k.cu -o k.o")
    ships = database("ci", "nvcc -arch=sm_90 -O3 -c k.cu -o k.o")
    acf_path = compileiq.tune(tmp_path / "k.cu", budget=2, workers="local", compile_commands=tuned_from,
                              only=["ptxas.opt_level", "ptxas.maxrregcount"], db=f"sqlite:///{tmp_path / 't.db'}",
                              out=tmp_path / "k.acf.toml").acf_path
    assert "-O0" in compileiq.flags(acf_path)
    assert compileiq.gate(acf_path, device=False).exit_code == 0  # held to the -O0 its [baseline] names
    report = compileiq.gate(acf_path, device=False, compile_commands=ships)
    assert report.exit_code == 1, report
    assert "worse-than-default" in [f.rule for f in report.results[0].findings if f.severity == "error"], report
    with pytest.raises(UsageError, match="^metric_regex: needs a group around the time"):
        compileiq.gate(acf_path, device=False, program=True, metric_regex="time: [0-9.]+ ms")
    with pytest.raises(UsageError, match=r"^compile_commands .*missing\.json: file not found"):
        compileiq.gate(acf_path, device=False, compile_commands=tmp_path / "missing.json")


def test_the_api_takes_a_compile_command_and_gives_the_base_flags(tmp_path: Path) -> None:
    """`--compile-commands` and `flags --all` had no keyword (a bare TypeError)."""
    (tmp_path / "scale.cu").write_text(TINY_KERNEL)
    (tmp_path / "compile_commands.json").write_text(json.dumps([{
        "directory": str(tmp_path), "file": "scale.cu", "command": "nvcc -DUNUSED=2 -lineinfo -arch=sm_90 -c scale.cu"}]))
    result = compileiq.tune(tmp_path / "scale.cu", budget=2, workers="local", db=f"sqlite:///{tmp_path / 't.db'}",
                            compile_commands=tmp_path / "compile_commands.json", out=tmp_path / "s.acf.toml")
    everything = compileiq.flags(result.acf_path, with_base=True).split()
    assert {"-DUNUSED=2", "-lineinfo"} <= set(everything) and "-lineinfo" not in compileiq.flags(result.acf_path)


def test_flag_notes_gives_the_notes_the_command_prints_beside_its_flags(tmp_path: Path) -> None:
    """`compileiq.flags` returned the text alone: a script got none of the notes `compileiq flags` prints
    on stderr (here: the base flags -DUNUSED=2 -lineinfo the build needs, which only with_base prints)."""
    (tmp_path / "scale.cu").write_text(TINY_KERNEL)
    (tmp_path / "compile_commands.json").write_text(json.dumps([{
        "directory": str(tmp_path), "file": "scale.cu", "command": "nvcc -DUNUSED=2 -lineinfo -arch=sm_90 -c scale.cu"}]))
    acf_path = compileiq.tune(tmp_path / "scale.cu", budget=2, workers="local", db=f"sqlite:///{tmp_path / 't.db'}",
                              compile_commands=tmp_path / "compile_commands.json", out=tmp_path / "s.acf.toml").acf_path
    printed = subprocess.run([sys.executable, "-m", "compileiq", "flags", str(acf_path)], capture_output=True, text=True,
                             cwd=tmp_path, env=clean_env(), check=True)
    found = compileiq.flag_notes(acf_path)
    assert dataclasses.is_dataclass(found) and found.lines, found
    assert list(found.lines) == printed.stderr.strip().splitlines(), (found, printed.stderr)
    assert {"-DUNUSED=2", "-lineinfo"} <= {left.flag for left in found.left_out if left.kind == "base"}, found
    assert not [left for left in compileiq.flag_notes(acf_path, with_base=True).left_out if left.kind == "base"]
    assert isinstance(compileiq.flags(acf_path), str)  # existing callers still get the text
    with pytest.raises(UsageError, match="^format must be one of"):
        compileiq.flag_notes(acf_path, format="nope")
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.lines = ()  # type: ignore[misc]
