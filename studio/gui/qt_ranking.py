"""``QtRanker``: the Transformations dock's matches, ranked off the GUI thread, debounced and cached.

``schedule`` (re)starts a short timer; ``rank`` snapshots the session's graph, the
selected and the visible kernels, and runs ``ranking.rank_groups`` as a window task
(cancelling the previous one). Groups reach the dock as soon as they are checked,
then again once ranked. Results are cached per (graph, selection, viewport), so undo
and redo show their lists at once; candidates and predictions come from the session's
``MatchIndex`` of the graph (built in the worker on first use, then derived after each
apply from the neighbourhood of the rewrite), so a new selection, a scrolled viewport or
the state after an apply only ranks the matches not ranked before. While the listing shown was
ranked on an earlier graph (an apply, undo or redo since), the dock marks it out of date
(``set_stale``) until the new ranking reaches it; nothing waits for it. Zoomed out over more
than ``VIEWPORT_MAX`` kernels, the Viewport group is left to the Whole graph one. A child of the window; it reaches the window
through ``parent()`` (no Python reference cycle). Rankings run on the ranker's own one-thread pool, so a new
graph's ranking starts at once instead of waiting behind layouts and figures on the shared pool.
"""
from __future__ import annotations

from collections import OrderedDict

from PySide6.QtCore import QObject, QThreadPool, QTimer

from studio.gui.jobs import background
from studio.gui.qt_workers import QtTask
from studio.gui.ranking import rank_groups

CACHE_SIZE = 24
VIEWPORT_MAX = 400          # more kernels in view than this (zoomed out): the Viewport group waits for a zoom in


class QtRanker(QObject):
    def __init__(self, window, delay_ms: int = 150) -> None:
        super().__init__(window)
        self.task: QtTask | None = None
        self.cache: OrderedDict = OrderedDict()
        self.delay_ms = delay_ms
        self.timer = QTimer(self, singleShot=True, interval=delay_ms)
        self.timer.timeout.connect(self.rank)
        self.shown = None                    # the graph the listing on show was ranked on
        self.pool = QThreadPool(self)        # its own thread: never queued behind layouts and figures
        self.pool.setMaxThreadCount(1)

    def schedule(self, delay_ms: int | None = None) -> None:
        self._mark()
        w = self.parent()
        if self.task is not None and (w.session is None or self.task.context["graph"] is not w.session.graph):
            self.task.cancel()       # it ranks a graph no longer shown: stop sharing the GIL with the paint
            self.task = None
        self.timer.start(self.delay_ms if delay_ms is None else delay_ms)

    def _mark(self) -> None:
        """Mark the listing out of date when the session's graph is not the one it was ranked on."""
        w = self.parent()
        graph = w.session.graph if w.session is not None else None
        w.transformations.set_stale(self.shown is not None and self.shown is not graph)

    def rank(self) -> None:
        """Rank the matches for selection, viewport and whole graph in the background."""
        w = self.parent()
        if w.session is None:
            return
        graph = w.session.graph
        sel = tuple(w.view.selected_ids()) or None
        vp = tuple(w.view.viewport_ids()) or None
        w.transformations.viewport_note = ""
        if vp is not None and len(vp) > VIEWPORT_MAX:    # the overview: as good as the whole graph, and slow
            w.transformations.viewport_note = f"zoom in to rank the {len(vp)} kernels in view"
            vp = None
        key = (id(graph), sel, vp)
        if key in self.cache and self.cache[key][0] is graph:
            self._show(self.cache[key][1], graph)
            return
        self._mark()
        if self.task is not None and self.task.context["key"] == key and self.task.context["graph"] is graph:
            return                           # already ranking exactly this: let it finish
        if self.task is not None:
            self.task.cancel()
        session = w.session
        def work(token, progress):
            with background():                         # gives way to a comparison or a repeat being planned
                return rank_groups(graph, sel, vp, token=token, progress=progress, index=session.match_index(graph),
                                   on_group=lambda label, rows: progress.partial((label, rows)))
        task = w.run_task("Ranking matches", work, track=False, context={"key": key, "graph": graph, "shown": {}},
                          pool=self.pool)
        task.progressed.connect(self._progress)
        task.partial.connect(self._part)
        task.succeeded.connect(self._done)
        self.task = task

    def _current(self, task) -> bool:
        w = self.parent()
        return task is self.task and w.session is not None and task.context["graph"] is w.session.graph

    def _progress(self, done: int, total: int, what: str) -> None:
        if self.sender() is self.task:
            self.parent().transformations.set_status(f"{what}: {done} of {total}…")

    def _part(self, item) -> None:
        """Show a group as soon as it is checked, and again once ranked (Selection first: it is small)."""
        task = self.sender()
        label, rows = item
        task.context["shown"][label] = rows
        if self._current(task):
            self.shown = task.context["graph"]
            self.parent().transformations.show_groups(task.context["shown"])

    def _done(self, groups) -> None:
        task = self.sender()
        self.cache[task.context["key"]] = (task.context["graph"], groups)
        while len(self.cache) > CACHE_SIZE:
            self.cache.popitem(last=False)
        current = self._current(task)
        if task is self.task:
            self.task = None
        if current:
            self._show(groups, task.context["graph"])

    def _show(self, groups, graph) -> None:
        self.shown = graph
        dock = self.parent().transformations
        dock.show_groups(groups)
        n = sum(len(v) for v in groups.values())
        ok = sum(1 for v in groups.values() for r in v if r.ok)
        dock.set_status(f"{ok} applicable of {n} matches, ranked by predicted bytes saved")
