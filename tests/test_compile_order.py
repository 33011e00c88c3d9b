"""A batch's compiles start longest predicted first (`tuning.compile_order`), from the ptxas times
of the compiles already finished."""

from __future__ import annotations

from compileiq.tuning.compile_order import LongestFirst


def _config(level: int, cap: int = 0, cache: str = "ca") -> dict[str, object]:
    return {"ptxas.opt_level": level, "ptxas.maxrregcount": cap, "ptxas.def_load_cache": cache}


def test_nothing_learned_keeps_the_order() -> None:
    order = LongestFirst()
    items = [_config(0), _config(3), _config(1)]
    assert order.order(items, lambda c: c) == items
    assert order.predict(_config(3)) is None


def test_the_slow_setting_starts_first() -> None:
    order = LongestFirst()
    for cache in ("ca", "cg", "cs"):  # -O3 runs ~2 s, -O0 ~0.2 s, whatever else is set
        order.learn(_config(3, cache=cache), 2.0)
        order.learn(_config(0, cache=cache), 0.2)
    batch = [_config(0, 32), _config(3, 64), _config(0), _config(3, cache="cv")]
    assert order.order(batch, lambda c: c) == [_config(3, 64), _config(3, cache="cv"), _config(0, 32), _config(0)]


def test_effects_add_up() -> None:
    """-O3 and a tight register cap each cost more; both together cost the most, whatever else is set."""
    order = LongestFirst()
    for cache in ("ca", "cg"):
        for level, cap, seconds in ((0, 0, 0.25), (0, 32, 0.5), (3, 0, 1.0), (3, 32, 2.0)):
            order.learn(_config(level, cap, cache), seconds)
    batch = [_config(0, 0, "cs"), _config(3, 0, "cs"), _config(0, 32, "cs"), _config(3, 32, "cs")]
    assert order.order(batch, lambda c: c) == [batch[3], batch[1], batch[2], batch[0]]


def test_one_sample_moves_the_prediction_less_than_many() -> None:
    """A value seen once is shrunk towards the mean: one long run is not taken at its word."""
    few, many = LongestFirst(), LongestFirst()
    for order, times in ((few, 1), (many, 12)):
        for _ in range(12):
            order.learn(_config(0), 0.5)
        for _ in range(times):
            order.learn(_config(2), 4.0)
    assert (few.predict(_config(2)) or 0) < (many.predict(_config(2)) or 0)


def test_failed_and_cached_times_teach_nothing() -> None:
    order = LongestFirst()
    for seconds in (None, 0.0, float("nan"), float("inf"), -1.0):
        order.learn(_config(3), seconds)
    assert order.predict(_config(3)) is None


def test_ties_keep_their_order() -> None:
    order = LongestFirst()
    order.learn(_config(3), 1.0)
    order.learn(_config(1), 0.1)
    batch = [_config(1, cache="cg"), _config(1, cache="cs"), _config(3)]
    assert order.order(batch, lambda c: c) == [_config(3), _config(1, cache="cg"), _config(1, cache="cs")]
