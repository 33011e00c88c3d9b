"""Whether tune.toml's macros reach the code: a ``-DNAME`` is lost when a file of the kernel
``#define``s NAME itself without asking first (``#ifndef NAME``), as cuda-samples' kernels do with
their tile sizes. Tuning such a macro would compare identical builds and write a setting that
does nothing into the ACF, so the run is refused before any build, naming the line (`macro_effect`
refuses one that changes no code for any other reason)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from compileiq.core.errors import UsageError
from compileiq.source.base_flags import cap_note
from compileiq.source.launch import without_comments

if TYPE_CHECKING:
    from compileiq.source.spec import KernelSpec, SourceBundle

_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)", re.MULTILINE)


class MacroError(UsageError):
    """A tune.toml macro that the kernel's own #define overrides."""


def check_macros_take_effect(spec: KernelSpec, bundle: SourceBundle) -> None:
    """MacroError naming the first tune.toml macro that a bundled file #defines unguarded."""
    keys = {name: f"defines.{name}" for name, _ in spec.defines}
    keys.update({name: f"tune.defines.{name}" for name, _ in spec.tuned_defines})
    if not keys:
        return
    for rel, content in bundle.files:
        text = without_comments(content.decode(errors="replace"), keep_lines=True)
        for match in _DEFINE.finditer(text):
            name = match.group(1)
            if name in keys and not _asked_first(text[: match.start()], name):
                lines = [text.count("\n", 0, m.start()) + 1 for m in _DEFINE.finditer(text)
                         if m.group(1) == name and not _asked_first(text[: m.start()], name)]
                where = f"{spec.source.parent / 'tune.toml'}: {keys[name]}: {rel}"
                if len(lines) == 1:
                    raise MacroError(f"{where}:{lines[0]} #defines {name} itself, so -D{name} has no effect: "
                                     f"guard that line with #ifndef {name}")
                raise MacroError(f"{where} #defines {name} itself on lines {', '.join(map(str, lines))} (one of "
                                 f"them whatever -D{name} says), so -D{name} has no effect: wrap them in "
                                 f"#ifndef {name} ... #endif, or tune a macro they read instead")


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


def _asked_first(before: str, name: str) -> bool:
    """Whether an #ifdef/#ifndef/#if defined(NAME) comes before the #define."""
    asks = rf"^[ \t]*#[ \t]*(?:ifn?def[ \t]+{name}\b|(?:el)?if\b[^\n]*\bdefined\b[ \t(]*{name}\b)"
    return re.search(asks, before, re.MULTILINE) is not None
