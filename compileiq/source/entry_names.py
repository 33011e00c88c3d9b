"""Which compiled entry a kernel name in tune.toml means: ``saxpy`` is ``saxpy`` (extern "C"),
``_Z5saxpyifPf`` (a plain C++ kernel) and ``_ZN3ops6detail5saxpyEifPf`` (one in a namespace,
named or anonymous); ``ops::detail::saxpy`` names the namespaced one only, and ``tile<128>`` or
``reduce6<float, 256, true>`` (arguments that are integers, ``true``/``false``, built-in types or
their fixed-width aliases, ``int16_t`` for ``short``)
one instance of a kernel template, an enumerator argument by its enum and value as a demangler
prints it (``scan<int, 128, (cub::BlockScanAlgorithm)2>``: the mangled name holds no enumerator
name; enclosing and inline namespaces, such as CUB's versioned ``CUB_300001_SM_900``, may be left
out); a template's name alone names every instance. A mangled name
matches itself. A kernel of internal linkage under -rdc=true (``static __global__``, named
``__nv_static_25__<25 characters>_Z3addPf`` by nvcc) is named as its name after that prefix is
(``add``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

# a kernel name as tune.toml may write it: an identifier (plain or mangled) or a qualified C++ name,
# optionally with template arguments (integers, true/false, built-in types)
_ARGUMENT = (r"\s*(?:-?\d+|[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*(?:\s+[A-Za-z_]\w*)*"  # 8, -2, true, unsigned int, cub::BLOCK_SCAN_RAKING
             r"|\(\s*[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*\s*\)\s*-?\d+)\s*")  # (cub::BlockScanAlgorithm)2
KERNEL_NAME = re.compile(rf"[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*(?:<{_ARGUMENT}(?:,{_ARGUMENT})*>)?")
# Itanium codes of the built-in types a kernel template is instantiated with (`reduce6<float, 256, true>`)
_BUILTIN = {"v": "void", "b": "bool", "c": "char", "a": "signed char", "h": "unsigned char", "s": "short",
            "t": "unsigned short", "i": "int", "j": "unsigned int", "l": "long", "m": "unsigned long",
            "x": "long long", "y": "unsigned long long", "f": "float", "d": "double", "e": "long double"}
# the fixed-width aliases of <cstdint> (and size_t) as the built-in types they are on Linux, x86_64 and
# aarch64 alike (LP64, glibc): what nvcc mangles `tile<int16_t>` as (`_Z4tileIsEvPT_`, `tile<short>`)
_ALIASES = {"int8_t": "signed char", "uint8_t": "unsigned char", "int16_t": "short", "uint16_t": "unsigned short",
            "int32_t": "int", "uint32_t": "unsigned int", "int64_t": "long", "uint64_t": "unsigned long",
            "size_t": "unsigned long"}
_LITERAL = re.compile(r"L([a-z])(n?)(\d+)E")
_VALUE = re.compile(r"(n?)(\d+)E")  # an enum literal's value, after its type
_CAST = re.compile(r"\(([^()]*)\)\s*(-?\d+)")  # (cub::BlockScanAlgorithm)2, as tune.toml gives it
_SOURCE_NAME = re.compile(r"(\d+)")
_BACK_REFERENCE = re.compile(r"S([0-9A-Z]*)_")  # an Itanium substitution: S_, S0_, S1_, ..., SA_
_NESTED_QUALIFIERS = "KVrOR"  # cv- and ref-qualifiers of a member function, before its names
_STATIC = re.compile(r"__nv_static_(\d{1,6})__")  # then that many characters (path hash, file), then the name


def with_macros(name: str, macros: Mapping[str, object]) -> str:
    """``reduce6<double, BLOCK, false>`` with BLOCK=128 is ``reduce6<double, 128, false>``: a template
    argument that names a macro (fixed, or tuned: the variant's value) stands for its value, so
    that a [launch] table or `entries` can name the instance a tuned macro picks."""
    base, bracket, args = name.partition("<")
    if not bracket or not macros:
        return name
    parts = [a.strip() for a in args.removesuffix(">").split(",")]
    return f"{base}<{', '.join(str(macros.get(p, p)) for p in parts)}>"


def macro_values(config: Mapping[str, object], fixed: Iterable[tuple[str, str]]) -> dict[str, object]:
    """The macros a variant builds with, by name: the fixed ones, then its tuned ``define.NAME`` values."""
    return {**dict(fixed), **{k.removeprefix("define."): v for k, v in config.items() if k.startswith("define.")}}


def entry_matches(entry: str, name: str) -> bool:
    """Whether the compiled entry ``entry`` (maybe mangled) is the kernel called ``name``."""
    if entry == name:
        return True
    entry = linkage_free(entry)
    base, _, args = name.partition("<")
    found = _name_and_end(entry, base.split("::"))
    if found is None:
        return False
    if not args:
        return True
    mangled, given = template_arguments(entry, found), [_argument(a) for a in args.rstrip(">").split(",")]
    return mangled is not None and len(mangled) == len(given) and all(map(_same_argument, mangled, given))


def template_arguments(entry: str, position: int) -> list[str] | None:
    """The template arguments mangled at ``position`` of ``entry``, as tune.toml writes them
    (``256``, ``true``, ``float``, ``(cub::BlockScanAlgorithm)2``); None when there are none, or
    one is not an integer, a bool, an enumerator or a built-in type (a class, a pointer: name such
    an instance by its mangled name)."""
    if not entry.startswith("I", position):
        return None
    arguments, position = [], position + 1
    nested = nested_name(entry)  # the back-references an argument may make (S_, S0_, ...): its prefixes
    prefixes = ["::".join(nested[0][:i + 1]) for i in range(len(nested[0]))] if nested else []
    while position < len(entry) and entry[position] != "E":
        if literal := _LITERAL.match(entry, position):
            kind, minus, digits = literal.groups()
            arguments.append(("true" if digits != "0" else "false") if kind == "b" else f"{'-' if minus else ''}{int(digits)}")
            position = literal.end()
        elif enum := _enum_literal(entry, position, prefixes):
            arguments.append(enum[0])
            position = enum[1]
        elif entry[position] in _BUILTIN:
            arguments.append(_BUILTIN[entry[position]])
            position += 1
        else:
            return None
    return arguments if arguments and position < len(entry) else None


def _enum_literal(entry: str, position: int, prefixes: Sequence[str] = ()) -> tuple[str, int] | None:
    """An enumerator argument at ``position`` (``LN3cub18BlockScanAlgorithmE2E``: its enum's name,
    maybe nested, then its value) as a demangler prints it, ``(cub::BlockScanAlgorithm)2``, and
    where it ends; None for anything else. An enum of the kernel's own namespace starts with a
    back-reference to it (``LNS_4AlgoE1E`` in ``_ZN2ns1kILi128ELNS_4AlgoE1EEEvPf``: S_ is ``ns``),
    read from the kernel's name's ``prefixes`` (S_ the first, S0_ the first two, ...)."""
    if not entry.startswith("L", position) or entry[position + 1:position + 2] in _BUILTIN:
        return None
    nested = entry.startswith("N", position + 1)
    names, position = [], position + 1 + nested
    if nested and (back := _BACK_REFERENCE.match(entry, position)):
        index = 0 if not back[1] else int(back[1], 36) + 1
        if index >= len(prefixes):
            return None
        names, position = prefixes[index].split("::"), back.end()
    while found := _SOURCE_NAME.match(entry, position):
        length, start = int(found[1]), found.end()
        if not 0 < length <= len(entry) - start:
            return None
        names.append(entry[start:start + length])
        position = start + length
        if not nested:
            break
    if nested and not entry.startswith("E", position):
        return None
    value = _VALUE.match(entry, position + nested)
    if not names or value is None:
        return None
    return f"({'::'.join(names)}){'-' if value[1] else ''}{int(value[2])}", value.end()


def _same_argument(mangled: str, given: str) -> bool:
    """Whether tune.toml's argument names the mangled one: the same text, or for an enumerator the
    same value of an enum whose name ends the same and whose namespaces, as given, are among the
    mangled ones in order (inline and enclosing namespaces may be left out)."""
    if mangled == given:
        return True
    ours, theirs = _CAST.fullmatch(mangled), _CAST.fullmatch(given)
    if ours is None or theirs is None or int(ours[2]) != int(theirs[2]):
        return False
    full, named = ours[1].split("::"), [n.strip() for n in theirs[1].split("::")]
    if full[-1] != named[-1]:
        return False
    rest = iter(full[:-1])
    return all(name in rest for name in named[:-1])  # a subsequence, in order


def _argument(text: str) -> str:
    """A template argument as tune.toml gives it, in the form `template_arguments` reads it (a
    fixed-width alias, `int16_t` or `std::int16_t`, as the built-in type it is: `_ALIASES`)."""
    words = " ".join(text.split())
    if re.fullmatch(r"-?\d+", words):
        return str(int(words))
    return _ALIASES.get(words.removeprefix("std::"), words)


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


def linkage_free(entry: str) -> str:
    """``entry`` without the prefix nvcc gives a ``static`` kernel under -rdc=true
    (``__nv_static_25__8f633831_4_k_cu_d589cb60__Z3addPf`` -> ``_Z3addPf``); any other as it is."""
    if (found := _STATIC.match(entry)) and found.end() + int(found[1]) < len(entry):
        return entry[found.end() + int(found[1]):]
    return entry


def kernel_names(entries: Sequence[str]) -> list[str]:
    """Each compiled kernel as every result and view names it (an ACF's `launch_by_kernel`, the
    `unscored` tables, a failure's list of kernels, the scored `entries`): as tune.toml names it
    (`readable`), with its compiled name beside it where two of `entries` share that name (overloads:
    ``foo (_Z3fooi)``, ``foo (_Z3foof)``), which only it tells apart."""
    shown = [readable(entry) for entry in entries]
    return [name if shown.count(name) == 1 else f"{name} ({entry})" for name, entry in zip(shown, entries, strict=True)]


def compiled_names(entries: Sequence[str]) -> list[str]:
    """How an ACF of a release before `kernel_names` keyed an overload in `launch_by_kernel`: by its
    compiled name alone (``_Z3fooi``); any other kernel as `kernel_names` does. The gate still reads those."""
    shown = [readable(entry) for entry in entries]
    return [name if shown.count(name) == 1 else entry for name, entry in zip(shown, entries, strict=True)]


def readable(entry: str) -> str:
    """The name tune.toml can give a compiled entry: a mangled one's source name, with its template
    arguments where `template_arguments` reads them (``_Z14calculate_tempiPf...`` -> ``calculate_temp``,
    ``_ZN3ops4tileILi8EEEvPf`` -> ``ops::tile<8>``); any other entry as it is. (No demangler ships
    with every toolkit.) A ``static`` kernel's under -rdc=true without nvcc's prefix (`linkage_free`)."""
    entry = linkage_free(entry)
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
    return f"{base}<{', '.join(arguments)}>" if arguments else base
