"""The interpreter's cyclic garbage collector, kept off the objects that live for the whole run.

Every full collection walks every tracked object, and the imported libraries (scikit-learn,
scipy, SQLAlchemy, rich: ~150,000 objects) are most of them: ~60 ms a walk on 2 CPUs, four times
in a budget-480 tune (0.23 CPU s, taken from the compilers on cores they share), and several
walks more as the interpreter exits (~0.35 s at the end of every command). Frozen objects are
still freed by reference counting; only a cycle among them that becomes garbage stays (the
libraries' modules live for the run anyway). Nothing a run proposes or records depends on when
the collector runs.
"""

from __future__ import annotations

import atexit
import gc

_exit_registered = False
_settled = False


def settled() -> None:
    """Take the objects alive now (the libraries just imported) out of the collector's walks;
    once per process (a process that tunes many times, a test suite or a notebook, would keep
    every later call's uncollected garbage cycles for good)."""
    global _settled
    if not _settled:
        _settled = True
        gc.freeze()


def quick_exit() -> None:
    """At the interpreter's exit, skip its collections of everything still alive (the process is
    ending: its memory goes back whole). Registered once; atexit handlers registered later (the
    database's, the workers') run before it, and the objects they close are closed by them."""
    global _exit_registered
    if not _exit_registered:
        _exit_registered = True
        atexit.register(gc.freeze)
