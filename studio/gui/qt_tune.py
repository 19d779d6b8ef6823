"""Tools → Tune this scope…: ``studio.tune.search``'s search on the current graph, from the studio.

The scope is the layer the selected kernels share (``transforms.layers``: all of them inside
``layer.3``, say), else the whole graph. The search starts from the graph as it is now (the
steps applied so far stay), runs in this process on a background task (progress with the best so
far, Cancel keeps what was found), and lists the best sequences with their bytes and the change
against the graph now; with Measure, that many of the best are then timed as whole exported steps
against the recipe's (on the CPU, or on the GPU where CUDA runs) and the table shows the measured
ratio. Applying one pushes its passes as one undo macro: one Undo takes the whole sequence back,
and the history file records every pass step.
"""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QDialog, QDialogButtonBox, QFormLayout, QLabel,
                               QProgressBar, QPushButton, QSpinBox, QTableWidget, QTableWidgetItem, QVBoxLayout)

from ir.errors import StudioError
from studio.gui.commands import ApplyCommand, step_text
from studio.gui.qt_workers import QtTask
from studio.session.core import Session
from transforms.layers import layer_of

SHOWN = 12          # sequences listed


class SessionRef:
    """The session's current graph as the start of every evaluation (the ``ModelRef`` interface)."""

    def __init__(self, session: Session, scope: str | None) -> None:
        self.graph, self.model_path, self.scope = session.graph.clone(), session.model_path, scope
        self.bindings, self.optimizer = (), None
        self.training = session.training        # how the original was made: what a check compares with

    def open(self) -> Session:
        s = Session(self.graph.clone(), model_path=self.model_path, autosave=False)
        s.training = self.training
        return s


def scope_of(ids) -> str | None:
    """The layer every id in ``ids`` lies in, or None (the whole graph)."""
    found = {layer_of(i) for i in ids}
    if len(found) != 1 or None in found:
        return None
    family, index = found.pop()
    return family.key(index)


