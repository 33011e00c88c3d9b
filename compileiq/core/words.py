"""The plain-word rule for compiler options: nvcc runs its sub-tools (the host compiler, cicc,
ptxas) through /bin/sh, and hands it every `-Xptxas` and `-Xcompiler` value, and options it
forwards, unquoted (a value "32`touch x`" ran `touch`). An option that reaches nvcc, or that a
user's shell reads from `compileiq flags`, is one plain word: letters, digits and ``_ . + = : / -``,
and ``@`` after a letter, digit, ``_`` or ``.`` (a CI workspace such as Jenkins's ``proj@2`` is in
include paths). ``@`` never starts a word or follows a comma or ``=``: a host compiler reads
``@FILE`` as more options, and ``-Xcompiler=-Wall,@FILE`` would hand it one.
"""

from __future__ import annotations

import re

from compileiq.core.defines import define_arg_problem

PLAIN_WORD = re.compile(r"(?:[A-Za-z0-9_.+=:/-]|(?<=[A-Za-z0-9_.])@)+")
_CHARS = "letters, digits and _ . + = : / -"
_AT = "; @ inside a name"
PLAIN_WORD_CHARS = _CHARS + _AT
# nvcc's own options may hold a list: `--diag-suppress=177,550`; a comma inside an -Xptxas value
# would split it into two ptxas options, so option values handed on (ptxas's) never do
_NVCC_WORD = re.compile(r"(?:[A-Za-z0-9_.+=:/,-]|(?<=[A-Za-z0-9_.])@)+")


def word_problem(token: str, commas: bool = False) -> str | None:
    """Why ``token`` is not one plain word (``commas``: a comma is allowed, as in an nvcc list), or None."""
    pattern = _NVCC_WORD if commas else PLAIN_WORD
    if pattern.fullmatch(token):
        return None
    if not token:
        return "it is empty"
    matched = pattern.match(token)
    bad = token[matched.end() if matched else 0]  # the first character the rule stops at
    allowed = _CHARS + (" ," if commas else "") + _AT
    return f"it contains {bad!r}: a compiler option is one plain word ({allowed}), nothing a shell would read"


def nvcc_arg_problem(arg: str) -> str | None:
    """Why ``arg`` may not be one of nvcc's arguments (None: it may): a -D passes the macro
    allow-list (nvcc quotes it), anything else is one plain word, commas allowed."""
    if arg.startswith("-D"):
        return define_arg_problem(arg)
    return word_problem(arg, commas=True)
