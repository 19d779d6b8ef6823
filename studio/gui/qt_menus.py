"""Menus, actions and shortcuts of the main window, and the recent-files list in QSettings.

Every user command is a QAction here (so the command palette lists it). Actions
whose feature is not built yet are present but disabled, with a tooltip and status tip
saying why (none at the moment). The Tools menu drives the Timings dock (``qt_profiling``);
View → Compare with… opens the Compare window (``qt_compare``).
"""
from __future__ import annotations

import importlib.util
from types import SimpleNamespace

from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QMainWindow

from studio.gui import qt_node_data, qt_tune
from studio.gui.qt_transfer import repeat_on_equal_layers
from studio.gui.heatmap import SCALES


MAX_RECENT = 10


def _feature(module: str, what: str) -> str:
    """Why ``what`` is disabled ('' when its module exists and the GUI drives it)."""
    if importlib.util.find_spec(module.split(".")[0]) is None or _missing(module):
        return f"{what} needs {module}, which is not built yet (the codegen issue)"
    return f"{what}: {module} exists, but the studio does not drive it yet"


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True


def _action(w, text: str, slot=None, shortcut: str | QKeySequence | None = None, tip: str = "") -> QAction:
    a = QAction(text, w)
    if shortcut is not None:
        a.setShortcut(QKeySequence(shortcut))
    if slot is not None:
        a.triggered.connect(lambda _checked=False: slot())
    if tip:
        a.setStatusTip(tip)
        a.setToolTip(tip)
    w.addAction(a)
    return a


def _canvas_key(w, a: QAction) -> QAction:
    """A single-key shortcut fires only while the graph view has the focus: typed into a table,
    a list or a field, the letter is the user's (keyboard search, text), never the command."""
    a.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
    w.removeAction(a)
    w.view.addAction(a)
    return a


def _disabled(w, text: str, why: str) -> QAction:
    a = _action(w, text, tip=why)
    a.setEnabled(False)
    return a


def build(w: QMainWindow) -> SimpleNamespace:
    """Create the actions and menus of window ``w``; returns them by name."""
    a = SimpleNamespace()
    a.open_model = _action(w, "&Open model…", w.choose_model, QKeySequence.StandardKey.Open, "Open an ONNX model")
    a.open_history = _action(w, "Open &history…", w.choose_history, "Ctrl+Shift+O",
                             "Replay a history file onto this model")
    a.save_history = _action(w, "&Save history…", w.choose_save_history, QKeySequence.StandardKey.Save,
                             "Save the applied steps as a history file")
    a.load_overlay = _action(w, "Load node &data…", lambda: qt_node_data.choose_overlay(w), tip="Colour the graph with per-kernel values "
                             "from a JSON file (Model Explorer's node-data format)")
    a.save_overlay = _action(w, "Export node data…", lambda: qt_node_data.choose_save_overlay(w), tip="Write bytes moved (and the last "
                             "profile's times) per kernel as node-data JSON, for Model Explorer")
    a.export = _action(w, "&Export module…", w.show_export_dialog, "Ctrl+E",
                       "Write the current graph as a standalone Python package and check it")
    a.close = _action(w, "&Close window", w.close, QKeySequence.StandardKey.Close)
    a.undo = w.stack.createUndoAction(w, "&Undo")
    a.undo.setShortcut(QKeySequence("Ctrl+Z"))
    a.redo = w.stack.createRedoAction(w, "&Redo")
    a.redo.setShortcut(QKeySequence("Ctrl+Shift+Z"))
    w.addActions([a.undo, a.redo])
    a.find = _action(w, "&Find…", w.find_bar.focus, QKeySequence("Ctrl+F"), "Find kernels by id, name or op")
    a.find_next = _action(w, "Find next", w.find_bar.next, QKeySequence("F3"))
    a.find_previous = _action(w, "Find previous", w.find_bar.previous, QKeySequence("Shift+F3"))
    a.palette = _action(w, "Command &palette…", w.show_palette, QKeySequence("Ctrl+Shift+P"))
    a.preview = _action(w, "&Preview selected match", w.preview_current, "Ctrl+Shift+Return")
    a.apply = _action(w, "&Apply selected match", w.apply_current, "Ctrl+Return")
    a.rerank = _action(w, "Re-rank matches", w.schedule_rank, "F5", "Rank the matches for selection and viewport")
    a.tune = _action(w, "&Tune this scope…", lambda: qt_tune.show(w), "Ctrl+Shift+T",
                     "Search pass sequences for fewer bytes in the selected layer (or the whole graph)")
    a.repeat_layers = _action(w, "Repeat on equal &layers", lambda: repeat_on_equal_layers(w), "Ctrl+Shift+L",
                              "Apply the last steps made inside one layer to every structurally equal layer")
    a.fit = _canvas_key(w, _action(w, "&Fit graph", w.view.fit, QKeySequence("F"),
                                   "Fit the whole graph in the view (the groups' plates name its parts)"))
    a.zoom_selection = _canvas_key(w, _action(w, "&Zoom to selection", w.view.zoom_to_selection, QKeySequence("Z"),
                                              "Frame the selected kernels at a zoom where their labels read"))
    a.collapse_all = _action(w, "Collapse all groups", w.collapse_all)
    a.stack_layers = _action(w, "&Stack layers", None, None,
                             "Group a training step by layer, each with its forward, grad and update, in a grid "
                             "(off: by kernel names, the passes side by side)")
    a.stack_layers.setCheckable(True)
    a.stack_layers.setChecked(True)
    a.stack_layers.toggled.connect(w.view.set_stacking)
    a.expand_selected = _canvas_key(w, _action(w, "Open selected groups", w.expand_selected, "+"))
    a.timeout = _action(w, "Layout timeout…", w.choose_layout_timeout)
    a.compare = _action(w, "&Compare with…", w.show_compare, "Ctrl+D",
                        "Side by side: the current graph against the original or any history step")
    _timing_actions(w, a)
    a.about = _action(w, "&About dcstudio", w.show_about)
    heat = QActionGroup(w)
    a.heat = {}
    for scale in (None, *SCALES):
        act = _action(w, f"Heatmap: {scale or 'off'}", lambda s=scale: w.set_heatmap(s))
        act.setCheckable(True)
        act.setChecked(scale is None)
        heat.addAction(act)
        a.heat[scale] = act
    _menus(w, a)
    return a


