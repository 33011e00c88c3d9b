"""A compile command's preprocessor options, as `compile_db` reads them.

- A ``-D``/``-U`` of a macro that tune.toml tunes is the shipped value of ``define.NAME`` (the
  baseline starts from it), never a base flag: the base flags come first and the ACF's own ``-D``
  after, so the preprocessor would keep the ACF's, and no build would have the shipped value. One
  that tune.toml fixes ([defines]) is tune.toml's own ``-D``, given once; another value is refused.
- ``-Xcompiler`` hands the host compiler its options, and nvcc preprocesses the device code with
  the host compiler: a ``-D -U -I -isystem`` there changes the device code as nvcc's own does (it
  is applied as one), and one the base flags cannot give (``-include``, ``-iquote``, ``-Wp,``, ...) is
  refused. GCC's long spellings are the same options (``--define-macro=X`` is ``-DX``, ``--include=``
  is ``-include``). Its other options may change the macros the device pass predefines
  (``-O2``: ``__OPTIMIZE__``; ``-fopenmp``: ``_OPENMP``): `host_why` says so where they are set aside.
- nvcc hands such a value (and an option -forward-unknown-to-host-compiler forwards) to the host
  compiler through /bin/sh, unquoted: the shell splits it at its spaces, and each word is read as
  an option of its own (`shell_words`). A value the shell would read more into (quotes, escapes,
  expansions, globs) is refused, but for ``$PWD`` inside a host-only option
  (``-fdebug-prefix-map=$PWD=.``), which no expansion can turn into a preprocessor option.
- A GCC response file (``-Xcompiler @FILE``) or spec file (``-specs=FILE``) hands the host compiler
  options compileiq cannot see (a spec file's ``*cpp:`` adds -D to the device pass): refused.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from compileiq.core.errors import UsageError
from compileiq.source.shipped import shown
from compileiq.source.spec import FixedFlag, KernelSpec, ShippedSetting


@dataclass(frozen=True)
class _Option:
    """One GCC preprocessor option, as a -Xcompiler value: it changes what nvcc's device pass
    preprocesses (nvcc preprocesses the device code with the host compiler)."""

    takes_value: bool  # its value joined (-DX, -isystem=DIR) or the next item (-include,FILE)
    nvcc: str | None = None  # nvcc's own option that gives it (applied as one); None: no base flag gives it, refused
    long: tuple[str, ...] = ()  # GCC's long spellings (gcc.cc's option_map; GCC takes no abbreviation of them)
    equals: bool = False  # a joined value may follow "=" (-isystem=DIR)


# GCC's preprocessor options: the one table `_preprocessor` and `host_options` read.
_OPTIONS: dict[str, _Option] = {
    "-D": _Option(True, "-D", ("--define-macro",)),
    "-U": _Option(True, "-U", ("--undefine-macro",)),
    "-I": _Option(True, "-I", ("--include-directory",)),
    "-isystem": _Option(True, "-isystem", equals=True),
    "-include": _Option(True, long=("--include",)),
    "-imacros": _Option(True, long=("--imacros",)),
    "-iquote": _Option(True),
    "-idirafter": _Option(True, long=("--include-directory-after",)),
    "-iprefix": _Option(True, long=("--include-prefix",)),
    "-iwithprefix": _Option(True, long=("--include-with-prefix", "--include-with-prefix-after")),
    "-iwithprefixbefore": _Option(True, long=("--include-with-prefix-before",)),
    "-isysroot": _Option(True, equals=True),
    "-imultilib": _Option(True),
    "-imultiarch": _Option(True),
    "-A": _Option(True, long=("--assert",)),
    "--sysroot": _Option(False, long=("--sysroot",)),
    "-nostdinc": _Option(False, long=("--no-standard-includes",)),
    "-nostdinc++": _Option(False),
    "-undef": _Option(False),
    "-trigraphs": _Option(False, long=("--trigraphs",)),
    "-traditional": _Option(False),
    "-traditional-cpp": _Option(False),
    "-Xpreprocessor": _Option(False),
    "-Wp": _Option(False),
}
# -Xcompiler options that nvcc's device pass preprocesses with, and nvcc's own option for each.
APPLIED = {name: option.nvcc for name, option in _OPTIONS.items() if option.nvcc is not None}
_LONG = {spelling: name for name, option in _OPTIONS.items() for spelling in option.long}
_JOINED = sorted((name for name, option in _OPTIONS.items() if option.takes_value), key=len, reverse=True)
# Why a host compiler option compileiq sets aside is set aside (`host_why`).
MAY_CHANGE_MACROS = ("host compiler option: may change the macros the device pass predefines (__OPTIMIZE__, "
                     "_OPENMP...); compileiq builds without it")
HOST_WARNINGS = "host compiler warning option: device code is unchanged"
HOST_LINKER = "host linker or assembler option (-Wl, -Wa,): device code is unchanged"
# What /bin/sh reads in a value beyond its spaces: quotes, escapes, expansions, globs, separators,
# redirections, comments. `$` and '`' anywhere: an expansion is split too (-Wall${IFS}-DX=1).
_SHELL_SYNTAX = "'\"\\$`;&|<>()*?[]{}~#!"
_EXPANSIONS = "$`"
# What /bin/sh reads in one word too: quotes, escapes, separators, redirections and globs (`-[D]X=1`
# is -DX=1 where a file of that name lies in the build's folder).
_ONE_WORD_SYNTAX = "'\"\\;&|<>()*?["
# The one variable the shell may expand inside a host-only word: $PWD or ${PWD}, nothing else. The
# shell splits an expansion's value at its spaces, each piece an option of its own, and only PWD's
# value is known: the command's folder, where the build runs it (held to one plain word by the
# caller: `pwd`). Any other may hold a space: dash's PS2 is "> " and PS4 "+ " by default, so
# `-fdebug-prefix-map=a=b${PS4}-DX=1` hands the host compiler -DX=1, as ${IFS} would; HOME is the
# building user's (CI's, another machine's), which the command does not say. Not $(...),
# ${NAME:-...}, $1, `...`.
_VARIABLE = re.compile(r"\$(?:PWD\b|\{PWD\})")
_NAMED = re.compile(r"\$(?:([A-Za-z_]\w*)|\{([A-Za-z_]\w*)\})")
# Host compiler options that read more options from a file compileiq does not read: GCC's @FILE
# and -specs=FILE (--specs), whose `*cpp:` section adds -D/-include to the device pass; clang's
# --config=FILE (and --config-system-dir/--config-user-dir, where it looks for one), as nvcc's
# host compiler with -ccbin clang++.
_FILE_OPTIONS = ("@", "-specs", "--specs", "--config")


class MacroError(UsageError):
    """A -D/-U of the command that fights tune.toml over a macro, or a -Xcompiler preprocessor
    option that no build of compileiq can give."""


@dataclass(frozen=True)
class Macros:
    """The macros tune.toml sets: each tuned one's values, each fixed one's value."""

    tuned: Mapping[str, tuple[int | str, ...]] = field(default_factory=dict)
    fixed: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, spec: KernelSpec | None) -> Macros:
        if spec is None:
            return cls()
        return cls(dict(spec.tuned_defines), dict(spec.defines))

    def names(self, value: str) -> bool:
        """Whether a -D/-U value (NAME, NAME=VALUE) names one of them."""
        name = value.partition("=")[0]
        return name in self.tuned or name in self.fixed


def shipped_macro(flag: str, value: str, given: str, macros: Macros, where: str) -> ShippedSetting | FixedFlag:
    """The -D/-U (`flag`) of a macro tune.toml sets: the shipped value of a tuned one, or a fixed
    one's -D as tune.toml gives it; MacroError where the two disagree."""
    name, eq, text = value.partition("=")
    text = text if eq else "1"  # -DNAME is -DNAME=1
    undefine = flag in ("-U", "--undefine-macro")
    if name in macros.tuned:
        values = macros.tuned[name]
        listed = ", ".join(str(v) for v in values)
        found = next((v for v in values if str(v) == text), None)
        if undefine:
            raise MacroError(f"{where}: {given} undefines {name}, which tune.toml tunes over {listed} "
                             f"([tune.defines]): every build gives it one of them; take {given} out of the command, "
                             f"or {name} out of tune.toml")
        if found is None:
            raise MacroError(f"{where}: {given} gives {name}={text}, and tune.toml tunes {name} over {listed} "
                             f"([tune.defines]): compileiq tunes from the build you ship; add {text} to tune.toml's "
                             f"values for {name}, or change the command")
        return ShippedSetting(f"define.{name}", found, given)
    fixed = macros.fixed[name]
    if undefine or str(fixed) != text:
        what = "undefines it" if undefine else f"gives {name}={text}"
        raise MacroError(f"{where}: {given} {what}, and tune.toml's [defines] gives {name}={fixed}: one build cannot "
                         f"have both; make them agree (tune.toml's [defines], or the command)")
    return FixedFlag(f"-D{name}={fixed}", True, f"tune.toml's [defines] gives {name}={fixed} alike: applied once, "
                     "as tune.toml gives it")