class TuneDialog(QDialog):
    """Budget and objective, Start/Cancel, progress, the ranked result and Apply."""

    def __init__(self, window, scope: str | None) -> None:
        super().__init__(window)
        self.window_, self.scope, self.task, self.result = window, scope, None, None
        self.setWindowTitle("Tune this scope")
        self.setObjectName("tune-dialog")
        form = QFormLayout()
        form.addRow("Scope:", QLabel(scope or "the whole graph (select kernels of one layer to tune it alone)"))
        self.budget = QSpinBox()
        self.budget.setRange(2, 5000)
        self.budget.setValue(60)
        self.budget.setToolTip("Sequences evaluated (each runs its passes on a copy of the graph)")
        form.addRow("Budget:", self.budget)
        self.objective = QComboBox()
        self.objective.addItems(["bytes", "time"])
        self.objective.setToolTip("bytes moved, or the time the calibrated roofline predicts")
        form.addRow("Objective:", self.objective)
        self.seed = QSpinBox()
        self.seed.setRange(0, 1 << 30)
        form.addRow("Seed:", self.seed)
        self.measure = QSpinBox()
        self.measure.setRange(0, 8)
        self.measure.setSpecialValueText("none (rank by the objective)")
        self.measure.setSuffix(" best")
        self.measure.setToolTip("After the search, time this many of the best sequences as whole exported training "
                                "steps against the recipe's, alternately on recorded inputs (a BERT-base layer pair "
                                "takes about half a minute on two CPU cores)")
        form.addRow("Measure:", self.measure)
        self.time_on = QComboBox()
        self.time_on.addItems(["CPU (all cores)", "GPU (CUDA)"])
        self.time_on.setToolTip("Where the measured steps run. The GPU needs a CUDA device and CuPy; each CUDA "
                                "package is first checked there against the original model")
        form.addRow("Time on:", self.time_on)
        from studio.gui.exporting import find_gpu
        find_gpu(window, self._gpu_found)      # GPU (CUDA) disabled once it is known there is none
        self.progress = QProgressBar()
        self.status = QLabel("Start searches for pass sequences that move fewer bytes than the recipe.")
        self.status.setWordWrap(True)
        self.table = QTableWidget(0, 4)
        self.table.setHorizontalHeaderLabels(["Bytes", "Change", "Measured step", "Passes"])
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setColumnWidth(2, 250)
        self.status.setMinimumHeight(3 * self.status.fontMetrics().lineSpacing())
        self.start_button, self.cancel_button = QPushButton("&Start"), QPushButton("&Cancel search")
        self.apply_button = QPushButton("&Apply selected")
        self.cancel_button.setEnabled(False)
        self.apply_button.setEnabled(False)
        self.start_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        self.apply_button.clicked.connect(self.apply_selected)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        for b in (self.start_button, self.cancel_button, self.apply_button):
            buttons.addButton(b, QDialogButtonBox.ButtonRole.ActionRole)
        box = QVBoxLayout(self)
        box.addLayout(form)
        box.addWidget(self.progress)
        box.addWidget(self.status)
        box.addWidget(self.table)
        box.addWidget(buttons)
        self.resize(900, 600)

    def _gpu_found(self, reason: str | None) -> None:
        """Disable "GPU (CUDA)" once it is known that this machine has none."""
        item = self.time_on.model().item(1)
        item.setEnabled(reason is None)
        item.setToolTip(f"CUDA is unavailable: {reason}" if reason else "A CUDA device is available")
        if reason is not None and self.time_on.currentIndex() == 1:
            self.time_on.setCurrentIndex(0)

    # --- the search -------------------------------------------------------------------
    def start(self) -> None:
        from studio.session.recipe import RECIPES, pick
        from studio.tune.evaluators import LocalEvaluator
        from studio.tune.search import search
        session = self.window_.session
        if session is None:
            self.status.setText("Open a model first.")
            return
        ref, budget = SessionRef(session, self.scope), self.budget.value()
        recipe = RECIPES[pick(session.graph)]
        objective, seed, measure = self.objective.currentText(), self.seed.value(), self.measure.value()
        backend = "cuda" if self.time_on.currentIndex() == 1 else "cpu"

        def work(token, progress):
            def seen(p) -> None:
                if p.timing_total:
                    progress(p.timing, p.timing_total, f"timing the best sequences' steps against the recipe's "
                             f"on the {'GPU' if backend == 'cuda' else 'CPU'}: {p.timing} of {p.timing_total} done")
                    return
                best = p.best.value if p.best is not None else float("nan")
                progress(p.evaluated + p.reused, budget, f"{p.evaluated + p.reused} of {budget} sequences; best "
                         + (f"{best / 1e6:.2f} MB" if objective == "bytes" else f"{best * 1e3:.3f} ms (roofline)"))
            peaks = None
            if backend == "cuda" and measure:
                from studio.tune.gpu import ready
                peaks = ready(objective)
            res = search(ref, evaluator=LocalEvaluator(), objective=objective, budget=budget, seed=seed,
                         start=(recipe,), on_progress=seen, stop=lambda: token.cancelled, measure=measure,
                         backend=backend, peaks=peaks)
            if backend == "cpu" and measure and not res.stopped and not token.cancelled:
                from studio.tune.headroom import of_recipe
                progress(1, 1, "profiling the recipe's step: how much could any sequence gain over it here?")
                try:
                    res.headroom = of_recipe(ref, res)
                except (RuntimeError, ValueError) as e:
                    res.headroom = None
                    progress(1, 1, f"the recipe's profile failed: {e}")
            progress.partial(res)       # also when cancelled: the task then reports no result of its own
            return res
        self.table.setRowCount(0)
        self.progress.setRange(0, budget)
        self.progress.setValue(0)
        self.task = QtTask("Tune", work)
        self.task.progressed.connect(self._progressed)
        self.task.partial.connect(self._done)
        self.task.failed.connect(self._failed)
        self.task.finished.connect(self._finished)
        self.start_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.apply_button.setEnabled(False)
        self.status.setText("Searching…")
        self.task.start()

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()
            self.status.setText("Stopping after the sequence in hand…")

    def _progressed(self, done: int, total: int, what: str) -> None:
        self.progress.setRange(0, total)
        self.progress.setValue(min(done, total))
        self.status.setText(what)

    def _failed(self, message: str) -> None:
        self.status.setText(f"The search failed: {message}")

    def _finished(self) -> None:
        self.task = None
        self.start_button.setEnabled(True)
        self.cancel_button.setEnabled(False)

    def _done(self, res) -> None:
        self.result = res
        now = self.window_.session.metrics().bytes
        timed = {m.key: m for m in res.measured}
        self.table.setRowCount(0)
        for cand, score in res.table[:SHOWN]:
            row = self.table.rowCount()
            self.table.insertRow(row)
            cells = (f"{score.bytes / 1e6:.2f} MB", f"{(score.bytes - now) / 1e6:+.2f} MB",
                     _measured_cell(cand, timed, res), ", ".join(p.transformation for p in cand.passes))
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(Qt.ItemDataRole.UserRole, row)
                self.table.setItem(row, col, item)
        if self.table.rowCount():
            self.table.selectRow(0)
        self.apply_button.setEnabled(bool(self.table.rowCount()))
        how = "stopped early; the best found so far" if res.stopped else "done"
        self.status.setText(f"{how}: {res.progress.evaluated} sequences evaluated. The best moves "
                            f"{res.score.bytes / 1e6:.2f} MB, {(res.score.bytes - now) / 1e6:+.2f} MB against now "
                            f"(the recipe from here: {res.baseline.bytes / 1e6:.2f} MB)." + _timed_summary(res))

    # --- applying a result ------------------------------------------------------------
    def apply_selected(self) -> int:
        """Push the selected sequence's passes as one undo macro; returns the steps recorded."""
        rows = self.table.selectionModel().selectedRows()
        if self.result is None or not rows:
            return 0
        cand, _ = self.result.table[rows[0].row()]
        w, s, scope = self.window_, self.window_.session, self.scope
        w.stack.beginMacro(f"tune: {len(cand.passes)} passes" + (f" in {scope}" if scope else ""))
        recorded = 0
        try:
            for p in cand.passes:
                cmd = ApplyCommand(s, p.transformation, (), p.params, text=f"{p.transformation} pass",
                                   first=lambda p=p: _applied(s, p, scope))
                w.stack.push(cmd)
                if cmd.error is None:
                    recorded += 1
                    cmd.setText(step_text(p.transformation, (), cmd.application.delta.bytes,
                                          s.steps[s.cursor - 1].applications))
        finally:
            w.stack.endMacro()
        self.status.setText(f"Applied {recorded} pass steps as one undoable change "
                            f"({s.metrics().bytes / 1e6:.2f} MB moved now).")
        self.apply_button.setEnabled(False)
        return recorded

    def done(self, code: int) -> None:
        if self.task is not None:
            self.task.cancel()
        super().done(code)


