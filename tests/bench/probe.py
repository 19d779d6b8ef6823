"""The event-loop probe of the studio benchmarks: a 10 ms ``QTimer`` notes how late each tick comes,
so ``worst`` is the longest the event loop was blocked (the user sees a frozen window) since ``reset``,
and ``worst_at`` when that stall ended (``perf_counter`` seconds)."""
from __future__ import annotations

import time


class Gaps:
    _running: list = []          # the probes' timers: a new probe stops the ones before it

    def __init__(self) -> None:
        from PySide6.QtCore import QCoreApplication, QTimer
        for timer in Gaps._running:
            timer.stop()
        self.last, self.worst, self.worst_at = time.perf_counter(), 0.0, 0.0
        # owned by the application, not by this object: a probe collected by the garbage collector on a
        # worker thread destroyed its timer there ("Timers cannot be stopped from another thread", then a
        # segfault in the next test)
        self.timer = QTimer(QCoreApplication.instance(), interval=10)
        Gaps._running.append(self.timer)
        self.timer.timeout.connect(self._tick)
        self.timer.start()

    def _tick(self) -> None:
        now = time.perf_counter()
        if now - self.last > self.worst:
            self.worst, self.worst_at = now - self.last, now
        self.last = now

    def reset(self) -> None:
        self.last, self.worst, self.worst_at = time.perf_counter(), 0.0, 0.0
