"""The report's figures, as SVG text: convergence (each trial, the best so far, random search's
expected best), each setting's contribution, surrogate importance, a Pareto front."""

from __future__ import annotations

from typing import TYPE_CHECKING

from compileiq.report import svg as report_svg
from compileiq.search.convergence import best_so_far, expected_random_best

if TYPE_CHECKING:
    from collections.abc import Sequence

    from compileiq.core.readings import Reading
    from compileiq.core.records import Trial
    from compileiq.results.ablation import Ablation
    from compileiq.results.pareto import Front
    from compileiq.search.importance import Importances


def short_name(name: str) -> str:
    """A setting without its stage: `ptxas.opt_level` -> `opt_level`."""
    return name.partition(".")[2] or name


# -- figures ------------------------------------------------------------------------------------


def convergence_svg(trials: Sequence[Trial], value_label: str, read: Reading) -> str:
    points = best_so_far(trials)
    label = value_label
    values = [p.value for p in points]
    expected = expected_random_best(values)
    series = [
        report_svg.Series("each trial", tuple((p.number, p.value) for p in points if p.value is not None),
                          "#888", "dots"),
        report_svg.Series("best so far", tuple((p.number, p.best) for p in points if p.best is not None), "#1f5fbf"),
        report_svg.Series("random search, expected best",
                          tuple((p.number, e) for p, e in zip(points, expected, strict=True) if e is not None),
                          "#e08a00", "line", dashed=True),
    ]
    failed = [p.number for p in points if p.value is None]
    label = f"{read.minimised_as}, lower is better" if read.minimised_as else label
    return report_svg.line_chart(f"convergence: {label}", series, "trial number", label,
                                 failed, "failed trial")


def contributions_svg(ablation: Ablation, value_label: str) -> str:
    bars = [(_step_label(s.setting, s.value), s.contribution) for s in ablation.steps if s.contribution is not None]
    return report_svg.bar_chart("each setting's contribution (gain along the ablation path)", bars,
                                f"gain in {value_label}")


def _step_label(setting: str, value: object) -> str:
    """BLOCK=64; a step of several settings (`ablation`): BC=16 + BR=16."""
    values = value if isinstance(value, list) else [value]
    return " + ".join(f"{short_name(name)}={v}" for name, v in zip(setting.split(" + "), values, strict=False))


def pareto_svg(trade_offs: Front) -> str:
    """The first two objectives: every complete trial, the front, and the pick."""
    x_name, y_name = trade_offs.objectives[:2]
    series = [
        report_svg.Series("dominated trials", tuple((p.values[0], p.values[1]) for p in trade_offs.others), "#888", "dots"),
        report_svg.Series("Pareto front", tuple((p.values[0], p.values[1]) for p in trade_offs.points), "#1f5fbf", "line"),
    ]
    if trade_offs.pick is not None:
        picked = trade_offs.pick.values
        series.append(report_svg.Series(f"pick ({trade_offs.rule})", ((picked[0], picked[1]),), "#c00", "dots",
                                        radius=5))
    return report_svg.line_chart(f"Pareto front: {x_name} vs {y_name} (static estimates unless time)", series,
                                 objective_label(x_name), objective_label(y_name), integer_x=False)


def objective_label(name: str) -> str:
    return "occupancy shortfall (1 - occupancy)" if name == "occupancy" else name


def importance_svg(importance: Importances) -> str:
    return report_svg.bar_chart("surrogate importance (share)", [(i.setting, i.share) for i in importance.items],
                                "share of importance")
