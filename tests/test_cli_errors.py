"""Every bad input to the real `compileiq` command: one line on stderr, a non-zero exit, no traceback.

The commands run as subprocesses (the console script, a clean environment, no colour). Each one
pays ~2 s of interpreter start-up, so the module starts them all at once on a small thread pool
and each test waits for its own result.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers import CliResult, run_cli

from compileiq.core.records import TrialState
from compileiq.store import Store

REPO = Path(__file__).resolve().parent.parent
REDUCTION = REPO / "kernels" / "reduction" / "reduction.cu"
SPACES = REPO / "search_spaces"
PASSWORD = "s3cr3tpw"
PG_URL = f"postgresql+psycopg://user:{PASSWORD}@127.0.0.1:1/db"
BAD_SQLITE = "sqlite:////proc/nope/x.db"

BROKEN_KERNEL = """\
__global__ void broken(float* out) {
    out[threadIdx.x] = ;   // syntax error
}
"""
PLAIN_CPP = "int main() { return 0; }\n"


@dataclass(frozen=True)
class Case:
    command: str  # split like a shell would; {ws} is the workspace, {k} the reduction kernel
    code: int = 1  # 1: a domain error; 2: bad usage or input
    says: tuple[str, ...] = ()  # each must appear (case-insensitive) in the error line
    env: dict[str, str] = field(default_factory=dict)
    progress_allowed: bool = False  # progress lines may precede the error line


# fmt: off
T = "tune --workers local --json --db sqlite:///{ws}/tune.db"  # tune, fast and quiet
RAY_DB = "--db sqlite:///{ws}/ray.db"
SPACE = "COMPILEIQ_SEARCH_SPACES"

CASES: dict[str, Case] = {
    # the kernel file
    "missing-cu": Case(f"{T} {{ws}}/nope.cu", 2, ("not found", "nope.cu")),
    "python-file": Case(f"{T} {{ws}}/script.py", 2, ("script.py", "not a CUDA source")),
    "cu-without-global": Case(f"{T} {{ws}}/plain/plain.cu", 1, ("plain.cu", "no kernel (__global__ function)")),
    "compile-error-local": Case(
        "tune {ws}/broken/broken.cu --workers local --json --budget 2 --db sqlite:///{ws}/failed.db",
        1, ("broken.cu", "does not build with default settings", "compile_error: broken.cu(2): error"),
    ),  # the file named as the user has it, not in the scratch folder the compiler ran in
    "compile-error-ray": Case(  # default (Ray) workers, human output: progress lines, then the error
        "tune {ws}/broken/broken.cu --budget 2 --db sqlite:///{ws}/failed-ray.db",
        1, ("broken.cu", "does not build with default settings", "compile_error: broken.cu(2): error"),
        progress_allowed=True,
    ),
    # tune.toml
    "toml-syntax": Case(f"{T} {{ws}}/syntax/reduction.cu", 2, ("tune.toml", "malformed TOML")),
    "toml-unknown-key": Case(f"{T} {{ws}}/unknown/reduction.cu", 2, ("tune.toml", "colour", "unknown key")),
    "toml-define-space": Case(  # a space split the flag where a build runs nvcc $(compileiq flags ...)
        f"{T} {{ws}}/definespace/reduction.cu", 2, ("tune.toml", "contains ' '"),
    ),
    "toml-macro-newline": Case(  # the reason used to be cut at the key's newline
        f"{T} {{ws}}/macronewline/reduction.cu", 2, ("tune.toml: defines.A\\x0aB: ", "not a valid macro name"),
    ),
    "toml-flag-and-tuned-macro": Case(  # nvcc_flags' -DBLOCK=64 beside a tuned BLOCK: which one won was nvcc's
        f"{T} {{ws}}/flagmacro/reduction.cu", 2, ("tune.toml: tune.defines.BLOCK: also set by nvcc_flags",),
    ),
    "toml-smem-expression": Case(  # it used to say only "must be an integer"
        f"{T} {{ws}}/smemexpr/reduction.cu", 2, ("tune.toml: dynamic_smem: ", "goes in a [launch.KERNEL] table"),
    ),
    "toml-wrong-type": Case(f"{T} {{ws}}/wrongtype/reduction.cu", 2, ("tune.toml", "block_size")),
    "toml-launch-typo": Case(  # a [launch.NAME] that names no kernel: its kernel would be scored at the default launch
        f"{T} {{ws}}/launchtypo/reduction.cu --budget 2", 2, ("reduction.cu", "[launch.reduce_summ]", "found: reduce_sum"),
    ),  # tune.toml is at fault, not the kernel: bad input (exit 2), not "does not build"
    "toml-entries-typo": Case(  # a C++ kernel's compiled name is mangled: the one tune.toml can give comes first
        f"{T} {{ws}}/entrytypo/hotspot.cu --budget 2", 2,
        ("hotspot.cu: tune.toml entries: no entry matches ['calc_temp']",
         "found: calculate_temp"),
    ),
    "toml-entries-one-typo": Case(  # one good name beside the typo: the typo's kernel went unscored, unnoticed
        f"{T} {{ws}}/entrytypo2/many.cu --budget 2", 2,
        ("many.cu: tune.toml entries 'scale_kernel' names no kernel of the build", "found: "),
    ),
    "toml-entries-many": Case(  # whole names, overloads told apart by their compiled names, then how many more
        f"{T} {{ws}}/manykernels/many.cu --budget 2", 2,
        ("no entry matches ['scale_kernel']", ("found: scale (_Z5scalePf), scale (_Z5scalePi), "
                                                "a_kernel_with_a_rather_long_name_11, "), "_name_07 and 7 more"),
    ),
    # search spaces
    "space-syntax": Case(f"{T} {{k}}", 2, ("ptxas-13.0.toml", "malformed TOML"), {SPACE: "{ws}/space-syntax"}),
    "space-missing-key": Case(f"{T} {{k}}", 2, ("ptxas-13.0.toml", "render"), {SPACE: "{ws}/space-missing-key"}),
    "space-none": Case(f"{T} {{k}}", 2, ("no search space",), {SPACE: "{ws}/space-empty"}),
    # a search space is data: one that renders -ccbin ran a program of its choosing in tune and gate
    "space-runs-a-program": Case(f"{T} {{k}}", 2, ("nvcc-13.0.toml", "'-ccbin=/tmp/evilcc'", "never searched"),
                                 {SPACE: "{ws}/space-ccbin"}),
    "space-huge-int": Case("space", 2, ("ptxas-13.0.toml", "an int parameter has 1 to 65536 values"),
                           {SPACE: "{ws}/space-huge"}),
    "space-for-flags": Case("flags {ws}/good.acf.toml", 2, ("ptxas-13.0.toml",), {SPACE: "{ws}/space-missing-key"}),
    # tune options
    "objective-unknown": Case(f"{T} {{k}} --objective speed", 2, ("unknown objective", "speed")),
    "objective-time": Case(f"{T} {{k}} --objective time", 2, ("needs a GPU", "instructions", "--ray-address")),
    "budget-negative": Case(f"{T} {{k}} --budget -3", 2, ("--budget", "-3")),
    "budget-zero": Case(f"{T} {{k}} --budget 0", 2, ("--budget",)),
    "metric-regex-static": Case(f"{T} {{k}} --metric-regex x", 2, ("--metric-regex", "--objective time")),
    "strategy-unknown": Case(f"{T} {{k}} --strategy anneal", 2, ("strategy", "anneal")),
    "workers-unknown": Case(f"{T} {{k}} --workers mpi", 2, ("mpi",)),
    # ACFs
    "acf-missing": Case("flags {ws}/nope.acf.toml", 2, ("not found",)),
    "acf-text-garbage": Case("flags {ws}/garbage.acf.toml", 2, ("garbage.acf.toml", "not a readable ACF")),
    "acf-random-bytes": Case("flags {ws}/random.acf.toml", 2, ("random.acf.toml", "not a readable ACF")),
    "acf-missing-tables": Case("flags {ws}/tables.acf.toml", 2, ("tables.acf.toml", "kernel")),
    "acf-format-99": Case("flags {ws}/format.acf.toml", 2, ("unsupported ACF format",)),
    "acf-is-a-tune-toml": Case("flags {ws}/tune.toml", 2, ("tune.toml is not an ACF (no format key)",)),
    "gate-a-tune-toml": Case("gate {ws}/tune.toml --static", 2, ("tune.toml is not an ACF (no format key)",)),
    "acf-Xcompiler": Case("flags {ws}/xcompiler.acf.toml", 2, ("-Xcompiler=-fPIC", "not in search space")),
    "acf-compiler-bindir": Case("flags {ws}/bindir.acf.toml", 2, ("--compiler-bindir=/tmp", "not in search space")),
    "acf-output": Case("flags {ws}/output.acf.toml", 2, ("'-o'", "not in search space")),
    "acf-run": Case("flags {ws}/run.acf.toml", 2, ("--run", "not in search space")),
    "acf-argv-vs-controls": Case("flags {ws}/mismatch.acf.toml", 2, ("does not match its controls",)),
    "acf-unknown-control": Case("flags {ws}/control.acf.toml", 2, ("no_such_flag",)),
    "acf-define-injection": Case("flags {ws}/define.acf.toml", 2, ("not an allowed define",)),
    "acf-bad-arch": Case("flags {ws}/arch.acf.toml", 2, ("bad arch",)),
    "flags-bad-stage": Case("flags {ws}/good.acf.toml --stage link", 2, ("--stage",)),
    # databases
    "pg-show": Case(f"show --db {PG_URL}", 1, ("127.0.0.1",)),
    "pg-show-env": Case("show", 1, ("127.0.0.1",), {"COMPILEIQ_DB": PG_URL}),
    "pg-tune": Case(f"tune {{k}} --workers local --db {PG_URL}", 1, ("127.0.0.1",)),
    "pg-upgrade": Case(f"db upgrade --db {PG_URL}", 1, ("127.0.0.1",)),
    "sqlite-missing-show": Case(f"show --db {BAD_SQLITE}", 2, ("no database at /proc/nope/x.db",)),
    # a command that only reads creates no database where a path is mistyped (it printed an empty list)
    "show-mistyped-db": Case("show --db sqlite:///{ws}/typo_dir/a.db", 2, ("no database at", "typo_dir/a.db")),
    "show-study-mistyped-db": Case("show s --json --db sqlite:///{ws}/typo_dir/a.db", 2, ("no database at",)),
    "report-mistyped-db": Case("report s -o {ws}/typo.html --db sqlite:///{ws}/typo_dir/a.db", 2, ("no database at",)),
    "export-mistyped-db": Case("db export s -o {ws}/typo.json --db sqlite:///{ws}/typo_dir/a.db", 2,
                               ("no database at",)),
    "sqlite-uncreatable-tune": Case(f"tune {{k}} --workers local --db {BAD_SQLITE}", 1, ("/proc/nope",)),
    "db-not-a-url": Case("show --db 'not a url'", 2, ("not a database URL",)),
    "show-unknown-study": Case("show nosuchstudy", 2, ("nosuchstudy",)),  # bad input (user50 #4)  # the default store/ the good tune made
    # Ray
    "ray-unreachable": Case(f"tune {{k}} --ray-address 127.0.0.1:1 {RAY_DB}", 1, ("127.0.0.1:1",)),
    "ray-malformed": Case(f"tune {{k}} --ray-address nohostport {RAY_DB}", 2, ("HOST:PORT", "nohostport")),
    "ray-address-with-local": Case(
        f"tune {{k}} --workers local --ray-address 127.0.0.1:1 {RAY_DB}", 2, ("--workers ray",)
    ),
    # typer usage errors
    "usage-unknown-option": Case("tune {k} --bogus", 2, ("--bogus",)),
    "usage-bad-int": Case("tune {k} --budget many", 2, ("--budget",)),
    "usage-missing-argument": Case("flags", 2, ("FILE",)),
    "usage-unknown-command": Case("frobnicate", 2, ("frobnicate",)),
}
# fmt: on


# -- the workspace ---------------------------------------------------------------------------


def _copy_kernel(ws: Path, folder: str, tune_toml: str) -> None:
    (ws / folder).mkdir()
    shutil.copy(REDUCTION, ws / folder / "reduction.cu")
    (ws / folder / "tune.toml").write_text(tune_toml)


def _space_copy(ws: Path, name: str, appended: str, nvcc: str = "") -> None:
    shutil.copytree(SPACES, ws / name)
    with (ws / name / "ptxas-13.0.toml").open("a") as stream:
        stream.write(appended)
    with (ws / name / "nvcc-13.0.toml").open("a") as stream:
        stream.write(nvcc)


def _write_inputs(ws: Path) -> None:
    (ws / "script.py").write_text("print('hello')\n")
    (ws / "plain").mkdir()
    (ws / "plain" / "plain.cu").write_text(PLAIN_CPP)
    (ws / "broken").mkdir()
    (ws / "broken" / "broken.cu").write_text(BROKEN_KERNEL)
    _copy_kernel(ws, "syntax", 'arch = "sm_90\n')
    _copy_kernel(ws, "unknown", 'colour = "blue"\n')
    _copy_kernel(ws, "wrongtype", "block_size = true\n")
    _copy_kernel(ws, "flagmacro", 'nvcc_flags = ["-DBLOCK=64"]\n[tune.defines]\nBLOCK = [256, 128]\n')
    _copy_kernel(ws, "smemexpr", 'dynamic_smem = "BLOCK*sizeof(float)"\n')
    _copy_kernel(ws, "macronewline", '[defines]\n"A\\nB" = 1\n')
    _copy_kernel(ws, "definespace", '[defines]\nX = "1.o -ccbin=/tmp/evilcc -DY=2"\n')
    harness = json.dumps(str(REPO / "compileiq" / "include"))
    _copy_kernel(ws, "launchtypo", f'include_dirs = [{harness}]\n[launch.reduce_summ]\nblock_size = 128\n')
    (ws / "entrytypo").mkdir()  # Rodinia's hotspot (tests/corpus_harm), a C++ kernel with a host main
    shutil.copy(Path(__file__).parent / "corpus_harm" / "hotspot.cu", ws / "entrytypo" / "hotspot.cu")
    (ws / "entrytypo" / "tune.toml").write_text('entries = ["calc_temp"]\n')
    (ws / "manykernels").mkdir()
    (ws / "manykernels" / "many.cu").write_text(  # the compiled module lists them last to first
        "".join(f'extern "C" __global__ void a_kernel_with_a_rather_long_name_{i:02d}(float* x) {{ x[{i}] = 0; }}\n'
                for i in range(12))
        + "__global__ void scale(int* x) { x[threadIdx.x] *= 2; }\n__global__ void scale(float* x) { x[threadIdx.x] *= 2; }\n")
    (ws / "manykernels" / "tune.toml").write_text('entries = ["scale_kernel"]\n')
    shutil.copytree(ws / "manykernels", ws / "entrytypo2")
    (ws / "entrytypo2" / "tune.toml").write_text('entries = ["scale", "scale_kernel"]\n')
    _space_copy(ws, "space-syntax", "\njunk = [\n")
    _space_copy(ws, "space-ccbin", "", nvcc='\n[[parameter]]\nname = "nvcc.evil"\nkind = "flag"\ndefault = false\n'
                'render = "-ccbin=/tmp/evilcc"\nrisk = "safe"\nhelp = "x"\n')
    _space_copy(ws, "space-huge", '\n[[parameter]]\nname = "ptxas.huge"\nkind = "int"\nlow = 0\n'
                'high = 1000000000000\ndefault = 0\nrender = "--huge={}"\nrisk = "safe"\nhelp = "x"\n')
    _space_copy(ws, "space-missing-key", '\n[[parameter]]\nname = "x"\nkind = "flag"\n')
    (ws / "space-empty").mkdir()
    (ws / "garbage.acf.toml").write_text("this is not TOML at all\n")
    (ws / "random.acf.toml").write_bytes(bytes(range(256)) * 4)
    (ws / "tables.acf.toml").write_text("format = 1\n[objective]\nname = 'static'\n")
    (ws / "tune.toml").write_text('include_dirs = ["../Common"]\n')  # given instead of the ACF


def _set_argv(good: str, argv: list[str]) -> str:
    """The good ACF with its args.argv replaced (tomli_w writes it as a multi-line array)."""
    replaced, count = re.subn(r"(?ms)^argv = \[.*?^\]", "argv = " + json.dumps(argv), good)
    assert count == 1, good
    return replaced


def _write_acf_variants(ws: Path) -> None:
    good = (ws / "good.acf.toml").read_text()
    argv = re.search(r'"(-DBLOCK=\d+)"', good)
    assert argv is not None, good
    define = argv.group(1)
    variants = {
        "format": good.replace("format = 1", "format = 99", 1),
        "xcompiler": _set_argv(good, [define, "-Xcompiler=-fPIC"]),
        "bindir": _set_argv(good, [define, "--compiler-bindir=/tmp"]),
        "output": _set_argv(good, [define, "-o", "x"]),
        "run": _set_argv(good, [define, "--run"]),
        "mismatch": _set_argv(good, [define, "-Xptxas=-O2"]),
        "control": good.replace("[controls]\n", "[controls]\nno_such_flag = true\n", 1),
        "define": _set_argv(good, ["-DBLOCK=256;rm"]),
        "arch": good.replace('arch = "sm_90"', 'arch = "sm_90 -o x"', 1),
    }
    for name, text in variants.items():
        assert text != good, name
        (ws / f"{name}.acf.toml").write_text(text)


@dataclass
class Workspace:
    path: Path
    good_acf: CliResult
    results: dict[str, Future[CliResult]]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    ws = tmp_path_factory.mktemp("cli-errors")
    _write_inputs(ws)
    good = run_cli(
        [
            "tune",
            str(REDUCTION),
            "--objective",
            "instructions",
            "--budget",
            "3",
            "--workers",
            "local",
            "--out",
            str(ws / "good.acf.toml"),
        ],
        cwd=ws,
    )
    assert good.returncode == 0, good.describe()
    _write_acf_variants(ws)
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = {name: pool.submit(_run_case, ws, case) for name, case in CASES.items()}
        yield Workspace(ws, good, results)


def _run_case(ws: Path, case: Case) -> CliResult:
    def fill(text: str) -> str:
        return text.replace("{ws}", str(ws)).replace("{k}", str(REDUCTION))

    args = [fill(a) for a in shlex.split(case.command)]
    return run_cli(args, cwd=ws, env={k: fill(v) for k, v in case.env.items()})


# -- the contract ----------------------------------------------------------------------------


def assert_one_line_error(
    result: CliResult, code: int | None = None, progress_allowed: bool = False
) -> str:
    """The error contract; returns the error line."""
    context = result.describe()
    assert "Traceback" not in result.output, context
    assert result.returncode != 0, context
    if code is not None:
        assert result.returncode == code, context
    lines = result.stderr_lines
    assert lines, context
    if progress_allowed:
        assert [line for line in lines if line.startswith("error:")] == [lines[-1]], context
    else:
        assert len(lines) == 1, context
    assert lines[-1].startswith("error: "), context
    return lines[-1]


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line(workspace: Workspace, name: str) -> None:
    case = CASES[name]
    result = workspace.results[name].result()
    line = assert_one_line_error(result, case.code, case.progress_allowed)
    for text in case.says:
        assert text.lower() in line.lower(), result.describe()
    assert PASSWORD not in result.output, result.describe()


def test_a_read_only_command_creates_no_database_nor_its_folder(workspace: Workspace) -> None:
    for name in ("show-mistyped-db", "show-study-mistyped-db", "report-mistyped-db", "export-mistyped-db"):
        workspace.results[name].result()
    left = [p.name for p in workspace.path.iterdir() if p.name.startswith("typo")]
    assert left == [], left
    assert "no database at" in workspace.results["show-mistyped-db"].result().stderr
    assert str(workspace.path) in workspace.results["show-mistyped-db"].result().stderr


def _failed_trials(url: str) -> list[tuple[str, TrialState, str]]:
    store = Store.open(url)
    try:
        return [
            (s.name, t.state, t.reason or "")
            for s in store.list_studies()
            for t in store.trials(s.id)
        ]
    finally:
        store.close()


@pytest.mark.parametrize(
    "name, db", [("compile-error-local", "failed.db"), ("compile-error-ray", "failed-ray.db")]
)
def test_compile_error_is_recorded(workspace: Workspace, name: str, db: str) -> None:
    """The failed baseline is data: the study and its failed trials are in the database."""
    assert_one_line_error(workspace.results[name].result(), 1, CASES[name].progress_allowed)
    url = f"sqlite:///{workspace.path / db}"
    shown = run_cli(["show", "--json", "--db", url], cwd=workspace.path)
    assert shown.returncode == 0, shown.describe()
    studies = json.loads(shown.stdout)
    assert [(s["kernel"], s["best"]) for s in studies] == [("broken", None)]
    assert studies[0]["trials"] >= 1
    trials = _failed_trials(url)
    assert trials and all(state is TrialState.FAILED for _, state, _ in trials)
    assert all("expected an expression" in reason for _, _, reason in trials), trials


@pytest.mark.parametrize("name", ["ray-unreachable", "ray-malformed", "ray-address-with-local"])
def test_bad_ray_address_leaves_no_trial_behind(workspace: Workspace, name: str) -> None:
    """A bad --ray-address is refused before any trial is claimed (none is left RUNNING)."""
    assert_one_line_error(workspace.results[name].result())
    db = workspace.path / "ray.db"
    assert not db.exists() or _failed_trials(f"sqlite:///{db}") == []


def test_no_arguments_prints_usage_without_traceback(tmp_path: Path) -> None:
    result = run_cli([], cwd=tmp_path)
    assert result.returncode == 2, result.describe()
    assert "Usage" in result.output and "Traceback" not in result.output, result.describe()


def test_flags_on_the_good_acf(workspace: Workspace) -> None:
    """Positive control: the ACF the tuner wrote is accepted."""
    result = run_cli(["flags", str(workspace.path / "good.acf.toml")], cwd=workspace.path)
    assert result.returncode == 0, result.describe()
    # the kernel includes the harness header: one note names the -I that only --all prints
    assert len(result.stderr_lines) == 1 and result.stderr_lines[0].startswith("note: "), result.describe()
    assert result.stderr_lines[0].endswith("--all adds them"), result.describe()
    args = result.stdout.split()
    assert args[0] == "-arch=sm_90" and "-DBLOCK=256" in args, result.describe()


@pytest.mark.parametrize(
    "stage, check",
    [
        ("frontend", lambda args: args[:1] == ["-arch=sm_90"]),
        ("ptxas", lambda args: args[:1] == ["-arch=sm_90"] and not any(a.startswith("-D") for a in args)),
    ],
)
def test_flags_stages(workspace: Workspace, stage: str, check: Callable[[list[str]], bool]) -> None:
    result = run_cli(
        ["flags", str(workspace.path / "good.acf.toml"), "--stage", stage], cwd=workspace.path
    )
    assert result.returncode == 0 and check(result.stdout.split()), result.describe()


def test_a_study_that_does_not_exist_is_bad_input(tmp_path: Path) -> None:
    """A mistyped study name is bad input (exit 2, as a missing file or database), not a domain error
    (exit 1): a CI script tells "typed it wrong" from "the database failed" by it (user50, fault 4)."""
    url = f"sqlite:///{tmp_path / 't.db'}"
    Store.open(url)  # a database with no study
    for args in (["show", "nosuch"], ["report", "nosuch", "-o", "x.html"],
                 ["report", "--compare", "nosuch", "other", "-o", "c.md"], ["db", "export", "nosuch", "-o", "x.json"]):
        result = run_cli([*args, "--db", url], cwd=tmp_path)
        assert "no study named 'nosuch'" in assert_one_line_error(result, 2), result.describe()
