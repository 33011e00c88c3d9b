"""The search's initial design: corners, then middle values (no compiler needed)."""

import statistics
import subprocess
import sys
from pathlib import Path

from compileiq.core.space import Parameter, SearchSpace
from compileiq.search.initial_design import CORNER_RUNS
from compileiq.search.searcher import Observation, Searcher, SearchSettings


def _choice(name, values, default, stage="ptxas"):
    return Parameter(
        name, stage, "choice", tuple(values), default, f"--{name}={{value}}", "safe", ""
    )


def _space() -> SearchSpace:
    return SearchSpace(
        "design",
        "13.0",
        (
            Parameter("ptxas.level", "ptxas", "int", (0, 1, 2, 3), 3, "-O{value}", "safe", ""),
            _choice("ptxas.cap", ["default", 24, 32, 64, 128, 255], "default"),
            _choice("ptxas.expensive", ["default", True, False], "default"),
            _choice("nvcc.block", [128, 64, 256], 128, stage="frontend"),
        ),
    )


def _evaluations_to_optimum(space, value, seed, batch=8):
    """`compileiq tune`'s counting: the baseline first, then batches, until the optimum."""
    searcher = Searcher(space, SearchSettings(seed=seed))
    configs, count = [space.default_config()], 0
    while configs:
        observations = [Observation(c, value(c)) for c in configs]
        for observation in observations:
            count += 1
            if observation.value == 0:
                return count
        searcher.tell(observations)
        configs = searcher.ask(batch)
    raise AssertionError("the search ended without the optimum")


def test_the_first_batch_holds_middle_values():
    """-O1/-O2 and a middle register cap are in every first batch; the corners alone never
    try them."""
    for seed in range(10):
        batch = Searcher(_space(), SearchSettings(seed=seed)).ask(8)
        assert {c["ptxas.level"] for c in batch} & {1, 2}, seed
        assert {c["ptxas.cap"] for c in batch} & {32, 64, 128}, seed


def test_the_centre_is_followed_by_corners_at_the_extremes():
    batch = Searcher(_space(), SearchSettings(seed=4)).ask(8)
    for config in batch[1 : 1 + CORNER_RUNS]:
        assert config["ptxas.level"] in (0, 3)
        assert config["ptxas.cap"] in (24, 255)
        assert config["ptxas.expensive"] in (True, False)
    assert len({c.key for c in batch}) == 8


def test_a_dense_landscape_is_solved_within_the_first_batch():
    """A quarter of the space is optimal, all at -O1 (softmax's registers objective): random
    search needs about 5 evaluations; the corners alone never tried -O1 in the first batch."""
    space = _space()
    counts = [
        _evaluations_to_optimum(space, lambda c: 0 if c["ptxas.level"] == 1 else 1, seed)
        for seed in range(10)
    ]
    assert statistics.median(counts) <= 1 + 8, counts  # the baseline and the first batch


def test_a_needle_at_two_extremes_is_still_found_by_the_corners():
    """The lowest register cap with the expensive optimisations off: a corner."""
    space = _space()
    counts = [
        _evaluations_to_optimum(
            space,
            lambda c: 0 if c["ptxas.cap"] == 24 and c["ptxas.expensive"] is False else 1,
            seed,
        )
        for seed in range(10)
    ]
    assert statistics.median(counts) <= 5, counts


def test_a_space_of_front_end_settings_only_gets_a_full_batch():
    space = SearchSpace(
        "fe", "13.0", (_choice("nvcc.block", [128, 64, 256, 512, 32], 128, "frontend"),)
    )
    batch = Searcher(space, SearchSettings(seed=0)).ask(3)
    assert len({c.key for c in batch}) == 3


def test_the_first_run_is_the_centre_of_the_space():
    """Before the corners: -O1 or -O2, the middle register cap and the middle block size
    (bsr_spmm's static optimum lies there: 19 evaluations with the corners only, 6 with it after
    them, 2 with it first)."""
    for seed in range(5):
        centre = Searcher(_space(), SearchSettings(seed=seed)).ask(8)[0]
        assert centre["ptxas.level"] in (1, 2)
        assert centre["ptxas.cap"] == 64
        assert centre["nvcc.block"] == 64


def test_a_space_without_front_end_settings_gets_middle_values():
    space = SearchSpace(
        "ptxas",
        "13.0",
        (Parameter("ptxas.level", "ptxas", "int", (0, 1, 2, 3), 3, "-O{value}", "safe", ""),),
    )
    batch = Searcher(space, SearchSettings(seed=0)).ask(3)
    assert len({c.key for c in batch}) == 3
    assert {c["ptxas.level"] for c in batch} & {1, 2}


def _macros_space() -> SearchSpace:
    """Macros alone, as pnpoly's: every configuration is a front end of its own."""
    def macro(name, values, default):
        return Parameter(f"define.{name}", "frontend", "int", tuple(values), default, f"-D{name}={{value}}", "safe", "")
    return SearchSpace("macros", "13.0", (
        macro("block", range(32, 1025, 32), 32),
        macro("tile", (1, 2, 4, 6, 8, 10, 12), 1),
        macro("method", (0, 1, 2, 3), 0),
        macro("slopes", (0, 1), 0),
    ))