def _measured_cell(cand, timed: dict, res) -> str:
    """The measured-step column: the finalist's step against the recipe's, or why it was left out."""
    if res.measured and cand.key == res.baseline_candidate.key:
        return "the recipe (baseline)"
    m = timed.get(cand.key)
    if m is None:
        return ""
    if m.note:
        return f"left out: {m.note}"
    digits = 2 if m.recipe_ms < 10 else 1
    return f"{m.ratio:.3f}x: {m.candidate_ms:.{digits}f} ms, recipe {m.recipe_ms:.{digits}f} ms"


def _timed_summary(res) -> str:
    ok = [m for m in res.measured if not m.note]
    if not res.measured:
        return ""
    where = f"the GPU ({res.measured[0].device})" if res.measured[0].device else \
        f"the CPU ({res.measured[0].threads} threads)"
    head = f" Timed {len(res.measured)} of the best as whole steps against the recipe's on {where}"
    if not ok:
        return head + ": none could be timed."
    fastest = max(ok, key=lambda m: m.ratio)
    verdict = "it beats the noise" if res.chosen.key == fastest.key else \
        "none beats the recipe by more than the noise of the paired steps"
    room = f" The recipe's headroom: {res.headroom.text()}." if res.headroom is not None else ""
    return head + f": the fastest {fastest.ratio:.3f}x ({verdict})." + room


def _applied(session: Session, p, scope):
    app = session.apply_pass(p.transformation, p.params, scope=scope)
    if app is None:
        raise StudioError(f"{p.transformation} applies nowhere here")
    return app


def show(window) -> TuneDialog | None:
    """Tools → Tune this scope…"""
    if window.session is None:
        window.say("Open a model first", error=True, detail="Tuning searches transformations of an open model")
        return None
    dialog = TuneDialog(window, scope_of(window.view.selected_ids()))
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.show()
    return dialog
