"""The Data movement dock: totals against the bound, a sortable kernel table, the trend over steps.

The header shows bytes moved, the compulsory lower bound, their ratio, FLOPs and
peak memory. Below it, on request (*Count as exported (CPU)*, a background task), the bytes the
exported CPU program moves against the bytes as fused (``codegen.program.traffic``), with the
statements that differ most in its tooltip; kept per graph for undo and redo. The table (a model over the session's ``Ledger``, sorted on the raw
numbers) has one row per kernel; after an apply, undo or revert only the rows of the
kernels that differ (``graph_diff``) are removed and inserted in place, and the share
column is refreshed (the view repaints only the visible cells that changed); selecting rows emits
``selectionChangedIds`` and ``select_ids`` follows the graph view's selection.
``QtTrendPlot`` draws bytes after each history step (QPainter, no plotting library)
with the bound as a dashed line and the current step marked.
"""
from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import (QAbstractItemView, QDockWidget, QHBoxLayout, QPushButton, QSplitter, QTableView,
                               QVBoxLayout, QWidget)

from ir.graph import Graph
from ir.movement import Ledger
from studio.text import human_bytes, human_count
from studio.gui import graph_diff
from studio.gui.describe import kernel_title
from studio.gui.qt_kernel_tables import QtRowsModel, select_rows, selected_row_ids
from studio.gui.qt_text import QtTextLine

COLUMNS = ("kernel", "op", "read", "written", "bytes", "FLOPs", "FLOP/B", "share")
_DISPLAY, _ALIGN = int(Qt.ItemDataRole.DisplayRole), int(Qt.ItemDataRole.TextAlignmentRole)
_SORT = int(Qt.ItemDataRole.UserRole)
_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
_ASCENDING = Qt.SortOrder.AscendingOrder


