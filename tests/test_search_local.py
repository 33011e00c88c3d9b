"""Local search around the incumbents: the neighbourhood, the polish pick and its effect on a
plateau (no compiler needed)."""

import statistics

import numpy as np

from compileiq.core.space import Parameter, SearchSpace
from compileiq.search import local_search
from compileiq.search.encoding import Encoding
from compileiq.search.searcher import Observation, Searcher, SearchSettings


def _choice(name, values, default, stage="ptxas"):
    return Parameter(
        name, stage, "choice", tuple(values), default, f"--{name}={{value}}", "safe", ""
    )


def _space() -> SearchSpace:
    return SearchSpace(
        "local",
        "13.0",
        (
            Parameter("ptxas.level", "ptxas", "int", (0, 1, 2, 3), 3, "-O{value}", "safe", ""),
            _choice("ptxas.cap", ["default", 24, 32, 40, 48, 64, 80, 96, 128, 255], "default"),
            _choice("ptxas.override", [False, True], False),
            _choice("ptxas.expensive", ["default", True, False], "default"),
            _choice("nvcc.block", [256, 128, 512], 256, stage="frontend"),
        ),
    )


def _plateau(config) -> float:
    """spmv_sell's register count: -O1 reaches the plateau, so does a cap of 24 with the
    override; both together are the optimum, one setting away from either."""
    low_level = config["ptxas.level"] == 1
    capped = config["ptxas.cap"] == 24 and config["ptxas.override"]
    if low_level and capped:
        return 22.0
    if low_level or capped:
        return 24.0
    return 32.0 if config["ptxas.level"] >= 2 else 30.0


def _run(space, value, seed, batch=8, limit=400, target=None):
    """`compileiq tune`'s counting: the baseline first, then batches; every config asked (until
    one reaches `target`)."""
    searcher = Searcher(space, SearchSettings(seed=seed))
    configs, asked = [space.default_config()], []
    while configs and len(asked) < limit:
        if target is not None and any(value(c) <= target for c in asked):
            break
        asked += configs
        searcher.tell([Observation(c, value(c)) for c in configs])
        configs = searcher.ask(batch)
    return asked


def _evaluations_to(target, asked, value):
    return next((i + 1 for i, c in enumerate(asked) if value(c) <= target), len(asked) + 1)


def test_neighbours_are_every_row_one_setting_away_and_nothing_else():
    cardinality = np.array([4, 10, 2, 3, 3])
    rows = np.array([[1, 0, 1, 2, 0], [3, 9, 0, 0, 2]])
    found = local_search.neighbours(rows, cardinality)
    assert len(found) == len({tuple(r) for r in found.tolist()})
    assert len(found) == 2 * (1 + int((cardinality - 1).sum()))  # the two share no neighbour
    for row in found:
        assert ((row >= 0) & (row < cardinality)).all()
        assert min(int((row != r).sum()) for r in rows) <= 1


def test_the_additive_model_predicts_two_good_settings_together_below_either():
    """Trees predict leaf means and never go below the best seen; main effects add up."""
    space = _space()
    encoding = Encoding(space)
    configs = [space.default_config()] + [
        space.default_config().with_values(values)
        for values in (
            {"ptxas.level": 1},
            {"ptxas.cap": 24, "ptxas.override": True},
            {"ptxas.level": 0},
            {"ptxas.cap": 64, "ptxas.override": True},
            {"ptxas.level": 1, "ptxas.cap": 64},
            {"ptxas.level": 2, "ptxas.cap": 24, "ptxas.override": True},
        )
    ]
    rows = np.array([encoding.row(c) for c in configs])
    model = local_search.main_effects(rows, [_plateau(c) for c in configs], encoding.cardinality)
    combined = {"ptxas.level": 1, "ptxas.cap": 24, "ptxas.override": True}
    both = np.array([encoding.row(space.default_config().with_values(combined))])
    assert model(both)[0] < model(rows[1:3]).min()


