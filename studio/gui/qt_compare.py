"""The Compare window (View → Compare with…): a history step (default the original) beside the current graph.

Two ``QtGraphView``s (collapsed by scope as usual) in a splitter. The left shows the
graph after the step chosen in the picker, the right the session's current graph;
kernels only the left has are marked *merged* when they became part of a right kernel
(lineage, ``Session.origins``) and *removed* otherwise, only the right *added*, and those on
both sides that differ *changed* (``compare.py``), with a legend and a summary line.
Hovering a kernel on one side marks what it is on the other (what a fused kernel was made
from, what an original became). Below, a table per scope: kernels and bytes moved before
and after, and their ratio, largest saving first.
Navigation is mirrored: wheel zoom, scrolling (the other side centres on the same
scene point), opening and closing groups, and selection (the same kernel id, or for a
kernel only one side has, the item standing for its scope group on the other side).
The window follows the session: after an apply or undo the right side shows the new
current graph. The comparison, both sides' scope trees and the table are made on a
worker thread (``ready()`` once they show). It is a child window of the main window (closed with it).
"""
from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (QComboBox, QHBoxLayout, QHeaderView, QLabel, QPushButton, QSplitter,
                               QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

from ir.movement import Ledger
from studio.gui.commands import step_text
from studio.text import human_bytes
from studio.gui.compare import Comparison, compare, mirrored, scope_rows
from studio.gui.describe import group_bytes
from studio.gui.jobs import foreground, gui_busy, hold_workers, release_workers
from studio.gui.qt_graph_items import MARK_COLORS
from studio.gui.qt_graph_view import QtGraphView
from studio.gui.qt_workers import QtTask
from studio.gui.scope_tree import ScopeTree
from studio.gui.timings import human_seconds
from studio.session.core import Session

KINDS = ("removed", "merged", "added", "changed")
TABLE_COLUMNS = ("scope", "kernels before", "kernels after", "bytes before", "bytes after", "bytes after / before",
                 "time before", "time after", "time after / before")
NOT_TIMED = "—"
HOLD_S = 0.4           # workers wait this long while a side of the comparison is built and first painted
SIDE_GAP_MS = 30       # the right side is built after the left one has painted (one stall of each, not both)
FIRST_PAINT_MS = 500   # the comparison starts after the window's first paint, or this long after it was made


def _compare_work(session: Session, step: int, cursor: int, graphs: tuple, ledger: Ledger, now: Ledger,
                  options: dict, times: tuple, trees: tuple, token) -> tuple:
    """On a worker: (step, before, after, before's Ledger, the Comparison, both scope trees (those in ``trees``
    that are None built here: the main view has the others) with their groups' bytes summed, the table's rows)."""
    with foreground():
        return _compare(session, step, cursor, graphs, ledger, now, options, times, trees, token)


def _compare(session: Session, step: int, cursor: int, graphs: tuple, ledger: Ledger, now: Ledger,
             options: dict, times: tuple, trees: tuple, token) -> tuple:
    before, after = graphs
    trees = tuple(tree if tree is not None else ScopeTree(graph, **options) for graph, tree in zip(graphs, trees))
    token.check("comparing")
    d_new = [i for i in after.nodes if i not in before.nodes or after.nodes[i] is not before.nodes[i]]
    made_from = {i: session.origins(i, k=cursor, since=step) for i in d_new}
    comparison = compare(before, after, ledger.total.bytes, now.total.bytes, made_from)
    token.check("comparing")
    group_bytes(trees[0], ledger)                       # kept per tree and ledger: the boxes read them
    group_bytes(trees[1], now)
    rows = scope_rows(before, after, ledger, now, times_before=times[0], times_after=times[1])
    return step, before, after, ledger, comparison, trees, rows


class QtCompareWindow(QWidget):
    """See the module docstring."""

    def __init__(self, session: Session, parent: QWidget | None = None, step: int = 0,
                 layout_timeout_s: float = 20.0) -> None:
        hold_workers(FIRST_PAINT_MS / 1000)            # building the window, its first show and paint call
        super().__init__(parent, Qt.WindowType.Window)  # Python often: a running ranking would take half the GIL
        self.setWindowTitle(f"Compare — {session.model_name}")
        self.setObjectName("window.compare")
        self.session = session
        self.comparison: Comparison | None = None
        self._shown: tuple | None = None             # (step, current graph) the comparison on show is of
        self._task: QtTask | None = None
        self.left = QtGraphView(self, layout_timeout_s)
        self.right = QtGraphView(self, layout_timeout_s)
        main = getattr(parent, "view", None)
        for view in (self.left, self.right):          # layouts are keyed by shape: the main view's serve here too
            view.tree_options = dict(main.tree_options) if main is not None else {}
            if main is not None:
                view.book.cache = main.book.cache
        self.picker = QComboBox(self)
        self.summary = QLabel(self)
        self.table = QTableWidget(0, len(TABLE_COLUMNS), self)
        self.time_button = QPushButton("Time both sides", self)
        self.time_button.setObjectName("compare.time")
        self.time_button.setToolTip("Profile every kernel of the graphs on both sides (those not timed yet) "
                                    "to fill the time columns; progress and Cancel are in the Timings dock")
        self._syncing = False
        self._build()
        self._fill_picker(step)
        self._connect()
        self._follow = QTimer(self, singleShot=True, interval=0)
        self._follow.timeout.connect(self.refresh)
        self._unsubscribe = session.subscribe(lambda _event, _payload: self._follow.start())
        self.resize(1400, 800)
        self._first = QTimer(self, singleShot=True, interval=FIRST_PAINT_MS)
        self._first.timeout.connect(self._painted)
        self._first.start()

    def paintEvent(self, event) -> None:
        super().paintEvent(event)
        if self._first.isActive():
            self._first.start(0)                       # fires once this paint (children included) is done

    def _painted(self) -> None:
        """The window is on screen: the comparison starts now, and the workers held for the paint go on."""
        release_workers()
        self.refresh()

    # --- construction -----------------------------------------------------------------
    def _build(self) -> None:
        top = QHBoxLayout()
        top.addWidget(QLabel("Compare step", self))
        top.addWidget(self.picker, 1)
        top.addWidget(QLabel("with the current graph", self))
        top.addWidget(self.time_button)
        top.addStretch(1)
        for kind in KINDS:
            swatch = QLabel(f"■ {kind}", self)
            swatch.setStyleSheet(f"color: {MARK_COLORS[kind]}; font-weight: bold")
            swatch.setObjectName(f"legend.{kind}")
            top.addWidget(swatch)
        split = QSplitter(Qt.Orientation.Horizontal, self)
        split.addWidget(self.left)
        split.addWidget(self.right)
        split.setSizes([1 << 16, 1 << 16])           # two equal halves whatever the views' size hints
        self.table.setObjectName("compare.scopes")
        self.table.setHorizontalHeaderLabels([c.replace(" ", "\n", 1) if c != "scope" else c for c in TABLE_COLUMNS])
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()     # two-line headers, columns as wide as they need: none is cut
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        rows = QSplitter(Qt.Orientation.Vertical, self)
        rows.addWidget(split)
        rows.addWidget(self.table)
        rows.setSizes([600, 160])
        col = QVBoxLayout(self)
        col.addLayout(top)
        col.addWidget(self.summary)
        col.addWidget(rows, 1)

    def _fill_picker(self, step: int) -> None:
        self.picker.blockSignals(True)
        self.picker.clear()
        self.picker.addItem("0 — the original graph", 0)
        for k, st in enumerate(self.session.steps, start=1):
            self.picker.addItem(f"{k} — {step_text(st.transformation, st.anchors, None, st.applications)}", k)
        self.picker.setCurrentIndex(max(0, min(step, self.picker.count() - 1)))
        self.picker.blockSignals(False)

    def _connect(self) -> None:
        self.picker.currentIndexChanged.connect(lambda _i: self.refresh())
        self.time_button.clicked.connect(self.time_both)
        if self._profiling is not None:
            self._profiling.measuredChanged.connect(self._fill_times)
        for a, b in ((self.left, self.right), (self.right, self.left)):
            a.selectionChangedIds.connect(lambda ids, a=a, b=b: self._mirror_selection(a, b, ids))
            a.groupToggled.connect(lambda key, opened, a=a, b=b: self._mirror_group(a, b, key, opened))
            a.zoomed.connect(lambda _factor, a=a, b=b: self._mirror_scroll(a, b))
            a.hoveredKernel.connect(lambda key, a=a, b=b: self._mirror_hover(a, b, key))
            for bar in (a.horizontalScrollBar(), a.verticalScrollBar()):
                bar.valueChanged.connect(lambda _v, a=a, b=b: self._mirror_scroll(a, b))

    # --- content ----------------------------------------------------------------------
    @property
    def step(self) -> int:
        return int(self.picker.currentData() or 0)

    def set_step(self, step: int) -> None:
        self.picker.setCurrentIndex(step)

    def refresh(self) -> None:
        """Show the chosen step against the session's current graph (keeping open groups and the zoom). The
        comparison, both scope trees and the table are made on a worker (0.55 s of the GUI
        thread at 12 layers); a newer refresh replaces a running one."""
        s = self.session
        if self.picker.count() != len(s.steps) + 1:
            self._fill_picker(self.step)
        if self._task is not None:
            self._task.cancel()
        step, cursor, before, after = self.step, s.cursor, s.graph_at(self.step), s.graph
        known = s.ledger_at(step)                       # every state keeps its figures
        options, times, now = dict(self.left.tree_options), (self._times(before), self._times(after)), s.ledger
        main = getattr(self.parent(), "view", None)
        trees = tuple(main.cached_tree(g) if main is not None and main.tree_options == options else None
                      for g in (before, after))
        self._task = task = QtTask(f"Comparing step {step} with the current graph",
                                   lambda token, _progress: _compare_work(s, step, cursor, (before, after), known,
                                                                          now, options, times, trees, token))
        task.succeeded.connect(lambda result, task=task: self._show(task, result))
        task.failed.connect(lambda message, task=task: self._failed(task, message))
        task.start()

    def ready(self) -> bool:
        """The comparison on show is of the chosen step and the session's current graph."""
        return self._task is None and self.comparison is not None and self._shown == (self.step, self.session.graph)

    def _failed(self, task: QtTask, message: str) -> None:
        if task is self._task:
            self._task = None
            self.summary.setText(f"could not compare: {message}")

    def _show(self, task: QtTask, result) -> None:
        if task is not self._task:
            return
        step, before, after, ledger, comparison, trees, rows = result
        s = self.session
        if step != self.step or after is not s.graph or before is not s.graph_at(step):
            self._task = None
            self.refresh()                             # the session moved on meanwhile
            return
        self.comparison = comparison
        self.left.seed_tree(before, trees[0])
        self.right.seed_tree(after, trees[1])
        with gui_busy():                                # the ranker waits while this side is built and painted
            hold_workers(HOLD_S)
            self.left.set_graph(before, ledger)
            self._fill_table(rows)
        QTimer.singleShot(SIDE_GAP_MS, lambda: self._show_right(task, step, after))   # paint in between

    def _show_right(self, task: QtTask, step: int, after) -> None:
        if task is not self._task:
            return
        self._task = None
        s = self.session
        if after is not s.graph:
            self.refresh()
            return
        self._shown = (step, after)
        hold_workers(HOLD_S)
        self.right.set_graph(after, s.ledger)
        self._syncing = True
        try:
            self.right.expanded = set(self.left.expanded) | set(self.right.expanded)
            self.right.relayout()
        finally:
            self._syncing = False
        self._mirror_scroll(self.left, self.right)      # same zoom and centre
        for view, marks in ((self.left, self.comparison.left_marks), (self.right, self.comparison.right_marks)):
            view.clear_marks(*KINDS)
            for kind, ids in marks.items():
                view.set_marks(kind, ids)
        self.summary.setText(self.comparison.summary())
        self.time_button.setEnabled(self._profiling is not None and (self._times(s.graph_at(step)) is None
                                                                      or self._times(after) is None))

    @property
    def _profiling(self):
        return getattr(self.parent(), "profiling", None)

    def _times(self, graph) -> dict[str, float] | None:
        report = self._profiling.measured.get(graph) if self._profiling is not None else None
        return None if report is None else {k.node_id: k.samples.median_s for k in report.kernels if k.ok}

    def time_both(self):
        """Profile the compared graphs not timed yet (``QtProfiling.measure``); None when both are."""
        if self._profiling is None:
            return None
        return self._profiling.measure([(self.step, self.session.graph_at(self.step)),
                                        (self.session.cursor, self.session.graph)])

    def _fill_times(self) -> None:
        s = self.session
        if not self.ready():                           # the comparison being made fills the table when shown
            return
        before, after = s.graph_at(self.step), s.graph
        tb, ta = self._times(before), self._times(after)
        self.time_button.setEnabled(self._profiling is not None and (tb is None or ta is None))
        self._fill_table(scope_rows(before, after, s.ledger_at(self.step), s.ledger, times_before=tb, times_after=ta))

    def _fill_table(self, rows) -> None:
        self.table.setRowCount(len(rows))
        right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        for k, r in enumerate(rows):
            tr = r.time_ratio
            cells = (r.scope, str(r.kernels_before), str(r.kernels_after), human_bytes(r.bytes_before),
                     human_bytes(r.bytes_after), f"{r.ratio:.2f}×" if r.bytes_before else "new",
                     NOT_TIMED if r.time_before is None else human_seconds(r.time_before),
                     NOT_TIMED if r.time_after is None else human_seconds(r.time_after),
                     NOT_TIMED if tr is None else f"{tr:.2f}×")
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if c:
                    item.setTextAlignment(right)
                self.table.setItem(k, c, item)

    def _mirror_hover(self, a: QtGraphView, b: QtGraphView, key: str) -> None:
        """Mark on ``b`` what the kernel hovered on ``a`` is there (``Comparison.linked``)."""
        if self.comparison is None:
            return
        a.set_marks("hover", [key] if key else [])
        side = "left" if a is self.left else "right"
        b.set_marks("hover", [i for i in self.comparison.linked(side, key) if b.graph is not None
                              and i in b.graph.nodes] if key else [])

    # --- mirrored navigation ----------------------------------------------------------------
    def _mirror_selection(self, a: QtGraphView, b: QtGraphView, ids: list) -> None:
        if self._syncing or a.tree is None or b.tree is None:
            return
        self._syncing = True
        try:
            items = a.selected_keys() or ids
            b.select(mirrored(items, a.tree, b.tree, set(b.tree.expanded_groups(b.expanded))))
        finally:
            self._syncing = False

    def _mirror_group(self, a: QtGraphView, b: QtGraphView, key: str, opened: bool) -> None:
        if self._syncing or b.tree is None:
            return
        self._syncing = True
        try:
            if opened and key in b.tree.groups:
                b.expand(key)
            elif not opened and key in b.expanded:
                b.collapse(key)
        finally:
            self._syncing = False

    def _mirror_scroll(self, a: QtGraphView, b: QtGraphView) -> None:
        """``b`` takes ``a``'s zoom and centres on the scene point ``a`` shows in its middle."""
        if self._syncing:
            return
        self._syncing = True
        try:
            b.setTransform(a.transform())
            b.centerOn(a.mapToScene(a.viewport().rect().center()))
        finally:
            self._syncing = False

    def closeEvent(self, event) -> None:
        if self._profiling is not None:
            try:
                self._profiling.measuredChanged.disconnect(self._fill_times)
            except (RuntimeError, TypeError):
                pass
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._task is not None:                     # its result is dropped (``_show`` ignores other tasks)
            self._task.cancel()
            self._task = None
        for view in (self.left, self.right):
            if view.task is not None:
                view.task.cancel()
                view.task.wait(10.0)
        super().closeEvent(event)
