"""The Timings dock: profile buttons with progress and Cancel, the kernel table, the roofline.

A bar of buttons ("Profile selection", "Profile all kernels", repetitions and threads, "Inputs"
(a menu: your own weights and data from an .npz, or the deterministic feeds), "Compare with step…",
"Export Chrome trace…") emits requests that ``QtProfiling`` carries out off the GUI thread; the
progress bar and its Cancel button follow the running task. Under it: the inputs line, the machine
line (threads, calibrated peaks), the coverage
("N of M kernels measured", the step's time, a stale note), the last A/B result, then
the sortable table (``QtTimingModel``) beside the roofline (``QtRooflinePlot``). Table
rows and roofline dots select kernels (``selectionChangedIds``); ``select_ids``
follows the graph view's selection, as the Data movement dock does.
"""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QDockWidget, QHBoxLayout, QLabel, QMenu, QProgressBar,
                               QPushButton, QSpinBox, QSplitter, QTableView, QVBoxLayout, QWidget)

from studio.gui.qt_kernel_tables import select_rows, selected_row_ids
from studio.gui.qt_roofline import QtRooflinePlot
from studio.gui.qt_text import QtTextLine
from studio.gui.qt_timing_table import COLUMNS, DESC, QtTimingModel
from studio.gui.timings import TimingReport, describe_machine, human_seconds, trust_note


def _button(text: str, name: str, tip: str) -> QPushButton:
    b = QPushButton(text)
    b.setObjectName(name)
    b.setToolTip(tip)
    return b


def _spin(lo: int, hi: int, value: int, tip: str, special: str = "") -> QSpinBox:
    s = QSpinBox()
    s.setRange(lo, hi)
    s.setValue(value)
    s.setToolTip(tip)
    if special:
        s.setSpecialValueText(special)
    return s


