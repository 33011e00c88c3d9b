"""Whether tune.toml's macros reach the code: a ``-DNAME`` is lost when a file of the kernel
``#define``s NAME itself without asking first (``#ifndef NAME``), as cuda-samples' kernels do with
their tile sizes. Tuning such a macro would compare identical builds and write a setting that
does nothing into the ACF, so the run is refused before any build, naming the line (`macro_effect`
refuses one that changes no code for any other reason)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from compileiq.core.errors import UsageError
from compileiq.source.base_flags import cap_note
from compileiq.source.comments import without_comments

if TYPE_CHECKING:
    from compileiq.source.spec import KernelSpec, SourceBundle

# The directives that #define a macro or ask whether one is defined, in the order of the file.
_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(?:define[ \t]+([A-Za-z_]\w*)|ifn?def[ \t]+([A-Za-z_]\w*)|(?:el)?if\b([^\n]*))",
                        re.MULTILINE)
_DEFINED = re.compile(r"\bdefined\b[ \t(]*([A-Za-z_]\w*)")


class MacroError(UsageError):
    """A tune.toml macro that the kernel's own #define overrides."""


def check_macros_take_effect(spec: KernelSpec, bundle: SourceBundle) -> None:
    """MacroError naming every tune.toml macro that a bundled file #defines unguarded (each with
    the first such file and its lines), all at once: one fix and one run, not one per macro."""
    keys = {name: f"defines.{name}" for name, _ in spec.defines}
    keys.update({name: f"tune.defines.{name}" for name, _ in spec.tuned_defines})
    if not keys:
        return
    found: dict[str, tuple[str, list[int]]] = {}  # macro -> (the first file defining it unguarded, its lines)
    for rel, content in bundle.files:
        for name, lines in _unguarded(without_comments(content.decode(errors="replace"), keep_lines=True),
                                      keys).items():
            found.setdefault(name, (rel, lines))
    if not found:
        return
    where = spec.source.parent / "tune.toml"
    if len(found) == 1:
        [(name, (rel, lines))] = found.items()
        if len(lines) == 1:
            raise MacroError(f"{where}: {keys[name]}: {rel}:{lines[0]} #defines {name} itself, so -D{name} has no "
                             f"effect: guard that line with #ifndef {name}")
        raise MacroError(f"{where}: {keys[name]}: {rel} #defines {name} itself on lines {', '.join(map(str, lines))} "
                         f"(one of them whatever -D{name} says), so -D{name} has no effect: wrap them in "
                         f"#ifndef {name} ... #endif, or tune a macro they read instead")
    each = "; ".join(f"{keys[name]}: {rel}:{','.join(map(str, lines))}" for name, (rel, lines) in found.items())
    raise MacroError(f"{where}: the kernel #defines {len(found)} of its tune.toml macros itself, so their -D has no "
                     f"effect: {each}: guard each line with #ifndef NAME ... #endif, or tune a macro they read "
                     "instead")


def _unguarded(text: str, keys: Mapping[str, str]) -> dict[str, list[int]]:
    """The lines of each of ``keys``' macros that ``text`` #defines with no #ifdef, #ifndef or
    #if defined(NAME) for it before: one pass over the directives, in order."""
    asked: set[str] = set()
    found: dict[str, list[int]] = {}
    line, counted = 1, 0
    for match in _DIRECTIVE.finditer(text):
        defined, tested, condition = match.groups()
        if tested is not None:
            asked.add(tested)
        elif condition is not None:
            asked.update(_DEFINED.findall(condition))
        elif defined in keys and defined not in asked:
            line += text.count("\n", counted, match.start())
            counted = match.start()
            found.setdefault(defined, []).append(line)
    return found


def unnamed_kernels(spec: KernelSpec, bundle: SourceBundle) -> list[str]:
    """One line per kernel name of tune.toml (`entries`, a [launch.NAME] table) that no file of the
    kernel names: a misspelling, found before any build (a mangled name is not looked for, nor a
    name that a macro pastes together, hence a note: the build decides)."""
    named = [("entries", name) for name in spec.entries] + [(f"launch.{f.entry}", f.entry) for f in spec.launch]
    wanted = [(key, name) for key, name in named if not name.startswith("_Z")]
    if not wanted:
        return []
    texts = _texts(bundle)
    lines = []
    for key, name in wanted:
        base = name.partition("<")[0].rpartition("::")[2].strip()
        if not any(re.search(rf"\b{re.escape(base)}\b", text) for text in texts):
            lines.append(f"{key}: no file of {spec.source.name} names {base!r}, so no kernel of the build "
                         "is likely to match it (misspelt?)")
    return lines


def source_notes(spec: KernelSpec, bundle: SourceBundle) -> list[str]:
    """What `space` and `tune` say of the kernel's settings before any build, one line each: nvcc's
    register cap among the base flags, a kernel name no file spells (a tuned macro that changes no
    code is refused: `macro_effect`)."""
    return cap_note(spec.nvcc_flags) + unnamed_kernels(spec, bundle)


def _texts(bundle: SourceBundle) -> list[str]:
    """Every bundled file's text without its comments (line numbers kept)."""
    return [without_comments(content.decode(errors="replace"), keep_lines=True) for _, content in bundle.files]


