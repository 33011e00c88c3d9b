"""A T1 tuning space file (the FAIR Benchmark Hub's format, Kernel Tuner's `tune_kernel_T1`), read
as the landscape benchmarks need it: each parameter's values (default first) and the Conditions.

The file is untrusted: nothing in it is run. A parameter's `Values` is a list, or a string in one
of the forms Kernel Tuner's T1 reader accepts (it `eval`s them; here a small evaluator reads them):
a literal list (``"[16, 32, 64]"``, ``"['a', 'b']"``), ``range(...)`` or ``list(range(...))``, and
a list comprehension over one range of integer arithmetic (``"[128+64*i for i in range(15)]"``).
A `Conditions` entry is ``{"Expression": TEXT, ...}`` or the text itself. Anything else is an
`InputError` with one line.
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

MAX_VALUES = 100_000  # values one parameter may list
MAX_T1_BYTES = 16 << 20


class InputError(ValueError):
    """A file or option the benchmark cannot use: one line, reported with exit status 2."""


def read_t1(path: Path) -> dict:
    """The T1 file's JSON object; InputError (one line) when it is missing, unreadable or no T1 space."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_T1_BYTES + 1)
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror or error}") from None
    if len(raw) > MAX_T1_BYTES:
        raise InputError(f"{path}: larger than {MAX_T1_BYTES >> 20} MiB")
    try:
        t1 = json.loads(raw)
    except ValueError as error:
        raise InputError(f"{path}: not a T1 file (JSON): {str(error)[:120]}") from None
    parameters(t1, path)  # checked once here: every later reader can trust it
    conditions(t1, path)
    return t1


def _space(t1: Any, where: object) -> Mapping[str, Any]:
    space = t1.get("ConfigurationSpace") if isinstance(t1, dict) else None
    if not isinstance(space, dict) or not isinstance(space.get("TuningParameters"), list) \
            or not space["TuningParameters"]:
        raise InputError(f"{where}: not a T1 file: no ConfigurationSpace with TuningParameters")
    return space


def parameters(t1: Any, where: object = "T1 file") -> dict[str, list[Any]]:
    """Each tuning parameter's values, in the file's order."""
    found: dict[str, list[Any]] = {}
    for index, parameter in enumerate(_space(t1, where)["TuningParameters"]):
        name = parameter.get("Name") if isinstance(parameter, dict) else None
        if not isinstance(name, str) or not name.isidentifier() or name in found:
            raise InputError(f"{where}: TuningParameters[{index}]: no Name, or not a unique identifier")
        try:
            found[name] = t1_values(parameter.get("Values"))
        except InputError as error:
            raise InputError(f"{where}: {name}'s Values: {error}") from None
        default = parameter.get("Default", found[name][0])
        if not any(_same(default, v) for v in found[name]):
            raise InputError(f"{where}: {name}'s Default {default!r} is not one of its Values")
    return found


def defaults(t1: Any) -> dict[str, Any]:
    """Each parameter's default (its first value when it names none)."""
    values = parameters(t1)
    return {p["Name"]: p.get("Default", values[p["Name"]][0]) for p in _space(t1, "T1 file")["TuningParameters"]}


def conditions(t1: Any, where: object = "T1 file") -> list[str]:
    """The Conditions' expressions: each entry a {"Expression": ...} object or the text itself."""
    texts = []
    for index, condition in enumerate(_space(t1, where).get("Conditions") or []):
        text = condition.get("Expression") if isinstance(condition, dict) else condition
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"{where}: Conditions[{index}] is neither an expression nor an object with one")
        texts.append(text)
    return texts


def _same(a: Any, b: Any) -> bool:
    """Equal, a bool only to a bool (True is not 1; 1 is 1.0, as Kernel Tuner compares them)."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def t1_values(values: Any) -> list[Any]:
    """A parameter's value list: a JSON list, or a string Kernel Tuner's reader accepts (see the
    module docstring), read without running anything; each value a number, a string or a bool."""
    if isinstance(values, str):
        try:
            values = _evaluate(ast.parse(values.strip(), mode="eval").body, {}, _Made())
        except (SyntaxError, ValueError, TypeError, ZeroDivisionError, RecursionError) as error:
            raise InputError(f"cannot read {values[:80]!r}: {error}") from None
    if not isinstance(values, list | tuple | range) or not values:
        raise InputError("not a non-empty list of values")
    values = list(values)
    if len(values) > MAX_VALUES:
        raise InputError(f"more than {MAX_VALUES:,} values")
    if not all(isinstance(v, int | float | str) for v in values):  # bool is an int
        raise InputError("each value must be a number, a string or a bool")
    return values


_OPERATORS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Div: operator.truediv}


class _Made:
    """The values an expression's lists have made so far, all nested lists together: refused past
    MAX_VALUES as they are made, so "[[i for i in range(100000)] for j in range(100000)]" stops
    after MAX_VALUES values, never after 10**10."""

    def __init__(self) -> None:
        self.count = 0

    def add(self, how_many: int) -> None:
        self.count += how_many
        if self.count > MAX_VALUES:
            raise ValueError(f"more than {MAX_VALUES:,} values in all its lists")


def _evaluate(node: ast.AST, names: Mapping[str, int], made: _Made) -> Any:
    """The value of a literal, range, list(range) or one-range list comprehension; ValueError else
    (and past MAX_VALUES values made by its lists: `made`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float | str):
        return node.value
    if isinstance(node, ast.List | ast.Tuple):
        made.add(len(node.elts))
        return [_evaluate(e, names, made) for e in node.elts]
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.Name) and node.id in ("true", "false"):  # a JSON list in a string
        return node.id == "true"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _evaluate(node.operand, names, made)
        if isinstance(operand, int | float):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left, names, made), _evaluate(node.right, names, made)
        if all(isinstance(v, int | float) and abs(v) < 1 << 53 for v in (left, right)):
            return _OPERATORS[type(node.op)](left, right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        if node.func.id == "range" and 1 <= len(node.args) <= 3:
            bounds = [_evaluate(a, names, made) for a in node.args]
            if all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
                found = range(*bounds)
                if len(found) <= MAX_VALUES:
                    return found
        if node.func.id == "list" and len(node.args) == 1:
            inner = _evaluate(node.args[0], names, made)
            if isinstance(inner, range | list):
                made.add(len(inner) if isinstance(inner, range) else 0)  # a list's values are counted already
                return list(inner)
    if isinstance(node, ast.ListComp) and len(node.generators) == 1:
        generator = node.generators[0]
        if isinstance(generator.target, ast.Name) and not generator.ifs and not generator.is_async:
            over = _evaluate(generator.iter, names, made)
            if isinstance(over, range | list):
                return [_counted(_evaluate(node.elt, {**names, generator.target.id: i}, made), made) for i in over]
    raise ValueError(f"{ast.dump(node)[:60]} is not a literal, a range or a list comprehension over one")


def _counted(value: Any, made: _Made) -> Any:
    """One value a list comprehension made, counted."""
    made.add(1)
    return value
