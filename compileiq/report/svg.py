"""Small hand-written SVG charts for the report (no plotting library): a line chart and bars.

Every label is escaped: study names, setting names and values come from a database.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compileiq.core.text import html_text

WIDTH, HEIGHT = 720, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 44, 44


@dataclass(frozen=True)
class Series:
    name: str
    points: tuple[tuple[float, float], ...]
    color: str
    kind: str = "step"  # step | line | dots
    dashed: bool = False
    radius: float = 2.0  # dots


def _n(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _label(x: float) -> str:
    return f"{x:.4g}"


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high == low:
        return [low]
    step = (high - low) / (count - 1)
    return [low + i * step for i in range(count)]


def line_chart(title: str, series: Sequence[Series], x_label: str, y_label: str,
               marks: Sequence[float] = (), mark_label: str = "", integer_x: bool = True) -> str:
    """Series over a shared x axis; `marks` are x positions drawn as red crosses under the axis."""
    xs = [x for s in series for x, _ in s.points] + list(marks)
    ys = [y for s in series for _, y in s.points]
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    y0, y1 = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if y0 == y1:
        y0, y1 = y0 - 1, y1 + 1
    x1 = x1 if x1 > x0 else x0 + 1
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return TOP + (y1 - y) / (y1 - y0) * ph

    parts = [_open(title), f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>']
    for y in _ticks(y0, y1):
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{_n(py(y))}" y2="{_n(py(y))}" stroke="#eee"/>'
                     f'<text x="{LEFT - 4}" y="{_n(py(y) + 4)}" text-anchor="end">{html_text(_label(y))}</text>')
    for x in _ticks(x0, x1):
        parts.append(f'<text x="{_n(px(x))}" y="{TOP + ph + 16}" text-anchor="middle">{html_text(_label(round(x) if integer_x else x))}</text>')
    parts.append(f'<text x="{LEFT + pw / 2}" y="{HEIGHT - 6}" text-anchor="middle">{html_text(x_label)}</text>')
    parts.append(f'<text x="12" y="{TOP + ph / 2}" transform="rotate(-90 12 {TOP + ph / 2})" '
                 f'text-anchor="middle">{html_text(y_label)}</text>')
    for s in series:
        parts.append(_series(s, px, py))
    for x in marks:
        cx, cy = _n(px(x)), TOP + ph - 4
        parts.append(f'<path d="M{cx} {cy}m-3-3l6 6m0-6l-6 6" stroke="#c00"/>')
    legend = [(s.name, s.color, s.dashed) for s in series] + ([(mark_label, "#c00", False)] if marks else [])
    parts.append(_legend(legend))
    return "".join(parts) + "</svg>"


def _series(s: Series, px: Callable[[float], float], py: Callable[[float], float]) -> str:
    if not s.points:
        return ""
    if s.kind == "dots":
        dots = "".join(f'<circle cx="{_n(px(x))}" cy="{_n(py(y))}" r="{_n(s.radius)}"/>' for x, y in s.points)
        return f'<g fill="{s.color}" fill-opacity="0.5">{dots}</g>'
    path: list[str] = []
    previous: tuple[float, float] | None = None
    for x, y in s.points:
        if previous is None:
            path.append(f"M{_n(px(x))} {_n(py(y))}")
        elif s.kind == "step":
            path.append(f"H{_n(px(x))}V{_n(py(y))}")
        else:
            path.append(f"L{_n(px(x))} {_n(py(y))}")
        previous = (x, y)
    dash = ' stroke-dasharray="5 4"' if s.dashed else ""
    return f'<path d="{"".join(path)}" fill="none" stroke="{s.color}" stroke-width="2"{dash}/>'


def bar_chart(title: str, bars: Sequence[tuple[str, float]], unit: str) -> str:
    """Horizontal bars, one per (label, value); negative values extend left of zero."""
    row, label_w = 22, 260
    height = TOP + row * max(len(bars), 1) + 24
    low = min([0.0, *(v for _, v in bars)])
    high = max([0.0, *(v for _, v in bars)])
    span = (high - low) or 1.0
    plot_w = WIDTH - label_w - 90

    def px(v: float) -> float:
        return label_w + (v - low) / span * plot_w

    parts = [_open(title, height)]
    zero = _n(px(0.0))
    for i, (label, value) in enumerate(bars):
        y = TOP + i * row
        a, b = sorted((px(0.0), px(value)))
        color = "#2a7" if value >= 0 else "#c63"
        parts.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end">{html_text(label)}</text>'
                     f'<rect x="{_n(a)}" y="{y + 4}" width="{_n(max(b - a, 1))}" height="{row - 8}" fill="{color}"/>'
                     f'<text x="{_n(b + 4)}" y="{y + 15}">{html_text(_label(value))}</text>')
    parts.append(f'<line x1="{zero}" x2="{zero}" y1="{TOP}" y2="{height - 20}" stroke="#333"/>')
    parts.append(f'<text x="{label_w}" y="{height - 4}">{html_text(unit)}</text>')
    return "".join(parts) + "</svg>"


def _open(title: str, height: int = HEIGHT) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
            f'height="{height}" font-family="sans-serif" font-size="11" role="img">'
            f'<title>{html_text(title)}</title><text x="{LEFT}" y="16" font-size="13" font-weight="bold">'
            f"{html_text(title)}</text>")


def _legend(entries: Sequence[tuple[str, str, bool]]) -> str:
    parts, x = [], WIDTH - RIGHT - 10
    for name, color, dashed in reversed(entries):
        width = 7 * len(name) + 26
        x -= width
        dash = ' stroke-dasharray="5 4"' if dashed else ""
        parts.append(f'<line x1="{x}" x2="{x + 18}" y1="28" y2="28" stroke="{color}" stroke-width="2"{dash}/>'
                     f'<text x="{x + 22}" y="32">{html_text(name)}</text>')
    return "".join(parts)
