"""The Timings dock's table model: one row per profiled graph kernel, sorted on the raw numbers.

Columns: kernel, kind, median, min, max, CV, GB/s, % of the calibrated triad, GFLOP/s,
roofline efficiency, bound (memory or compute: the kernel's FLOP/B against the ridge of
the calibrated peaks), share of the measured total, error. Failed kernels show their
error (red, and in the tooltip) and sort last on every numeric column. A generated kernel's tooltip
says how its loops run (``loops:``, the CPU renderer's schedule). A stale report
is drawn grey. ``SORT_ROLE`` gives the raw numbers, as in the Data movement table.
"""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from codegen.timing.roofline import OVER_PEAK, bound_kind
from ir.statements import StatementKind
from studio.gui.qt_kernel_tables import QtRowsModel
from studio.gui.timings import TimingReport, human_seconds, over_peak

COLUMNS = ("kernel", "kind", "median", "min", "max", "CV", "GB/s", "% peak BW", "GFLOP/s", "roofline eff.",
           "bound", "share", "error")
TIME_COLUMNS = (2, 3, 4)
PERCENT_COLUMNS = (5, 7, 9, 11)        # stored as fractions or percents, shown with '%'
TEXT_COLUMNS = (0, 1, 10, 12)
ERROR = 12
DESC = Qt.SortOrder.DescendingOrder


def row_of(report: TimingReport, k) -> tuple:
    if not k.ok:
        return (k.node_id, k.kind) + (None,) * 10 + (k.error or "failed",)
    s = k.samples
    view = k.kind == StatementKind.VIEW                    # an alias: no data moves at run time, no roof applies
    return (k.node_id, k.kind, s.median_s, s.min_s, s.max_s, s.cv, None if view else k.gbps,
            None if view else k.pct_peak_bw, k.gflops, None if view else k.efficiency,
            StatementKind.VIEW if view else bound_kind(k), report.share(k), "")


class QtTimingModel(QtRowsModel):
    """See the module docstring."""

    SORT_ROLE = Qt.ItemDataRole.UserRole
    columns = COLUMNS

    def __init__(self) -> None:
        super().__init__()
        self.labels: dict[str, str] = {}
        self.statements: dict[str, list[str]] = {}
        self.schedules: dict[str, str] = {}      # how each generated kernel's loops run
        self.stale = False
        self.over: set[str] = set()           # kernels above the roof that only low peaks explain
        self.order = (2, DESC)

    def set_report(self, report: TimingReport | None) -> None:
        self.beginResetModel()
        kernels = report.kernels if report is not None else []
        self.rows = [row_of(report, k) for k in kernels]
        self.over = {k.node_id for k in over_peak(report)} if report is not None else set()
        self.labels = {k.node_id: k.label for k in kernels}
        self.statements = {k.node_id: k.extra.get("statements", []) for k in kernels}
        self.schedules = {k.node_id: k.extra.get("schedule", "") for k in kernels}
        self.stale = False
        self._sort()
        self.endResetModel()

    def set_stale(self, stale: bool) -> None:
        if stale != self.stale:
            self.stale = stale
            if self.rows:
                self.dataChanged.emit(self.index(0, 0), self.index(len(self.rows) - 1, len(COLUMNS) - 1))

    def _sort(self) -> None:
        column, order = self.order
        have = [r for r in self.rows if r[column] is not None]
        have.sort(key=lambda r: r[column], reverse=order == DESC)
        self.rows = have + [r for r in self.rows if r[column] is None]

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        row = self.rows[index.row()]
        c = index.column()
        v = row[c]
        if role == self.SORT_ROLE:
            return v
        if role == Qt.ItemDataRole.DisplayRole:
            return _text(c, v)
        if role == Qt.ItemDataRole.ForegroundRole:
            if self.stale:
                return QColor("#9a9a9a")
            if row[ERROR] or (c == 9 and row[0] in self.over):
                return QColor("#c62828")                # failed, or faster than the calibrated roof
            return None
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(row)
        if role == Qt.ItemDataRole.TextAlignmentRole and 2 <= c <= 11 and c != 10:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def _tooltip(self, row: tuple) -> str:
        parts = [f"{row[0]} ({self.labels.get(row[0], '')})"]
        stmts = self.statements.get(row[0], [])
        if stmts and stmts != [row[0]]:
            parts.append("profiled as: " + ", ".join(stmts))
        if self.schedules.get(row[0]):
            parts.append("loops: " + self.schedules[row[0]])
        if row[ERROR]:
            parts.append(f"failed: {row[ERROR]}")
        if row[0] in self.over:
            parts.append(f"{100 * row[9]:.0f} % of the roofline: faster than the calibrated peaks allow, so they "
                         "were measured low (Recalibrate in the Timings dock)")
        elif row[9] is not None and row[9] > OVER_PEAK:
            parts.append(f"{100 * row[9]:.0f} % of the DRAM roof: its data fits the CPU's last-level cache, "
                         "where each repetition finds it (the triad roof models DRAM)")
        if row[1] == StatementKind.VIEW:
            parts.append("a view: no data moves at run time, so no roof applies")
        if self.stale:
            parts.append("stale: the graph changed since this profile")
        return "\n".join(parts)


def _text(c: int, v) -> str:
    if v is None:
        return "–"
    if c in TEXT_COLUMNS:
        return v
    if c in TIME_COLUMNS:
        return human_seconds(v)
    if c == 5:
        return f"{100 * v:.1f} %"
    if c == 7:
        return f"{v:.1f} %"
    if c in (9, 11):
        return f"{100 * v:.1f} %"
    return f"{v:.3g}"