class QtTimingsDock(QDockWidget):
    """See the module docstring."""

    selectionChangedIds = Signal(list)
    profileSelectionRequested = Signal()
    profileAllRequested = Signal()
    compareRequested = Signal()
    traceRequested = Signal()
    cancelRequested = Signal()
    recalibrateRequested = Signal()
    inputsRequested = Signal()
    inputsCleared = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Timings", parent)
        self.setObjectName("dock.timings")
        self.model = QtTimingModel()
        self.table = self._make_table()
        self.plot = QtRooflinePlot()
        self.plot.pointClicked.connect(self._on_point)
        self.status = QtTextLine()
        self.status.setObjectName("timingsStatus")
        self.status.set_text("not profiled")
        self.machine = QtTextLine()
        self.inputs_line = QtTextLine()
        self.inputs_line.setObjectName("timingsInputs")
        self.coverage = QtTextLine(rich=True)
        self.ab_line = QtTextLine()
        self.ab_line.hide()
        self.trust = QtTextLine(rich=True, lines=2)          # a warning wraps beside its button, never cut
        self.trust.setObjectName("timingsTrust")
        self.recalibrate = _button("Recalibrate", "recalibrate",
                                   "Measure this machine's bandwidth and GEMM peaks again (a few seconds; "
                                   "best while nothing else runs)")
        self.recalibrate.clicked.connect(self.recalibrateRequested)
        trust_row = QHBoxLayout()
        trust_row.addWidget(self.trust, 1)
        trust_row.addWidget(self.recalibrate)
        self.trust_box = QWidget()
        self.trust_box.setLayout(trust_row)
        trust_row.setContentsMargins(0, 0, 0, 0)
        self.trust_box.hide()
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(180)
        self.progress.setMaximumHeight(16)
        self.cancel_button = _button("Cancel", "cancelProfile", "Stop profiling (kills the worker process)")
        self.cancel_button.clicked.connect(self.cancelRequested)
        col = QVBoxLayout()
        col.setContentsMargins(2, 2, 2, 2)
        col.addLayout(self._make_bar())
        for w in (self.status, self.inputs_line, self.machine, self.coverage, self.trust_box, self.ab_line,
                  self.table):
            col.addWidget(w)
        left = QWidget()
        left.setLayout(col)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(self.plot)
        split.setSizes([760, 340])
        self.setWidget(split)
        self.report: TimingReport | None = None
        self._syncing = False
        self.set_running(False)
        self.set_inputs("")
        self.table.selectionModel().selectionChanged.connect(self._on_rows)

    def _make_table(self) -> QTableView:
        t = QTableView()
        t.setModel(self.model)
        t.setSortingEnabled(True)
        t.sortByColumn(2, DESC)
        t.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        t.verticalHeader().setVisible(False)
        t.verticalHeader().setDefaultSectionSize(18)
        t.horizontalHeader().setDefaultSectionSize(74)
        t.setColumnWidth(0, 290)
        t.setColumnWidth(1, 60)
        t.setWordWrap(False)                                # (word wrap forces eliding at the end)
        t.setTextElideMode(Qt.TextElideMode.ElideMiddle)   # long scoped ids: keep the op at the end
        t.horizontalHeader().setStretchLastSection(True)
        metrics = t.horizontalHeader().fontMetrics()           # no header cut ("roofline eff.")
        for c, name in enumerate(COLUMNS[1:], start=1):
            t.setColumnWidth(c, max(60 if c == 1 else 74, metrics.horizontalAdvance(name) + 28))
        return t

    def _make_bar(self) -> QHBoxLayout:
        self.profile_selection = _button("Profile selection", "profileSelection",
                                         "Time the selected kernels on inputs recorded from one run of the step")
        self.profile_all = _button("Profile all kernels", "profileAll", "Time every kernel of the current step")
        self.compare = _button("Compare with step…", "compareStep", "Paired A/B of whole steps: that step vs now")
        self.trace = _button("Export Chrome trace…", "exportTrace", "Write the last profile for Perfetto")
        self.reps = _spin(1, 1_000_000, 10, "Timed repetitions per kernel")
        self.threads = _spin(0, 256, 0, "Threads for the kernels (auto: the default)", "auto")
        self.inputs = _button("Inputs", "timingInputs", "What the timings run on: your own weights and data "
                                                        "(an .npz of arrays by input name), or deterministic feeds")
        menu = QMenu(self.inputs)
        self.choose_inputs = menu.addAction("Time on arrays from an .npz…", self.inputsRequested.emit)
        self.clear_inputs = menu.addAction("Time on deterministic feeds", self.inputsCleared.emit)
        self.inputs.setMenu(menu)
        for b, sig in ((self.profile_selection, self.profileSelectionRequested),
                       (self.profile_all, self.profileAllRequested), (self.compare, self.compareRequested),
                       (self.trace, self.traceRequested)):
            b.clicked.connect(sig)
        bar = QHBoxLayout()
        for w in (self.profile_selection, self.profile_all, QLabel("reps"), self.reps, QLabel("threads"),
                  self.threads, self.inputs, self.compare, self.trace, self.progress, self.cancel_button):
            bar.addWidget(w)
        bar.addStretch(1)                                  # the status line has its own row: never cut
        return bar

    # --- running --------------------------------------------------------------------------
    def set_running(self, running: bool, text: str = "") -> None:
        """Busy state: buttons that start work are disabled, progress and Cancel shown."""
        for b in (self.profile_selection, self.profile_all, self.compare, self.recalibrate, self.inputs):
            b.setEnabled(not running)
        self.trace.setEnabled(not running and self.report is not None)
        self.progress.setVisible(running)
        self.cancel_button.setVisible(running)
        if running:
            self.progress.setRange(0, 0)
        if text:
            self.status.set_text(text)

    def set_inputs(self, text: str) -> None:
        """What the next timings run on (empty: the deterministic feeds)."""
        self.inputs_line.set_text(text or "inputs: deterministic feeds (seeded; weights drawn as torch initializes "
                                          "them)")
        self.clear_inputs.setEnabled(bool(text))

    def set_progress(self, done: int, total: int, what: str = "") -> None:
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)
        if what:
            self.status.set_text(what)

    # --- content ----------------------------------------------------------------------------
    def set_report(self, report: TimingReport | None, stale_note: str = "") -> None:
        self.report = report
        self._syncing = True
        try:
            self.model.set_report(report)
        finally:
            self._syncing = False
        if report is None:
            self.machine.set_text("")
            self.coverage.set_text("no profile yet: press “Profile all kernels”")
            self.plot.set_data([], 0.0, 0.0)
        else:
            self.machine.set_text(describe_machine(report))
            peaks = report.peaks
            self.plot.set_data(report.kernels, peaks.bandwidth if peaks else 0.0, peaks.flops if peaks else 0.0,
                               cache_bw=getattr(peaks, "cache_bandwidth", 0.0) if peaks else 0.0)
        self.set_stale(stale_note)
        self.trace.setEnabled(report is not None and self.profile_all.isEnabled())
        note = trust_note(report)
        self.trust.set_text(f"<span style='color:#b35900'><b>⚠ {note}</b></span>" if note else "")
        self.trust_box.setVisible(bool(note))

    def set_stale(self, note: str) -> None:
        """Grey the table and the roofline and say why, or show them as current (``note`` = '')."""
        r = self.report
        self.model.set_stale(bool(note))
        self.plot.set_note(note)
        if r is None:
            return
        text = (f"<b>{r.coverage()}</b> &nbsp; step {r.step} &nbsp; whole step {human_seconds(r.step_s)}"
                f" &nbsp; kernels sum {human_seconds(r.total_s)}")
        if note:
            text += f" &nbsp; <span style='color:#b35900'><b>{note}</b> — profile again for current numbers</span>"
        self.coverage.set_text(text)

    def set_ab(self, text: str) -> None:
        self.ab_line.set_text(text)
        self.ab_line.setVisible(bool(text))

    # --- selection --------------------------------------------------------------------------
    def select_ids(self, ids: list[str]) -> None:
        self._syncing = True
        try:
            select_rows(self.table, self.model.rows, ids)
        finally:
            self._syncing = False
        self.plot.set_highlight(set(ids))

    def selected_ids(self) -> list[str]:
        return selected_row_ids(self.table, self.model.rows)

    def _on_rows(self, *_args) -> None:
        ids = self.selected_ids()
        self.plot.set_highlight(ids)
        if not self._syncing:
            self.selectionChangedIds.emit(ids)

    def _on_point(self, node_id: str) -> None:
        self.select_ids([node_id])
        self.selectionChangedIds.emit([node_id])
