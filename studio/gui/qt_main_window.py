"""The studio's main window: the graph view, the docks, the undo stack and the background tasks.

The window observes a headless ``Session``: every edit is an ``ApplyCommand`` pushed
on the QUndoStack (the History dock is a QUndoView over it); the session's events
schedule one coalesced ``refresh`` (view, data movement, properties, find), and
``QtRanker`` fills the Transformations dock off the GUI thread. Opening a
model (and replaying a history or an autosave) is a background task too; its result
replaces the session; a forward model first gets the offer to generate its training step.
A marker beside the autosave (``studio.session.marker``) lives while a session is shown, so an
autosave is offered back only after a crash. Errors arrive as non-modal dialogs naming the
node or step.
"""
from __future__ import annotations

import gc
import sys
import weakref

from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtGui import QUndoStack
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMainWindow, QToolBar, QWidget

from ir.errors import StudioError
from studio.gui import graph_diff, qt_dialogs, qt_menus, qt_node_data, qt_transfer
from studio.gui.commands import ApplyCommand, step_text
from studio.gui.jobs import gui_busy
from studio.gui.loading import Opened, needs_training, open_session
from studio.gui.qt_compare import QtCompareWindow   # imported here, not at the first Compare: that import
from studio.gui.qt_find import QtFindBar           # (PySide reads each module's source) stalled 0.1 s beside a ranking
from studio.gui.qt_graph_view import QtGraphView
from studio.gui.qt_history import QtHistoryDock
from studio.gui.qt_movement import QtMovementDock, exported_work
from studio.gui.qt_overlays import QtMinimap
from studio.gui.qt_palette import QtCommandPalette
from studio.gui.qt_profiling import QtProfiling
from studio.gui.qt_properties import QtPropertiesDock
from studio.gui.qt_text import QtTextLine
from studio.gui.qt_timings import QtTimingsDock
from studio.gui.qt_transformations import QtTransformationsDock
from studio.gui.qt_workers import QtTask, QtTaskBar
from studio.gui.qt_ranking import QtRanker
from studio.gui.qt_outline import QtOutlineDock
from studio.gui.qt_peak import QtPeakMemory
from studio.gui.qt_training_dialog import offer_training
from studio.gui.ranking import preview
from studio.session.core import Session
from studio.session.marker import Hold, crashed
from transforms.history import load as load_history

EXAMPLE = Path(__file__).resolve().parents[2] / "resources" / "examples" / "bert_layer_base_train.onnx"
SWITCH_INTERVAL_S = 0.0002  # the GIL switch interval while a window is open (see __init__)