def _timing_actions(w: QMainWindow, a: SimpleNamespace) -> None:
    """The Timings dock's commands, and the heatmap's metric (bytes moved or measured time)."""
    p = w.profiling
    a.profile_all = _action(w, "&Profile all kernels", p.profile_all, "Ctrl+Alt+P",
                            "Time every kernel of the current step out of process")
    a.profile_selection = _action(w, "Profile &selection", p.profile_selection, "Ctrl+Alt+S",
                                  "Time the selected kernels")
    a.cancel_profile = _action(w, "Cancel profiling", p.cancel, tip="Stop the running profile or A/B")
    a.compare_step = _action(w, "Compare timing with step…", p.choose_compare,
                             tip="Paired A/B of whole training steps: an earlier step against the current one")
    a.export_trace = _action(w, "Export Chrome &trace…", p.choose_trace, tip="Write the last profile for Perfetto")
    group = QActionGroup(w)
    a.heat_metric = {}
    for metric, text in (("bytes", "bytes moved"), ("time", "measured time"), ("overlay", "node data")):
        act = _action(w, f"Heatmap metric: {text}", lambda m=metric: w.set_heat_metric(m))
        act.setIconText(text)
        act.setCheckable(True)
        act.setChecked(metric == "bytes")
        act.setEnabled(metric != "overlay")           # until node data is loaded
        group.addAction(act)
        a.heat_metric[metric] = act


def _menus(w: QMainWindow, a: SimpleNamespace) -> None:
    bar = w.menuBar()
    file = bar.addMenu("&File")
    file.addActions([a.open_model, a.open_history, a.save_history])
    w.recent_menu = file.addMenu("Open &recent")
    file.addSeparator()
    file.addActions([a.load_overlay, a.save_overlay])
    file.addSeparator()
    file.addActions([a.export, a.close])
    edit = bar.addMenu("&Edit")
    edit.addActions([a.undo, a.redo])
    edit.addSeparator()
    edit.addActions([a.find, a.find_next, a.find_previous, a.palette])
    edit.addSeparator()
    edit.addActions([a.preview, a.apply, a.repeat_layers, a.rerank])
    view = bar.addMenu("&View")
    view.addActions([a.fit, a.zoom_selection, a.expand_selected, a.collapse_all, a.stack_layers])
    view.addSeparator()
    view.addActions(list(a.heat.values()))
    view.addActions(list(a.heat_metric.values()))
    view.addSeparator()
    view.addActions([a.timeout, a.compare])
    w.docks_menu = view.addMenu("&Docks")
    tools = bar.addMenu("&Tools")
    tools.addActions([a.profile_all, a.profile_selection, a.cancel_profile, a.compare_step, a.export_trace])
    tools.addSeparator()
    tools.addAction(a.tune)
    bar.addMenu("&Help").addAction(a.about)


class RecentFiles:
    """The recent models, newest first, kept in QSettings under ``recent``."""

    def __init__(self, settings: QSettings) -> None:
        self.settings = settings

    def list(self) -> list[str]:
        value = self.settings.value("recent", [])
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or [])]

    def add(self, path: str) -> None:
        items = [path] + [p for p in self.list() if p != path]
        self.settings.setValue("recent", items[:MAX_RECENT])

    def fill(self, menu, open_fn) -> None:
        menu.clear()
        for path in self.list():
            menu.addAction(path).triggered.connect(lambda _c=False, p=path: open_fn(p))
        menu.setEnabled(bool(self.list()))
