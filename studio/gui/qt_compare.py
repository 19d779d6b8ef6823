"""The Compare window (View → Compare with…): a history step (default the original) beside the current graph.

Two ``QtGraphView``s (collapsed by scope as usual) in a splitter. The left shows the
graph after the step chosen in the picker, the right the session's current graph;
kernels only the left has are marked *removed*, only the right *added*, and those on
both sides that differ *changed* (``compare.py``), with a legend and a summary line.
Navigation is mirrored: wheel zoom, scrolling (the other side centres on the same
scene point), opening and closing groups, and selection (the same kernel id, or for a
kernel only one side has, the item standing for its scope group on the other side).
The window follows the session: after an apply or undo the right side shows the new
current graph. It is a child window of the main window (closed with it).
"""
from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSplitter, QVBoxLayout, QWidget

from ir.movement import Ledger
from studio.gui.commands import step_text
from studio.gui.compare import Comparison, compare, mirrored
from studio.gui.qt_graph_items import MARK_COLORS
from studio.gui.qt_graph_view import QtGraphView
from studio.session import Session

KINDS = ("removed", "added", "changed")


class QtCompareWindow(QWidget):
    """See the module docstring."""

    def __init__(self, session: Session, parent: QWidget | None = None, step: int = 0,
                 layout_timeout_s: float = 20.0) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle(f"Compare — {session.model_name}")
        self.setObjectName("window.compare")
        self.session = session
        self.comparison: Comparison | None = None
        self._ledgers: dict[int, tuple] = {}
        self.left = QtGraphView(self, layout_timeout_s)
        self.right = QtGraphView(self, layout_timeout_s)
        self.picker = QComboBox(self)
        self.summary = QLabel(self)
        self._syncing = False
        self._build()
        self._fill_picker(step)
        self._connect()
        self._follow = QTimer(self, singleShot=True, interval=0)
        self._follow.timeout.connect(self.refresh)
        self._unsubscribe = session.subscribe(lambda _event, _payload: self._follow.start())
        self.resize(1400, 800)
        self.refresh()

    # --- construction -----------------------------------------------------------------
    def _build(self) -> None:
        top = QHBoxLayout()
        top.addWidget(QLabel("Compare step", self))
        top.addWidget(self.picker, 1)
        top.addWidget(QLabel("with the current graph", self))
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
        col = QVBoxLayout(self)
        col.addLayout(top)
        col.addWidget(self.summary)
        col.addWidget(split, 1)

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
        for a, b in ((self.left, self.right), (self.right, self.left)):
            a.selectionChangedIds.connect(lambda ids, a=a, b=b: self._mirror_selection(a, b, ids))
            a.groupToggled.connect(lambda key, opened, a=a, b=b: self._mirror_group(a, b, key, opened))
            a.zoomed.connect(lambda _factor, a=a, b=b: self._mirror_scroll(a, b))
            for bar in (a.horizontalScrollBar(), a.verticalScrollBar()):
                bar.valueChanged.connect(lambda _v, a=a, b=b: self._mirror_scroll(a, b))

    # --- content ----------------------------------------------------------------------
    @property
    def step(self) -> int:
        return int(self.picker.currentData() or 0)

    def set_step(self, step: int) -> None:
        self.picker.setCurrentIndex(step)

    def refresh(self) -> None:
        """Show the chosen step against the session's current graph (keeping open groups and the zoom)."""
        s = self.session
        if self.picker.count() != len(s.steps) + 1:
            self._fill_picker(self.step)
        before, after = s.graph_at(self.step), s.graph
        ledger = self._ledger(self.step)
        self.comparison = compare(before, after, ledger.total.bytes, s.ledger.total.bytes)
        self.left.set_graph(before, ledger)
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

    def _ledger(self, step: int) -> Ledger:
        """The figures of the graph after ``step`` steps (the session's own for the current one)."""
        s = self.session
        graph = s.graph_at(step)
        if graph is s.graph:
            return s.ledger
        hit = self._ledgers.get(step)
        if hit is None or hit[0] is not graph:
            hit = self._ledgers[step] = (graph, Ledger(graph))
        return hit[1]

    def closeEvent(self, event) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for view in (self.left, self.right):
            if view.task is not None:
                view.task.cancel()
                view.task.wait(10.0)
        super().closeEvent(event)
