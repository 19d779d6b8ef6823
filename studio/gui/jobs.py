"""Cancellation for long work run off the GUI thread (layout, ranking, loading): no Qt here.

A ``CancelToken`` is shared between the GUI (which calls ``cancel``) and the
worker (which calls ``check`` between units of work, or polls ``cancelled``).
``check`` raises ``Cancelled``; workers let it propagate so the task ends cleanly.

``check`` is also where a worker gives way to the GUI thread: while the GUI thread runs a burst of
work inside ``gui_busy()`` (bringing every pane up to date after an apply), a worker that reaches
``check`` waits (at most ``YIELD_S``) without holding the GIL. A pure-Python worker otherwise takes
half of every 5 ms switch interval: at 12 layers a ranking still running made the refresh after an
apply take 0.25 s instead of 0.15 s.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from ir.errors import StudioError

Progress = Callable[[int, int, str], None]
"""``progress(done, total, what)``: a worker reports how far it got."""

YIELD_S = 2.0                  # the longest a worker waits for the GUI thread's burst to end
_gui_idle = threading.Event()  # clear while the GUI thread is inside gui_busy()
_gui_idle.set()
_busy_thread: int | None = None


@contextmanager
def gui_busy() -> Iterator[None]:
    """Run a burst of GUI-thread work while workers wait at their next ``check`` (see the docstring)."""
    global _busy_thread
    if _busy_thread is not None:               # nested: the outer burst holds the flag
        yield
        return
    _busy_thread = threading.get_ident()
    _gui_idle.clear()
    try:
        yield
    finally:
        _busy_thread = None
        _gui_idle.set()


def _give_way() -> None:
    """Wait while another thread's GUI burst runs (never for the thread's own burst)."""
    owner = _busy_thread
    if owner is not None and owner != threading.get_ident():
        _gui_idle.wait(YIELD_S)


class Cancelled(StudioError):
    """The user (or a newer request) cancelled the work."""


class CancelToken:
    """A thread-safe cancellation flag. ``commit`` marks the point of no return (e.g. an export
    moving its package into place): a cancel requested after it is ignored, so the task
    reports what really happened."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._committed = False

    def cancel(self) -> None:
        with self._lock:
            if not self._committed:
                self._event.set()

    def commit(self, what: str = "the task") -> None:
        """Raise ``Cancelled`` if cancellation was requested; otherwise ignore any later request."""
        _give_way()                                 # not under the lock: the GUI thread may cancel meanwhile
        with self._lock:
            self._raise_if_cancelled(what)
            self._committed = True

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self, what: str = "the task") -> None:
        """Raise ``Cancelled`` when cancellation was requested (after letting a GUI burst finish)."""
        _give_way()
        self._raise_if_cancelled(what)

    def _raise_if_cancelled(self, what: str) -> None:
        if self._event.is_set():
            raise Cancelled(f"{what} was cancelled")


def no_progress(done: int, total: int, what: str) -> None:
    """A ``Progress`` that reports nowhere."""
