"""A Ctrl-C or SIGTERM in a command's first milliseconds, while the package itself loads: the one
line and exit 130 (143), never a KeyboardInterrupt traceback. `compileiq/__init__.py` installs
it first, where this process is the command (`the_command`), before its own imports; the CLI's
`signals.installed` takes over from it with the handlers it replaced (`originals`). Imported as a
library, the package leaves a program's signals alone."""

from __future__ import annotations

import os
import signal
import sys

TYPE_CHECKING = False  # typing itself takes milliseconds to import: not before the handlers are in
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any, NoReturn

originals: dict[int, Any] = {}  # the handlers `take_over` replaced, for the CLI to give back


def the_command() -> bool:
    """Whether this process is the `compileiq` command: the console script, or `python -m
    compileiq` while the interpreter finds the package (argv[0] is "-m" then, and `orig_argv` names
    the module: `-m compileiq`, `-Im compileiq`, `-mcompileiq`), never a program's own arguments
    (`python prog.py -m compileiq`: argv[0] is prog.py)."""
    if os.path.basename(sys.argv[0]) == "compileiq":
        return True
    if sys.argv[0] != "-m":
        return False
    words = list(getattr(sys, "orig_argv", ()))[1:]
    return any(word.startswith("-") and not word.startswith("--") and (
        word.endswith("m") and words[index + 1:index + 2] == ["compileiq"] or word.endswith("mcompileiq"))
        for index, word in enumerate(words))


def take_over() -> None:
    """SIGINT and SIGTERM end the process with the one line until the CLI installs its own; a
    signal ignored as inherited (`cmd &` in a script) stays ignored."""
    for number in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(number)
        if handler is not signal.SIG_IGN and handler is not stop_at_once:
            originals[number] = handler
            signal.signal(number, stop_at_once)


def name(number: int) -> str:
    """What a command stopped by this signal says."""
    return "interrupted" if number == signal.SIGINT else "terminated (SIGTERM)"


def end_now(number: int) -> NoReturn:
    """The one line, and the signal's exit code at once: nothing has started that needs stopping."""
    os.write(2, f"{name(number)}\n".encode())
    os._exit(128 + number)


def stop_at_once(number: int, frame: FrameType | None) -> None:
    """The handler `take_over` installs."""
    end_now(number)
