"""Whether a restriction can still hold once some of its macros are set and the others range
over their listed values: interval arithmetic over the condition's tree (``launch``'s forms).

The search enumerates the macro combinations a restriction allows by setting one macro after
another and dropping a partial combination as soon as no completion can hold
(``A + B + ... + H == 8`` with A = 2 and every macro at least 1: the sum is at least 9). Before, a
sampler drew from the whole product and kept what the restriction allowed: 1 of 10**6 combinations
was never drawn, and the search stopped after the baseline.

Sound, not exact: ``False`` only where every completion makes the condition false (or not
evaluable, which the restriction refuses too); forms it does not bound (``/ // % **``, a fixed
macro written as an expression) range over everything.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from functools import lru_cache

from compileiq.source.launch import SIZEOF, ExpressionError, parsed

Bounds = tuple[int, int] | None  # lowest and highest value; None: unbounded

_TRUE, _FALSE, _EITHER = (1, 1), (0, 0), (0, 1)


def may_hold(text: str, ranges: Mapping[str, tuple[int, int]]) -> bool:
    """False only when no values of the macros within ``ranges`` (a set one: its value twice)
    make the condition ``text`` true; names absent from ``ranges`` range over everything."""
    try:
        found = _bounds(_tree(text), ranges)
    except (ExpressionError, RecursionError):
        return True
    return found != _FALSE


@lru_cache(maxsize=256)
def _tree(text: str) -> ast.expr:
    return parsed(text)  # read only, never changed: one parse per restriction


def _truth(bounds: Bounds) -> Bounds:
    if bounds is None:
        return _EITHER
    low, high = bounds
    if low == high == 0:
        return _FALSE
    return _TRUE if low > 0 or high < 0 else _EITHER


def _bounds(node: ast.expr, ranges: Mapping[str, tuple[int, int]]) -> Bounds:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value, node.value
    if isinstance(node, ast.Name):
        return ranges.get(node.id)
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id == "sizeof" and len(node.args) == 1:
            arg = node.args[0]
            size = SIZEOF.get(arg.id) if isinstance(arg, ast.Name) else None
            return None if size is None else (size, size)
        return None
    if isinstance(node, ast.UnaryOp):
        inner = _bounds(node.operand, ranges)
        if isinstance(node.op, ast.Not):
            truth = _truth(inner)
            return _TRUE if truth == _FALSE else _FALSE if truth == _TRUE else _EITHER
        if inner is None:
            return None
        return (-inner[1], -inner[0]) if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp):
        return _binary(node, ranges)
    if isinstance(node, ast.BoolOp):
        truths = [_truth(_bounds(v, ranges)) for v in node.values]
        decisive, other = (_FALSE, _TRUE) if isinstance(node.op, ast.And) else (_TRUE, _FALSE)
        if decisive in truths:
            return decisive
        return other if all(t == other for t in truths) else _EITHER
    if isinstance(node, ast.Compare):
        truths = []
        left = _bounds(node.left, ranges)
        for op, operand in zip(node.ops, node.comparators):
            right = _bounds(operand, ranges)
            truths.append(_compare(op, left, right))
            left = right
        if _FALSE in truths:
            return _FALSE
        return _TRUE if all(t == _TRUE for t in truths) else _EITHER
    return None


def _binary(node: ast.BinOp, ranges: Mapping[str, tuple[int, int]]) -> Bounds:
    # a long chain (a + b + ... ) nests to the left: walked as a loop, not by recursion
    chain = [node]
    while isinstance(chain[-1].left, ast.BinOp):
        chain.append(chain[-1].left)
    value = _bounds(chain[-1].left, ranges)
    for link in reversed(chain):
        right = _bounds(link.right, ranges)
        if value is None or right is None or not isinstance(link.op, ast.Add | ast.Sub | ast.Mult):
            value = None
            continue
        (a, b), (c, d) = value, right
        if isinstance(link.op, ast.Add):
            value = (a + c, b + d)
        elif isinstance(link.op, ast.Sub):
            value = (a - d, b - c)
        else:
            corners = (a * c, a * d, b * c, b * d)
            value = (min(corners), max(corners))
    return value


def _compare(op: ast.cmpop, left: Bounds, right: Bounds) -> Bounds:
    if left is None or right is None:
        return _EITHER
    (a, b), (c, d) = left, right
    if isinstance(op, ast.Eq | ast.NotEq):
        verdict = _TRUE if a == b == c == d else _FALSE if b < c or d < a else _EITHER
        if isinstance(op, ast.NotEq):
            verdict = _TRUE if verdict == _FALSE else _FALSE if verdict == _TRUE else _EITHER
        return verdict
    if isinstance(op, ast.Gt | ast.GtE):  # a > b is b < a
        (a, b), (c, d) = (c, d), (a, b)
        op = ast.Lt() if isinstance(op, ast.Gt) else ast.LtE()
    if isinstance(op, ast.Lt):
        return _TRUE if b < c else _FALSE if a >= d else _EITHER
    if isinstance(op, ast.LtE):
        return _TRUE if b <= c else _FALSE if a > d else _EITHER
    return _EITHER
