"""GUI test fixtures (pytest-qt, offscreen via tests/conftest.py).

- ``no_leaked_windows`` (autouse): fails a test that leaves a top-level widget alive
  (a window, a message box, a palette), as napari's ``make_napari_viewer`` does.
- ``make_window``: main windows with their settings in a temporary INI file, closed
  and deleted (with their background tasks finished) after the test.
- ``bert_model``: the bundled example copied to a temporary folder, so autosaves
  land there.
- ``export_and_check(qtbot, window, folder, name)``: export through the Export dialog and
  require the package's own ``--check`` to pass.
- ``crash_marker(model)``: leave the session marker of a studio that died (a dead PID), as
  a crash would.
"""
from __future__ import annotations

import gc

import json
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QCoreApplication, QEvent, QSettings, QThreadPool
from PySide6.QtWidgets import QApplication

EXAMPLE = Path(__file__).resolve().parents[2] / "resources" / "examples" / "bert_layer_base_train.onnx"


def _flush() -> None:
    QThreadPool.globalInstance().waitForDone(20000)
    for _ in range(3):
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        QApplication.processEvents()
    # Collect the test's reference cycles here, on the GUI thread: the next test's workers allocate, and a
    # collection there destroyed Python-owned Qt objects (pytest-qt's wait timers) on a worker thread
    # ("Timers cannot be stopped from another thread", then a segfault)
    gc.collect()


@pytest.fixture(autouse=True)
def no_leaked_windows(qapp):
    before = {id(w) for w in QApplication.topLevelWidgets()}
    yield
    _flush()
    leaked = [w for w in QApplication.topLevelWidgets() if id(w) not in before]
    names = [f"{type(w).__name__}({w.objectName() or w.windowTitle()!r}, visible={w.isVisible()})" for w in leaked]
    for w in leaked:
        w.close()
        w.deleteLater()
    _flush()
    assert not leaked, f"top-level widgets leaked by the test: {names}"


@pytest.fixture
def settings(tmp_path) -> QSettings:
    return QSettings(str(tmp_path / "dcstudio.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def make_window(qapp, settings):
    from studio.gui.qt_main_window import QtMainWindow
    made = []

    def make(**kw) -> QtMainWindow:
        kw.setdefault("restore_policy", "never")
        w = QtMainWindow(kw.pop("settings", settings), **kw)
        w.resize(1400, 900)
        w.show()
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()
        w.deleteLater()
    _flush()


@pytest.fixture
def bert_model(tmp_path) -> Path:
    path = tmp_path / EXAMPLE.name
    shutil.copy(EXAMPLE, path)
    return path


def crash_marker(model) -> Path:
    """Write ``model``'s session marker as a studio that has died since would have left it."""
    from studio.session.marker import marker_for
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    marker = marker_for(model)
    marker.write_text(json.dumps({"pid": child.pid, "host": socket.gethostname(), "started": None}))
    return marker



CHECK_MS = 600000                     # the export, then numba compiles the package's kernels


def export_and_check(qtbot, w, folder: Path, name: str, steps=()) -> None:
    """Export ``w``'s session through File → Export module… into ``folder/name``; its check must pass."""
    from PySide6.QtCore import Qt
    from studio.gui.qt_export_dialog import QtExportDialog
    w.actions_.export.trigger()
    d = w.findChild(QtExportDialog)
    d.folder.setText(str(folder))
    d.name.clear()
    qtbot.keyClicks(d.name, name)
    assert d.export_button.isEnabled(), d.message.text()
    qtbot.mouseClick(d.export_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: d.state == "done", timeout=CHECK_MS)
    assert d.passed is True, d.verdict.text() + "\n" + d.output.toPlainText()
    assert d.verdict.text().startswith("Check passed") and "outputs match" in d.verdict.text()
    assert re.search(r"bytes as fused [\d.]+ MB, as exported \(cpu\) [\d.]+ MB", d.output.toPlainText())
    header = (folder / name / "model.py").read_text().split("\n", 30)
    assert any(line.startswith(f"# history: {len(steps)} step{'s' if len(steps) != 1 else ''} ") for line in header)
    assert all(any(step in line for line in header) for step in steps)
    assert [p.name for p in folder.iterdir() if p.name.startswith(f".{name}.")] == []   # no staging left
    d.close()
