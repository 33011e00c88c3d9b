"""Hostile and broken inputs to the tuning loop and the command line (issue 9).

Real `compileiq` processes (the console script, a clean environment), real SQLite, real nvcc;
where a compile must still be in flight when something happens to its tuner, ptxas is wrapped
by a script that sleeps first.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import time
import tomllib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from helpers import (
    TINY_KERNEL,
    CliResult,
    clean_env,
    compileiq_command,
    recorded_trials,
    run_cli,
    sleeping_compiles,
    slow_toolchain,
    write_locked,
)

from compileiq import app
from compileiq.core.records import Trial, TrialState
from compileiq.results import acf
from compileiq.store import Store, exchange
from compileiq.tuning.progress import SilentProgress

REPO = Path(__file__).resolve().parent.parent
REDUCTION = REPO / "kernels" / "reduction" / "reduction.cu"
ONE_FLAG = "ptxas.opt_level"  # four configurations: the baseline and three others


# -- one line, the right exit code, no traceback: every option's hostile values ----------------

T = "tune {k} --workers local --json --db sqlite:///{ws}/t.db --objective instructions"
# fmt: off
BAD_INPUTS: dict[str, tuple[str, int, str]] = {  # command, exit code, text in the error line
    "seed-negative": (f"{T} --seed -1", 2, "--seed must be at least 0"),
    "seed-2**32": (f"{T} --seed {2**32}", 2, "--seed must be at most 4294967295"),
    "seed-2**40": (f"{T} --seed {2**40}", 2, "--seed must be at most"),
    "budget-zero": (f"{T} --budget 0", 2, "--budget must be at least 1"),
    "budget-huge": (f"{T} --budget 100001", 2, "--budget must be at most 100000"),
    "budget-absurd": (f"{T} --budget {10**15}", 2, "--budget must be at most"),
    "batch-size-zero": (f"{T} --batch-size 0", 2, "--batch-size must be at least 1"),
    "batch-size-negative": (f"{T} --batch-size -4", 2, "--batch-size must be at least 1"),
    "batch-size-huge": (f"{T} --batch-size 5000", 2, "--batch-size must be at most"),
    "finalists-zero": (f"{T} --finalists 0", 2, "--finalists must be at least 1"),
    "finalists-huge": (f"{T} --finalists 9", 2, "--finalists must be at most 8"),
    "finalists-static": (f"{T} --finalists 2", 2, "--finalists applies to --objective time"),
    "stale-after-inf": (f"{T} --stale-after inf", 2, "--stale-after"),
    "stale-after-nan": (f"{T} --stale-after nan", 2, "--stale-after"),
    "stale-after-negative": (f"{T} --stale-after -1", 2, "--stale-after"),
    "out-is-a-directory": (f"{T} --out {{ws}}/adir", 2, "is a directory"),
    "out-under-a-file": (f"{T} --out {{ws}}/afile/k.acf.toml", 2, "cannot write"),
    "out-unwritable": (f"{T} --out /proc/nope/k.acf.toml", 2, "cannot write"),
    "only-empty": (f"{T} --only ,", 2, "--only names no parameter"),
    "exclude-empty": (f"{T} --exclude ' , '", 2, "--exclude names no parameter"),
    "only-unknown": (f"{T} --only no.such", 2, "no.such"),
    "only-one-unknown": (f"{T} --only {ONE_FLAG},bogus", 2, "bogus"),
    "exclude-unknown": (f"{T} --exclude bogus", 2, "bogus"),
    "surrogate-unknown": (f"{T} --surrogate XGB", 2, "XGB"),
    "arch-injection": (f"{T} '--arch=sm_90;id'", 2, "is not an arch"),
    "objective-empty": (f"{T} --objective=", 2, "unknown objective"),
    "strategy-empty": (f"{T} --strategy=", 2, "unknown strategy"),
    "kernel-is-a-directory": ("tune {ws}/adir --workers local --db sqlite:///{ws}/t.db", 2,
                              "adir is a directory, not a regular file"),
    "kernel-is-a-fifo": ("tune {ws}/fifo.cu --workers local --db sqlite:///{ws}/t.db", 2,
                         "fifo.cu is a named pipe, not a regular file"),
    "kernel-links-to-dev-zero": ("tune {ws}/zero.cu --workers local --db sqlite:///{ws}/t.db", 2,
                                 "zero.cu is a character device, not a regular file"),
    "show-top-zero": ("show --top 0 --db sqlite:///{ws}/t.db", 2, "--top must be at least 1"),
    "show-top-negative": ("show x --top -3 --db sqlite:///{ws}/t.db", 2, "--top must be at least 1"),
    "flags-directory": ("flags {ws}/adir", 2, "adir"),
    "flags-binary": ("flags {ws}/binary.acf.toml", 2, "not a readable ACF"),
    "flags-huge": ("flags {ws}/huge.acf.toml", 2, "bytes"),
    "gate-directory": ("gate {ws}/adir --static", 2, "adir"),
    "flags-fifo": ("flags {ws}/fifo.acf.toml", 2, "it is a named pipe, not a regular file"),  # never opened
    "gate-fifo": ("gate {ws}/fifo.acf.toml --static", 2, "it is a named pipe, not a regular file"),
    "gate-kernel-fifo": ("gate {ws}/good.acf.toml --static --kernel {ws}/fifo.cu", 2,
                         "fifo.cu is a named pipe, not a regular file"),
    "gate-binary": ("gate {ws}/binary.acf.toml --static", 2, "not a readable ACF"),
    "gate-huge": ("gate {ws}/huge.acf.toml --static", 2, "bytes"),
    "flags-deeply-nested": ("flags {ws}/deep.acf.toml", 2, "not a readable ACF: nested too deeply"),
    "gate-deeply-nested": ("gate {ws}/deep.acf.toml --static", 2, "not a readable ACF: nested too deeply"),
    "gate-markdown-unwritable": ("gate {ws}/good.acf.toml --static --markdown /proc/nope/summary.md", 2,
                                 "--markdown cannot write /proc/nope/summary.md"),
    "gate-junit-is-a-directory": ("gate {ws}/good.acf.toml --static --junit {ws}/adir", 2, "--junit"),
    "export-to-a-directory": ("db export 1 --out {ws}/adir --db sqlite:///{ws}/t.db", 2, "adir"),
    "db-empty": ("show --db ''", 2, "--db is empty"),  # not the default database, silently
    "db-empty-upgrade": ("db upgrade --db=", 2, "--db is empty"),
    "db-blank": ("show --db ' '", 2, "--db is empty"),
    "db-not-a-url": ("show --db 'not a database URL: file.db'", 2, "not a database URL"),
    "db-http": ("show --db http://x", 2, "unsupported database URL http://x"),
    "db-no-such-driver": ("show --db sqlite+nodriver:///x.db", 2, "unsupported database URL"),
    "db-in-memory": ("show --db sqlite://", 2, "in-memory database"),
    "db-mysql": ("show --db mysql://u:secret@127.0.0.1/x", 2, "unsupported database URL mysql://u:***@127.0.0.1/x"),
    "db-driver-not-installed": ("show --db postgresql+psycopg2cffi://u@127.0.0.1:9/x", 2,  # exited 1 before
                                "no database driver for postgresql+psycopg2cffi in this Python"),
    "gate-evidence-nan": ("gate {ws}/nan.acf.toml --static", 2, "evidence.best.occupancy"),
    "flags-evidence-nan": ("flags {ws}/nan.acf.toml", 2, "evidence.best.occupancy = 'nan' must be a number"),
    "flags-format-true": ("flags {ws}/format-true.acf.toml", 2, "unsupported ACF format True"),
    "flags-arch-9999": ("flags {ws}/arch-9999.acf.toml", 2, "kernel.arch = 'sm_9999' is not an arch"),
    "arch-9999": (f"{T} --arch sm_9999", 2, "'sm_9999' is not an arch like 'sm_90'"),
    # issue 24, item 7: what adversarial tries still found
    "gate-markdown-fifo": ("gate {ws}/good.acf.toml --static --markdown {ws}/out.fifo", 2,  # blocked forever
                           "--markdown cannot write {ws}/out.fifo: it is a named pipe, not a regular file"),
    "gate-junit-device": ("gate {ws}/good.acf.toml --static --junit /dev/full", 2, "it is a character device"),
    "gate-reports-one-file": ("gate {ws}/good.acf.toml --static --junit {ws}/same.out --markdown {ws}/same.out", 2,
                              "--markdown and --junit name the same file"),  # the markdown was lost, exit 0
    "gate-reports-hard-linked": ("gate {ws}/good.acf.toml --static --junit {ws}/linked.xml --markdown {ws}/linked.md",
                                 2, "--markdown and --junit name the same file"),
    "report-out-fifo": ("report 1 --db sqlite:///{ws}/t.db -o {ws}/out.fifo", 2,  # blocked forever
                        "cannot write {ws}/out.fifo: it is a named pipe, not a regular file"),
    "report-md-device": ("report 1 --db sqlite:///{ws}/t.db --format md -o /dev/full", 2, "a character device"),
    "time-budget-unit-twice": (f"{T} --time-budget 1h1h", 2, "--time-budget takes a duration such as"),
    "time-budget-units-reversed": (f"{T} --time-budget 30m1h", 2, "got '30m1h'"),
    "ray-address-empty": ("tune {k} --ray-address= --db sqlite:///{ws}/t.db", 2, "--ray-address is empty"),
    "ray-address-port-99999": ("tune {k} --ray-address 127.0.0.1:99999 --db sqlite:///{ws}/t.db", 2,
                               "a port from 1 to 65535"),
    "kernel-symlink-loop": ("tune {ws}/loop.cu --workers local --db sqlite:///{ws}/t.db", 2,
                            "kernel file {ws}/loop.cu is a symlink loop"),  # was a traceback
    "compile-commands-fifo": ("tune {k} --compile-commands {ws}/ccfifo.json --workers local --db sqlite:///{ws}/t.db",  # blocked forever
                              2, "ccfifo.json: it is a named pipe, not a compilation database"),
    "space-compile-commands-fifo": ("space {k} --compile-commands {ws}/ccfifo.json", 2,  # blocked forever
                                    "ccfifo.json: it is a named pipe, not a compilation database"),
    "tune-toml-fifo": ("tune {ws}/tomlfifo/k.cu --workers local --db sqlite:///{ws}/t.db", 2,  # was ignored
                       "tomlfifo/tune.toml is a named pipe, not a regular file"),
    "tune-toml-directory": ("tune {ws}/tomldir/k.cu --workers local --db sqlite:///{ws}/t.db", 2,
                            "tomldir/tune.toml is a directory, not a regular file"),
    "tune-toml-loop": ("tune {ws}/tomlloop/k.cu --workers local --db sqlite:///{ws}/t.db", 2,
                       "tomlloop/tune.toml is a symlink loop or a dangling link"),
    "include-folder-loop": ("tune {ws}/incloop/k.cu --workers local --db sqlite:///{ws}/t.db", 2,
                            "include folder {ws}/incloop/inc is a symlink loop"),  # was a traceback
    "show-emoji-code": ("show :x: --db sqlite:///{ws}/t.db", 2, "no study named ':x:'"),  # was '❌'
    "ray-address-password": ("tune {k} --ray-address user:s3cret@127.0.0.1:6379 --db sqlite:///{ws}/t.db", 2,
                             "got '***@127.0.0.1:6379'"),
}
# fmt: on


@dataclass
class Workspace:
    path: Path
    results: dict[str, Future[CliResult]]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    ws = tmp_path_factory.mktemp("hostile-cli")
    (ws / "adir").mkdir()
    (ws / "linked.md").write_text("")
    os.link(ws / "linked.md", ws / "linked.xml")  # two names of one file
    (ws / "afile").write_text("not a directory\n")
    for fifo in ("fifo.cu", "fifo.acf.toml", "out.fifo", "ccfifo.json"):  # reading or writing one blocks until the other end comes
        os.mkfifo(ws / fifo)
    (ws / "zero.cu").symlink_to("/dev/zero")
    (ws / "loop.cu").symlink_to(ws / "loop.cu")
    for folder in ("tomlfifo", "tomldir", "tomlloop", "incloop"):
        (ws / folder).mkdir()
        (ws / folder / "k.cu").write_text(TINY_KERNEL)
    os.mkfifo(ws / "tomlfifo" / "tune.toml")
    (ws / "tomldir" / "tune.toml").mkdir()
    (ws / "tomlloop" / "tune.toml").symlink_to(ws / "tomlloop" / "tune.toml")
    (ws / "incloop" / "inc").symlink_to(ws / "incloop" / "inc")
    (ws / "incloop" / "tune.toml").write_text('include_dirs = ["inc"]\n')
    (ws / "binary.acf.toml").write_bytes(bytes(range(256)) * 64)
    (ws / "huge.acf.toml").write_text("# " + "x" * (2 << 20) + "\n")
    (ws / "deep.acf.toml").write_text("format = 1\nx = " + "[" * 5000 + "]" * 5000 + "\n")  # under the size cap
    good = run_cli([*shlex.split(_fill(T, ws)), "--budget", "2", "--only", ONE_FLAG, "--out", str(ws / "good.acf.toml")], ws)
    assert good.returncode == 0, good.describe()
    _edited(ws / "good.acf.toml", ws / "nan.acf.toml", lambda d: d["evidence"]["best"].update(occupancy=math.nan))
    _edited(ws / "good.acf.toml", ws / "format-true.acf.toml", lambda d: d.update(format=True))
    _edited(ws / "good.acf.toml", ws / "arch-9999.acf.toml", lambda d: d["kernel"].update(arch="sm_9999"))
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = {name: pool.submit(run_cli, shlex.split(_fill(command, ws)), ws)
                   for name, (command, _, _) in BAD_INPUTS.items()}  # fmt: skip
        yield Workspace(ws, results)


def _edited(good: Path, path: Path, edit: Callable[[dict[str, Any]], object]) -> Path:
    """A hand edit of a real ACF: `good` read, changed by `edit`, written to `path`."""
    data = tomllib.loads(good.read_text())
    edit(data)
    path.write_text(tomli_w.dumps(data))
    return path


def _fill(command: str, ws: Path) -> str:
    return command.replace("{ws}", str(ws)).replace("{k}", str(REDUCTION))


def _error_line(result: CliResult, code: int) -> str:
    context = result.describe()
    assert "Traceback" not in result.output, context
    assert result.returncode == code, context
    errors = [line for line in result.stderr_lines if line.startswith("error:")]
    assert len(errors) == 1 and errors[0] == result.stderr_lines[-1], context
    return errors[0]


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_a_hostile_option_value_is_one_line(workspace: Workspace, name: str) -> None:
    _, code, says = BAD_INPUTS[name]
    result = workspace.results[name].result()
    line = _error_line(result, code)
    assert _fill(says, workspace.path).lower() in line.lower(), result.describe()
    assert "s3cret" not in result.output
    if not name.startswith("gate-"):  # the gate prints its report before the error
        assert len(result.stderr_lines) == 1, result.describe()


# A password with a raw '@': the URL parser ends the password at its first '@' and reads the rest
# as the host, so `show` printed "ci:***@Prod-Key-9f3a@127.0.0.1" and the driver's "failed to resolve
# host 'Prod-Key-9f3a@127.0.0.1'" (red team 49, finding 4).
RAW_AT_PASSWORD = "hunter2@Prod-Key-9f3a@x"
RAW_AT_URLS = (f"postgresql+psycopg://ci:{RAW_AT_PASSWORD}@127.0.0.1:5432/tuning",
               f"postgresql+psycopg://ci:{RAW_AT_PASSWORD}@127.0.0.1/tuning?sslmode=disable",
               f"sqlite://ci:{RAW_AT_PASSWORD}@/store.db")


@pytest.mark.parametrize("url", RAW_AT_URLS)
def test_a_raw_at_in_a_database_password_shows_no_part_of_it(url: str, tmp_path: Path) -> None:
    for args, env in ((["show", "--db", url], None), (["db", "upgrade", "--db", url], None),
                      (["tune", str(REDUCTION), "--workers", "local", "--budget", "1", "--db", url], None),
                      (["show"], {"COMPILEIQ_DB": url})):
        result = run_cli(args, tmp_path, env=env)
        line = _error_line(result, 2)
        assert "write each '@' in it as %40" in line and "ci:***@" in line, result.describe()
        for fragment in ("hunter2", "Prod", "Key", "9f3a", "@x@"):
            assert fragment not in result.output, (fragment, result.describe())


def test_control_characters_in_an_acf_never_reach_the_gates_report_files(workspace: Workspace, tmp_path: Path) -> None:
    """A hand-edited `toolchain.build` holding ESC and NUL: the terminal showed it escaped, but the
    JUnit file held them raw and no XML parser could read it (the red team's)."""
    import xml.etree.ElementTree as ET

    edited = _edited(workspace.path / "good.acf.toml", tmp_path / "ctl.acf.toml",
                     lambda d: d["toolchain"].update(build="x\x1bY\x00z"))
    done = run_cli(["gate", str(edited), "--static", "--junit", str(tmp_path / "g.xml"), "--markdown",
                    str(tmp_path / "g.md")], tmp_path)
    assert done.returncode in (0, 1), done.describe()
    ET.parse(tmp_path / "g.xml")  # well-formed
    for name in ("g.xml", "g.md"):
        text = (tmp_path / name).read_text()
        assert "\x1b" not in text and "\x00" not in text and "x\\x1bY\\x00z" in text, name


def test_an_unwritable_gate_report_still_writes_the_others(workspace: Workspace) -> None:
    junit = workspace.path / "report.xml"
    args = ["gate", str(workspace.path / "good.acf.toml"), "--static", "--junit", str(junit),
            "--markdown", "/proc/nope/summary.md"]  # fmt: skip
    result = run_cli(args, workspace.path)
    _error_line(result, 2)
    assert "gate PASS" in result.stdout, result.describe()  # the verdict was still shown
    assert "<testsuite" in junit.read_text()


def test_an_output_option_never_replaces_an_input_a_database_or_an_acf(workspace: Workspace, tmp_path: Path) -> None:
    """A mistyped output path (the red team's): `db export -o` over its own database, `gate --junit`
    over the ACF it gates and `--markdown` over the database, `report -o` over an ACF. Each used to
    succeed and destroy what it named; now each is one line, exit 2, and the file is as it was."""
    acf_file, db = tmp_path / "good.acf.toml", tmp_path / "t.db"
    acf_file.write_bytes((workspace.path / "good.acf.toml").read_bytes())
    db.write_bytes((workspace.path / "t.db").read_bytes())
    before = {path: path.read_bytes() for path in (acf_file, db)}
    url = f"sqlite:///{db}"
    for args, says in (
        (["db", "export", "1", "--db", url, "-o", str(db)], "it is an SQLite database"),
        (["gate", str(acf_file), "--static", "--junit", str(acf_file)], "it is one of this command's inputs"),
        (["gate", str(acf_file), "--static", "--markdown", str(db)], "it is an SQLite database"),
        (["report", "1", "--db", url, "-o", str(acf_file)], "it is an ACF"),
    ):
        result = run_cli(args, tmp_path)
        line = _error_line(result, 2)
        assert "not replacing" in line and says in line, result.describe()
        assert "gate " not in result.stdout, result.describe()  # refused before any rebuild ran
        assert all(path.read_bytes() == data for path, data in before.items()), args
    exported = tmp_path / "study.json"
    for _ in range(2):  # an export replaces its own older export
        assert run_cli(["db", "export", "1", "--db", url, "-o", str(exported)], tmp_path).returncode == 0


# Every output option, its command with OUT for the path (the red team's: `tune --out` and
# `db export -o` through a dangling link wrote its target and created its folders elsewhere).
OUTPUTS = {
    "tune-out": "tune {k} --workers local --budget 1 --db sqlite:///TMP/t.db --out OUT",
    "db-export": "db export 1 --db sqlite:///{ws}/t.db -o OUT",
    "report": "report 1 --db sqlite:///{ws}/t.db -o OUT",
    "report-md": "report 1 --db sqlite:///{ws}/t.db --format md -o OUT",
    "gate-junit": "gate {ws}/good.acf.toml --static --junit OUT",
    "gate-markdown": "gate {ws}/good.acf.toml --static --markdown OUT",
}


@pytest.mark.parametrize("dangling", [True, False], ids=["dangling", "to-a-file"])
@pytest.mark.parametrize("name", list(OUTPUTS))
def test_an_output_path_that_is_a_symlink_is_refused_before_anything_runs(
    workspace: Workspace, tmp_path: Path, name: str, dangling: bool
) -> None:
    outside = tmp_path / "outside" / "a" / "b" / "out.txt"
    if not dangling:
        outside.parent.mkdir(parents=True)
        outside.write_text("kept\n")
    link = tmp_path / "link.out"
    link.symlink_to(outside)
    command = _fill(OUTPUTS[name], workspace.path).replace("OUT", str(link)).replace("TMP", str(tmp_path))
    result = run_cli(shlex.split(command), tmp_path)
    line = _error_line(result, 2)
    assert f"cannot write {link}: it is a symbolic link" in line, result.describe()
    assert len(result.stderr_lines) == 1 and "gate " not in result.stdout, result.describe()  # nothing ran
    assert os.readlink(link) == str(outside)
    if dangling:
        assert not (tmp_path / "outside").exists()  # not its folders either
    else:
        assert outside.read_text() == "kept\n"
    assert not (tmp_path / "t.db").exists()  # tune: refused before the study was opened


def test_a_report_figure_that_is_a_symlink_stops_the_report_before_any_file(workspace: Workspace,
                                                                            tmp_path: Path) -> None:
    (tmp_path / "r-convergence.svg").symlink_to(tmp_path / "elsewhere" / "c.svg")
    result = run_cli(["report", "1", "--db", f"sqlite:///{workspace.path / 't.db'}", "--format", "md",
                      "-o", str(tmp_path / "r.md")], tmp_path)
    assert "it is a symbolic link" in _error_line(result, 2), result.describe()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r-convergence.svg"]


def test_an_output_in_a_symlinked_folder_is_written(workspace: Workspace, tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    url = f"sqlite:///{workspace.path / 't.db'}"
    for args in (["db", "export", "1", "--db", url, "-o", "linked/s.json"], ["report", "1", "--db", url, "-o", "linked/r.html"],
                 ["gate", str(workspace.path / "good.acf.toml"), "--static", "--junit", "linked/g.xml"]):
        result = run_cli(args, tmp_path)
        assert result.returncode == 0, result.describe()
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["g.xml", "r.html", "s.json"]


def test_a_bad_out_fails_before_any_trial_is_claimed(workspace: Workspace) -> None:
    workspace.results["out-is-a-directory"].result()
    store = Store.open(f"sqlite:///{workspace.path / 't.db'}")
    try:
        assert [len(store.trials(s.id)) for s in store.list_studies()] == [2]  # the good run's only
    finally:
        store.close()


# -- a hand-edited ACF: every recorded number, its format and arch are checked ---------------------

def _set(table: str, key: str, value: object) -> Callable[[dict[str, Any]], object]:
    def edit(data: dict[str, Any]) -> None:
        *path, last = f"{table}.{key}".split(".")
        for name in path:
            data = data[name]
        data[last] = value
    return edit


# fmt: off
ACF_EDITS: dict[str, tuple[Callable[[dict[str, Any]], object], str]] = {  # edit, text in the error
    # a flag in args.defines was echoed back in the "expected" argv, as if it belonged there
    "defines-not-a-define": (lambda d: d["args"]["defines"].append("-Xcompiler=-fPIC"),
                             "args.defines holds '-Xcompiler=-fPIC', which is not a -D define"),
    "occupancy-nan": (_set("evidence.best", "occupancy", math.nan), "evidence.best.occupancy"),
    "occupancy-above-one": (_set("evidence.best", "occupancy", 1.5), "evidence.best.occupancy"),
    "occupancy-negative": (_set("evidence.best", "occupancy", -0.5), "evidence.best.occupancy"),
    "occupancy-string": (_set("evidence.best", "occupancy", "1.0"), "evidence.best.occupancy"),
    "registers-string": (_set("evidence.best", "registers", "8"), "evidence.best.registers"),
    "registers-float": (_set("evidence.best", "registers", 8.0), "evidence.best.registers"),
    "registers-bool": (_set("evidence.best", "registers", True), "evidence.best.registers"),
    "registers-256": (_set("evidence.best", "registers", 256), "evidence.best.registers"),
    "registers-negative": (_set("evidence.best", "registers", -1), "evidence.best.registers"),
    "spills-negative": (_set("evidence.best", "spill_bytes", -4), "evidence.best.spill_bytes"),
    "spills-inf": (_set("evidence.best", "spill_bytes", math.inf), "evidence.best.spill_bytes"),
    "instructions-inf": (_set("evidence.best", "instructions", math.inf), "evidence.best.instructions"),
    "instructions-negative": (_set("evidence.best", "instructions", -7), "evidence.best.instructions"),
    "stack-nan": (_set("evidence.best", "stack_bytes", math.nan), "evidence.best.stack_bytes"),
    "block-size-zero": (_set("evidence.best", "block_size", 0), "evidence.best.block_size"),
    "median-negative": (_set("evidence.best", "median_ms", -1.0), "evidence.best.median_ms"),
    "baseline-spills-nan": (_set("evidence.baseline", "spill_bytes", math.nan), "evidence.baseline.spill_bytes"),
    "baseline-occupancy-inf": (_set("evidence.baseline", "occupancy", math.inf), "evidence.baseline.occupancy"),
    "best-not-a-table": (_set("evidence", "best", "fine"), "evidence.best must be a table"),
    "objective-best-nan": (_set("objective", "best", math.nan), "objective.best"),
    "objective-baseline-string": (_set("objective", "baseline", "0"), "objective.baseline"),
    # numbers that claim what the evidence does not hold (the gate checks the evidence, a reader the numbers)
    "objective-best-forged": (_set("objective", "best", -5.0), "objective.best = -5.0 is not what evidence.best gives"),
    "objective-baseline-forged": (_set("objective", "baseline", 1e9), "objective.baseline = 1000000000.0 is not what"),
    "objective-improved-forged": (lambda d: d["objective"].update(improved=not d["objective"]["improved"]),
                                  "objective.improved"),
    "objective-speedup-inf": (_set("objective", "speedup", math.inf), "objective.speedup"),
    "objective-finalists-string": (_set("objective", "confirmed_finalists", "4"), "objective.confirmed_finalists"),
    "objective-confirmed-median-string": (_set("objective", "confirmed_median", "1.0"), "objective.confirmed_median"),
    "objective-confirmed-median-negative": (_set("objective", "confirmed_median", -1.0),
                                            "objective.confirmed_median = -1.0 must be a positive time"),
    "format-true": (lambda d: d.update(format=True), "unsupported ACF format True"),
    "format-float": (lambda d: d.update(format=1.0), "unsupported ACF format 1.0"),
    "arch-9999": (_set("kernel", "arch", "sm_9999"), "kernel.arch = 'sm_9999' is not an arch"),
    "arch-number": (_set("kernel", "arch", 90), "kernel.arch = '90' is not an arch"),
    "arch-suffix": (_set("kernel", "arch", "sm_90x"), "kernel.arch = 'sm_90x' is not an arch"),
    "mode-shell": (_set("kernel", "mode", "program; rm -rf ~"), "kernel.mode must be one of: harness, program"),
    "mode-number": (_set("kernel", "mode", 1), "kernel.mode must be one of"),
    "metric-regex-no-group": (lambda d: d["kernel"].update(mode="program", metric_regex="took .* ms"),
                              "kernel.metric_regex needs a group"),
    "metric-regex-broken": (lambda d: d["kernel"].update(mode="program", metric_regex="(("),
                            "kernel.metric_regex not a regular expression"),
    "metric-regex-huge": (lambda d: d["kernel"].update(mode="program", metric_regex="(a)" * 1000),
                          "kernel.metric_regex must be a regular expression of at most 500"),
    "metric-regex-table": (lambda d: d["kernel"].update(mode="program", metric_regex={"x": 1}),
                           "kernel.metric_regex must be"),
    "metric-regex-harness": (_set("kernel", "metric_regex", "took ([0-9.]+) ms"),
                             'kernel.metric_regex is for kernel.mode = "program"'),
}
# fmt: on


def test_a_real_acf_reads_back_valid(workspace: Workspace) -> None:
    read = acf.read(workspace.path / "good.acf.toml")
    assert {"spill_bytes", "registers", "occupancy", "instructions"} <= set(read.evidence["best"])


def test_an_acf_saved_with_a_byte_order_mark_is_read(workspace: Workspace) -> None:
    path = workspace.path / "bom.acf.toml"
    path.write_bytes(codecs.BOM_UTF8 + (workspace.path / "good.acf.toml").read_bytes())
    assert acf.read(path).argv == acf.read(workspace.path / "good.acf.toml").argv


@pytest.mark.parametrize("name", list(ACF_EDITS))
def test_a_hand_edited_number_or_arch_is_refused_naming_its_key(workspace: Workspace, name: str) -> None:
    edit, says = ACF_EDITS[name]
    path = _edited(workspace.path / "good.acf.toml", workspace.path / f"edit-{name}.acf.toml", edit)
    with pytest.raises(acf.AcfError) as info:
        acf.read(path)
    assert says in str(info.value) and "\n" not in str(info.value), str(info.value)


# -- terminal and markup injection -------------------------------------------------------------

HOSTILE_NAME = "evil\x1b[31m[bold red]x[/bold red][/foo][/"
HOSTILE_KERNEL = (
    "#ifndef MODE\n#define MODE 1\n#endif\n#if MODE == 2\n#error [/foo] [bold red]y[/bold red] \x1b[31mred\n#endif\n"
    "__global__ void k(float* x) { x[threadIdx.x] *= MODE; }\n"
)


def _raw(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the command without stripping anything from its output (run_cli strips ANSI)."""
    return subprocess.run([compileiq_command(), *args], cwd=cwd, env=clean_env(), capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=120, check=False)  # fmt: skip


def test_names_and_compiler_messages_are_shown_literally(tmp_path: Path) -> None:
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "k.cu").write_text(HOSTILE_KERNEL)
    (tmp_path / "k" / "tune.toml").write_text("[tune.defines]\nMODE = [1, 2]\n")
    db = f"sqlite:///{tmp_path / 'h.db'}"
    tuned = _raw(["tune", "k/k.cu", "--workers", "local", "--db", db, "--study", HOSTILE_NAME, "--strategy",
                  "exhaustive", "--budget", "4", "--only", ONE_FLAG, "--objective", "instructions",
                  "--no-simplify", "--out", str(tmp_path / "k.acf.toml")], tmp_path)  # fmt: skip
    listed = _raw(["show", "--db", db], tmp_path)
    shown = _raw(["show", "1", "--db", db], tmp_path)
    exported = _raw(["db", "export", "1", "--db", db, "-o", str(tmp_path / "h.json")], tmp_path)
    imported = _raw(["db", "import", str(tmp_path / "h.json"), "--db", f"sqlite:///{tmp_path / 'i.db'}"], tmp_path)
    for done in (tuned, listed, shown, exported, imported):
        output = done.stdout + done.stderr
        assert done.returncode == 0 and "Traceback" not in output, output
        assert "\x1b" not in output, output  # no escape sequence reaches the terminal
    assert "evil\\x1b[31m[bold red]x[/bold red][/foo][/" in listed.stdout, listed.stdout
    assert "FAILED (" in tuned.stderr and "[/foo] [bold red]y[/bold red] \\x1b[31mred" in tuned.stderr
    assert "[/foo] [bold red]y[/bold red] \\x1b[31mred" in shown.stdout, shown.stdout
    assert "evil\\x1b[31m[bold red]x[/bold red][/foo][/" in shown.stdout  # the table's title
    for done in (exported, imported):  # they printed the name raw: an escape sequence and a live newline
        assert "study evil\\x1b[31m[bold red]x[/bold red]" in done.stdout + done.stderr, done.stdout


FORMAT_CHARACTERS = "\u202e\u202a\u2066\u2069\u200b\u200f\u2028\u2029\ufeff\U000e0041"  # bidi, zero-width, separators, tag
BIDI_NAME = "rtl" + "".join(f"{c}{i}" for i, c in enumerate(FORMAT_CHARACTERS))


def _no_format_character(text: str, where: str) -> None:
    assert not [c for c in FORMAT_CHARACTERS if c in text], (where, text[:2000])
    assert "\\u202e0" in text and "\\u2028" in text and "\\U000e0041" in text, (where, text[:2000])


def test_bidi_and_zero_width_characters_are_escaped_on_the_terminal_in_markdown_and_html(tmp_path: Path) -> None:
    """A RIGHT-TO-LEFT OVERRIDE (Trojan Source) in a study name reordered how the rest of a line
    was shown: in `show`, the markdown report (a PR comment) and the HTML report. Format characters
    (Cf) and the line/paragraph separators are escaped like control characters, by one rule; an
    ACF's text reaches the gate's JUnit and markdown files (the PR comment) escaped too."""
    (tmp_path / "scale.cu").write_text(TINY_KERNEL)
    db = f"sqlite:///{tmp_path / 'b.db'}"
    tuned = _raw(["tune", "scale.cu", "--workers", "local", "--db", db, "--study", BIDI_NAME, "--budget", "2",
                  "--only", ONE_FLAG, "--no-simplify", "--out", str(tmp_path / "b.acf.toml")], tmp_path)  # fmt: skip
    assert tuned.returncode == 0, tuned.stdout + tuned.stderr
    views = {"tune": tuned.stdout + tuned.stderr}
    for name, args in {"show": ["show"], "show-1": ["show", "1"], "md": ["report", "1", "--format", "md", "-o", "-"],
                       "html": ["report", "1", "-o", str(tmp_path / "b.html")]}.items():  # fmt: skip
        done = _raw([*args, "--db", db], tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        views[name] = done.stdout + done.stderr
    views["html"] = (tmp_path / "b.html").read_text(encoding="utf-8")
    edited = _edited(tmp_path / "b.acf.toml", tmp_path / "e.acf.toml", lambda d: d["toolchain"].update(build=BIDI_NAME))
    gated = _raw(["gate", str(edited), "--static", "--junit", str(tmp_path / "g.xml"), "--markdown",
                  str(tmp_path / "g.md")], tmp_path)  # fmt: skip
    assert gated.returncode in (0, 1), gated.stdout + gated.stderr
    views |= {name: (tmp_path / name).read_text(encoding="utf-8") for name in ("g.xml", "g.md")}
    for name in ("show", "show-1", "md", "html", "g.xml", "g.md"):
        _no_format_character(views[name], name)
    assert FORMAT_CHARACTERS[0] not in views["tune"] + gated.stdout + gated.stderr


# -- crashes, Ctrl-C and closed pipes: nothing left RUNNING, no broken ACF ---------------------


def _start(processes: list[subprocess.Popen[str]], kernel: Path, db: str, *extra: str,
           env: dict[str, str] | None = None, json_out: bool = True) -> subprocess.Popen[str]:
    args = [compileiq_command(), "tune", str(kernel), "--db", db, "--workers", "local", "--study", "S",
            "--only", ONE_FLAG, *(["--json"] if json_out else []), *extra]  # fmt: skip
    process = subprocess.Popen(args, cwd=kernel.parent, env=clean_env(env), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # fmt: skip
    processes.append(process)
    return process


def _wait_for_running(db: str, process: subprocess.Popen[str], timeout: float = 60) -> list[Trial]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if Path(db.removeprefix("sqlite:///")).exists():
            running = [t for t in recorded_trials(db) if t.state is TrialState.RUNNING]
            if running:
                return running
        time.sleep(0.2)
    raise AssertionError(f"no trial was claimed (exit {process.poll()})")


def _worker(process: subprocess.Popen[str]) -> str:
    return f"{socket.gethostname()}:{process.pid}"


@pytest.mark.slow
def test_a_plain_rerun_after_a_crash_in_the_baseline_writes_a_valid_acf(tiny: Path, processes: list) -> None:
    db, out = f"sqlite:///{tiny.parent / 't.db'}", tiny.parent / "scale.acf.toml"
    victim = _start(processes, tiny, db, "--budget", "4", "--batch-size", "4", "--out", str(out),
                    env=slow_toolchain(tiny.parent / "slow", 60))
    held = _wait_for_running(db, victim)
    assert 0 in {t.number for t in held}  # the baseline is in flight
    victim.kill()
    victim.communicate(timeout=30)

    started = time.monotonic()
    rerun = _start(processes, tiny, db, "--budget", "4", "--out", str(out), json_out=False)
    _, stderr = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, stderr
    assert time.monotonic() - started < 45, "the rerun waited for the dead tuner's heartbeat to go stale"
    assert f"retrying {len(held)} trial(s) of tuner {_worker(victim)}, which is no longer running" in stderr
    evidence = tomllib.loads(out.read_text())["evidence"]
    for name in ("baseline", "best"):
        assert evidence[name]["code_hash"], evidence
    assert evidence["baseline"]["trial"] == 0
    assert all(t.state is TrialState.COMPLETE for t in recorded_trials(db))


@pytest.mark.slow
def test_a_baseline_held_by_a_live_tuner_never_replaces_a_good_acf(tiny: Path, processes: list) -> None:
    db, out = f"sqlite:///{tiny.parent / 't.db'}", tiny.parent / "scale.acf.toml"
    out.write_text("# the good ACF of an earlier run\n")
    holder = _start(processes, tiny, db, "--budget", "1", "--batch-size", "1", "--stale-after", "3",
                    "--out", str(tiny.parent / "holder.acf.toml"), env=slow_toolchain(tiny.parent / "slow", 60))
    (baseline,) = _wait_for_running(db, holder)
    # The holder beats every second (a third of its --stale-after); the other holds a claim stale
    # after 6 s and starts once the baseline was claimed 6 s ago: without those beats it would
    # take the baseline, and a holder stalled 1-3 s on a loaded machine still keeps it.
    time.sleep(6)
    # --force: the file is no ACF, which tune would otherwise refuse to replace before the run
    other = _start(processes, tiny, db, "--budget", "3", "--stale-after", "6", "--out", str(out), "--force")
    _, stderr = other.communicate(timeout=120)
    line = stderr.strip().splitlines()[-1]
    assert other.returncode == 1 and "Traceback" not in stderr, stderr
    assert line.startswith("error: the baseline (trial #0) is still being evaluated by another tuner"), stderr
    assert _worker(holder) in line and "no ACF was written" in line
    assert out.read_text() == "# the good ACF of an earlier run\n"
    assert baseline.number == 0 and holder.poll() is None


def _variants_compile_slowly(folder: Path, seconds: int) -> dict[str, str]:
    """CUDA_HOME whose ptxas sleeps `seconds` for every variant (an -O flag), not for the baseline
    (none): two variants are soon in flight on the two local threads."""
    env = slow_toolchain(folder, 0)
    ptxas = folder / "bin" / "ptxas"
    ptxas.write_text(ptxas.read_text().replace("*--version*) ;; *) sleep 0", f'*" -O"*) sleep {seconds}'))
    return env


@pytest.mark.slow
@pytest.mark.parametrize(("sent", "code", "said"), [(signal.SIGINT, 130, "interrupted"),
                                                   (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_ctrl_c_or_sigterm_stops_at_once_and_hands_the_claimed_trials_back(
        tiny: Path, processes: list, sent: int, code: int, said: str) -> None:
    db, slow = f"sqlite:///{tiny.parent / 't.db'}", tiny.parent / "slow"
    victim = _start(processes, tiny, db, "--budget", "4", "--batch-size", "4",
                    env=_variants_compile_slowly(slow, 60), json_out=False)
    deadline = time.monotonic() + 60
    while len(sleeping_compiles(slow)) < 2 and time.monotonic() < deadline and victim.poll() is None:
        time.sleep(0.1)
    assert len(sleeping_compiles(slow)) == 2, "two variants never compiled at once"
    held = [t for t in recorded_trials(db) if t.state is TrialState.RUNNING]
    os.killpg(victim.pid, sent)  # what a terminal's Ctrl-C does (compilers have their own group); CI's cancel
    started = time.monotonic()
    _, stderr = victim.communicate(timeout=90)
    took = time.monotonic() - started
    assert took < 10, f"{took:.1f} s: the run waited for its compiles (60 s each) before exiting"
    assert victim.returncode == code and "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if said in line]
    line = f"{said}: {len(held)} unfinished trial(s) handed back to retry; finished trials are saved; rerun with --resume"
    assert lines == [f"{line} to continue"], stderr  # one line
    assert sleeping_compiles(slow) == []  # no compiler outlives the run
    after = {t.config_key: t for t in recorded_trials(db)}
    for trial in held:
        released = after[trial.config_key]
        assert released.state is TrialState.FAILED and released.retryable
        assert (released.reason or "").endswith(f"({said})"), released.reason  # SIGTERM said "(interrupted)" (red53)
    assert [t.number for t in after.values() if t.state is TrialState.COMPLETE] == [0]  # the baseline is kept


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["local", "ray"])
def test_a_second_ctrl_c_ends_the_run_at_once(tiny: Path, processes: list, workers: str) -> None:
    """The first Ctrl-C stops the run in order: it hands its claimed trials back, a write that a
    busy database holds here (a team's PostgreSQL under load, another tuner's SQLite transaction:
    up to the 30 s busy timeout, the main thread inside sqlite's C code all that time). A second
    Ctrl-C while that stop is under way leaves at once, and its compilers (and Ray) go with it.
    Before: the second waited for the write (30 s), as Python runs a handler only between two
    bytecodes of the main thread; with the lock taken 0.1 s after the first, CI once saw the first
    stop finish before the second came (stop 52)."""
    if workers == "ray":
        pytest.importorskip("ray")
    db, slow = f"sqlite:///{tiny.parent / 't.db'}", tiny.parent / "slow"
    victim = _start(processes, tiny, db, "--budget", "4", "--batch-size", "4", "--workers", workers,
                    env=slow_toolchain(slow, 60), json_out=False)
    deadline = time.monotonic() + 60
    while not sleeping_compiles(slow) and time.monotonic() < deadline and victim.poll() is None:
        time.sleep(0.1)
    assert sleeping_compiles(slow), "the baseline never compiled"
    with write_locked(tiny.parent / "t.db"):  # the hand-back waits for this write lock
        os.killpg(victim.pid, signal.SIGINT)
        time.sleep(1.5)  # the first stop waits for the database (30 s at most)
        assert victim.poll() is None, "the first stop did not wait for the busy database"
        os.killpg(victim.pid, signal.SIGINT)
        started = time.monotonic()
        _, stderr = victim.communicate(timeout=90)
        took = time.monotonic() - started
    assert took < 5, f"{took:.1f} s: {stderr}"
    assert victim.returncode == 130 and "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].startswith("interrupted again: stopped at once"), stderr
    assert _wait_until_none(lambda: sleeping_compiles(slow), 10)  # the guard kills the compilers as the run dies
    (baseline,) = recorded_trials(db)  # still claimed by this dead tuner: the next run on this host
    assert baseline.state is TrialState.RUNNING, baseline  # hands it back (as the line says)


@pytest.mark.slow
def test_sigterm_on_the_gate_says_only_that_it_was_terminated(tiny: Path, processes: list) -> None:
    """rev50b #6: a cancelled gate said tune's "finished trials are saved; rerun with --resume",
    though a gate has no trials and no --resume."""
    db, slow = f"sqlite:///{tiny.parent / 't.db'}", tiny.parent / "slow"
    tuned = _start(processes, tiny, db, "--budget", "1", "--out", str(tiny.parent / "s.acf.toml"))
    _, stderr = tuned.communicate(timeout=120)
    assert tuned.returncode == 0, stderr
    gate = subprocess.Popen([compileiq_command(), "gate", "s.acf.toml", "--static"], cwd=tiny.parent,
                            env=clean_env(slow_toolchain(slow, 60)), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    processes.append(gate)
    deadline = time.monotonic() + 60
    while not sleeping_compiles(slow) and time.monotonic() < deadline and gate.poll() is None:
        time.sleep(0.1)
    assert sleeping_compiles(slow), "the gate's rebuild never started"
    os.killpg(gate.pid, signal.SIGTERM)
    _, stderr = gate.communicate(timeout=90)
    assert gate.returncode == 143 and "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1] == "terminated (SIGTERM)", stderr
    assert _wait_until_none(lambda: sleeping_compiles(slow), 10)


def _wait_until_none(found: Callable[[], list[int]], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while found() and time.monotonic() < deadline:
        time.sleep(0.1)
    return not found()


@pytest.mark.slow
def test_a_closed_output_pipe_hands_the_claimed_trials_back(tiny: Path, processes: list) -> None:
    db = f"sqlite:///{tiny.parent / 't.db'}"
    args = [compileiq_command(), "tune", str(tiny), "--db", db, "--workers", "local", "--study", "S",
            "--only", ONE_FLAG, "--budget", "4", "--batch-size", "4"]  # fmt: skip
    env = clean_env(slow_toolchain(tiny.parent / "slow", 5))
    # the reader goes away after the line printed just before the baseline is claimed
    pipeline = f"{shlex.join(args)} 2>&1 | head -4; echo \"exit ${{PIPESTATUS[0]}}\""
    done = subprocess.run(["bash", "-c", pipeline], cwd=tiny.parent, env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("study S") and lines[-2].startswith("limits:"), done.stdout + done.stderr
    assert lines[-1] == "exit 1", done.stdout + done.stderr  # click's answer to EPIPE, and no traceback
    trials = recorded_trials(db)
    assert trials and [t for t in trials if t.state is TrialState.RUNNING] == []
    reasons = [t.reason or "" for t in trials if t.state is TrialState.FAILED]
    assert all("output was closed" in reason for reason in reasons), reasons


@pytest.mark.slow
def test_resume_leaves_a_live_tuners_trials_to_it(tiny: Path, processes: list) -> None:
    db = f"sqlite:///{tiny.parent / 't.db'}"
    common = ("--budget", "4", "--batch-size", "4", "--stale-after", "6", "--strategy", "exhaustive")
    live = _start(processes, tiny, db, *common, "--out", str(tiny.parent / "live.acf.toml"),
                  env=slow_toolchain(tiny.parent / "slow", 12))
    held = _wait_for_running(db, live)
    resumed = _start(processes, tiny, db, *common, "--resume", "--out", str(tiny.parent / "resumed.acf.toml"),
                     json_out=False)
    stdout, stderr = resumed.communicate(timeout=120)
    live_out, live_err = live.communicate(timeout=120)
    assert resumed.returncode == 0, stderr
    assert live.returncode == 0, live_err
    assert f"another tuner ({_worker(live)}) is working on this study; its trials are left to it" in stderr
    trials = recorded_trials(db)
    assert len(trials) == 4 and all(t.state is TrialState.COMPLETE for t in trials)
    assert {t.worker for t in trials if t.config_key in {h.config_key for h in held}} == {_worker(live)}
    # nothing was compiled twice: the two tuners' new trials add up to the study
    resumed_new = int(re.search(r"; (\d+) new, ", stdout).group(1))  # type: ignore[union-attr]
    assert json.loads(live_out)["counters"]["new_trials"] + resumed_new == 4, (live_out, stdout)


# -- the ACF says where its evidence comes from ------------------------------------------------


def test_acf_evidence_says_whether_this_run_built_it(tmp_path: Path, tiny: Path) -> None:
    def tune(db: Path, out: str) -> dict:
        options = app.TuneOptions(kernel=tiny, objective="instructions", budget=4, strategy="exhaustive",
                                  workers="local", db=f"sqlite:///{db}", out=tmp_path / out, study="S",
                                  only=(ONE_FLAG,))  # fmt: skip
        app.tune(options, SilentProgress())
        return tomllib.loads((tmp_path / out).read_text())["evidence"]

    built = tune(tmp_path / "a.db", "a.acf.toml")
    assert built["baseline"]["source"] == "compiled by this run"
    assert built["best"]["source"] == "compiled by this run"
    exchange.export_to_file(f"sqlite:///{tmp_path / 'a.db'}", "S", tmp_path / "s.json")
    exchange.import_from_file(f"sqlite:///{tmp_path / 'b.db'}", tmp_path / "s.json")
    imported = tune(tmp_path / "b.db", "b.acf.toml")
    for name in ("baseline", "best"):
        source = imported[name]["source"]
        assert source.startswith(f"recorded in sqlite:///{tmp_path / 'b.db'} by ")
        assert source.endswith("compiled again by this run, which gave the same result")  # issue 24, item 4
        assert imported[name]["worker"] == built[name]["worker"]  # who evaluated it, as imported


# -- the store's side: claims handed back by worker, ages of the claims held -------------------


def test_release_hands_back_only_that_tuners_running_trials(store_url: str) -> None:
    from compileiq.core.records import StudyKey

    store = Store.open(store_url)
    try:
        key = StudyKey("k", "a" * 64, "space", "b" * 64, "13.0", "sm_90", "static", "spills")
        study = store.get_or_create_study(key)
        mine = store.claim_trials(study.id, [("m1", {"x": 1}), ("m2", {"x": 2})], "host:1")
        (theirs,) = store.claim_trials(study.id, [("t1", {"x": 3})], "host:2")
        store.finish_trial(mine[0].id, state=TrialState.COMPLETE, value=1.0, reason=None, metrics={},
                           code_hash="c", compile_seconds=0.1)  # fmt: skip
        claims = store.running_claims(study.id)
        assert set(claims) == {"host:1", "host:2"} and all(0 <= age < 60 for age in claims.values())
        assert store.release_trials(study.id, "host:1", "released: test") == 1
        after = {t.config_key: t for t in store.trials(study.id)}
        assert after["m1"].state is TrialState.COMPLETE  # finished work is never touched
        assert after["m2"].state is TrialState.FAILED and after["m2"].retryable and after["m2"].reason == "released: test"
        assert after["t1"].state is TrialState.RUNNING and after[theirs.config_key].worker == "host:2"
        assert set(store.running_claims(study.id)) == {"host:2"}
    finally:
        store.close()


@pytest.mark.parametrize(("toml", "says"), [
    ("[defines]\nX = nan\n", "defines.X: nan is not a finite number"),
    ("[defines]\nX = -inf\n", "defines.X: -inf is not a finite number"),
    ("[defines]\nX = 1e400\n", "defines.X: inf is not a finite number"),
    ("[defines]\nX = 18446744073709551616\n", "defines.X: 18446744073709551616 does not fit in 64 bits"),
    ("[tune.defines]\nX = [1, 99999999999999999999]\n", "tune.defines.X: 99999999999999999999 does not fit in 64 bits"),
    ("[tune.defines]\nX = [1, -9223372036854775809]\n", "tune.defines.X: -9223372036854775809 does not fit in 64 bits"),
], ids=["nan", "minus-inf", "inf-from-1e400", "define-past-64-bits", "tuned-past-64-bits", "tuned-below-64-bits"])
def test_a_define_no_c_constant_can_hold_is_refused(tmp_path: Path, toml: str, says: str) -> None:
    """nan, inf and 1e400 became -DX=nan / -DX=inf (an identifier, not a number) in the ACF, which
    the gate passed; an integer past 64 bits reached nvcc as a constant no type holds."""
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    (tmp_path / "tune.toml").write_text(toml)
    done = run_cli(["space", "k.cu"], cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr_lines) == 1 and "Traceback" not in done.output, done.describe()
    assert done.stderr_lines[0].startswith(f"error: {tmp_path / 'tune.toml'}: {says}"), done.describe()


def test_a_finite_float_define_and_a_64_bit_integer_are_accepted(tmp_path: Path) -> None:
    """Python writes 1e16 as 1e+16, a C floating constant of the same value: kept as is."""
    (tmp_path / "k.cu").write_text(TINY_KERNEL)
    (tmp_path / "tune.toml").write_text("[defines]\nX = 1e16\nY = 0.5\nZ = 18446744073709551615\n")
    done = run_cli(["space", "k.cu", "--json"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
