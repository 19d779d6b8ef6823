"""``QtPeakMemory``: the Memory figure's peak bytes per graph, computed off the GUI thread and cached per
graph object (undo and redo return to old graphs). ``of(graph)`` is the peak, or None while a worker
computes it (0.03-0.06 s of the GUI thread after each apply at 12 layers); when it is ready, the window's
Movement dock gets it. A child of the window; it reaches the window through ``parent()``."""
from __future__ import annotations

from collections import OrderedDict

from PySide6.QtCore import QObject

CACHE_SIZE = 64


class QtPeakMemory(QObject):
    def __init__(self, window) -> None:
        super().__init__(window)
        self.cache: OrderedDict = OrderedDict()

    def seed(self, graph, peak: int) -> None:
        """A peak computed elsewhere (a loading worker)."""
        self.cache[id(graph)] = (graph, peak)

    def of(self, graph) -> int | None:
        hit = self.cache.get(id(graph))
        if hit is None or hit[0] is not graph:
            self.cache[id(graph)] = (graph, None)
            task = self.parent().run_task("Peak memory", _work(self.parent().session, graph), track=False,
                                          context=graph)
            task.succeeded.connect(self._done)
            task.failed.connect(self._failed)
            task.cancelled.connect(self._failed)
            return None
        self.cache.move_to_end(id(graph))
        return hit[1]

    def _done(self, peak: int) -> None:
        graph = self.sender().context
        self.cache[id(graph)] = (graph, peak)
        while len(self.cache) > CACHE_SIZE:
            self.cache.popitem(last=False)
        self.parent().movement.set_peak(graph, peak)

    def _failed(self, message: str) -> None:
        graph = self.sender().context
        self.cache.pop(id(graph), None)              # the next refresh of this graph tries again
        self.parent().movement.set_peak(graph, None, why=message)


def _work(session, graph):
    """The work of a peak-memory task: it starts once the refresh that asked for it has ended."""
    def work(token, progress) -> int:
        token.check("peak memory")
        return session.peak_bytes(graph)
    return work
