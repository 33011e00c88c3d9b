"""Text from outside (study and kernel names, compiler messages) made safe to print or write where a
terminal, a PR comment or a browser may show it: every control and format character written as an
escape (\\x1b, \\u202e...). One rule: the terminal, markdown and HTML all use `printable`."""

import os
import re
import shlex
import unicodedata
from html import escape

# Categories written as an escape besides the C0/DEL/C1 controls: format characters (Cf: the bidi
# embeddings, overrides and isolates U+202A-202E and U+2066-2069, which reorder how the rest of a
# line is shown - "Trojan Source" - the zero-width U+200B-200F, U+FEFF, tags...) and the line and
# paragraph separators (Zl, Zp), which some viewers break a line at.
_FORMAT_CATEGORIES = frozenset({"Cf", "Zl", "Zp"})


class _Escapes(dict[int, str]):
    """``str.translate``'s table: controls by a fixed table, any other character looked up once."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        if unicodedata.category(char) in _FORMAT_CATEGORIES:
            char = f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
        self[code] = char
        return char


_ESCAPES = _Escapes({code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))})


def printable(text: object) -> str:
    """``text`` with every control and format character written as an escape: nothing reaches a
    terminal as a command (a study named "\\x1b]0;..." retitles no window), and nothing reorders or
    hides what is shown (a right-to-left override in a name shows as \\u202e)."""
    return str(text).translate(_ESCAPES)


def html_text(text: object) -> str:
    """``text`` for an HTML page or SVG figure: `printable`, then HTML-escaped (quotes too)."""
    return escape(printable(text))


def markdown_cell(value: str) -> str:
    """Text in markdown (a report, the gate's PR comment) as text, never as markdown: table-safe, no
    HTML (`<` and `&` escaped: no tag or entity can open; `>` stays, so `100% -> 75%` reads as it is in
    the raw file; quotes read as quotes: markdown shows `&#x27;` as it is), no blockquote, no code
    span, link, image, emphasis, strikethrough, heading or math opened (`\\`, `` ` ``, `[`, `]`,
    `*`, `~`, `$`, a leading `#` and a `_` that is not inside a word backslash-escaped: `opt_level`
    and "trial #3" stay as they are), no @-mention (a zero-width space after `@`, as Dependabot writes them), and no control
    character (a terminal may `cat` the file). An ACF or a shared database row is untrusted: its
    `![x](https://...)` shows as those characters, loads nothing and links nowhere."""
    text = _MARKDOWN.sub(lambda m: f"{m[0][:-1]}\\{m[0][-1]}", value.replace("\n", " "))
    return printable(text.replace("&", "&amp;").replace("<", "&lt;").replace("@", "@&#8203;"))


_MARKDOWN = re.compile(r"[\\`\[\]*~$|]|^[ \t]*#(?=[#\s])|^[ \t]*>|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def db_option(shown: str) -> str:
    """`--db URL` for a command compileiq prints, from the database URL as shown (passwords masked):
    an SQLite file by its absolute path, so that the command works from any folder (the default,
    store/compileiq.db, is relative to where the run was); a URL with a masked password or token,
    `--db "$COMPILEIQ_DB"` (the pasted command reads it from the environment, as the gate's re-tune
    command does)."""
    if "***" in shown:
        return '--db "$COMPILEIQ_DB"'
    if shown.startswith("sqlite:///"):
        shown = "sqlite:///" + os.path.abspath(shown.removeprefix("sqlite:///"))
    return f"--db {shlex.quote(printable(shown))}"


def shortened(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a word's end, marked with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0] if " " in text[: limit - 1] else text[: limit - 1]
    return cut.rstrip() + "…"
