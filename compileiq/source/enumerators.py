"""Enumerators as template arguments of tune.toml's kernel names (``BlockPrefixSumKernel<int, 128,
cub::BLOCK_SCAN_RAKING>``).

A mangled name holds an enumerator argument as its enum and value, ``(cub::BlockScanAlgorithm)0``
(`entry_names`), never its name. So each enumerator a name gives is looked up once, when the kernel
is bundled, among the enum definitions of the files its build reads (the `nvcc -M` list, the
toolkit's CUB headers included), read as text: nothing is compiled or run for it. The result maps
the argument as written to the form a mangled name decodes to; `entry_names.with_macros` puts it
in. An enumerator whose value is not a plain integer, or the previous one's plus one, stays
unresolved (it then matches no instance, and the run's error lists the instances as they decode).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from compileiq.source.comments import without_comments

_QUALIFIED = re.compile(r"[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*")
_NOT_ENUMERATORS = {"true", "false", "void", "bool", "char", "signed", "unsigned", "short", "int", "long", "float",
                    "double"}
# An underlying type is short: bounded, so an `enum E :` never followed by a brace scans a bounded
# stretch, not the rest of the file for each one.
_ENUM = re.compile(r"\benum\s+(class\s+|struct\s+)?([A-Za-z_]\w*)\s*(?::[^{};]{0,256})?\{([^{}]*)\}")
_ITEM = re.compile(r"([A-Za-z_]\w*)(?:\s+[A-Za-z_]\w*(?:\([^()]*\))?)*\s*(?:=\s*(.+))?", re.DOTALL)
_INTEGER = re.compile(r"(-?)\s*(0[xX][0-9a-fA-F]+|\d+)[uUlL]*")
MAX_FILE_BYTES = 4 << 20
MAX_FILES = 4096


def wanted(names: Iterable[str]) -> set[str]:
    """The template arguments of ``names`` that may be enumerators: identifiers, maybe qualified,
    that are no built-in type or bool (a macro's name is put in by `with_macros` first)."""
    found: set[str] = set()
    for name in names:
        _, bracket, args = name.partition("<")
        for arg in args.removesuffix(">").split(",") if bracket else ():
            arg = "".join(arg.split())
            if _QUALIFIED.fullmatch(arg) and arg not in _NOT_ENUMERATORS:
                found.add(arg)
    return found


def resolve(names: set[str], files: Sequence[Path]) -> tuple[tuple[str, str], ...]:
    """Each of ``names`` (``cub::BLOCK_SCAN_RAKING``) that an enum of ``files`` defines, with the
    form its mangled argument decodes to (``(cub::BlockScanAlgorithm)0``); the first definition
    found, in the compiler's order, where several enums define one name."""
    if not names:
        return ()
    last = {name: name.rpartition("::")[2] for name in names}
    values: dict[str, tuple[bool, str, int]] = {}  # enumerator -> (scoped, its enum, value)
    for path in files[:MAX_FILES]:
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if not any(word in text for word in last.values() if word not in values):
            continue
        for scoped, enum, body in _ENUM.findall(without_comments(text)):
            for item, value in _enumerators(body):
                if item in last.values():
                    values.setdefault(item, (bool(scoped), enum, value))
    resolved: list[tuple[str, str]] = []
    for name in sorted(names):
        if (found := values.get(last[name])) is None:
            continue
        scoped, enum, value = found
        qualifiers = name.split("::")[:-1]
        if scoped and qualifiers[-1:] != [enum]:
            continue  # a scoped enumerator is named through its enum
        enum_name = "::".join(qualifiers if qualifiers[-1:] == [enum] else [*qualifiers, enum])
        resolved.append((name, f"({enum_name}){value}"))
    return tuple(resolved)


def _enumerators(body: str) -> list[tuple[str, int]]:
    """An enum body's enumerators with their values, up to the first whose value is an expression
    (its own and the following ones' values are not known without compiling)."""
    found: list[tuple[str, int]] = []
    known: dict[str, int] = {}
    following = 0
    for part in body.split(","):
        if not part.strip():
            continue
        item = _ITEM.fullmatch(part.strip())
        if item is None:
            break
        given = (item[2] or "").strip()
        if given:
            if number := _INTEGER.fullmatch(given):
                digits = number[2]
                base = 16 if digits[:2] in ("0x", "0X") else 8 if len(digits) > 1 and digits[0] == "0" else 10
                following = int(digits, base) * (-1 if number[1] else 1)
            elif given in known:
                following = known[given]
            else:
                break
        found.append((item[1], following))
        known[item[1]] = following
        following += 1
    return found
