"""What a search is asked for and told, without the search itself: its settings, an observation,
and the check of settings against a space. Light (no numpy, scikit-learn or scikit-optimize), so
that a run checks its settings and names its study before the searcher has loaded (`loading`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compileiq.core.errors import UsageError
from compileiq.core.space import Config, SearchSpace

STRATEGIES = ("bayes", "random", "exhaustive")
SURROGATES = ("ET", "RF", "GP")
MAX_EXHAUSTIVE = 1_000_000


@dataclass(frozen=True)
class Observation:
    config: Config
    value: float | None  # None: the variant failed, or the no-harm rules refuse it
    values: tuple[float, ...] = ()  # a multi-objective search: one per objective (see multi_objective)
    refused: float | None = None  # value None because the no-harm rules refuse it: its objective value

    @classmethod
    def of(cls, config: Config, value: float | None, refused: bool, values: Sequence[float] | None = None) -> Observation:
        """A result as the searcher learns it: one the rules refuse (or that failed: `value` None)
        is worse than any that may win, and keeps its value aside for one objective. `values`:
        several objectives (None: one), a refused one's dropped."""
        if values is not None:
            kept = () if refused else tuple(values)
            return cls(config, value if kept else None, kept)
        return cls(config, None, refused=value) if refused else cls(config, value)


@dataclass(frozen=True)
class SearchSettings:
    strategy: str = "bayes"
    seed: int = 0
    surrogate: str = "ET"
    initial_points: int = 10
    exploration: float = 0.01  # EI's xi
    trees: int = 32
    frontend_cost: float = 5.0  # a new front-end (nvcc -ptx) compile costs this many ptxas runs
    initial_frontends: int = 3  # front-end settings (besides the default) in the initial design
    min_samples_leaf: int = 1


def check_settings(settings: SearchSettings, space: SearchSpace) -> None:
    """UsageError for a strategy or surrogate that does not exist, or a space too large to enumerate."""
    if settings.strategy not in STRATEGIES:
        raise UsageError(
            f"unknown strategy {settings.strategy!r}; choose one of: {', '.join(STRATEGIES)}"
        )
    if settings.surrogate not in SURROGATES:
        raise UsageError(
            f"unknown surrogate {settings.surrogate!r}; choose one of: {', '.join(SURROGATES)}"
        )
    if settings.strategy == "exhaustive" and space.size() > MAX_EXHAUSTIVE:
        raise UsageError(
            f"the space has {space.size():,} configurations; exhaustive search allows {MAX_EXHAUSTIVE:,}"
            " (narrow it with --only/--exclude)"
        )
