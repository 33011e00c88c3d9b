"""tune.toml's [tune] restrictions: parsed and checked when the spec loads (one-line errors,
hostile text refused by the safe evaluator), counted by `compileiq space`, applied before any
build (searchers propose only valid configurations), recorded in the ACF and the study identity.
The convolution space of the FAIR Benchmark Hub (T1 format) is the fixture: its Conditions as
restrictions must allow exactly the configurations its brute-forced cache holds."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest

from compileiq import app
from compileiq.core.space import Config
from compileiq.evaluate.replay import tune_toml_of_t1
from compileiq.search.encoding import enumerate_space
from compileiq.search.searcher import Observation, Searcher, SearchSettings
from compileiq.source.kernel import load_spec, study_identity
from compileiq.source.spec import KernelError, SourceBundle
from tests.helpers import run_cli

DATA = Path("/work/shared/data/runtime-landscapes")
T1 = DATA / "convolution_milo.json"
CACHE = DATA / "convolution_A100.json.gz"
needs_data = pytest.mark.skipif(not T1.is_file() or not CACHE.is_file(), reason="landscape data not here")
KERNEL = "__global__ void k(float* y) { y[threadIdx.x] = BX * BY; }\n"


def _cache() -> dict:
    with gzip.open(CACHE) as handle:
        return json.loads(handle.read())


def _kernel(folder: Path, toml: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tune.toml").write_text(toml)
    (folder / "k.cu").write_text(KERNEL)
    return folder / "k.cu"


@pytest.fixture(scope="module")
def convolution(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not T1.is_file():
        pytest.skip("landscape data not here")
    return _kernel(tmp_path_factory.mktemp("conv"), tune_toml_of_t1(json.loads(T1.read_text())))


def _cache_keys() -> set[tuple[int, ...]]:
    data = _cache()
    return {tuple(int(v) for v in key.split(",")) for key in data["cache"]}


def _macros(space) -> list[str]:
    return [p.name for p in space.parameters if p.name.startswith("define.")]


@needs_data
def test_the_convolution_conditions_allow_exactly_the_recorded_configurations(convolution: Path) -> None:
    space, _ = app.full_space(convolution)
    names = _cache()["tune_params_keys"]
    assert space.macro_combinations() == (4362, 10240)
    macros = space.select(only=_macros(space))
    allowed = {tuple(c[f"define.{n}"] for n in names) for c in enumerate_space(macros)}
    assert allowed == _cache_keys()  # the same 4,362 configurations, not only as many


SPACES = Path(__file__).parent.parent / "benchmarks" / "spaces"


@pytest.mark.parametrize(("name", "allowed_count", "total"), [
    ("clblast_gemm_T1.json", 17956, 82944),
    ("convolution_kt_T1.json", 7520, 18432),
])
def test_a_benchmark_spaces_conditions_allow_what_python_arithmetic_allows(
        tmp_path: Path, name: str, allowed_count: int, total: int) -> None:
    """The T1 spaces under benchmarks/spaces: CLBlast's GEMM (seven divisibility Conditions with `%`
    and `/` over 15 macros; its brute-forced A100 cache holds the same 17,956) and Kernel Tuner's
    convolution example (threads per block between 64 and 1,024, fewer than 30 outputs per thread;
    docs/benchmarks.md, (h2) and (h3)). The safe evaluator allows the same combinations as Python's
    own arithmetic on these values (every division here is exact), and the defaults are among them."""
    t1 = json.loads((SPACES / name).read_text())
    kernel = _kernel(tmp_path / "space", tune_toml_of_t1(t1))
    space, _ = app.full_space(kernel)
    assert space.macro_combinations() == (allowed_count, total)
    parameters = t1["ConfigurationSpace"]["TuningParameters"]
    names = [p["Name"] for p in parameters]
    conditions = [c["Expression"] for c in t1["ConfigurationSpace"]["Conditions"]]
    expected = {values for values in itertools.product(*(p["Values"] for p in parameters))
                if all(eval(c, {}, dict(zip(names, values))) for c in conditions)}  # the test's own constants
    allowed = {tuple(c[f"define.{n}"] for n in names) for c in enumerate_space(space.select(only=_macros(space)))}
    assert allowed == expected and len(expected) == allowed_count
    assert tuple(p["Default"] for p in parameters) in allowed


@needs_data
def test_space_prints_the_allowed_count(convolution: Path) -> None:
    run = run_cli(["space", str(convolution)], convolution.parent, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "4,362 of 10,240 macro combinations satisfy tune.toml's 4 restrictions" in " ".join(run.stdout.split())


@needs_data
@pytest.mark.parametrize("strategy", ["random", "exhaustive", "bayes"])
def test_searchers_propose_only_allowed_configurations(convolution: Path, strategy: str) -> None:
    space, _ = app.full_space(convolution)
    macros = space.select(only=_macros(space))
    searcher = Searcher(macros, SearchSettings(strategy, seed=3, initial_points=8))
    proposed: list[Config] = []
    for batch in range(6):
        configs = searcher.ask(8)
        # an invalid proposal is replaced, not left as a hole in the batch (bayes's first batch over
        # macros alone is its centre, corners and middles, each the nearest allowed configuration)
        assert len(configs) == 8
        proposed += configs
        searcher.tell([Observation(c, float(hash(c.key) % 97)) for c in configs])
    assert proposed and all(macros.allows(c) for c in proposed)
    everything = space.select(only=[*_macros(space), "ptxas.opt_level"])  # large: the pool is sampled
    searcher = Searcher(everything, SearchSettings(strategy, seed=1, initial_points=8)) if strategy != "exhaustive" else None
    if searcher is not None:
        for batch in range(3):
            configs = searcher.ask(8)
            assert len(configs) == 8 or strategy == "bayes" and batch == 0 and configs
            assert all(everything.allows(c) for c in configs)
            searcher.tell([Observation(c, float(hash(c.key) % 89)) for c in configs])


@needs_data
def test_exhaustive_enumerates_only_the_allowed(convolution: Path) -> None:
    space, _ = app.full_space(convolution)
    macros = space.select(only=_macros(space))
    searcher = Searcher(macros, SearchSettings("exhaustive"))
    seen = searcher.ask(20000)
    assert len(seen) == 4362 and all(macros.allows(c) for c in seen)


HOSTILE = [
    ("__import__('os').system('touch /tmp/pwned')", "only integers"),
    ("BX.__class__", "only integers"),
    ("(lambda: 1)()", "only integers"),
    ("BX ** 9 ** 9 ** 9 > 1", "larger than 2**256"),
    ("9 ** 999 > BX", "larger than 2**256"),
    ("-" * 200 + "BX > 0", "nested more than"),
    ("1 + " * 300 + "BX > 0", "longer than"),
    ("(" * 40 + "BX" + ")" * 40 + " + " + "(BX + (" * 40 + "1" + "))" * 40 + " > 0", "nested"),
    ("BX >", "not an arithmetic expression"),
    ("NOPE < 4", "'NOPE', not a macro of tune.toml"),
    ("BX in [1, 2]", "only == != < <= > >= compare"),
    ("BX * BY > 4096", "the defaults (each tuned macro's first value) break 'BX * BY > 4096'"),
    # said "break" too, where the defaults make them no number at all (a red team's)
    ("BX ** BY ** BX ** BY ** 99 > 0", "cannot evaluate 'BX ** BY ** BX ** BY ** 99 > 0': 'BY ** 99': a value larger"),
    ("BX % (BY - 4) == 0", "cannot evaluate 'BX % (BY - 4) == 0': 'BX % (BY - 4)': division by zero"),
    # Python reads identifiers NFKC-normalised: fullwidth 'ＢX' was the macro BX, recorded as 'ＢX' (red team 49)
    ("\uff22X + BY < 1000", "holds '\uff22' (U+FF22), not ASCII: macro names are ASCII"),
    ("BX * B\u0443 > 0", "holds '\u0443' (U+0443), not ASCII"),  # a Cyrillic 'y' in BY
    ("\U0001d401X > 0", "(U+1D401), not ASCII"),  # mathematical bold B
]


@pytest.mark.parametrize(("text", "problem"), HOSTILE)
def test_hostile_restrictions_are_one_line_errors(tmp_path: Path, text: str, problem: str) -> None:
    toml = f"[tune]\nrestrictions = [{json.dumps(text, ensure_ascii=False)}]\n[tune.defines]\nBX = [32, 64]\nBY = [4, 8]\n"
    kernel = _kernel(tmp_path / "k", toml)
    with pytest.raises(KernelError) as caught:
        load_spec(kernel)
    message = str(caught.value)
    assert "\n" not in message and "tune.toml: tune.restrictions" in message and problem in message
    run = run_cli(["space", str(kernel)], tmp_path, timeout=120)
    assert run.returncode != 0 and "Traceback" not in run.stderr and "tune.restrictions" in run.stderr
    assert not Path("/tmp/pwned").exists()


def test_a_launch_expression_with_a_lookalike_macro_name_is_one_line(tmp_path: Path) -> None:
    """`[launch.k] block_size = "ＢX*BY"` read as BX*BY; `space` listed it (exit 0)."""
    kernel = _kernel(tmp_path / "k", "[tune.defines]\nBX = [32, 64]\nBY = [1, 4]\n[launch.k]\nblock_size = \"\uff22X*BY\"\n")
    run = run_cli(["space", str(kernel)], tmp_path, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.output, run.describe()
    line = (f"error: {kernel.parent}/tune.toml: launch.k.block_size: '\uff22X*BY' holds '\uff22' (U+FF22), not ASCII: "
            "macro names are ASCII letters, digits and _")
    assert run.stderr_lines == [line], run.describe()


def test_a_fixed_macro_with_two_minus_signs_is_no_number_and_no_traceback(tmp_path: Path) -> None:
    """A reviewer's `[defines] BK = "--8"` beside a restriction reading BK: `space` printed a
    traceback (`"--8".lstrip("-")` is digits, `int("--8")` raises). It is no integer literal: the
    restriction reads it as the expression it is (`--8`, 8), as it reads `BK = "2*4"`."""
    kernel = _kernel(tmp_path / "k", '[defines]\nBK = "--8"\n[tune]\nrestrictions = ["BX * BK <= 256"]\n'
                                     "[tune.defines]\nBX = [32, 64]\n")
    run = run_cli(["space", str(kernel)], tmp_path, timeout=120)
    assert run.returncode == 0 and "Traceback" not in run.output, run.describe()
    assert "1 of 2 macro combinations satisfy" in run.stdout, run.describe()


@pytest.mark.parametrize("value", ["'BX < 4'", "[1]", "[\"\"]"])
def test_restrictions_must_be_a_list_of_conditions(tmp_path: Path, value: str) -> None:
    kernel = _kernel(tmp_path / "k", f"[tune]\nrestrictions = {value}\n[tune.defines]\nBX = [32, 64]\nBY = [4]\n")
    with pytest.raises(KernelError, match="tune.restrictions: must be a list of non-empty strings"):
        load_spec(kernel)


def test_restrictions_read_fixed_macros_and_are_part_of_the_study(tmp_path: Path) -> None:
    toml = "[defines]\nLIMIT = 128\n[tune.defines]\nBX = [32, 64, 128]\nBY = [1, 2, 4]\n"
    plain = load_spec(_kernel(tmp_path / "a", toml))
    restricted = load_spec(_kernel(tmp_path / "b", "[tune]\nrestrictions = ['32 <= BX*BY <= LIMIT']\n" + toml))
    assert restricted.restrictions == ("32 <= BX*BY <= LIMIT",)
    bundle = SourceBundle("k.cu", (), (), "ab" * 32)
    assert study_identity(plain, bundle) != study_identity(restricted, bundle)
    assert "restrictions" not in plain.settings()  # studies without restrictions keep their identity
    space, _ = app.full_space(restricted.source)
    assert space.macro_combinations() == (6, 9)  # BX*BY in 32..128


def test_the_acf_records_the_restrictions_and_refuses_controls_that_break_them(tmp_path: Path) -> None:
    from compileiq.results import acf

    kernel = _kernel(tmp_path / "k", "[tune]\nrestrictions = ['BX * BY <= 128']\n[tune.defines]\nBX = [32, 64]\nBY = [1, 4]\n")
    space, spec = app.full_space(kernel)
    assert spec is not None
    chosen = space.default_config().with_values({"define.BX": 32, "define.BY": 4})
    content = acf.AcfContent("k", "k.cu", "k.cu", "ab" * 32, "sm_90", "13.0", "13.0", "b", space, chosen, (),
                             {"name": "registers"}, {}, {}, restrictions=spec.restrictions)
    path = acf.write(tmp_path / "k.acf.toml", content)
    assert acf.read(path).restrictions == ("BX * BY <= 128",)
    text = path.read_text()
    for forged, problem in [("BX * BY <= 64", "the controls break 'BX * BY <= 64'"),
                            ("__import__('os')", "only integers"), ("NOPE > 1", "not a macro"),
                            ("\uff22X * BY <= 128", "(U+FF22), not ASCII")]:
        path.write_text(text.replace("BX * BY <= 128", forged))
        with pytest.raises(acf.AcfError, match="kernel.restrictions") as caught:
            acf.read(path)
        assert problem in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.slow
def test_a_tune_builds_only_allowed_configurations(tmp_path: Path) -> None:
    """The real loop through the CLI: an exhaustive search of 9 macro combinations, 3 of which
    break the restriction, builds exactly the 6 allowed (with the defaults) and records them."""
    from compileiq.results import acf
    from compileiq.store import Store

    kernel = _kernel(tmp_path / "k", "[tune]\nrestrictions = ['BX * BY <= 128']\n"
                                      "[tune.defines]\nBX = [32, 64, 128]\nBY = [1, 2, 4]\n")
    db, out = f"sqlite:///{tmp_path / 't.db'}", tmp_path / "k.acf.toml"
    run = run_cli(["tune", str(kernel), "--objective", "registers", "--strategy", "exhaustive", "--budget", "20",
                   "--workers", "local", "--only", "define.BX,define.BY", "--db", db, "--out", str(out)],
                  tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr
    store = Store.open(db)
    try:
        (study,) = store.list_studies()
        trials = store.trials(study.id)
    finally:
        store.close()
    built = {(t.config["define.BX"], t.config["define.BY"]) for t in trials}
    assert built == {(32, 1), (32, 2), (32, 4), (64, 1), (64, 2), (128, 1)}
    assert acf.read(out).restrictions == ("BX * BY <= 128",)

    # A shared row is untrusted: one edited to a configuration the restrictions refuse, claiming
    # the best value, is skipped as not of the space; never told, chosen, rebuilt or quarantined.
    import sqlalchemy as sa

    from compileiq.core.space import canonical_key
    from compileiq.store.schema import trials_table

    victim = next(t for t in trials if t.number > 0 and t.value is not None)
    forged = {**victim.config, "define.BX": 128, "define.BY": 4}
    engine = sa.create_engine(db)
    with engine.begin() as conn:
        conn.execute(trials_table.update().where(trials_table.c.id == victim.id).values(
            config=forged, config_key=canonical_key(forged), value=1.0,
            metrics={**victim.metrics, "registers": 1}))
    engine.dispose()
    again = run_cli(["tune", str(kernel), "--objective", "registers", "--strategy", "exhaustive", "--budget", "20",
                     "--workers", "local", "--only", "define.BX,define.BY", "--db", db, "--out", str(out)],
                    tmp_path, timeout=600)
    assert again.returncode == 0, again.stderr
    chosen = acf.read(out).controls
    assert (chosen["define.BX"], chosen["define.BY"]) != (128, 4)
    assert "quarantined" not in again.stdout + again.stderr


def test_conditions_read_as_python_does(tmp_path: Path) -> None:
    """and/or stop early (a guarded division), comparisons chain, / truncates, ** is bounded."""
    toml = ("[tune]\nrestrictions = ['B == 0 or 12 % B == 0', '1 <= A * 2 ** B <= 64', 'not A / 4 > 1']\n"
            "[tune.defines]\nA = [1, 4, 8]\nB = [1, 0, 2, 5]\n")
    space, _ = app.full_space(_kernel(tmp_path / "k", toml))
    allowed = {(c["define.A"], c["define.B"]) for c in enumerate_space(space.select(only=["define.A", "define.B"]))}
    assert allowed == {(1, 0), (1, 1), (1, 2), (4, 0), (4, 1), (4, 2)}


def test_a_macro_left_out_of_the_search_is_held_at_its_first_value(tmp_path: Path) -> None:
    """--only a macro of a restricted pair: the other is held at tune.toml's first value, in every
    build (its -D) and in the restrictions, and the ACF records it (the run built with the source's
    own #define, checked the restrictions with the first value, then refused to write its ACF:
    "'BX * BY <= 128' names 'BY', not a macro of tune.toml")."""
    from compileiq.results import acf
    from compileiq.store import Store

    kernel = _kernel(tmp_path / "k", "[tune]\nrestrictions = ['BX * BY <= 128']\n"
                                      "[tune.defines]\nBX = [32, 64, 128]\nBY = [2, 1, 4]\n")
    db, out = f"sqlite:///{tmp_path / 't.db'}", tmp_path / "k.acf.toml"
    run = run_cli(["tune", str(kernel), "--objective", "registers", "--strategy", "exhaustive", "--budget", "20",
                   "--workers", "local", "--only", "define.BX", "--db", db, "--out", str(out)], tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr
    store = Store.open(db)
    try:
        (study,) = store.list_studies()
        built = {(t.config["define.BX"], t.config["define.BY"]) for t in store.trials(study.id)}
    finally:
        store.close()
    assert built == {(32, 2), (64, 2)}  # 128 * 2 breaks the restriction
    read = acf.read(out)
    assert read.controls["define.BY"] == 2 and "-DBY=2" in read.argv
    assert "never built" not in run.stdout  # BX=128 is not allowed with BY=2: nothing it could have built
