"""Something slow to import, loaded on a thread of its own: the searcher (numpy), and the
searcher's surrogate (scikit-optimize, scikit-learn, scipy), which takes a second to import on an
idle machine and tens of seconds on a loaded one. A run's first minute needs neither (the
baseline compiles first, then the initial design, which needs no model). The load starts at
once; the first `get` waits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SearchLoad(Generic[T]):
    """Builds a value (`build`, which imports what it needs) on a daemon thread from construction on."""

    def __init__(self, build: Callable[[], T], on_ready: Callable[[float], None] | None = None) -> None:
        self._build = build
        self._on_ready = on_ready  # told the load's seconds, by the first `get` (on its thread)
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()  # `close` and the end of the load: one of them closes the value
        self._closed = False
        self._started = time.perf_counter()
        self.seconds = 0.0  # how long the load took, once done
        threading.Thread(target=self._load, name="compileiq-search-load", daemon=True).start()

    def _load(self) -> None:
        try:
            value = self._build()
        except BaseException as error:  # noqa: BLE001 - re-raised by `get`, on the thread that needs it
            self._error = error
        else:
            with self._lock:
                self._value, closed = value, self._closed
            if closed:  # the run ended while this loaded: nobody else will close it
                _close(value)
        finally:
            self.seconds = time.perf_counter() - self._started
            self._done.set()

    @property
    def loaded(self) -> bool:
        return self._done.is_set()

    def ready(self) -> T | None:
        """The value if it has loaded (None while loading, or if the load failed), without waiting."""
        return self._value if self._done.is_set() and self._error is None else None

    def get(self) -> T:
        """The searcher, waited for; the error that stopped it from loading, re-raised."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        if self._on_ready is not None:
            on_ready, self._on_ready = self._on_ready, None
            on_ready(self.seconds)
        assert self._value is not None
        return self._value

    def close(self) -> None:
        """Close what was loaded, if it has a `close` (a searcher in a process of its own); a load
        still running closes its value itself when it ends; one that failed has nothing to close."""
        with self._lock:
            self._closed = True
            value = self._value
        if value is not None:
            _close(value)


def _close(value: object) -> None:
    if (close := getattr(value, "close", None)) is not None:
        close()
