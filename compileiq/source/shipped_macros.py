"""The value a tuned macro has in the build a project ships when its compile command gives no -D
for it: the kernel's own default (`#ifndef TILE` / `#define TILE 16`). The baseline holds a macro
the command leaves out at tune.toml's first value, so where the kernel's own default is another
value, "your build" would be a build nobody ships and every speedup over it false: the run stops
in one line saying which value the build has and how to make the two agree.

Found by preprocessing (`nvcc -E`, device and host side as `macro_effect` does) as the command builds
it (its own -D, nothing added) and as the baseline does (each macro it leaves out at tune.toml's
first value): the same text is the same build. Where the text differs, a probe appended to the
kernel reads what each such macro expands to after the kernel's own #defines, the other macros as
the command has them (`#define TN TM` under -DTM=8 is 8): `(16)`, `0x10`, `020` are 16; an
expression, `(BLOCK / 8)`, is evaluated by the preprocessor's own `#if`. A default of the first
value spelled otherwise is the baseline only where it is one value wherever the code reads it (a
literal, or a whole in parentheses: `2+2` is not, `ty * TILE` reads `ty*2+2`), and is confirmed:
the kernel preprocessed with -D at what the probe read must be the build without the -D, else a
later `#undef`/`#define` (after the code that reads it) fooled the probe; the build with every such
spelling must then be the command's. The probe reads both sides: a default the device and the host
code see differently (`#ifdef __CUDA_ARCH__`) is no one value a -D tunes, and is refused naming both.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from compileiq.core.processes import scratch_dir
from compileiq.source.device_ptx import device_ptx
from compileiq.source.host_levels import command_level
from compileiq.source.kernel import with_base_flags
from compileiq.source.macro_effect import SIDES, Macros, Preprocessed, preprocess
from compileiq.source.macros import MacroError
from compileiq.source.spec import KernelSpec

_PROBE = "__compileiq_macro_probe__"


class KernelDefaultError(MacroError):
    """A tuned macro the command gives no -D whose kernel default is not tune.toml's first value;
    its words are the kernel's and tune.toml's, never the command's (the gate may quote it for a
    database an untrusted ACF names)."""
# a C/C++14 integer literal of type int: hex, binary, octal (a leading 0) or decimal, ' between digits,
# no suffix (8u, 8l, 8ull are another type than the -D8 the baseline builds: `(8u - 9) < 0` is false)
_INTEGER = re.compile(r"(?P<sign>[+-]?)(?:0[xX](?P<hex>[0-9a-fA-F](?:'?[0-9a-fA-F])*)|0[bB](?P<bin>[01](?:'?[01])*)"
                      r"|(?P<oct>0(?:'?[0-7])*)|(?P<dec>[1-9](?:'?[0-9])*))")
# a literal with a type suffix anywhere in an expansion: never the same build as a plain number
_TYPED = re.compile(r"(?<![\w.])(?:0[xX][0-9a-fA-F']+|0[bB][01']+|[0-9][0-9']*)(?:[uU][lLzZ]*|[lLzZ]+[uU]?)(?!\w)")
_BASES = {"hex": 16, "bin": 2, "oct": 8, "dec": 10}


@dataclass(frozen=True)
class _Default:
    """What one tuned macro is in the shipped build, where its command gives no -D."""

    name: str
    values: tuple[int | str, ...]
    value: int | str | None  # the listed value the kernel's own default is; None: none of them
    expansion: str | None  # what the macro expands to there; None: the kernel does not preprocess without it


def check_shipped_macro_defaults(spec: KernelSpec, nvcc: str, host_level: str | None = None) -> None:
    """KernelDefaultError for the first tuned macro the shipped command (--compile-commands) gives no -D
    for whose kernel default does not build as the baseline does (at tune.toml's first value).
    `spec`: as `host_check` left it (its base flags the baseline's); `host_level`: the command's
    (`shipped_host_level`, read before that check relabels it), which the shipped build has."""
    if spec.shipped is None:
        return
    given = {s.name.removeprefix("define."): s.value for s in spec.shipped.settings if s.name.startswith("define.")}
    left = [(name, values) for name, values in spec.tuned_defines if name not in given]
    if not left:
        return
    shipped: Macros = given | {name: None for name, _ in left}  # the command's macros: nothing added
    baseline: Macros = given | {name: values[0] for name, values in left}  # what compileiq builds as "your build"
    own, spec = spec, _with_host_level(spec, host_level)  # the baseline's flags; the command's, its host level as nvcc hands it
    with scratch_dir("shipped-macros") as scratch:
        texts = Preprocessed(spec, nvcc, Path(scratch))
        # and each left-out macro alone at the first value (`_problem`'s `at_first`): one batch, run at once
        at_first = [{**shipped, name: values[0]} for name, values in left]
        texts.prefetch([(side, macros) for side in SIDES for macros in (shipped, baseline, *at_first)])
        if any(texts.digest(side, baseline) is None for side in SIDES):  # the build's own problem: its first build says it
            return
        if all(texts.digest(side, shipped) == texts.digest(side, baseline) for side in SIDES):
            return  # the same code: the baseline is the build you ship
        read = partial(_read_sides, spec, nvcc, Path(scratch), shipped)
        spelled = {side: dict(baseline) for side in SIDES}  # each macro as the shipped code spells it
        for name, values in left:
            if problem := _problem(spec, texts, shipped, name, values, read, spelled):
                raise KernelDefaultError(problem)
        texts.prefetch([(side, macros) for side, macros in spelled.items()])
        if any(texts.digest(side, macros) != texts.digest(side, shipped) for side, macros in spelled.items()):
            raise KernelDefaultError(_together(spec, left))
        # only the spelling differs: the same build where the device code is (`#BLOCK`, `kern_##BLOCK` differ)
        with ThreadPoolExecutor(2) as pool:  # the two front ends at once
            built = [pool.submit(device_ptx, kernel, nvcc, macros, Path(scratch) / f"{side}.ptx")
                     for kernel, macros, side in ((own, baseline, "baseline"), (spec, shipped, "shipped"))]
        if built[0].result() != built[1].result():
            raise KernelDefaultError(_respelled(spec, left, spelled["device"]))


def shipped_host_level(spec: KernelSpec) -> str | None:
    """The shipped command's host level as nvcc hands it to the host compiler (-O1..-O3, nvcc's
    spelling), which preprocesses the device pass too: -O3 defines __OPTIMIZE__ there, and a
    kernel's default may read it; None: no level (none given, -O0, -Os). Read from its set-aside
    flags before `host_check` relabels them."""
    level = command_level(spec.shipped.fixed).effective if spec.shipped is not None else None
    return level.canonical if level is not None and level.level else None


def _with_host_level(spec: KernelSpec, level: str | None) -> KernelSpec:
    """`spec` with the shipped build's host level where its base flags (the baseline's: `host_check`
    applies it where it changes the baseline's device code) do not give it already."""
    if level is None or level in spec.nvcc_flags.flags:
        return spec
    assert spec.shipped is not None
    return with_base_flags(spec, (level,), f"{spec.shipped.origin}: the command for {spec.source.name}")


def _read_sides(spec: KernelSpec, nvcc: str, scratch: Path, shipped: Macros, name: str,
                values: tuple[int | str, ...], sides: list[str]) -> dict[str, _Default]:
    """`_kernel_default` of `name` on each of `sides`, read at once, the other macros as the command has them."""
    with ThreadPoolExecutor(max(1, len(sides))) as pool:
        jobs = {side: pool.submit(_kernel_default, spec, nvcc, scratch, shipped, name, values, side) for side in sides}
    return {side: job.result() for side, job in jobs.items()}


Reader = Callable[[str, tuple[int | str, ...], list[str]], dict[str, _Default]]


def _problem(spec: KernelSpec, texts: Preprocessed, shipped: Macros, name: str, values: tuple[int | str, ...],
             read: Reader, spelled: dict[str, dict[str, int | str | None]]) -> str | None:
    """Why the shipped build's `name` (no -D, the other macros as the command has them) is not the
    baseline's -D at the first value, on a side whose code that -D changes: a default the two sides
    see differently, one that is not tune.toml's first value, or one that is it but is no one value
    wherever it is read (`2+2`: `ty*2+2`), or one that does not build as -D at what the probe read
    (a later #undef/#define). A default the first value spelled otherwise (`(16)`, `0x10`) is the
    baseline: `spelled` takes it as the code spells it, for the check of all the macros together."""
    at_first = {**shipped, name: values[0]}  # preprocessed with the others (`check_shipped_macro_defaults`)
    changed = [side for side in SIDES if texts.digest(side, at_first) != texts.digest(side, shipped)]
    if not changed:
        return None  # the same build either way
    found = read(name, values, changed)  # each side whose code the -D changes; the other only to say a refusal's reason
    if not (wrong := [default for default in found.values() if default.value != values[0]]):
        if odd := next((default for default in found.values() if not _one_value(default)), None):
            return _expression(spec, odd)
        # the same value, spelled otherwise (`(16)`): confirmed by building it so, each side at once
        built = {side: {**shipped, name: default.expansion} for side, default in found.items()}
        texts.prefetch(list(built.items()))
        for side, macros in built.items():
            if texts.digest(side, macros) != texts.digest(side, shipped):
                return _unconfirmed(spec, found[side], side)
            spelled[side][name] = found[side].expansion
        return None
    found = found | read(name, values, [side for side in SIDES if side not in found])
    device, host = found["device"], found["host"]
    if _defined(device) and _defined(host) and _reading(device) != _reading(host):
        return _two_sides(spec, device, host)
    return _refusal(spec, wrong[0])


def _one_value(default: _Default) -> bool:
    """Whether `expansion` reads as one value wherever the code puts it, as the baseline's -D does:
    an integer literal, or a whole in parentheses (`(BASE / 8)`); not `2+2`, which `ty * TILE` reads
    as `ty*2+2`."""
    expansion = str(default.expansion)
    if expansion == str(default.value) or _c_integer(expansion) is not None:
        return True
    if not (expansion.startswith("(") and expansion.endswith(")")):
        return False
    depth = 0
    for place, char in enumerate(expansion):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return place == len(expansion) - 1  # the first parenthesis closes at the end: one whole
    return False


def _defined(found: _Default) -> bool:
    return found.expansion is not None and found.expansion not in ("", found.name)


def _reading(found: _Default) -> str:
    return str(found.value) if found.value is not None else str(found.expansion)


def _kernel_default(spec: KernelSpec, nvcc: str, scratch: Path, shipped: Macros, name: str,
                    values: tuple[int | str, ...], side: str) -> _Default:
    """What `name` expands to after the kernel's own #defines, without a -D for it, read on `side`
    with the other tuned macros as the command has them (`shipped`: a default `TN` of `TM` is the
    command's -DTM, not tune.toml's first TM)."""
    said = _probe(spec, nvcc, scratch, shipped, f"{_PROBE} {name}\n", side)
    if said is None:
        return _Default(name, values, None, None)
    expansion = said[-1] if said else ""
    if ((value := _listed(expansion, values)) is None and not _TYPED.search(expansion)
            and (numbers := [v for v in values if isinstance(v, int)])):
        # an expression (`(BLOCK / 8)`): the preprocessor's own arithmetic says which value it is; a
        # default #if cannot evaluate (a float, a string) fails this probe alone
        tests = "".join(f"#if ({name}) == ({v})\n{_PROBE} {v}\n#endif\n" for v in numbers)
        found = _probe(spec, nvcc, scratch, shipped, tests, side)
        value = next((v for v in numbers if found and str(v) in found), None)
    return _Default(name, values, value, expansion)


def _probe(spec: KernelSpec, nvcc: str, scratch: Path, shipped: Macros, lines: str, side: str) -> list[str] | None:
    """What follows the probe's marker on each line of the kernel preprocessed (for `side`, with the
    command's macros) with `lines` after it; None where the preprocessor fails."""
    probe = scratch / f"probe-{side}.cu"  # one per side: the sides are read at once
    probe.write_text(f'#include "{spec.source.resolve()}"\n{lines}', encoding="utf-8")
    out = scratch / f"probe-{side}.ii"
    out.unlink(missing_ok=True)
    if not preprocess(spec, nvcc, shipped, out, source=str(probe), side=side):
        return None
    text = out.read_text(encoding="utf-8", errors="replace").splitlines()
    return [" ".join(line.split(_PROBE, 1)[1].split()) for line in text if _PROBE in line]


def _listed(expansion: str, values: tuple[int | str, ...]) -> int | str | None:
    """The listed value `expansion` is: the same text, or the same int (`(16)`, `0x10`,
    `020`, `0b1'0000`); None for any other text (the `#if` probe may still say)."""
    text = expansion
    while text.startswith("(") and text.endswith(")"):
        text = text[1:-1].strip()
    number = _c_integer(text)
    for value in values:
        if str(value) in (expansion, text) or (number is not None and isinstance(value, int) and value == number):
            return value
    return None


def _c_integer(text: str) -> int | None:
    """The value of a C/C++14 integer literal as nvcc reads it (`010` is 8); None for other text."""
    if (match := _INTEGER.fullmatch(text)) is None:
        return None
    base = next(kind for kind in _BASES if match.group(kind) is not None)
    number = int(match.group(base).replace("'", ""), _BASES[base])
    return -number if match.group("sign") == "-" else number


def _where(spec: KernelSpec, name: str) -> str:
    assert spec.shipped is not None
    return f"{spec.shipped.origin}: the command for {spec.source.name} gives no -D{name}"


def _two_sides(spec: KernelSpec, device: _Default, host: _Default) -> str:
    name = device.name
    return (f"{_where(spec, name)}, so your build has the kernel's own {name}, which is {_reading(device)[:40]} in "
            f"device code and {_reading(host)[:40]} in host code: no one value of tune.toml's [tune.defines] {name} "
            f"is that build; give the command -D{name}=VALUE")


def _unconfirmed(spec: KernelSpec, found: _Default, side: str) -> str:
    name = found.name
    return (f"{_where(spec, name)}, and the kernel's own {name} reads as tune.toml's first value, {found.values[0]}, "
            f"only at the end of the {side} code: built with -D{name} at what it reads there, the {side} code "
            f"differs (redefined after the code that reads it?), so it could not be confirmed that your build is the "
            f"baseline; add -D{name}=VALUE to the command")


def _expression(spec: KernelSpec, found: _Default) -> str:
    name, first = found.name, found.values[0]
    return (f"{_where(spec, name)}, so your build has the kernel's own {name}, which expands to "
            f"{str(found.expansion)[:80]!r}: it equals tune.toml's first value, {first}, but not wherever the code reads "
            f"it (`x * {name}` is `x * {str(found.expansion)[:40]}`), so the baseline's -D{name}={first} is other code "
            f"than the build you ship; add -D{name}={first} to the command, or parenthesise the kernel's default")


def _together(spec: KernelSpec, left: list[tuple[str, tuple[int | str, ...]]]) -> str:
    names = ", ".join(name for name, _ in left)
    assert spec.shipped is not None
    return (f"{spec.shipped.origin}: the command for {spec.source.name} gives no -D for {names}: none of them alone "
            f"builds other code than the baseline's -D at tune.toml's first value (the kernel's own default reads as "
            f"that value, or the -D changes no code on its own), but together they preprocess to other code than the baseline's "
            f"{' '.join(f'-D{name}={values[0]}' for name, values in left)}, so the baseline would not be the build "
            f"you ship; add those -D to the command")


def _respelled(spec: KernelSpec, left: list[tuple[str, tuple[int | str, ...]]], spelled: Macros) -> str:
    name, values = next(((n, v) for n, v in left if str(spelled[n]) != str(v[0])), left[0])
    first, own = values[0], str(spelled[name])[:40]
    return (f"{_where(spec, name)}, so your build has the kernel's own {name}, spelled {own!r}: it is tune.toml's "
            f"first value, {first}, but the device code built with it differs from the baseline's -D{name}={first} "
            f"(code that stringifies or pastes {name}: #{name}, x##{name}); add -D{name}={first} to the command, "
            f"or write the kernel's default as {first}, as tune.toml lists it")


def _refusal(spec: KernelSpec, found: _Default) -> str:
    name, values = found.name, found.values
    listed = ", ".join(str(v) for v in values)
    where = _where(spec, name)
    fix = f"add -D{name}=VALUE to the command, or list your build's value first in tune.toml's [tune.defines] {name}"
    if found.expansion is None:
        return (f"{where}, and the kernel does not preprocess without it (nvcc -E fails): the build you ship cannot "
                f"be the baseline; {fix}")
    if found.value is None:
        own = f"expands to {found.expansion!r}" if found.expansion and found.expansion != name else "is not defined"
        return (f"{where}, so your build has the kernel's own {name}, which {own[:80]} there: none of tune.toml's "
                f"values {listed}, and the baseline (tune.toml's first value, {values[0]}) would not be the build "
                f"you ship; {fix}")
    order = ", ".join(f'"{v}"' if isinstance(v, str) else str(v)
                      for v in (found.value, *(v for v in values if v != found.value)))
    return (f"{where}, so your build has the kernel's own {name}={found.value}, and the baseline would be tune.toml's "
            f"first value, {name}={values[0]}, a build you do not ship: list {found.value} first "
            f"({name} = [{order}]), or add -D{name}={values[0]} to the command if that is what ships")
