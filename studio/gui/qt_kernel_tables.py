"""What the per-kernel tables (Data movement, Timings) share: a rows model and the
selection sync with the graph view.

``QtRowsModel`` is a table model over ``rows`` (tuples whose first field is the kernel
id) with fixed column titles ``columns``; subclasses supply ``data`` and ``_sort`` (``sort``
keeps the requested order in ``order``).
``select_rows(table, rows, ids)`` selects the rows of ``ids`` (whole rows, scrolled into
view) and ``selected_row_ids(table, rows)`` reads the selection back as ids.
"""
from __future__ import annotations

from typing import Sequence

from PySide6.QtCore import QAbstractTableModel, QItemSelection, QItemSelectionModel, QModelIndex, Qt
from PySide6.QtWidgets import QTableView


class QtRowsModel(QAbstractTableModel):
    columns: Sequence[str] = ()

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple] = []

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:
        return len(self.columns)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return self.columns[section]
        return None

    def sort(self, column: int, order=Qt.SortOrder.AscendingOrder) -> None:
        """Qt's sort request: remember ``(column, order)`` and let ``_sort`` order ``rows``."""
        self.layoutAboutToBeChanged.emit()
        self.order = (column, order)
        self._sort()
        self.layoutChanged.emit()

    def _sort(self) -> None:
        raise NotImplementedError


def select_rows(table: QTableView, rows: Sequence[tuple], ids) -> None:
    """Select exactly the rows whose kernel id is in ``ids`` and scroll to the first."""
    wanted = set(ids)
    model = table.model()
    sel = QItemSelection()
    for row, r in enumerate(rows):
        if r[0] in wanted:
            idx = model.index(row, 0)
            sel.select(idx, idx)
    flags = QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
    table.selectionModel().select(sel, flags)
    if not sel.isEmpty():
        table.scrollTo(sel.indexes()[0])


def selected_row_ids(table: QTableView, rows: Sequence[tuple]) -> list[str]:
    picked = {i.row() for i in table.selectionModel().selectedRows()}
    return [rows[r][0] for r in sorted(picked)]