class QtMainWindow(QMainWindow):
    """See the module docstring. ``restore_policy`` (after a crash): ``ask``, ``always`` or ``never``;
    ``offer_training``: offer to generate the training step of a forward model."""

    def __init__(self, settings: QSettings | None = None, *, restore_policy: str = "ask",
                 autosave: bool = True, layout_timeout_s: float | None = None, rank_delay_ms: int = 150,
                 offer_training: bool = True) -> None:
        super().__init__()
        self.settings = settings or QSettings("dcstudio", "dcstudio")
        self.restore_policy, self.autosave, self.offer_training = restore_policy, autosave, offer_training
        self.marker = Hold()                       # this window's session marker (crash detection)
        # replays, rankings and imports run on worker threads: with Python's default 5 ms GIL switch
        # interval the event loop waited behind them for 100-250 ms at a time (a 500-step history of
        # a 12-layer model). A paint calls the Python table models' data() hundreds of times, each call
        # waiting up to one interval for the GIL while a worker runs: at 1 ms the first paint of the
        # 4,777-row Data movement table after a session switch took up to 140 ms (the switch blocked
        # the loop 180-246 ms), at 0.2 ms the switch blocks it 111-143 ms. The replay's own time
        # did not change (7.3-8.7 s): the interval only matters while a thread waits
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        self.training_dialog = None
        self.session: Session | None = None
        self._unsubscribe = None
        self.tasks: set[QtTask] = set()
        self.peaks = QtPeakMemory(self)
        self.shown_step: int | None = None          # the session step the view shows (its selection follows)
        self.node_data = None                       # (session, keyed values, name) of loaded node data
        self.messages: list = []
        self.compare_window = None
        self._transfer_task = None                # Repeat on equal layers, while it is worked out (qt_transfer)
        self.refresh_suspended = False
        self.stack = QUndoStack(self)
        timeout = layout_timeout_s or float(self.settings.value("layoutTimeout", 20.0))
        self.view = QtGraphView(self, layout_timeout_s=timeout)
        self.view.origins_of = weakref.WeakMethod(self._origins)   # no Python reference cycle view ↔ window
        self.find_bar = QtFindBar(self)
        self._build_docks()
        self.actions_ = qt_menus.build(self)
        self.recent = qt_menus.RecentFiles(self.settings)
        self.recent.fill(self.recent_menu, self.open_model)
        for dock in (self.transformations, self.movement, self.timings, self.properties, self.history,
                     self.outline, self.minimap_dock):
            self.docks_menu.addAction(dock.toggleViewAction())
        self._build_toolbar()
        self._connect()
        self._refresh_timer = QTimer(self, singleShot=True, interval=0)
        self._refresh_timer.timeout.connect(self.refresh)
        self.ranker = QtRanker(self, rank_delay_ms)
        self.setWindowTitle("dcstudio")
        self.resize(1500, 950)
        self._restore_layout()

    # --- construction -----------------------------------------------------------------
    def _build_docks(self) -> None:
        from PySide6.QtWidgets import QDockWidget
        self.setCentralWidget(self.view)
        self.transformations = QtTransformationsDock(self)
        self.properties = QtPropertiesDock(self)
        self.movement = QtMovementDock(self)
        self.timings = QtTimingsDock(self)
        self.profiling = QtProfiling(self)
        self.history = QtHistoryDock(self.stack, self)
        self.outline = QtOutlineDock(self)
        self.minimap_dock = QDockWidget("Minimap", self)
        self.minimap_dock.setObjectName("dock.minimap")
        self.minimap = QtMinimap(self.view)
        self.minimap_dock.setWidget(self.minimap)
        right, left, bottom = (Qt.DockWidgetArea.RightDockWidgetArea, Qt.DockWidgetArea.LeftDockWidgetArea,
                               Qt.DockWidgetArea.BottomDockWidgetArea)
        self.addDockWidget(right, self.transformations)
        self.addDockWidget(right, self.properties)
        self.tabifyDockWidget(self.transformations, self.properties)
        self.transformations.raise_()
        self.addDockWidget(left, self.outline)
        self.addDockWidget(left, self.history)
        self.addDockWidget(left, self.minimap_dock)
        self.addDockWidget(bottom, self.movement)
        self.addDockWidget(bottom, self.timings)
        self._tabify_timings = True                # on the first show (see showEvent)
        self.resizeDocks([self.transformations], [470], Qt.Orientation.Horizontal)
        self.resizeDocks([self.history], [300], Qt.Orientation.Horizontal)    # the Outline's figures fit
        self.resizeDocks([self.movement], [240], Qt.Orientation.Vertical)

    def _build_toolbar(self) -> None:
        bar = QToolBar("Find", self)
        bar.setObjectName("toolbar.find")
        bar.addWidget(self.find_bar)
        bar.addSeparator()
        for scale, act in self.actions_.heat.items():
            bar.addAction(act)
        bar.addActions(list(self.actions_.heat_metric.values()))
        bar.addSeparator()
        bar.addAction(self.actions_.fit)
        self.addToolBar(bar)
        self.metrics_label = QtTextLine(self)
        self.task_bar = QtTaskBar(self)
        self.statusBar().addWidget(self.metrics_label, 1)
        self.statusBar().addPermanentWidget(self.task_bar)

    def _connect(self) -> None:
        v, t = self.view, self.transformations
        v.selectionChangedIds.connect(self._on_view_selection)
        v.currentChanged.connect(self._show_properties)
        v.layoutMessage.connect(self._layout_message)
        v.taskStarted.connect(self.task_bar.track)
        self.movement.selectionChangedIds.connect(self._on_table_selection)
        self.movement.exportedRequested.connect(self._count_exported)
        self.timings.selectionChangedIds.connect(self._on_table_selection)
        self.find_bar.hitChanged.connect(self._on_find)
        t.hovered.connect(self._on_hover)
        t.previewRequested.connect(self.preview)
        t.applyRequested.connect(self.apply)
        t.applyAllRequested.connect(self.apply_all)
        for sb in (v.horizontalScrollBar(), v.verticalScrollBar()):
            sb.valueChanged.connect(self._viewport_moved)

    def _layout_message(self, message: str) -> None:
        self.say("The layout was stopped", error=True, detail=message)

    def _viewport_moved(self, _value: int) -> None:
        self.ranker.schedule(600)                  # re-rank the Viewport group once scrolling stops

    # --- sessions ---------------------------------------------------------------------
    def open_model(self, path: str | None = None, history: str | None = None, training: dict | None = None) -> QtTask:
        """Import ``path`` (default: the bundled example; with ``training`` options, the training step
        generated from it) and replay ``history`` off the GUI thread. A forward model opened without
        either gets the offer to generate its training step (``offer_training``)."""
        path = str(path or EXAMPLE)
        # with ``training`` the user just answered the forward-model offer: the restore question,
        # if any, was asked when the forward model opened (its autosave is of another graph)
        histories = [history] if history else [] if training else self._autosave_to_restore(path)
        autosave, prepare = self.autosave, self._preparer()
        task = self.run_task(f"Opening {Path(path).name}",
                             lambda token, progress: open_session(path, histories, autosave=autosave, training=training,
                                                                  prepare=prepare, token=token, progress=progress),
                             context={"model": path, "fail": f"Could not open {path}",
                                      "offer": self.offer_training and not histories and not training})
        task.succeeded.connect(self._opened)
        task.failed.connect(self._task_failed)
        return task

    def _autosave_to_restore(self, path: str) -> list[str]:
        found = Session.autosave_for(path)
        if self.restore_policy == "never" or not self.autosave or not found.exists() or not crashed(path):
            return []
        try:
            steps = len(load_history(found).steps)
        except StudioError:
            return []
        if steps and (self.restore_policy == "always" or qt_dialogs.ask(
                self, "Restore session?", f"The last session on {Path(path).name} did not "
                f"close cleanly; its autosave has {steps} steps. Restore them?")):
            return [str(found)]
        return []

    def _opened(self, opened: Opened) -> None:
        path = self.sender().context["model"]
        if self.sender().context.get("offer") and needs_training(opened.session):   # not for histories
            offer_training(self, path, opened)
            return
        self.show_opened(path, opened)

    def _preparer(self):
        """What the loading worker builds for the view (no Qt): the scope tree, the peak memory and the
        Data movement rows of the opened graph, which took 0.65 s of the GUI thread at 12 layers."""
        options = dict(self.view.tree_options)

        def prepare(session: Session):
            from studio.gui.qt_movement import rows_of
            from studio.gui.scope_tree import ScopeTree
            return ScopeTree(session.graph, **options), session.peak_bytes(), rows_of(session.graph, session.ledger)
        return prepare

    def show_opened(self, path: str, opened: Opened) -> None:
        """Show a session opened from ``path``; say which history step could not be replayed."""
        if opened.prepared is not None:
            tree, peak, rows = opened.prepared
            graph = opened.session.graph
            self.view.seed_tree(graph, tree)
            self.peaks.seed(graph, peak)
            self.movement.model.seed(graph, rows)
        self.set_session(opened.session)
        self.recent.add(path)
        self.recent.fill(self.recent_menu, self.open_model)
        if opened.error:
            self.say("A history step could not be replayed", error=True,
                     detail=f"{opened.error}\n\nThe {opened.steps} steps before it are applied.")

    def set_session(self, session: Session) -> None:
        """Show ``session``; its applied steps become (already done) undo commands."""
        if self._unsubscribe is not None:
            self._unsubscribe()
        self.marker.set(session.model_path if session.autosave_enabled else None)
        self._close_compare()                      # it compares the steps of the old session
        self.session = session
        gc.freeze()       # the loaded graph is not rescanned by every gen-2 pass; the old session's objects
        # are freed by reference counting (it leaves no cycles: a collect here found none, and took 0.8 s
        # on the GUI thread after a 500-step history of a 12-layer model)
        with self.history.bulk():                  # one view update, not one per step
            self.stack.clear()
            for k, step in enumerate(session.steps[: session.cursor], start=1):
                app = session.application_at(k)
                self.stack.push(ApplyCommand(session, step.transformation, step.anchors, step.params, done=True,
                                             text=step_text(step.transformation, step.anchors,
                                                            app.delta.bytes if app is not None else None,
                                                            step.applications)))
        self._unsubscribe = session.subscribe(self._on_session_event)
        self.setWindowTitle(f"dcstudio — {session.model_name}")
        self.view.tree = None
        self.shown_step = None
        self.profiling.reset()
        self.refresh()

    def _on_session_event(self, event: str, payload) -> None:
        if event == "autosave-failed":
            self.say("Autosave is off", error=True, detail=payload)
            return
        s = self.session
        if event in ("applied", "redone") and s is not None and s.cursor > 0:
            graph_diff.hint(s.graph_at(s.cursor - 1), s.graph, payload)   # the view and table update just that
        if event == "applied":
            qt_transfer.hint(self, payload)
        self._refresh_timer.start()

    # --- refresh ------------------------------------------------------------------------
    def refresh(self) -> None:
        """Bring every pane up to date with the session's current graph (one pass; workers wait)."""
        s = self.session
        if s is None or self.refresh_suspended:
            return
        self._refresh_timer.stop()
        with gui_busy():
            self._refresh(s)

    def _refresh(self, s: Session) -> None:
        g, ledger = s.graph, s.ledger
        self.view.clear_marks("removed", "changed", "added", "hover")
        shown, self.shown_step = self.shown_step, s.cursor          # the selection follows the lineage
        kept = s.follow(self.view.selected_ids(), shown) if shown is not None and shown <= len(s.steps) else None
        self.view.set_graph(g, ledger, select=kept)
        qt_node_data.follow_overlay(self)
        self.outline.refresh()
        bound = s.metrics().bound
        self.movement.set_figures(g, ledger, bound, self.peaks.of(g), s.trend(), s.cursor)
        self.find_bar.set_graph(g)
        self.profiling.refresh()
        self._show_properties(self.properties.key)
        t = ledger.total
        self.metrics_label.set_text(f"step {s.cursor}/{len(s.steps)} · moved {t.bytes / 1e6:,.1f} MB · bound "
                                   f"{bound / 1e6:,.1f} MB · {t.bytes / bound if bound else 0:.2f}× · "
                                   f"{len(g.nodes)} kernels")
        if self.transformations.diff.toPlainText():
            self.transformations.show_preview(None)
        self.schedule_rank()

    def _count_exported(self) -> None:
        graph = self.session.graph
        task = self.run_task("Bytes as exported", exported_work(graph), context={"fail": "Could not count bytes"})
        task.succeeded.connect(lambda moved: self.movement.set_exported(graph, moved))
        task.failed.connect(self._task_failed)

    def _origins(self, ident: str) -> tuple[str, ...]:
        s = self.session
        return s.origins(ident) if s is not None and ident in s.graph.nodes else ()

    def _show_properties(self, key: str | None) -> None:
        s = self.session
        if s is not None and self.view.tree is not None:
            origins = s.origins(key) if key is not None and key in s.graph.nodes else ()
            self.properties.show_item(s.graph, self.view.tree, s.ledger, key, origins)

    def _on_view_selection(self, ids: list) -> None:
        self.movement.select_ids(ids)
        self.timings.select_ids(ids)
        self.schedule_rank()

    def _on_table_selection(self, ids: list) -> None:
        if ids:
            self.view.reveal(ids[0])
        self.view.select(ids)
        if len(ids) == 1:
            self._show_properties(ids[0])

    def _on_find(self, hits: list, index: int) -> None:
        self.view.set_marks("search", hits)
        self.view.set_marks("current", [hits[index]] if index >= 0 else [])
        if index >= 0:
            self.view.reveal(hits[index], zoom=True)        # zoomed in until its label reads
            self.view.select([hits[index]])
            self._show_properties(hits[index])

    # --- ranking ------------------------------------------------------------------------
    def schedule_rank(self) -> None:
        self.ranker.schedule()

    def rank(self) -> None:
        self.ranker.rank()

    @property
    def rank_task(self) -> QtTask | None:
        return self.ranker.task

    # --- transformations ----------------------------------------------------------------
    def _on_hover(self, r) -> None:
        if r is None or self.session is None:
            self.view.clear_marks("hover")
            return
        try:
            ids = set(r.match.anchors) | set(r.transformation.affected(self.session.graph, r.match))
        except (StudioError, KeyError):
            ids = set(r.match.anchors)
        self.view.set_marks("hover", ids)

    def preview(self, r) -> None:
        try:
            p = preview(self.session.graph, r.transformation, r.match)
        except StudioError as e:
            self.transformations.show_preview(None, f"{r.transformation.name} cannot be previewed: {e.summary}")
            return
        self.view.set_marks("removed", p.removed)
        self.view.set_marks("changed", p.changed)
        self.transformations.show_preview(p)
        if p.removed or p.changed:
            self.view.reveal((p.removed + p.changed)[0])

    def apply(self, r) -> bool:
        """Apply a ranked match as an undoable command; False (and a dialog) when it fails. A row that
        stands for equal layers ("× N") applies here and repeats on the others (``qt_transfer``)."""
        if r.copies:
            return qt_transfer.apply_on_equal_layers(self, r)
        return self.apply_step(r.transformation.name, r.match.anchors, r.transformation.params())

    def apply_step(self, name: str, anchors, params=None) -> bool:
        cmd = ApplyCommand(self.session, name, anchors, params)
        with gui_busy():
            self.stack.push(cmd)
        if cmd.error is not None:
            self.say(f"{name} could not be applied", error=True, detail=cmd.error.summary)
            return False
        return True

    def apply_all(self, r) -> None:
        """Apply every applicable match of this kind, one undoable macro, in steps the GUI can interrupt."""
        from studio.gui.qt_batch import QtBatchApply
        QtBatchApply(self, r.transformation).start()

    def preview_current(self) -> None:
        if (r := self.transformations.current()) is not None and r.ok:
            self.preview(r)

    def apply_current(self) -> None:
        if (r := self.transformations.current()) is not None and r.ok:
            self.apply(r)

    # --- files --------------------------------------------------------------------------
    def choose_model(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open model", "", "ONNX models (*.onnx);;All files (*)")
        if path:
            self.open_model(path)

    def choose_history(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open history", "", "dcstudio history (*.json);;All files (*)")
        if path:
            self.open_history(path)

    def open_history(self, path: str) -> QtTask | None:
        """Replay a history file after the current steps (a new session, built off the GUI thread)."""
        s = self.session
        if s is None or not s.model_path:
            self.say("Open a model file first: histories replay onto the model they were recorded on", error=True)
            return None
        current, model, autosave, prepare = s.history(), s.model_path, self.autosave, self._preparer()
        task = self.run_task(f"Replaying {Path(path).name}", lambda token, progress: open_session(
            model, [current, path], autosave=autosave, start=s, prepare=prepare, token=token, progress=progress),
            context={"model": model, "fail": f"Could not replay {Path(path).name}"})
        task.succeeded.connect(self._opened)
        task.failed.connect(self._task_failed)
        return task

    def show_export_dialog(self):
        """File → Export module…: the export dialog (``qt_export_dialog``); None without a session."""
        from studio.gui.qt_export_dialog import QtExportDialog
        if self.session is None:
            self.say("Open a model first: the export writes the current graph", error=True)
            return None
        dialog = QtExportDialog(self, str(self.settings.value("exportFolder", "") or ""))
        dialog.show()
        return dialog

    def choose_save_history(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save history", "history.json", "dcstudio history (*.json)")
        if path:
            self.save_history(path)

    def save_history(self, path: str) -> None:
        try:
            self.session.save_history(path)
            self.statusBar().showMessage(f"saved {self.session.cursor} steps to {path}", 5000)
        except (StudioError, OSError) as e:
            self.say(f"Could not save the history to {path}", error=True, detail=str(e))

    # --- view commands ------------------------------------------------------------------
    def set_heatmap(self, scale: str | None) -> None:
        self.actions_.heat[scale].setChecked(True)
        self.view.set_heatmap(scale)

    def set_heat_metric(self, metric: str) -> None:
        """``bytes``, ``time`` (the last profile) or ``overlay`` (loaded node data); turns the heatmap
        on (log) when it is off."""
        self.actions_.heat_metric[metric].setChecked(True)
        self.view.set_heat_metric(metric)
        if self.view.heat_scale is None:
            self.set_heatmap("log")

    def collapse_all(self) -> None:
        self.view.expanded.clear()
        self.view.relayout()

    def expand_selected(self) -> None:
        for key in self.view.selected_keys():
            if self.view.tree.is_group(key):
                self.view.expand(key)

    def choose_layout_timeout(self) -> None:
        value, ok = QInputDialog.getDouble(self, "Layout timeout", "Seconds before a layout is stopped:",
                                           self.view.layout_timeout_s, 1.0, 600.0, 1)
        if ok:
            self.view.layout_timeout_s = value
            self.settings.setValue("layoutTimeout", value)

    def show_compare(self, step: int = 0):
        """The Compare window: step ``step`` (default the original) beside the current graph."""
        if self.session is None:
            self.say("Open a model first: Compare shows a history step beside the current graph", error=True)
            return None
        self._close_compare()
        self.compare_window = QtCompareWindow(self.session, self, step, self.view.layout_timeout_s)
        self.compare_window.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.compare_window.show()
        return self.compare_window

    def _close_compare(self) -> None:
        if self.compare_window is not None and _alive(self.compare_window):
            self.compare_window.close()
        self.compare_window = None

    def show_palette(self) -> QtCommandPalette:
        palette = QtCommandPalette([a for a in self.actions() + self.view.actions() if a.text()], self)
        palette.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        palette.popup()
        return palette

    def show_about(self) -> None:
        self.say("dcstudio: a data-centric optimization studio for ONNX training graphs.")

    # --- tasks, messages, settings ------------------------------------------------------
    def run_task(self, title: str, fn, *, track: bool = True, context=None, pool=None) -> QtTask:
        """Run ``fn(token, progress)`` on the thread pool (or ``pool``; see ``QtTask``); started, listed until
        it ends."""
        task = QtTask(title, fn, context)
        self.tasks.add(task)
        task.finished.connect(self._task_finished)
        if track:
            self.task_bar.track(task)
        return task.start(pool)

    def _task_finished(self) -> None:
        self.tasks.discard(self.sender())

    def _task_failed(self, message: str) -> None:
        self.say(self.sender().context["fail"], error=True, detail=message)

    def say(self, text: str, *, error: bool = False, detail: str = "") -> QWidget:
        """A non-modal message (errors name the node or step; never a traceback). The status bar
        line names a file once: a detail that starts with the path the text ends with drops it."""
        first = detail.splitlines()[0] if detail else ""
        for path in {text.rsplit(" ", 1)[-1], Path(text.rsplit(" ", 1)[-1]).name} - {""}:
            if first.startswith(path + ": "):
                first = first[len(path) + 2:]
                break
        self.statusBar().showMessage(text + (f": {first}" if first else ""), 10000)
        show = qt_dialogs.show_error if error else qt_dialogs.show_info
        box = show(self, "dcstudio", text, detail)
        self.messages = [m for m in self.messages if _alive(m)] + [box]
        return box

    def _restore_layout(self) -> None:
        geometry, state = self.settings.value("geometry"), self.settings.value("windowState")
        if geometry is not None:
            self.restoreGeometry(geometry)
        if state is not None:
            self._tabify_timings = not self.restoreState(state)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self._tabify_timings:                   # Qt 6.11: a second tab group made before the first show
            self._tabify_timings = False           # leaves a stray tab bar in the middle of the window
            self.tabifyDockWidget(self.movement, self.timings)
            self.movement.raise_()

    def closeEvent(self, event) -> None:
        self.settings.setValue("geometry", self.saveGeometry())
        self.settings.setValue("windowState", self.saveState())
        self.settings.sync()
        self._close_compare()
        self.ranker.timer.stop()                   # the ranking is untracked work: it stops with the window too
        mine = list(self.tasks) + [t for t in (self.view.task, self.ranker.task) if t is not None and t not in self.tasks]
        for task in mine:
            task.cancel()
        for task in mine:                          # only this window's tasks (other windows keep theirs)
            task.wait(10.0)
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.marker.set(None)                      # a clean close: no restore offer next time
        super().closeEvent(event)


def _alive(widget) -> bool:
    from shiboken6 import isValid
    return isValid(widget) and widget.isVisible()


__all__ = ["QtMainWindow", "EXAMPLE", "step_text"]
