"""The host optimisation level a compile command's build has, read from its set-aside flags.

nvcc hands the host compiler (which also preprocesses the device pass: -O1..-O3 define
__OPTIMIZE__ there) every -Xcompiler item first, in the command's order, and its own last -O after
them where that is -O1..-O3, never an -O0 (nvcc 13.0 -dryrun: `nvcc -O1 -Xcompiler -O3 -Xcompiler
-Os` hands it `-O3 -Os -O1`; `nvcc -O0 -Xcompiler -O3` preprocesses at -O3, `nvcc -O3 -Xcompiler -O0`
at -O3 too). The host compiler takes its last -O item. So the build's level is nvcc's last -O where
it is -O1..-O3, else the last -O item of all the command's -Xcompiler values together, whichever
option holds it: `-Xcompiler -O3 -Xcompiler -Os` builds at -Os as `-Xcompiler -O3,-Os` does. A
level is nvcc's -O<n> (`-O3`, `-O 3`, `--optimize 3`, `--optimize=3`), or a host -O<n> in an
-Xcompiler item, other items beside it or not (`-Xcompiler -fPIC,-O3` and `-Xcompiler "-fPIC -O3"`
hand the host compiler -O3 as `-Xcompiler -O3` does; gcc reads any number, -O4 and -O03 are -O3;
gcc's -O and -Og are -O1: they predefine the same macros; gcc's --optimize=3 is -O3, --optimize -O;
the value of one word `"-Xcompiler=-fPIC -O3"` is read as `-Xcompiler "-fPIC -O3"`'s, a quoted '-O3' as
-O3, as the shell nvcc hands it to reads them; nvcc's own -O4, -O03 hand the host compiler -O4, -O3);
where the host compiler's last -O item is another (-Os, -Oz, -Ofast), the build has no level: the
level's effect on the device pass is the macro nvcc's own -O gives, and -Os gives another
(__OPTIMIZE_SIZE__). Any other host option (-fPIC, -Os, -Ofast,
-fopenmp, -wrapper) stays set aside as the command's reading says; where a list holds one, the
level is recorded apart from it (`relabelled`), and only the level is ever handed to a check
(`build.host_check`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace

from compileiq.source import nvcc_argv
from compileiq.source.preprocessor import MAY_CHANGE_MACROS, unquoted
from compileiq.source.shipped import HOST_OPTIMISATION
from compileiq.source.spec import FixedFlag

_LEVEL = re.compile(r"-O([0-9]+)")
_HOST_COMPILER = ("-Xcompiler", "--compiler-options")
_GCC_LONG = re.compile(r"--optimize(=.*)?")  # gcc's long spelling of -O: --optimize is -O, --optimize=3 is -O3


@dataclass(frozen=True)
class HostLevel:
    """One flag of the command that sets the host optimisation level."""

    flag: FixedFlag  # as the command's reading recorded it (set aside)
    level: int | None  # 0..3 (gcc's -O and -Og: 1); None: a host -O item that is no level (-Os, -Oz, -Ofast)
    host: bool  # a -Xcompiler value (the host compiler's own), not nvcc's -O
    mixed: bool = False  # a -Xcompiler list that holds other host options too (-fPIC,-O3)

    @property
    def canonical(self) -> str:
        """nvcc's own spelling of the level (-O3): what a build is given where it is applied."""
        return f"-O{self.level}"


@dataclass(frozen=True)
class CommandLevel:
    """The command's host level: the flag that gives it (None: no -O1..-O3 reaches the host
    compiler), every other level flag, which it overrides, and the flag whose -O the host compiler
    takes (`decided_by`: the effective one, or an -Xcompiler -O0, -Os... that leaves no level)."""

    effective: HostLevel | None
    overridden: tuple[HostLevel, ...]
    decided_by: HostLevel | None = None


def _parse(given: str) -> tuple[int | None, bool, bool] | None:
    """(the level, whether the host compiler's, whether a list with other host options) of one
    option of a command as given, or None where it holds no -O. A -Xcompiler value gives its last -O
    item: a level where that is -O0..-O3, whatever else it holds (nvcc 13.0 -dryrun: `-Xcompiler
    -fPIC,-O3` and `-Xcompiler "-fPIC -O3"` hand the host compiler `-fPIC -O3`), else None for the
    level (-Os, -Ofast: the host compiler takes it over any earlier -O3, of this option or another;
    gcc's -O and -Og are -O1, `_level_of`). nvcc's own -O<n> is a level of any number as the host
    compiler's is (nvcc 13.0 hands it -O4 for -O4, -O3 for -O03: __OPTIMIZE__ in the device pass)."""
    host = _host_option(given)
    if host is None:
        try:
            words = shlex.split(given)
        except ValueError:
            return None
        found = list(nvcc_argv.options(words))
        if len(found) != 1:
            return None
        name, value, _ = found[0]
        if name in _HOST_COMPILER:
            host = value
        elif name in ("-O", "--optimize") and re.fullmatch(r"[0-9]+", value):  # not "²": no number nvcc reads
            return _capped(value), False, False
        else:
            return None
    items = _host_items(host)
    last = [item for item in items if item.startswith("-O")][-1:]  # the host compiler takes its last -O item
    if not last:
        return None
    return _level_of(last[0]), True, not all(_level_of(item) is not None for item in items)


