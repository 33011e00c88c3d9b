"""Which compiled entry a kernel name in tune.toml means: ``saxpy`` is ``saxpy`` (extern "C"),
``_Z5saxpyifPf`` (a plain C++ kernel) and ``_ZN3ops6detail5saxpyEifPf`` (one in a namespace,
named or anonymous); ``ops::detail::saxpy`` names the namespaced one only, and ``tile<128>``
(integer template arguments) one instance of a kernel template. A mangled name matches itself."""

from __future__ import annotations

import re

# a kernel name as tune.toml may write it: an identifier (plain or mangled) or a qualified C++ name,
# optionally with integer template arguments
KERNEL_NAME = re.compile(r"[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*(?:<\s*-?\d+(?:\s*,\s*-?\d+)*\s*>)?")
_SOURCE_NAME = re.compile(r"(\d+)")
_NESTED_QUALIFIERS = "KVrOR"  # cv- and ref-qualifiers of a member function, before its names
_TEMPLATE_ARGS = re.compile(r"I((?:L[a-z]n?\d+E)+)E")  # integer arguments: ILi16EE, ILj8ELb1EE
_INTEGER_ARG = re.compile(r"L[a-z](n?)(\d+)E")


def entry_matches(entry: str, name: str) -> bool:
    """Whether the compiled entry ``entry`` (maybe mangled) is the kernel called ``name``."""
    if entry == name:
        return True
    base, _, args = name.partition("<")
    found = _name_and_end(entry, base.split("::"))
    if found is None:
        return False
    return not args or template_arguments(entry, found) == [int(a) for a in args.rstrip(">").split(",")]


def template_arguments(entry: str, position: int) -> list[int] | None:
    """The integer template arguments mangled at ``position`` of ``entry`` (None when there are none)."""
    match = _TEMPLATE_ARGS.match(entry, position)
    if match is None:
        return None
    return [int(digits) * (-1 if minus else 1) for minus, digits in _INTEGER_ARG.findall(match[1])]


def _name_and_end(entry: str, parts: list[str]) -> int | None:
    """Where the name's last component ends in ``entry`` when ``entry`` is that kernel, else None."""
    if len(parts) == 1 and entry.startswith(prefix := f"_Z{len(parts[0])}{parts[0]}"):
        return len(prefix)
    nested = nested_name(entry)
    if nested is None:
        return None
    names, ends = nested
    if len(names) < len(parts) or names[-len(parts):] != parts:
        return None
    return ends[-1]


def nested_name(entry: str) -> tuple[list[str], list[int]] | None:
    """The components of an Itanium nested name (``_ZN3ops5scaleE...`` -> ["ops", "scale"]) up to
    its end or its template arguments, and where each ends; None for any other entry."""
    if not entry.startswith("_ZN"):
        return None
    position = 3
    while position < len(entry) and entry[position] in _NESTED_QUALIFIERS:
        position += 1
    parts: list[str] = []
    ends: list[int] = []
    while match := _SOURCE_NAME.match(entry, position):
        length = int(match[1])
        start = match.end()
        if length == 0 or start + length > len(entry):
            return None
        parts.append(entry[start:start + length])
        position = start + length
        ends.append(position)
    return (parts, ends) if parts else None


def readable(entry: str) -> str:
    """The name tune.toml can give a compiled entry: a mangled one's source name, with its integer
    template arguments (``_Z14calculate_tempiPf...`` -> ``calculate_temp``, ``_ZN3ops4tileILi8EEEvPf``
    -> ``ops::tile<8>``); any other entry as it is. (No demangler ships with every toolkit.)"""
    nested = nested_name(entry)
    if nested is not None:
        names, ends = nested
        base, end = "::".join(n for n in names if not n.startswith("_GLOBAL__N")), ends[-1]  # anonymous namespaces
    elif (plain := re.match(r"_Z(\d+)", entry)) and int(plain[1]) and plain.end() + int(plain[1]) <= len(entry):
        end = plain.end() + int(plain[1])
        base = entry[plain.end():end]
    else:
        return entry
    arguments = template_arguments(entry, end)
    return f"{base}<{', '.join(str(a) for a in arguments)}>" if arguments else base
