"""Overlays from outside: File → Load node data… colours the graph with a node-data JSON file's
values (heat metric "node data", legend, tooltips); Export node data… writes the studio's
figures in the same format; a bad file gets a dialog naming it, and the view is unchanged."""
from __future__ import annotations

import json

from studio.gui import qt_node_data
from tests.gui.test_session_flow import _open


def test_load_and_export_node_data(qtbot, make_window, bert_model, tmp_path):
    w = make_window()
    _open(qtbot, w, bert_model)
    s, v = w.session, w.view
    assert not w.actions_.heat_metric["overlay"].isEnabled()
    ids = list(s.graph.nodes)
    values = {k: float(n + 1) for n, k in enumerate(ids[:50])}
    path = tmp_path / "latency.json"
    path.write_text(json.dumps({"results": {k: {"value": x} for k, x in values.items()}}))
    assert qt_node_data.load_overlay(w, str(path))
    assert v.heat_metric == "overlay" and v.heat_scale == "log" and v.overlay_values == values
    assert w.actions_.heat_metric["overlay"].isChecked() and v.legend.isVisible()
    assert "latency per box" in v.legend.caption and "50 of 309 kernels have a value" in v.legend.caption
    hot = v.tree.visible(ids[49], v.expanded)
    assert v.boxes[hot].heat is not None
    v.reveal(ids[0], zoom=True)
    qtbot.waitUntil(lambda: v.task is None and ids[0] in v.boxes, timeout=60_000)
    tip = v.tooltip_at(v.mapFromScene(v.boxes[ids[0]].sceneBoundingRect().center()))
    assert tip.endswith("latency: 1")

    out = tmp_path / "step.bytes_moved.json"
    assert qt_node_data.save_overlay(w, str(out)) == [str(out)]                 # no profile yet: bytes only
    doc = json.loads(out.read_text())
    assert {k: r["value"] for k, r in doc["results"].items()} == {k: e.bytes for k, e in s.ledger.kernels.items()}

    bad = tmp_path / "bad.json"
    bad.write_text('{"results": {"x": {"value": "slow"}}}')
    assert not qt_node_data.load_overlay(w, str(bad))
    assert str(bad) in w.statusBar().currentMessage() and v.overlay_values == values
    w.messages[-1].close()


def test_the_legend_steps_aside_from_the_pointer(qtbot, make_window, bert_model):
    from PySide6.QtCore import QEvent, QPointF, Qt
    from PySide6.QtGui import QMouseEvent
    from PySide6.QtWidgets import QApplication
    w = make_window()
    _open(qtbot, w, bert_model)
    w.set_heatmap("log")
    v = w.view
    assert v.legend.isVisible() and v.legend.x() == 10
    at = QPointF(v.legend.geometry().center())
    QApplication.sendEvent(v.viewport(), QMouseEvent(QEvent.Type.MouseMove, at, v.viewport().mapToGlobal(at),
                                                     Qt.MouseButton.NoButton, Qt.MouseButton.NoButton,
                                                     Qt.KeyboardModifier.NoModifier))
    assert not v.legend.geometry().contains(at.toPoint()), "the legend no longer covers the pointer"
    assert v.legend.x() == v.viewport().width() - v.legend.width() - 10


def test_node_data_legend_numbers_read_plainly():
    from studio.gui.heatmap import number_label
    assert number_label(155_900.0) == "155,900" and number_label(-2.5e6) == "-2,500,000"
    assert number_label(3.14159) == "3.142" and number_label(0) == "0" and number_label(0.0125) == "0.0125"
    assert number_label(2.5e-5) == "2.5×10^-5" and number_label(3e16) == "3×10^16"


def test_node_data_keyed_by_original_names_follows_the_fusions(qtbot, make_window, bert_model, tmp_path):
    """A file keyed by the opened graph's kernel names colours the kernels made from them after the bundled
    recipe, each with the sum of its origins' values, and the legend says so."""
    from studio.session.recipe import run_recipe
    w = make_window()
    _open(qtbot, w, bert_model)
    s, v = w.session, w.view
    original = list(s.graph.nodes)
    path = tmp_path / "latency.json"
    path.write_text(json.dumps({"results": {k: {"value": 1.0} for k in original}}))
    assert qt_node_data.load_overlay(w, str(path))
    run_recipe(s)
    w.refresh()
    assert set(v.overlay_values) == set(s.graph.nodes)                  # every kernel has a value
    for kernel in list(s.graph.nodes)[:40]:
        assert v.overlay_values[kernel] == len(s.origins(kernel))       # sum of its originals' ones
    assert "(sum over the original kernels each was made from) per box" in v.legend.caption
