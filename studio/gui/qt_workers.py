"""Long work off the GUI thread: ``QtTask`` on a QThreadPool, and the status-bar ``QtTaskBar``.

A task runs ``fn(token, progress)`` on a pool thread. Its signals (``progressed``,
``succeeded``, ``failed``, ``cancelled``, then always ``finished``) are emitted from
that thread and delivered queued, on the GUI thread. ``cancel()`` sets the token;
the work stops at its next check (a layout subprocess is killed at once). Errors
arrive as one-line messages (``StudioError.summary``), never as tracebacks; an
unexpected exception is printed to stderr for the bug report and reported as one
line naming the task.
"""
from __future__ import annotations

import sys
import threading
import time
import traceback
from typing import Any, Callable

from PySide6.QtCore import QCoreApplication, QObject, QThreadPool, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QWidget

from ir.errors import StudioError
from studio.gui.jobs import Cancelled, CancelToken

PROGRESS_S = 0.05              # the shortest time between two progress reports of one phase

Work = Callable[[CancelToken, "Reporter"], Any]


class _Signals(QObject):
    partial = Signal(object)
    progressed = Signal(int, int, str)
    succeeded = Signal(object)
    failed = Signal(str)
    cancelled = Signal(str)
    finished = Signal()


class Reporter:
    """What the work gets as ``progress``: call it with (done, total, what); ``partial(obj)`` hands out a
    result before the end (``QtTask.partial``). Reports reach the GUI thread at most every
    ``PROGRESS_S`` (and always the last of a phase): a worker that reports each of thousands of cheap
    units (ranking known matches) would otherwise queue a label update per unit on the GUI thread."""

    def __init__(self, signals: _Signals) -> None:
        self._signals = signals
        self._last = (-1.0, "")

    def __call__(self, done: int, total: int, what: str) -> None:
        now = time.monotonic()
        if done < total and what == self._last[1] and now - self._last[0] < PROGRESS_S:
            return
        self._last = (now, what)
        self._signals.progressed.emit(done, total, what)

    def partial(self, value: Any) -> None:
        self._signals.partial.emit(value)


class _Job:
    """The work of one task, run on a pool thread (a plain callable: no QRunnable to own or delete)."""

    def __init__(self, title: str, fn: Work, token: CancelToken, signals: _Signals, done: threading.Event) -> None:
        self.title, self.fn, self.token, self.signals, self.done = title, fn, token, signals, done

    def __call__(self) -> None:
        try:
            self._run()
        finally:
            self.done.set()

    def _run(self) -> None:
        s = self.signals
        try:
            result = self.fn(self.token, Reporter(s))
        except Cancelled as e:
            s.cancelled.emit(e.summary)
        except StudioError as e:
            s.failed.emit(e.summary)
        except Exception as e:  # noqa: BLE001 - a bug: keep the app alive, say which task failed
            traceback.print_exc(file=sys.stderr)
            s.failed.emit(f"{self.title} failed unexpectedly: {type(e).__name__}: {e}")
        else:
            if self.token.cancelled:
                s.cancelled.emit(f"{self.title} was cancelled")
            else:
                s.succeeded.emit(result)
        s.finished.emit()


class QtTask(_Signals):
    """A cancellable job on a thread pool (see the module docstring). Its signals are those of
    ``_Signals``, which the job emits on a private instance and the task re-emits.

    Owners connect *bound methods* (never lambdas that capture the owner or the task: such a
    closure, released while the task is deleted, could delete the owner from inside its child's
    destructor) and find the task with ``sender()``; ``context`` carries what they need. A task
    is a child of the application, not of its owner, so an owner closed while its task still runs
    only drops the connections; the task deletes itself after ``finished``.
    """

    def __init__(self, title: str, fn: Work, context: Any = None) -> None:
        super().__init__(QCoreApplication.instance())
        self.title, self.context = title, context
        self.token = CancelToken()
        self.running = False
        self._signals = _Signals(self)          # deleted with the task: late deliveries are dropped
        self._finished = threading.Event()
        self._job = _Job(title, fn, self.token, self._signals, self._finished)
        for name in ("partial", "progressed", "succeeded", "failed", "cancelled"):
            getattr(self._signals, name).connect(getattr(self, name))
        self._signals.finished.connect(self._done)

    def start(self, pool: QThreadPool | None = None) -> "QtTask":
        self.running = True
        (pool or QThreadPool.globalInstance()).start(self._job)
        return self

    def cancel(self) -> None:
        self.token.cancel()

    def wait(self, timeout_s: float) -> bool:
        """Block until the work has returned (not for its signals); False at the timeout."""
        return self._finished.wait(timeout_s) if self.running else True

    def _done(self) -> None:
        self.running = False
        self._job = None
        self.finished.emit()
        self.deleteLater()


class QtTaskBar(QWidget):
    """Status-bar progress of the running task, with Cancel; shown after a short delay."""

    def __init__(self, parent: QWidget | None = None, delay_ms: int = 300) -> None:
        super().__init__(parent)
        self.label = QLabel()
        self.bar = QProgressBar()
        self.bar.setMaximumWidth(160)
        self.bar.setMaximumHeight(14)
        self.button = QPushButton("Cancel")
        self.button.setObjectName("cancelTask")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        for w in (self.label, self.bar, self.button):
            lay.addWidget(w)
        self.task: QtTask | None = None
        self._timer = QTimer(self, singleShot=True, interval=delay_ms)
        self._timer.timeout.connect(self._reveal)
        self.button.clicked.connect(self._cancel)
        self.hide()

    def track(self, task: QtTask) -> None:
        """Show ``task``'s progress (replacing the previous one's)."""
        self.task = task
        self.label.setText(task.title)
        self.bar.setRange(0, 0)
        task.progressed.connect(self._progress)
        task.finished.connect(self._finish)
        self._timer.start()

    def _reveal(self) -> None:
        if self.task is not None and self.task.running:
            self.show()

    def _progress(self, done: int, total: int, what: str) -> None:
        if self.sender() is not self.task:
            return
        self.bar.setRange(0, total)
        self.bar.setValue(done)
        if what:
            self.label.setText(what)

    def _cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def _finish(self) -> None:
        if self.sender() is self.task:
            self.task = None
            self._timer.stop()
            self.hide()
