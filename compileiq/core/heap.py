"""The interpreter's cyclic garbage collector, kept off the objects that live for the whole run.

Every full collection walks every tracked object, and the imported libraries (scikit-learn,
scipy, SQLAlchemy, rich: ~150,000 objects) are most of them: ~60 ms a walk on 2 CPUs, four times
in a budget-480 tune, and several more walks as the interpreter exits, ~0.7 CPU s of a run that
spends ~7 itself, taken from the compilers on a machine whose cores they share. Frozen objects are
never collected as cycles; they are still freed by reference counting, so nothing is kept alive
that would otherwise go.
"""

from __future__ import annotations

import atexit
import gc

_exit_registered = False


def settled() -> None:
    """Take the objects alive now (the libraries just imported) out of the collector's walks."""
    gc.freeze()


def quick_exit() -> None:
    """At the interpreter's exit, skip its collections of everything still alive (the process is
    ending: its memory goes back whole). Registered once; atexit handlers registered later (the
    database's, the workers') run before it, and the objects they close are closed by them."""
    global _exit_registered
    if not _exit_registered:
        _exit_registered = True
        atexit.register(gc.freeze)