def shell_words(value: str, given: str, where: str, variables: bool = False, pwd: bool = False) -> list[str]:
    """The words /bin/sh splits one value into that nvcc hands the host compiler unquoted (an
    -Xcompiler item, an option -forward-unknown-to-host-compiler forwards): `nvcc -Xcompiler "-Wall
    -DX=1"` gives the host compiler, which preprocesses the device code too, -Wall and -DX=1.
    MacroError for a value the shell would read more into than its spaces (in one word too: quotes,
    escapes, separators, redirections, globs `* ? [`); with `variables` (the
    caller sets such a word aside, as a host-only option), but for a one-word value holding $PWD
    after a start no preprocessor option begins with (`_host_variables`), where `pwd`: the command's
    folder is one plain word (a space in $PWD's value would split it too). Any other variable is
    refused naming it: its value may hold a space (dash's PS4 is "+ ")."""
    words = [word for word in value.split(" ") if word]
    if len(words) == 1 and (plain := unquoted(words[0])) is not None:  # '-fPIC' (PyTorch's cpp_extension)
        value, words = plain, [plain]  # as the shell hands it on: '-DX=1' is -DX=1
    syntax = [c for c in value if c in _ONE_WORD_SYNTAX]  # read even in one word: never set aside
    shell = [c for c in value if c in _EXPANSIONS or c in (_SHELL_SYNTAX if len(words) > 1 else _ONE_WORD_SYNTAX)]
    one_word = variables and len(words) == 1 and not syntax
    if shell and not (one_word and _host_variables(words[0], pwd)):
        named = [a or b for a, b in _NAMED.findall(value) if (a or b) != "PWD" or not pwd]
        if one_word and named and _host_variables(_NAMED.sub("$PWD", words[0]), True):
            what = ("the command's folder, no plain path" if named[0] == "PWD" else
                    "whose value may hold a space: dash's PS2, PS4 do")
            raise MacroError(f"{where}: {shown(given)} holds '$' (${named[0]}, {what}): nvcc's shell splits it there, "
                             "and the host compiler preprocesses the device code with each piece (a -D?); only $PWD "
                             "is read; drop the host option from a copy of the command given to --compile-commands")
        raise MacroError(f"{where}: {shown(given)} holds {shell[0]!r}" + (" beside a space" if len(words) > 1 else "")
                         + ": nvcc hands the value to the host compiler (which preprocesses the device code too) "
                         "through a shell, which reads it there, and compileiq does not; give each host option on its "
                         "own, unquoted (-Xcompiler -Wall -Xcompiler -DX=1), or drop the host option from a copy of "
                         "the command given to --compile-commands")
    return words