def test_a_space_of_macros_alone_opens_with_its_centre_corners_and_middles():
    """Its first batch after the defaults: the centre, then corners of a two-level orthogonal array
    over the macros (each at its smallest or largest value), then middle values: a full batch,
    where random picks over 3 front ends made a batch of 3."""
    space = _macros_space()
    for seed in range(5):
        searcher = Searcher(space, SearchSettings(seed=seed))
        searcher.tell([Observation(space.default_config(), 1.0)])
        batch = searcher.ask(8)
        assert len({c.key for c in batch}) == 8, seed
        centre = batch[0]
        assert 384 <= centre["define.block"] <= 640 and centre["define.tile"] in (4, 6, 8), seed
        extremes = {p.name: (p.values[0], p.values[-1]) for p in space.parameters}
        corners = [c for c in batch if all(c[name] in ends for name, ends in extremes.items())]
        assert len(corners) == CORNER_RUNS, seed
        assert {c["define.tile"] for c in corners} == {1, 12} and {c["define.slopes"] for c in corners} == {0, 1}


def test_a_needle_at_a_corner_of_a_macro_space_is_found_early():
    """pnpoly's shape: the fastest configurations all have the smallest tile with precomputed
    slopes (and here the last method), whatever the block size: 1.8% of the space, three macros
    at an extreme. Over 20 seeds the median was 34 evaluations when the first picks were random,
    6.5 with the corners."""
    space = _macros_space()
    counts = [
        _evaluations_to_optimum(
            space, lambda c: 0 if c["define.tile"] == 1 and c["define.slopes"] == 1 and c["define.method"] == 3 else 1, seed
        )
        for seed in range(20)
    ]
    assert statistics.median(counts) <= 1 + 8, counts


def _mixed_space() -> SearchSpace:
    """A user's tune.toml block sizes (default first, as tune.toml lists them) beside ptxas settings."""
    def macro(name, values):
        return Parameter(f"define.{name}", "frontend", "choice", tuple(values), values[0], f"-D{name}={{value}}",
                         "safe", "", render_default=True)
    return SearchSpace("mixed", "13.0", (
        *_space().parameters[:3],
        macro("X", (32, 8, 16, 64, 128, 256)),
        macro("Y", (8, 1, 2, 4, 16, 32)),
    ))


def test_a_space_mixing_macros_and_ptxas_settings_spreads_its_first_batch_over_the_macros():
    """The first batch spread over the default front end and 3 random others: on a user's 6 x 6
    block sizes (PolyBench 2DCONV) 48 trials built 3-4 combinations and 5-9 of the 12 listed
    values. Now the ptxas design's runs are paired with a design over the macros: the centre,
    corners at each macro's smallest and largest value (by size, not as listed) and middles over
    the values between, paired with the ptxas runs at random: every listed value is built in the
    first batch."""
    space = _mixed_space()
    for seed in range(10):
        searcher = Searcher(space, SearchSettings(seed=seed))
        searcher.tell([Observation(space.default_config(), 1.0)])
        batch = searcher.ask(8)
        assert len({(c["define.X"], c["define.Y"]) for c in batch}) == 8, seed
        assert {8, 256} <= {c["define.X"] for c in batch} and {1, 32} <= {c["define.Y"] for c in batch}, seed
        assert len({c["define.X"] for c in batch} | {-c["define.Y"] for c in batch}) == 12, seed  # every value
        for config in batch[1 : 1 + CORNER_RUNS]:  # the ptxas corners are kept
            assert config["ptxas.level"] in (0, 3) and config["ptxas.cap"] in (24, 255), seed


_HELD_MODEL = '''
import importlib.abc, sys, threading
released = threading.Event()

class HoldTheModel(importlib.abc.MetaPathFinder):
    """scikit-optimize cannot be imported until `released` is set (a machine where it is slow)."""
    def find_spec(self, name, path, target=None):
        if name == "skopt":
            released.wait()
        return None

sys.meta_path.insert(0, HoldTheModel())
sys.path.insert(0, sys.argv[1])
from test_search_design import _space
from compileiq.search.searcher import Observation, Searcher, SearchSettings

space = _space()
searcher = Searcher(space, SearchSettings(seed=3))
searcher.tell([Observation(space.default_config(), 1.0)])
first = searcher.ask(8)  # the initial design: no model
assert len(first) == 8 and "skopt" not in sys.modules, (len(first), "skopt" in sys.modules)
released.set()
searcher.tell([Observation(c, float(i)) for i, c in enumerate(first)])
searcher.tell([Observation(c, float(i)) for i, c in enumerate(searcher.ask(8))])  # 17 results: fitted
assert "skopt" in sys.modules and len(searcher.ask(8)) == 8
print("first batch without the model; fitted once it loaded")
'''


def test_the_first_batch_is_asked_before_the_model_has_loaded():
    """The initial design needs numpy alone: a run's first batch does not wait for scikit-optimize
    (a second to import on an idle machine; it was the searcher's first import, and a run's
    compilers stood idle ~0.9 s of sgemm's 8.7 s waiting for it). The model is waited for at the
    first fit."""
    result = subprocess.run([sys.executable, "-c", _HELD_MODEL, str(Path(__file__).parent)],
                            check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "first batch without the model; fitted once it loaded" in result.stdout
