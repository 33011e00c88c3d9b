"""What the search's surrogate sees of a configuration: a macro's numeric values (listed default
first in tune.toml and in a T1 space) keep their order by size, so that a tree can split between
small and large tiles; the searcher still maps its observations back to the same rows."""

import numpy as np

from compileiq.core.space import SearchSpace
from compileiq.search.encoding import Encoding
from compileiq.search.searcher import Observation, Searcher, SearchSettings


def _space() -> SearchSpace:
    # block_size_y's default is its largest value, listed first (as compileiq lists a default)
    return SearchSpace("macros", "", ()).with_defines(
        {"BY": [16, 1, 2, 4, 8], "PAD": [1, 0], "MODE": ["fast", "exact"]}
    )


def test_a_macros_numeric_values_are_coordinates_in_order_of_size() -> None:
    space = _space()
    encoding = Encoding(space)
    by_value = {}
    for value in (16, 1, 2, 4, 8):
        row = encoding.row({"define.BY": value, "define.PAD": 1, "define.MODE": "fast"})
        by_value[value] = encoding.points(np.array([row]))[0][0]
    assert [by_value[v] for v in (1, 2, 4, 8, 16)] == [0, 1, 2, 3, 4]  # was 16 -> 0, next to 1
    pad = [encoding.points(np.array([encoding.row({"define.BY": 16, "define.PAD": p, "define.MODE": "fast"})]))[0][1]
           for p in (0, 1)]
    assert pad == [0, 1]
    modes = [encoding.points(np.array([encoding.row({"define.BY": 16, "define.PAD": 1, "define.MODE": m})]))[0][2]
             for m in ("fast", "exact")]
    assert modes == [0, 1]  # words keep their listed order


def test_the_searcher_never_proposes_a_told_configuration_again() -> None:
    space = _space()
    searcher = Searcher(space, SearchSettings("bayes", seed=3))
    told: set[str] = set()
    batch = [space.default_config()]
    while batch:
        searcher.tell([Observation(c, float(c["define.BY"]) + 0.1 * c["define.PAD"]) for c in batch])
        assert not told & {c.key for c in batch}
        told |= {c.key for c in batch}
        batch = searcher.ask(4)
    assert len(told) == 20  # the whole space, each once


def test_a_restricted_space_of_thousands_is_scored_whole() -> None:
    """16,384 combinations, 128 of them allowed: every ask scores all the allowed ones still
    untried, so each batch after the initial design is full until the space runs out (a random
    pool of 2,048 rows per draw, as spaces over 4,096 had, missed a third of them at each ask and
    left batches short while untried allowed ones remained)."""
    from compileiq.source.restrictions import restrictions_of

    values = {"A": tuple(range(128)), "B": tuple(range(128))}
    space = SearchSpace("macros", "", ()).with_defines({name: list(v) for name, v in values.items()})
    space = SearchSpace(space.id, space.compiler_version, space.parameters, restrictions_of(("A == B",), {}, values))
    assert space.size() == 16_384
    searcher = Searcher(space, SearchSettings("bayes", seed=1))
    batch, sizes, told = [space.default_config()], [], set()
    while batch:
        assert all(c["define.A"] == c["define.B"] for c in batch)
        searcher.tell([Observation(c, float(abs(c["define.A"] - 37))) for c in batch])
        told |= {c.key for c in batch}
        batch = searcher.ask(8)
        sizes.append(len(batch))
    # the baseline, the initial design's centre, corners and middles (each the nearest allowed
    # configuration: all 8 on the diagonal), then full batches: 1 + 15 x 8 + 7 = 128
    assert len(told) == 128 and sizes == [8] * 15 + [7, 0], sizes


def test_rows_are_skipped_the_same_way_on_any_space_size() -> None:
    """`without` numbers each row (numpy compares them at once) up to int64's range and compares
    tuples past it: the same rows kept, in the same order, both ways; keys are read once each."""
    rng = np.random.default_rng(4)
    small = Encoding(_space())
    huge = Encoding(SearchSpace("macros", "", ()).with_defines({f"M{i}": list(range(1000)) for i in range(8)}))
    for encoding in (small, huge):
        rows = encoding.sample(rng, 300)
        skip = {tuple(r) for r in rows[rng.random(len(rows)) < 0.4].tolist()} | {tuple(encoding.extreme_high.tolist())}
        kept = encoding.without(rows, skip)
        assert kept.tolist() == [r for r in rows.tolist() if tuple(r) not in skip]
        assert 0 < len(kept) < len(rows)
    assert huge._radix is None and small._radix is not None  # both paths ran
    key = small.config(small.extreme_high).key
    assert small.rows_of_keys([key, "not json", '{"other.space": 1}', key]) == {tuple(small.extreme_high.tolist())}