def unquoted(word: str) -> str | None:
    """A one-word value whose only shell syntax is quoting and escapes, as /bin/sh hands it on
    (`'-fPIC'` is -fPIC, `"-DX=1"` is -DX=1); None where it holds more (an expansion, a glob, a
    separator: refused by the caller) or the quotes do not close."""
    if not any(c in "'\"\\" for c in word) or any(c in _EXPANSIONS for c in word):
        return None
    try:
        split = shlex.split(word)
    except ValueError:
        return None
    if len(split) != 1 or not split[0] or any(c in _ONE_WORD_SYNTAX or c.isspace() for c in split[0]):
        return None
    return split[0]


def _host_variables(word: str, pwd: bool) -> bool:
    """Whether every expansion in `word` is $PWD (`pwd`: the command's folder is one plain word,
    which the shell neither splits nor globs) after a start that no preprocessor or file option
    begins with (-fdebug-prefix-map=$PWD=.): what it expands to is the rest of a host-only option,
    never a -D, -U, -include, -Wp, or -specs= of its own (`-W$PWD` could start `-Wp,`: refused)."""
    start = word.partition("$")[0]
    if not pwd or "`" in word or not start or _preprocessor(word) is not None:
        return False
    if any(spelling.startswith(start) for spelling in (*_OPTIONS, *_LONG, *_FILE_OPTIONS)):
        return False
    return "$" not in _VARIABLE.sub("", word)


def _file_options(words: list[str], given: str, where: str) -> None:
    """MacroError for a word the host compiler reads more options from (@FILE, -specs=FILE,
    --config=FILE)."""
    if found := next((w for w in words if w.startswith(_FILE_OPTIONS)), None):
        raise MacroError(f"{where}: {shown(given)}: {shown(found)} reads more host compiler options from a file "
                         "(GCC's @FILE, -specs=, clang's --config), and nvcc preprocesses the device code with them too: what the file "
                         "adds (-D, -include) compileiq cannot know; give those to nvcc itself, or tune from a copy "
                         "of the command without it")


def host_why(value: str) -> str:
    """Why an -Xcompiler value (or an option nvcc forwards to the host compiler) is set aside: a
    warning or a linker option leaves the device code as it is; any other may change the macros
    the device pass predefines (-O2, -fopenmp, -ffast-math, -march=, -std=gnu++17, -fPIC, ...).
    A value with a space is several options to the host compiler (`shell_words`): never "unchanged"."""
    if " " in value.strip(" "):
        return MAY_CHANGE_MACROS
    if value.startswith(("-Wl,", "-Wa,")):
        return HOST_LINKER
    if all(item == "-w" or (item.startswith("-W") and _preprocessor(item) is None) for item in value.split(",")):
        return HOST_WARNINGS
    return MAY_CHANGE_MACROS


