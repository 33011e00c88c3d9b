"""C/C++ source text without its comments, in one pass: what the text scanners of `launch`,
`macros` and `enumerators` read.

One regular expression takes each comment, string literal, raw string literal and character
literal from its start to its end, left to right, so a ``/*`` or ``//`` inside a literal is no
comment and a ``"`` inside a comment opens no literal. Every alternative ends where the token
does, or at the end of the line or the file where it is not closed, and consumes what it scanned:
the time is linear in the text (a ``/*`` never closed used to rescan to the end of the file for
each one, minutes for a 120 KB header).
"""

from __future__ import annotations

import re

_TOKEN = re.compile(
    r"""//(?:[^\\\n]|\\.)*"""  # a line comment; a backslash at its end continues it
    r"""|/\*.*?(?:\*/|\Z)"""  # a block comment; one never closed runs to the end, as in the compiler
    r"""|(?<![A-Za-z0-9_])(?:u8|[uUL])?R"(?P<delim>[^()\\\s"]{0,16})\(.*?(?:\)(?P=delim)"|\Z)"""  # R"x(...)x"
    r"""|"(?:[^"\\\n]|\\.)*(?:"|$)"""  # a string literal, ended by its line where it is not closed
    r"""|(?:(?<![A-Za-z0-9_])|(?<=\bu8)|(?<=\b[uUL]))'(?:[^'\\\n]|\\.)*(?:'|$)""",  # a character literal, not 1'000
    re.DOTALL | re.MULTILINE,
)


def without_comments(text: str, keep_lines: bool = False) -> str:
    """``text`` with each C/C++ comment replaced by a space, as the preprocessor does (a directive
    continues past a comment over several lines); ``keep_lines``: by its line breaks instead, so
    that a match's line number is the source's. Literals are kept as they are."""

    def replace(match: re.Match[str]) -> str:
        token = match.group()
        if not token.startswith("/"):
            return token
        return "\n" * token.count("\n") or " " if keep_lines else " "

    return _TOKEN.sub(replace, text)
