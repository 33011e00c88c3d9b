"""The allow-list of every -D that reaches nvcc (tune.toml, an ACF, base flags, a compile
database): nvcc runs its sub-tools through /bin/sh with -D values in double quotes, so $, `, backslashes,
quotes and newlines would run; a comma splits the value into two macros; and a space would split
the flag in two where a build passes `nvcc $(compileiq flags ...)`: the second word, an option of
the ACF's choosing (-ccbin, -odir)."""

from __future__ import annotations

import math
import re

MACRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MACRO_VALUE = re.compile(r"[A-Za-z0-9_.+\-*/%()<>:=]*")
MACRO_VALUE_CHARS = "letters, digits and _ . + - * / % ( ) < > : ="


def macro_problem(name: str, value: str | None = None) -> str | None:
    """Why ``-DNAME[=VALUE]`` may not reach nvcc, or None when it may."""
    if not MACRO_NAME.fullmatch(name):
        return f"{name!r} is not a valid macro name"
    if value is not None and not MACRO_VALUE.fullmatch(value):
        bad = next(c for c in value if not MACRO_VALUE.fullmatch(c))
        return f"value {value!r} of {name} contains {bad!r} (allowed: {MACRO_VALUE_CHARS})"
    return None


def define_arg_problem(token: str) -> str | None:
    """Why the nvcc argument ``-DNAME[=VALUE]`` is refused, or None when it is allowed."""
    if not token.startswith("-D"):
        return f"{token!r} is not a -D define"
    name, eq, value = token[2:].partition("=")
    return macro_problem(name, value if eq else None)


def number_problem(value: object) -> str | None:
    """Why a TOML number may not be a macro's value, or None: an integer past 64 bits is no C
    integer constant (the compiler warns, or truncates it), and nan or inf no number at all in C
    (`-DX=nan` names an identifier). Within 64 bits, -2**63 and 2**63 and above are kept, as C
    source would write them: the compiler takes their digits as unsigned (GCC warns "so large that
    it is unsigned"). A finite float is written as Python writes it, 1e+16 in exponent form: a C
    floating constant of the same value."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not -(1 << 63) <= value < 1 << 64:
        return f"{value} does not fit in 64 bits: no C integer constant holds it"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number (nan and inf are no C constants; 1e400 is inf in TOML)"
    return None