def _host_option(given: str) -> str | None:
    """The value of an -Xcompiler (--compiler-options) option as a command's reading gives it: two
    words joined with a space (`-Xcompiler VALUE`), or one (`-Xcompiler=VALUE`); VALUE may hold
    spaces either way (`"-Xcompiler=-O3 -fPIC"`, one word of the command). None for any other."""
    for joint in (" ", "="):
        name, found, value = given.partition(joint)
        if found and name in _HOST_COMPILER:
            return value
    return None


def _host_items(value: str) -> list[str]:
    """The options the host compiler gets from one -Xcompiler value: nvcc splits it at commas, the
    shell each item at its blanks and takes a quoted word's quotes off ('-O3' is -O3; a value the
    shell would read more into is refused as the command is read, `preprocessor.shell_words`);
    gcc's (and clang's) --optimize as its -O, --optimize=N as -ON (`gcc --optimize=3` predefines what
    -O3 does; --optimize=s is -Os)."""
    words = [unquoted(word) or word for word in re.split(r"[,\s]+", value) if word]
    return ["-O" + word.removeprefix("--optimize").removeprefix("=") if _GCC_LONG.fullmatch(word) else word
            for word in words]


def _level_of(item: str) -> int | None:
    """The level a host -O item gives the device pass: -O0..-O3 (gcc reads any number: -O4 and -O03
    are -O3), and gcc's -O and -Og as -O1 (the same predefined macros: __OPTIMIZE__ alone, `gcc -dM
    -E`); None for -Os, -Oz, -Ofast (__OPTIMIZE_SIZE__, __FAST_MATH__: macros no nvcc -O gives)."""
    if level := _LEVEL.fullmatch(item):
        return _capped(level[1])  # gcc: -O4, -O03 are -O3 (the same macros); -O00 is -O0
    return 1 if item in ("-O", "-Og") else None


def _capped(digits: str) -> int:
    """min(N, 3) for the ASCII digits of -ON, of any length: read without int(), which refuses
    over 4,300 digits (`-O0000` is 0, `-O03` 3, `-O` and five thousand 9s 3)."""
    significant = digits.lstrip("0")
    return 3 if len(significant) > 1 else min(int(significant or "0"), 3)


def _read(flag: FixedFlag) -> HostLevel | None:
    if flag.applied or flag.why not in (HOST_OPTIMISATION, MAY_CHANGE_MACROS):
        return None
    found = _parse(flag.flag)
    if found is None or found[1] != (flag.why == MAY_CHANGE_MACROS):
        return None
    return HostLevel(flag, *found)


def _deciding(levels: list[HostLevel]) -> HostLevel | None:
    """The flag whose -O the host compiler takes: nvcc's last -O where it is -O1..-O3 (nvcc hands it
    on after every -Xcompiler item), else the last -Xcompiler one, whatever its -O (-O0, -Os: no level)."""
    nvcc = [level for level in levels if not level.host]
    host = [level for level in levels if level.host]
    if nvcc and nvcc[-1].level:
        return nvcc[-1]
    return host[-1] if host else None


def _effective(levels: list[HostLevel]) -> HostLevel | None:
    deciding = _deciding(levels)
    return deciding if deciding is not None and deciding.level else None


def level_of(stripped: tuple[str, ...]) -> int:
    """The host level (0: none) a command's build has, from the options its reading set aside, as
    given and in its order (`CompileCommand.stripped`): what the gate holds an ACF's applied level to."""
    levels = [HostLevel(FixedFlag(given, False, ""), *found) for given in stripped
              if (found := _parse(given)) is not None]
    effective = _effective(levels)
    return 0 if effective is None or effective.level is None else effective.level


def command_level(fixed: tuple[FixedFlag, ...]) -> CommandLevel:
    """The host level the command's build has (see the module's text), from its set-aside flags
    in the command's order."""
    levels = [level for flag in fixed if (level := _read(flag)) is not None]
    deciding = _deciding(levels)
    return CommandLevel(_effective(levels), tuple(level for level in levels if level != deciding), deciding)


def relabelled(fixed: tuple[FixedFlag, ...], new: Mapping[FixedFlag, FixedFlag]) -> tuple[FixedFlag, ...]:
    """`fixed` with each level flag's `new` record: in its place where the flag gives the level
    alone; after it where the flag is a list with other host options (`-Xcompiler -fPIC,-O3`: the
    list stays set aside as read, for -fPIC, and the level is recorded as nvcc's -O3, applied or
    not as its check says)."""
    out: list[FixedFlag] = []
    for flag in fixed:
        found = _parse(flag.flag) if flag in new else None
        if found is None or not found[2]:
            out.append(new.get(flag, flag))
        else:
            out.extend((flag, replace(new[flag], flag=f"-O{found[0]}")))
    return tuple(dict.fromkeys(out))
