"""Cancellation for long work run off the GUI thread (layout, ranking, loading): no Qt here.

A ``CancelToken`` is shared between the GUI (which calls ``cancel``) and the
worker (which calls ``check`` between units of work, or polls ``cancelled``).
``check`` raises ``Cancelled``; workers let it propagate so the task ends cleanly.
"""
from __future__ import annotations

import threading
from typing import Callable

from ir.errors import StudioError

Progress = Callable[[int, int, str], None]
"""``progress(done, total, what)``: a worker reports how far it got."""


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
        with self._lock:
            self.check(what)
            self._committed = True

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self, what: str = "the task") -> None:
        """Raise ``Cancelled`` when cancellation was requested."""
        if self._event.is_set():
            raise Cancelled(f"{what} was cancelled")


def no_progress(done: int, total: int, what: str) -> None:
    """A ``Progress`` that reports nowhere."""
