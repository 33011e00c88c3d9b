"""The interpreter's cyclic garbage collector, kept off the objects alive as a command exits.

Every full collection walks every tracked object, and the imported libraries (scikit-learn,
scipy, SQLAlchemy, rich: ~150,000 objects) are most of them: several walks as the interpreter
exits cost ~0.35 s at the end of every command. The CLI alone skips them (`quick_exit`); the
objects of a process that goes on (the Python API, a notebook) are never frozen, so garbage
cycles made later are collected as usual. Freezing objects during a run (after the imports)
saved ~0.1 CPU s in a budget-480 tune and would keep a long-lived process's cycles alive for
good: not done.
"""

from __future__ import annotations

import atexit
import gc

_exit_registered = False


def quick_exit() -> None:
    """At the interpreter's exit, skip its collections of everything still alive (the process is
    ending: its memory goes back whole). Registered once; atexit handlers registered later (the
    database's, the workers') run before it, and the objects they close are closed by them."""
    global _exit_registered
    if not _exit_registered:
        _exit_registered = True
        atexit.register(gc.freeze)