class QtKernelModel(QtRowsModel):
    """One row per kernel of the current graph, sorted here (in Python, on the raw numbers: a
    sorting proxy would call ``data`` for every cell on each reset); ``SORT_ROLE`` gives the numbers."""

    SORT_ROLE = Qt.ItemDataRole.UserRole
    columns = COLUMNS

    def __init__(self) -> None:
        super().__init__()
        self.order = (4, Qt.SortOrder.DescendingOrder)
        self.graph: Graph | None = None
        self._seeded: tuple[Graph, list[tuple]] | None = None

    def seed(self, graph: Graph, rows: list[tuple]) -> None:
        """Rows of ``graph`` made elsewhere (``rows_of`` in the loading worker: 0.17 s of the GUI thread at
        24 layers), used when ``graph`` is shown next."""
        self._seeded = (graph, rows)

    def set_graph(self, graph: Graph, ledger: Ledger) -> None:
        """Show ``graph``: only the rows that differ from the graph shown now change (a reset otherwise)."""
        if self.graph is not None and self.graph is not graph and self.rows:
            change = graph_diff.changes(self.graph, graph)
            if len(change.touched) <= max(16, len(self.rows) // 8):
                self._update(graph, ledger, change)
                return
        self.beginResetModel()
        seeded, self._seeded = self._seeded, None
        self.rows = list(seeded[1]) if seeded is not None and seeded[0] is graph else rows_of(graph, ledger)
        self.graph = graph
        self._sort()
        self.endResetModel()

    def _update(self, graph: Graph, ledger: Ledger, change: graph_diff.GraphDiff) -> None:
        gone = set(change.removed) | set(change.changed)
        for k in reversed([k for k, r in enumerate(self.rows) if r[0] in gone]):
            self.beginRemoveRows(QModelIndex(), k, k)
            del self.rows[k]
            self.endRemoveRows()
        total = ledger.total.bytes or 1
        for ident in change.added + change.changed:
            row = _row(graph.nodes[ident], ledger, total)
            k = self._position(row)
            self.beginInsertRows(QModelIndex(), k, k)
            self.rows.insert(k, row)
            self.endInsertRows()
        self.rows = [r[:7] + (r[4] / total,) for r in self.rows]
        self.graph = graph
        if self.rows:
            self.dataChanged.emit(self.index(0, 7), self.index(len(self.rows) - 1, 7), [_DISPLAY])

    def _position(self, row: tuple) -> int:
        """Where ``row`` goes in the sorted rows (after equal ones)."""
        column, order = self.order
        v, lo, hi = row[column], 0, len(self.rows)
        while lo < hi:
            mid = (lo + hi) // 2
            if (self.rows[mid][column] <= v) if order == _ASCENDING else (self.rows[mid][column] >= v):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _sort(self) -> None:
        column, order = self.order
        self.rows.sort(key=lambda r: r[column], reverse=order == Qt.SortOrder.DescendingOrder)

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        role = int(role)                             # called for every visible cell and role: keep it short
        if role == _DISPLAY:
            c = index.column()
            v = self.rows[index.row()][c]
            return (v if c < 2 else human_bytes(v) if c < 5 else human_count(v) if c == 5
                    else f"{v:.2f}" if c == 6 else f"{100 * v:.1f} %")
        if role == _ALIGN:
            return _RIGHT if index.column() >= 2 else None
        if role == _SORT:
            return self.rows[index.row()][index.column()]
        return None


def rows_of(graph: Graph, ledger: Ledger) -> list[tuple]:
    """The table's rows of every kernel of ``graph``, unsorted (no Qt: a worker may make them)."""
    total = ledger.total.bytes or 1
    return [_row(node, ledger, total) for node in graph.nodes.values()]


def _row(node, ledger: Ledger, total: int) -> tuple:
    e = ledger.kernels[node.id]
    return (node.id, kernel_title(node), e.bytes_read, e.bytes_written, e.bytes, e.flops, e.intensity, e.bytes / total)


class QtTrendPlot(QWidget):
    """Bytes moved after each step (see the module docstring)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.values: list[int] = []
        self.bound = 0
        self.cursor = 0
        self.setMinimumHeight(90)

    def set_trend(self, values: list[int], bound: int, cursor: int) -> None:
        self.values, self.bound, self.cursor = list(values), bound, cursor
        self.update()

    def paintEvent(self, event) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.fillRect(self.rect(), QColor("#ffffff"))
        p.setFont(QFont("DejaVu Sans", 7))
        area = QRectF(64, 8, max(10, self.width() - 74), max(10, self.height() - 26))
        if not self.values:
            p.drawText(area, Qt.AlignmentFlag.AlignCenter, "no steps yet")
            return
        top = max(max(self.values), self.bound) * 1.05 or 1
        x = lambda k: area.left() + area.width() * (k / max(1, len(self.values) - 1))  # noqa: E731
        y = lambda v: area.bottom() - area.height() * (v / top)  # noqa: E731
        p.setPen(QPen(QColor("#bbbbbb"), 1))
        p.drawLine(area.bottomLeft(), area.bottomRight())
        p.drawLine(area.bottomLeft(), area.topLeft())
        p.setPen(QColor("#444444"))
        for v in (0, top / 2, top):
            p.drawText(QRectF(0, y(v) - 7, 60, 14), Qt.AlignmentFlag.AlignRight, human_bytes(v))
        p.drawText(QRectF(area.left(), area.bottom() + 2, area.width(), 14), Qt.AlignmentFlag.AlignCenter,
                   f"steps 0–{len(self.values) - 1}")
        if self.bound:
            pen = QPen(QColor("#2ca02c"), 1, Qt.PenStyle.DashLine)
            p.setPen(pen)
            p.drawLine(QPointF(area.left(), y(self.bound)), QPointF(area.right(), y(self.bound)))
            p.drawText(QRectF(area.right() - 60, y(self.bound) - 14, 60, 12), Qt.AlignmentFlag.AlignRight, "bound")
        path = QPainterPath(QPointF(x(0), y(self.values[0])))
        for k, v in enumerate(self.values[1:], start=1):
            path.lineTo(QPointF(x(k), y(v)))
        p.setPen(QPen(QColor("#1f77b4"), 2))
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.drawPath(path)
        c = min(self.cursor, len(self.values) - 1)
        p.setBrush(QColor("#d62728"))
        p.drawEllipse(QPointF(x(c), y(self.values[c])), 4, 4)


class QtMovementDock(QDockWidget):
    """See the module docstring."""

    selectionChangedIds = Signal(list)
    exportedRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Data movement", parent)
        self.setObjectName("dock.movement")
        self.summary = QtTextLine(rich=True)
        self.exported = QtTextLine(rich=True)
        self.exported_button = QPushButton("Count as exported (CPU)")
        self.exported_button.setToolTip("Build the CPU program of the current graph and count the bytes its calls "
                                        "move: a GEMM whose epilogue runs as its own kernel writes and rereads its "
                                        "raw product, views move nothing (runs in the background)")
        self.exported_button.clicked.connect(self.exportedRequested.emit)
        self._figures, self._peak = None, None
        self._traffic: dict[int, tuple] = {}       # id(graph) -> (graph, Traffic), the last few graphs
        self.summary.set_text("no model")
        self.model = QtKernelModel()
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(4, Qt.SortOrder.DescendingOrder)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(18)
        self.table.setColumnWidth(0, 260)
        self.trend = QtTrendPlot()
        split = QSplitter(Qt.Orientation.Horizontal)
        left = QWidget()
        col = QVBoxLayout(left)
        col.setContentsMargins(2, 2, 2, 2)
        col.addWidget(self.summary)
        row = QHBoxLayout()
        row.addWidget(self.exported, 1)
        row.addWidget(self.exported_button)
        col.addLayout(row)
        col.addWidget(self.table)
        split.addWidget(left)
        split.addWidget(self.trend)
        split.setSizes([700, 300])
        self.setWidget(split)
        self._syncing = False
        self.table.selectionModel().selectionChanged.connect(self._on_rows)

    def set_figures(self, graph: Graph, ledger: Ledger, bound: int, peak: int | None, trend: list[int],
                    cursor: int) -> None:
        """Show ``graph``'s figures; a ``peak`` of None reads "…" until ``set_peak`` brings it."""
        self._figures = (graph, ledger, bound)
        self._peak = peak
        self._summarize()
        self._show_exported()
        self._syncing = True
        try:
            self.model.set_graph(graph, ledger)
        finally:
            self._syncing = False
        self.trend.set_trend(trend, bound, cursor)

    def set_peak(self, graph: Graph, peak: int | None, why: str = "") -> None:
        """The peak memory of ``graph``, computed off the GUI thread (ignored once another graph shows);
        ``peak`` None with ``why``: the task failed or was cancelled, and the header says so."""
        if self._figures is not None and self._figures[0] is graph:
            self._peak = peak if peak is not None else ("n/a", why)
            self._summarize()

    def set_exported(self, graph: Graph, moved) -> None:
        """Bytes as exported of ``graph`` (a ``codegen.program.traffic.Traffic``), kept for undo and redo."""
        self._traffic[id(graph)] = (graph, moved)
        while len(self._traffic) > 16:
            self._traffic.pop(next(iter(self._traffic)))
        self._show_exported()

    def _show_exported(self) -> None:
        graph = self._figures[0] if self._figures is not None else None
        hit = self._traffic.get(id(graph)) if graph is not None else None
        if hit is None or hit[0] is not graph:
            self.exported.set_text("<b>as exported</b> not counted for this graph")
            self.exported.setToolTip("")
            return
        moved = hit[1]
        self.exported.set_text(f"<b>as fused</b> {human_bytes(moved.fused)} &nbsp; <b>as exported ({moved.backend})"
                               f"</b> {human_bytes(moved.exported)} ({moved.ratio - 1:+.1%})")
        self.exported.setToolTip("\n".join(f"{s.node_id}: {human_bytes(s.fused)} → {human_bytes(s.exported)} ({s.why})"
                                           for s in moved.largest_differences(8)))

    def _summarize(self) -> None:
        graph, ledger, bound = self._figures
        t = ledger.total
        ratio = t.bytes / bound if bound else 0.0
        peak = "…" if self._peak is None else self._peak[0] if isinstance(self._peak, tuple) else \
            human_bytes(self._peak)
        self.summary.set_text(
            f"<b>moved</b> {human_bytes(t.bytes)} &nbsp; <b>bound</b> {human_bytes(bound)} &nbsp; "
            f"<b>moved/bound</b> {ratio:.2f}× &nbsp; <b>FLOPs</b> {human_count(t.flops)} &nbsp; "
            f"<b>peak memory</b> {peak} &nbsp; <b>kernels</b> {len(graph.nodes)}")
        if isinstance(self._peak, tuple):
            self.summary.setToolTip(f"peak memory not computed: {self._peak[1]}")

    def select_ids(self, ids: list[str]) -> None:
        self._syncing = True
        try:
            select_rows(self.table, self.model.rows, ids)
        finally:
            self._syncing = False

    def selected_ids(self) -> list[str]:
        return selected_row_ids(self.table, self.model.rows)

    def _on_rows(self, *_args) -> None:
        if not self._syncing:
            self.selectionChangedIds.emit(self.selected_ids())


def exported_work(graph: Graph):
    """The work of a "bytes as exported" task: the CPU program of ``graph`` and its traffic."""
    def work(token, progress):
        token.check("bytes as exported")
        from studio.session.exporting import exported_traffic
        return exported_traffic(graph, "cpu")
    return work