def test_the_polish_pick_is_an_unseen_neighbour_of_an_incumbent():
    space = _space()
    encoding = Encoding(space)
    for seed in range(3):
        searcher = Searcher(space, SearchSettings(seed=seed))
        seen = {space.default_config().key}
        searcher.tell([Observation(space.default_config(), _plateau(space.default_config()))])
        observed = [space.default_config()]
        for _ in range(6):
            batch = searcher.ask(8)
            keys = [c.key for c in batch]
            assert len(set(keys)) == len(keys) and not set(keys) & seen
            if searcher.observations >= SearchSettings().initial_points:
                best = min(_plateau(c) for c in observed)
                incumbents = [encoding.row(c) for c in observed if _plateau(c) == best]
                polished = encoding.row(batch[0])
                assert min(sum(a != b for a, b in zip(polished, i)) for i in incumbents) == 1
            seen.update(keys)
            observed += batch
            searcher.tell([Observation(c, _plateau(c)) for c in batch])


def test_the_polish_never_proposes_a_seen_or_excluded_config_to_the_end_of_the_space():
    space = SearchSpace("small", "13.0", _space().parameters[:3])
    searcher = Searcher(space, SearchSettings(seed=2))
    asked = _run(space, _plateau, seed=2, limit=10_000)
    assert len(asked) == space.size() == len({c.key for c in asked})
    excluded = [c.key for c in asked[-20:]]
    searcher.tell([Observation(c, _plateau(c)) for c in asked[:-20]])
    assert {c.key for c in searcher.ask(8, exclude=excluded)} == set()


def test_a_better_point_next_to_a_plateau_is_found_within_a_few_batches():
    """Before the polish pick the search left the plateau (expected improvement is zero where
    the trees predict the incumbent's value with no spread): spmv_sell's register count took a
    median of 47.5 evaluations, 4 runs in 10 past 128; TPE needs 24."""
    space = _space()
    counts = [
        _evaluations_to(22.0, _run(space, _plateau, seed, limit=128, target=22.0), _plateau)
        for seed in range(10)
    ]
    assert statistics.median(counts) <= 33, counts
    assert max(counts) <= 65, counts


def _refusable(config) -> tuple[float, bool]:
    """spill_heavy's register count under its launch bounds (value, allowed): a cap needs the
    override to act, the override alone raises the count, and a capped build adds spills (the
    no-harm rules refuse it) unless -O1 or expensive optimisations off also cut them."""
    override, cap = config["ptxas.override"], config["ptxas.cap"]
    if not override:
        return (31.0 if config["ptxas.level"] == 1 else 32.0), True
    if cap == "default" or cap >= 128:
        return 40.0, True
    return float(cap), config["ptxas.level"] == 1 or config["ptxas.expensive"] is False


def _refusable_run(space, seed, tell_refused, limit=128) -> int:
    """Evaluations until the best allowed result (24 registers), as `compileiq tune` counts."""
    searcher = Searcher(space, SearchSettings(seed=seed))
    configs, asked = [space.default_config()], 0
    while configs and asked < limit:
        for config in configs:
            asked += 1
            if _refusable(config) == (24.0, True):
                return asked
        told = []
        for config in configs:
            value, allowed = _refusable(config)
            refused = value if tell_refused and not allowed else None
            told.append(Observation(config, value if allowed else None, refused=refused))
        searcher.tell(told)
        configs = searcher.ask(8)
    return limit


def test_refused_results_told_with_their_value_lead_the_search_into_their_region():
    """A refusal was learnt as a failure: the region where the capped builds lie (most of them
    refused, a few allowed and best) looked like the worst of the space. Told with its value,
    the surrogate models the objective there and a second model the chance of being allowed;
    expected improvement is weighted by that chance (constrained EI)."""
    space = _space()
    told = [_refusable_run(space, seed, tell_refused=True) for seed in range(20)]
    failures = [_refusable_run(space, seed, tell_refused=False) for seed in range(20)]
    # half the seeds meet the optimum in the initial design, before any model: the mean shows the rest
    assert statistics.mean(told) <= 0.8 * statistics.mean(failures), (sorted(told), sorted(failures))
