"""Cancellation for long work run off the GUI thread (layout, ranking, loading): no Qt here.

A ``CancelToken`` is shared between the GUI (which calls ``cancel``) and the
worker (which calls ``check`` between units of work, or polls ``cancelled``).
``check`` raises ``Cancelled``; workers let it propagate so the task ends cleanly.

``check`` is also where a worker gives way to the GUI thread: while the GUI thread runs a burst of
work inside ``gui_busy()`` (bringing every pane up to date after an apply), a worker that reaches
``check`` waits (at most ``YIELD_S``) without holding the GIL. A pure-Python worker otherwise takes
half of every 5 ms switch interval: at 12 layers a ranking still running made the refresh after an
apply take 0.25 s instead of 0.15 s. ``hold_workers`` makes them wait a short while after such a burst too,
while Qt paints its result (a new Compare window's first paint took 0.18 s beside a running ranking).
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from ir import pacing
from ir.errors import StudioError

Progress = Callable[[int, int, str], None]
"""``progress(done, total, what)``: a worker reports how far it got."""

YIELD_S = 2.0                  # the longest a worker waits for the GUI thread's burst to end
_gui_idle = threading.Event()  # clear while the GUI thread is inside gui_busy()
_gui_idle.set()
_busy_thread: int | None = None
_hold_until = 0.0              # time.monotonic() until which workers wait (``hold_workers``)
_lock = threading.Lock()
_foreground = 0                # ``foreground`` work running now
_foreground_idle = threading.Event()
_foreground_idle.set()
_local = threading.local()     # .background: this thread's work gives way to foreground work


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


@contextmanager
def foreground() -> Iterator[None]:
    """Work the user is waiting for (a comparison, a repeat being planned): ``background`` workers wait at
    their next ``check`` until it ends (at most ``YIELD_S`` at a time). Two pure-Python workers at once kept
    the GUI thread from the GIL for 0.2-0.3 s at a time on two cores; one leaves it about 0.1 s."""
    global _foreground
    with _lock:
        _foreground += 1
        _foreground_idle.clear()
    try:
        yield
    finally:
        with _lock:
            _foreground -= 1
            if not _foreground:
                _foreground_idle.set()


@contextmanager
def background() -> Iterator[None]:
    """Mark this thread's work as background (ranking): it gives way to ``foreground`` work."""
    _local.background = True
    try:
        yield
    finally:
        _local.background = False


def hold_workers(seconds: float) -> None:
    """Let the GUI thread paint what it just built (a new window's first paint runs in Qt, outside any
    burst): workers off the main thread wait at their next ``check`` until ``seconds`` from now."""
    global _hold_until
    _hold_until = max(_hold_until, time.monotonic() + seconds)


def release_workers() -> None:
    """End a hold early: what it waited for (a window's first paint) is done."""
    global _hold_until
    _hold_until = 0.0


def _give_way() -> None:
    """Wait while another thread's GUI burst runs (never for the thread's own burst), or a hold lasts."""
    owner = _busy_thread
    if owner is not None and owner != threading.get_ident():
        _gui_idle.wait(YIELD_S)
    if getattr(_local, "background", False):
        _foreground_idle.wait(YIELD_S)
    left = _hold_until - time.monotonic()
    if left > 0 and threading.current_thread() is not threading.main_thread():
        time.sleep(min(left, YIELD_S))


pacing.set_pause(_give_way)     # long loops in ir and transforms give way too, between their checks


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
