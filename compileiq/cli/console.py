"""Where the command writes: stdout and stderr consoles, text from outside made safe to print, and
the label every view gives an objective's values."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.text import Text

from compileiq.core.text import printable

out = Console(highlight=False, soft_wrap=True, emoji=False, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)  # ":x:" in a name stays ":x:"

STATIC_LABEL = "static estimate"
RUNTIME_LABEL = "GPU runtime, ms"


def safe(text: object) -> str:
    """Text from outside (study and kernel names, compiler messages) as it may be printed."""
    return printable(text)


def cells(*values: object) -> list[Text]:
    """Table cells as plain text: never parsed as rich markup, control characters escaped."""
    return [Text(safe(value)) for value in values]


def kind_label(objective: str) -> str:
    """How values of this objective are labelled everywhere they are shown."""
    return RUNTIME_LABEL if "time" in objective.split(",") else STATIC_LABEL
