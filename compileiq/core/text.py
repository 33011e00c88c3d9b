"""Text from outside (study and kernel names, compiler messages) made safe to print or write where a
terminal may show it: every control character written as an escape (\\x1b...)."""

_CONTROL = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))}


def printable(text: object) -> str:
    """``text`` with every control character written as an escape: nothing reaches a terminal as a
    command (a study named "\\x1b]0;..." retitles no window)."""
    return str(text).translate(_CONTROL)
