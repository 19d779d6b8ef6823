"""The event-loop probe of the studio benchmarks: a 10 ms ``QTimer`` notes how late each tick comes,
so ``worst`` is the longest the event loop was blocked (the user sees a frozen window) since ``reset``,
and ``worst_at`` when that stall ended (``perf_counter`` seconds)."""
from __future__ import annotations

import time


class Gaps:
    def __init__(self) -> None:
        from PySide6.QtCore import QTimer
        self.last, self.worst, self.worst_at = time.perf_counter(), 0.0, 0.0
        self.timer = QTimer(interval=10)
        self.timer.timeout.connect(self._tick)
        self.timer.start()

    def _tick(self) -> None:
        now = time.perf_counter()
        if now - self.last > self.worst:
            self.worst, self.worst_at = now - self.last, now
        self.last = now

    def reset(self) -> None:
        self.last, self.worst, self.worst_at = time.perf_counter(), 0.0, 0.0
