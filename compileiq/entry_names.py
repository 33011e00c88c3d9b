"""Which compiled entry a kernel name in tune.toml means: ``saxpy`` is ``saxpy`` (extern "C"),
``_Z5saxpyifPf`` (a plain C++ kernel) and ``_ZN3ops6detail5saxpyEifPf`` (one in a namespace,
named or anonymous); ``ops::detail::saxpy`` names the namespaced one only. A mangled name
matches itself."""

from __future__ import annotations

import re

# a kernel name as tune.toml may write it: an identifier (plain or mangled) or a qualified C++ name
KERNEL_NAME = re.compile(r"[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*")
_SOURCE_NAME = re.compile(r"(\d+)")
_NESTED_QUALIFIERS = "KVrOR"  # cv- and ref-qualifiers of a member function, before its names


def entry_matches(entry: str, name: str) -> bool:
    """Whether the compiled entry ``entry`` (maybe mangled) is the kernel called ``name``."""
    if entry == name:
        return True
    parts = name.split("::")
    if len(parts) == 1 and entry.startswith(f"_Z{len(name)}{name}"):
        return True
    nested = nested_name(entry)
    return nested is not None and len(nested) >= len(parts) and nested[-len(parts):] == parts


def nested_name(entry: str) -> list[str] | None:
    """The components of an Itanium nested name (``_ZN3ops5scaleE...`` -> ["ops", "scale"]), up
    to its end or its template arguments; None for any other entry."""
    if not entry.startswith("_ZN"):
        return None
    position = 3
    while position < len(entry) and entry[position] in _NESTED_QUALIFIERS:
        position += 1
    parts: list[str] = []
    while match := _SOURCE_NAME.match(entry, position):
        length = int(match[1])
        start = match.end()
        if length == 0 or start + length > len(entry):
            return None
        parts.append(entry[start:start + length])
        position = start + length
    return parts or None
