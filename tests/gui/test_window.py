"""The main window's pieces: menus and shortcuts, the command palette, find, the kernel table and its
selection sync, the heatmap and legend, recent files and dock layout in QSettings, apply-all as one
undoable macro, the autosave restore offer, the properties pane, and ``dcstudio open``."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QKeySequence

from studio.gui.heatmap import color, legend, normalize
from studio.gui.qt_find import find
from tests.gui.conftest import crash_marker
from studio.cli.open import has_display
from studio.session import Session
from transforms.registry import create


@pytest.fixture
def window(qtbot, make_window, bert_model):
    w = make_window()
    w.open_model(str(bert_model))
    qtbot.waitUntil(lambda: w.session is not None and w.view.placement is not None and w.view.placement.exact,
                    timeout=60000)
    return w


def test_menus_and_shortcuts(window):
    a = window.actions_
    keys = {name: getattr(a, name).shortcut() for name in ("undo", "redo", "find", "fit", "palette")}
    assert keys == {"undo": QKeySequence("Ctrl+Z"), "redo": QKeySequence("Ctrl+Shift+Z"), "find": QKeySequence("Ctrl+F"),
                    "fit": QKeySequence("F"), "palette": QKeySequence("Ctrl+Shift+P")}
    assert a.open_model.shortcut() == QKeySequence(QKeySequence.StandardKey.Open)
    assert a.compare.shortcut() == QKeySequence("Ctrl+D") and a.export.shortcut() == QKeySequence("Ctrl+E")
    for action in (a.compare, a.export, a.profile_all, a.profile_selection, a.export_trace):
        assert action.isEnabled(), action.text()          # every feature is built: nothing is greyed out


def test_command_palette_filters_and_triggers(qtbot, window):
    palette = window.show_palette()
    qtbot.keyClicks(palette.field, "heatmap log")
    assert palette.list.count() == 1
    qtbot.keyClick(palette.field, Qt.Key.Key_Return)
    assert window.view.heat_scale == "log" and window.actions_.heat["log"].isChecked()
    assert not palette.isVisible()


def test_find_reveals_and_steps_through_hits(qtbot, window):
    hits = find(window.session.graph, "softmax")
    assert hits and all("softmax" in (h + window.session.graph.nodes[h].op_type).lower() for h in hits)
    qtbot.keyClicks(window.find_bar.field, "softmax")
    assert window.find_bar.count.text() == f"1 of {len(hits)}"
    window.find_bar.next()
    assert window.view.marks["current"] == {hits[1 % len(hits)]} and window.view.marks["search"] == set(hits)
    qtbot.waitUntil(lambda: window.view.placement.exact, timeout=30000)
    assert hits[1 % len(hits)] in window.view.boxes               # its groups were opened
    assert window.view.selected_ids() == [hits[1 % len(hits)]]


def test_kernel_table_sorts_and_follows_the_selection(window):
    model = window.movement.model
    model.sort(4, Qt.SortOrder.DescendingOrder)
    moved = [r[4] for r in model.rows]
    assert moved == sorted(moved, reverse=True)
    top = model.rows[0][0]
    window.movement.select_ids([top])
    window._on_table_selection([top])
    assert window.view.selected_ids() == [top]
    text = window.properties.text.toPlainText()
    assert top in text and "read" in text and "FLOPs" in text


def test_heatmap_and_legend(window):
    window.set_heatmap("rank")
    heats = {k: b.heat for k, b in window.view.boxes.items()}
    assert all(h is not None for h in heats.values()) and window.view.legend.isVisible()
    assert "rank scale" in window.view.legend.caption
    window.set_heatmap(None)
    assert all(b.heat is None for b in window.view.boxes.values()) and not window.view.legend.isVisible()
    vals = {"a": 1.0, "b": 10.0, "c": 1000.0}
    assert normalize(vals, "linear")["b"] == pytest.approx(9 / 999)
    assert normalize(vals, "log")["b"] > normalize(vals, "linear")["b"]
    assert normalize(vals, "rank") == {"a": 0.0, "b": 0.5, "c": 1.0}
    assert color(0.0) == (255, 255, 204) and color(1.0) == (128, 0, 38)
    assert [v for _, v in legend(vals, "linear", 3)] == [1.0, 500.5, 1000.0]


def test_apply_all_is_one_undoable_macro(qtbot, window):
    s = window.session
    expand = create("expand")
    n = min(40, sum(1 for m in expand.matches(s.graph) if expand.check(s.graph, m).ok))
    from studio.gui.qt_batch import QtBatchApply
    batch = QtBatchApply(window, expand, max_steps=n).start()
    qtbot.waitUntil(lambda: not batch.timer.isActive() if _alive(batch) else True, timeout=120000)
    assert s.cursor == n and window.stack.count() == 1 and "apply all expand" in window.stack.text(0)
    window.actions_.undo.trigger()
    assert s.cursor == 0
    window.actions_.redo.trigger()
    assert s.cursor == n


def _alive(obj) -> bool:
    from shiboken6 import isValid
    return isValid(obj)


def test_settings_keep_recent_files_and_dock_layout(qtbot, make_window, bert_model, settings, window):
    assert window.recent.list() == [str(bert_model)]
    window.movement.hide()
    window.close()
    again = make_window(settings=QSettings(settings.fileName(), QSettings.Format.IniFormat))
    assert again.recent.list() == [str(bert_model)] and again.recent_menu.actions()[0].text() == str(bert_model)
    assert not again.movement.isVisible()


def test_autosave_is_offered_back(qtbot, make_window, bert_model):
    s = Session.open(bert_model)                                   # autosaves beside the model copy
    m = next(m for m in create("expand").matches(s.graph))
    s.apply("expand", m.anchors)
    assert Session.autosave_for(bert_model).exists()
    crash_marker(bert_model)                                       # its studio died
    w = make_window(restore_policy="always")
    w.open_model(str(bert_model))
    qtbot.waitUntil(lambda: w.session is not None, timeout=60000)
    assert w.session.cursor == 1 and w.stack.count() == 1


def test_open_history_replays_after_the_current_steps(qtbot, window, tmp_path):
    """File → Open history…: the steps land in the window as undoable steps after the current ones."""
    s = Session.open(window.session.model_path, autosave=False)
    for m in list(create("expand").matches(s.graph))[:3]:
        s.apply("expand", m.anchors)
    s.save_history(tmp_path / "three.json")
    before = window.session
    window.open_history(str(tmp_path / "three.json"))
    qtbot.waitUntil(lambda: window.session is not before, timeout=60000)
    assert window.session.cursor == 3 and window.stack.count() == 3
    assert [st.anchors for st in window.session.steps] == [st.anchors for st in s.steps]


def test_open_command_needs_a_display():
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    assert not has_display(env) and has_display({"QT_QPA_PLATFORM": "offscreen"})
    run = subprocess.run([sys.executable, "-m", "studio.cli", "open"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2
    assert "needs a display" in run.stderr and "dcstudio replay MODEL HISTORY" in run.stderr


def test_open_command_starts_the_window_offscreen(bert_model, tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", XDG_CONFIG_HOME=str(tmp_path))
    run = subprocess.run([sys.executable, "-m", "studio.cli", "open", str(bert_model), "--exit-when-loaded"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def _children(pid: int) -> list[int]:
    path = f"/proc/{pid}/task/{pid}/children"
    return [int(x) for x in open(path).read().split()] if os.path.exists(path) else []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_ending_the_open_command_ends_the_window(bert_model, tmp_path, sig):
    """``dcstudio open`` runs the window as a child process: a SIGTERM to the launcher is passed on, and a
    launcher killed outright takes the window with it (Linux parent-death signal), so no window is left
    running (and ranking) without its launcher."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", XDG_CONFIG_HOME=str(tmp_path))
    launcher = subprocess.Popen([sys.executable, "-m", "studio.cli", "open", str(bert_model)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not _children(launcher.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    (window,) = _children(launcher.pid)
    time.sleep(1.0)                                   # the window is up and working
    launcher.send_signal(sig)
    launcher.wait(timeout=30)
    deadline = time.monotonic() + 30
    while not _gone(window) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(window)


def _gone(pid: int) -> bool:
    """The process has exited (a zombie waits only for its new parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