def _preprocessor(item: str) -> tuple[str, str] | None:
    """The preprocessor option one host compiler option is (its short spelling) and the value
    joined to it ("" for none), or None."""
    if item.startswith("--"):
        name, _, joined = item.partition("=")
        return (_LONG[name], joined) if name in _LONG else None
    if item == "-Wp" or item.startswith("-Wp,"):
        return "-Wp", ""
    option = next((o for o in _JOINED if item.startswith(o)), None)
    if option is not None:
        joined = item[len(option):]
        return option, joined.removeprefix("=") if _OPTIONS[option].equals else joined
    return (item, "") if item in _OPTIONS else None


def forwarded_problem(given: str, forward: str, where: str, pwd: bool = False) -> None:
    """MacroError for a preprocessor option nvcc hands the host compiler under `forward`
    (-forward-unknown-to-host-compiler), as GCC spells it (--include-directory=DIR, -imacros, -Wp,):
    the host compiler preprocesses the device code with it too, and nvcc's own spelling is the one
    compileiq reads. Each word of an option with a space (`shell_words`) is one the host compiler reads."""
    words = shell_words(given, given, where, variables=True, pwd=pwd)
    _file_options(words, given, where)
    if len(words) > 1 and (hidden := next((w for w in words if _preprocessor(w) is not None), None)):
        raise MacroError(f"{where}: {shown(given)} hides {shown(hidden)} behind a space: {forward} hands it to the host "
                         "compiler through a shell, which splits it there, and the host compiler preprocesses the "
                         "device code with it too; give it to nvcc as an argument of its own (-D -U -I -isystem "
                         "-include), or tune from a copy of the command without it")
    if _preprocessor(given) is not None:
        raise MacroError(f"{where}: {given} is no option of nvcc 13.0, so {forward} hands it to the host compiler, "
                         "which preprocesses the device code with it too: compileiq cannot give it to its builds; "
                         "spell it as nvcc's own option (-D -U -I -isystem -include), or tune from a copy of the "
                         "command without it")


def host_options(flag: str, value: str, given: str, where: str, pwd: bool = False
                 ) -> Iterator[tuple[str, str, str]]:
    """Each option of one -Xcompiler value (nvcc splits it at commas, the shell each item at its
    spaces: `shell_words`; an option's value may be the next item or word, as in `-Xcompiler
    -isystem,DIR` or `-Xcompiler "-isystem DIR"`) as (flag, value, as given): a preprocessor option
    nvcc's device pass sees as its own flag (`APPLIED`, GCC's long spellings too); any other as
    (`flag`, the option, as given). MacroError for a preprocessor option no base flag gives."""
    words = [(word, "," if n == 0 else " ") for item in value.split(",")
             for n, word in enumerate(shell_words(item, given, where, variables=True, pwd=pwd) or [""])]
    _file_options([word for word, _ in words], given, where)
    if not any(_preprocessor(word) for word, _ in words):
        yield flag, value, given  # the host compiler's alone (-Xcompiler=-Wl,-z,now): set aside as given
        return
    for item in value.split(","):  # beside a preprocessor option, no expansion at all
        shell_words(item, given, where)
    items = iter(words)
    several = len(words) > 1
    spaced = f" (behind a space in {shown(given)}: the shell nvcc hands it to splits it there)" if " " in value else ""
    for item, _ in items:
        found = _preprocessor(item)
        if found is None:
            yield flag, item, f"{flag} {item}" if several else given
            continue
        option, argument = found
        shown_as = item
        if _OPTIONS[option].takes_value and not argument and not (item.startswith("--") and "=" in item):
            argument, separator = next(items, ("", ","))
            shown_as = f"{item}{separator}{argument}"
            if not argument:
                raise MacroError(f"{where}: {given}: {item} without its value in the same -Xcompiler value "
                                 f"(nvcc hands the host compiler each -Xcompiler apart): give {flag} {item},VALUE")
        if option not in APPLIED:
            raise MacroError(f"{where}: {flag} {shown_as}{spaced} hands the host compiler a preprocessor option, and "
                             "nvcc preprocesses the device code with it too: compileiq cannot give it to its builds "
                             "(the base flags take -D -U -I -isystem); give it to nvcc as its own option where nvcc "
                             "has one (-include), or tune from a copy of the command without it")
        yield APPLIED[option], argument, f"{flag} {shown_as}" if several else given
