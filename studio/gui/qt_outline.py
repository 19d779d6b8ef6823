"""The Outline dock: the step's layers × forward/grad/update (``outline``), each with kernels, bytes
moved, measured time and share of the step's bytes; a filter; clicking a row frames its kernels in the
view (``zoom_to``) and selects them. Filled on each refresh while the dock is visible."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDockWidget, QLineEdit, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from studio.text import human_bytes
from studio.gui.outline import OutlineRow, matches, outline
from studio.gui.timings import human_seconds

ROLE = Qt.ItemDataRole.UserRole


class QtOutlineDock(QDockWidget):
    def __init__(self, window) -> None:
        super().__init__("Outline", window)
        self.setObjectName("dock.outline")
        self.window_ = window
        self.filter = QLineEdit(placeholderText="filter layers (e.g. layer 7, grad)")
        self.filter.setClearButtonEnabled(True)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Part", "Kernels", "Bytes", "Time", "Share"])
        for column, width in enumerate((100, 56, 72, 60, 52)):     # Part, Kernels, Bytes, Time, Share
            self.tree.setColumnWidth(column, width)
        self.tree.setUniformRowHeights(True)
        body = QWidget()
        col = QVBoxLayout(body)
        col.setContentsMargins(2, 2, 2, 2)
        col.addWidget(self.filter)
        col.addWidget(self.tree)
        self.setWidget(body)
        self.rows: list[OutlineRow] = []
        self.task = None
        self.filter.textChanged.connect(self._apply_filter)
        self.tree.itemClicked.connect(self._clicked)
        self.visibilityChanged.connect(lambda shown: shown and self.refresh())

    def refresh(self) -> None:
        """Rebuild from the session's current graph (only while the dock shows), computed off the GUI
        thread (about 60 ms at 12 layers): the rows arrive when ready."""
        w = self.window_
        if w.session is None or not self.isVisible():
            return
        report, graph, ledger = w.profiling.report, w.session.graph, w.session.ledger
        seconds = None
        if report is not None and not report.is_stale(graph):
            seconds = {k: us * 1e-6 for k, us in report.times_us().items()}
        if self.task is not None:
            self.task.cancel()
        self.task = w.run_task("Outline", lambda token, progress: outline(graph, ledger, seconds), track=False,
                               context={"graph": graph, "fail": "Could not outline the step"})
        self.task.succeeded.connect(self._show)
        self.task.failed.connect(w._task_failed)

    def _show(self, rows: list[OutlineRow]) -> None:
        task = self.sender()
        if task is self.task:
            self.task = None
        w = self.window_
        if w.session is None or task.context["graph"] is not w.session.graph:
            return                                   # an older graph's outline
        self.rows = rows
        self.tree.setColumnHidden(3, all(row.seconds is None for row in rows))   # Time: once profiled
        self.tree.clear()
        for row in self.rows:
            item = self._item(self.tree, row)
            for child in row.children:
                self._item(item, child)
        self._apply_filter()

    def _item(self, parent, row: OutlineRow) -> QTreeWidgetItem:
        item = QTreeWidgetItem(parent, [row.label, str(len(row.kernels)), human_bytes(row.bytes),
                                        human_seconds(row.seconds) if row.seconds is not None else "–",
                                        f"{row.share:.1%}"])
        item.setData(0, ROLE, row)
        for c in range(1, 5):
            item.setTextAlignment(c, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return item

    def _apply_filter(self) -> None:
        text = self.filter.text()
        for k in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(k)
            item.setHidden(not matches(item.data(0, ROLE), text))

    def _clicked(self, item: QTreeWidgetItem, _column: int) -> None:
        row: OutlineRow = item.data(0, ROLE)
        view = self.window_.view
        view.select(row.kernels)
        view.zoom_to(row.kernels)
