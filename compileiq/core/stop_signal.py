"""Which signal stopped this process's command, as `cli.signals` took it: what a stop records
names it ("terminated (SIGTERM)"), whatever exception reached the stop (Ray's driver turns the
`Terminated` the handler raised into a plain KeyboardInterrupt on its way out)."""

from __future__ import annotations

import signal

_first: list[int] = []


def received(number: int) -> None:
    """The signal that stopped the command (the first; a later one ends the process)."""
    _first[:] = _first or [number]


def clear() -> None:
    _first.clear()


def first() -> int | None:
    """The signal that stopped the command; None while none has."""
    return _first[0] if _first else None


def terminated() -> bool:
    """Whether SIGTERM stopped it (a CI job cancelled, `kill`), not Ctrl-C."""
    return _first[:1] == [signal.SIGTERM]
