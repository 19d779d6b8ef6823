"""Nothing is cut at the default window size (1500 × 950): the Transformations columns, the History
entries' figures, the Timings headers and status line, the Properties IR (before: "Sta", entries
without their saving, "roofline e…", a status line cut by the buttons, an IR line cut at the edge)."""
from __future__ import annotations

from studio.gui.qt_timing_table import COLUMNS
from tests.gui.conftest import EXAMPLE
from tests.gui.test_session_flow import _open
from transforms.registry import create


def test_default_size_cuts_nothing(qtbot, make_window, bert_model):
    w = make_window()
    w.resize(1500, 950)
    _open(qtbot, w, bert_model)
    qtbot.wait(50)
    tree = w.transformations.tree
    metrics = tree.header().fontMetrics()
    for c in range(tree.columnCount()):
        text = tree.headerItem().text(c)
        assert tree.header().sectionSize(c) >= metrics.horizontalAdvance(text) + 8, f"{text!r} is cut"
    assert sum(tree.header().sectionSize(c) for c in range(4)) <= tree.viewport().width() + 2

    s = w.session
    for m in list(create("expand").matches(s.graph))[:40]:
        w.apply_step("expand", m.anchors)
    mf = create("map_fusion")
    m = next(m for m in mf.matches(s.graph) if mf.check(s.graph, m).ok)
    assert w.apply_step("map_fusion", m.anchors)
    entry = w.stack.text(w.stack.count() - 1)
    delta = s.application_at(s.cursor).delta.bytes
    assert delta and entry.startswith(f"{delta / 1e6:+.2f} MB · map_fusion @ "), entry

    table = w.timings.table
    hm = table.horizontalHeader().fontMetrics()
    for c, name in enumerate(COLUMNS):
        assert table.columnWidth(c) >= hm.horizontalAdvance(name) + 8, f"Timings header {name!r} is cut"
    dock = w.timings
    dock.status.set_text("profiled step 0 in 12.3 s: 309 of 309 kernels measured")
    assert dock.status.width() >= dock.table.width() - 4, "the status line has the table's whole width"
    assert dock.status.toolTip() == dock.status.text()

    key = max(w.session.graph.nodes, key=len)             # a long id: a long IR line
    w._show_properties(key)
    w.properties.text.resize(360, 400)
    assert w.properties.text.horizontalScrollBar().maximum() == 0, "the IR wraps instead of running off"


def test_a_loaded_history_shows_each_steps_figure(qtbot, make_window, bert_model):
    w = make_window()
    _open(qtbot, w, bert_model, str(EXAMPLE.with_name("bert_layer_base_train.history.json")))
    s = w.session
    assert s.cursor == w.stack.count() > 0
    for k in range(1, s.cursor + 1):
        delta = s.application_at(k).delta.bytes
        assert w.stack.text(k - 1).startswith(f"{delta / 1e6:+.2f} MB · " if delta else ""), w.stack.text(k - 1)
    assert any(s.application_at(k).delta.bytes for k in range(1, s.cursor + 1))


def test_a_bad_file_is_named_once_in_the_status_bar(qtbot, make_window, tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not really onnx")
    w = make_window()
    w.open_model(str(bad))
    qtbot.waitUntil(lambda: bool(w.messages), timeout=30_000)
    line = w.statusBar().currentMessage()
    assert line.startswith(f"Could not open {bad}: not a valid ONNX protobuf") and line.count(str(bad)) == 1
    box = w.messages[-1]
    assert str(bad) in box.informativeText() + box.text()            # the dialog keeps the full detail
    box.close()


def test_the_right_dock_keeps_its_width_through_an_apply(qtbot, make_window, bert_model):
    """Before: the Transformations dock widened itself from 470 to 677 px at the first apply (its status line,
    "re-ranking … of …", asked for its whole width on one line). A long status now wraps."""
    w = make_window()
    w.resize(1600, 1000)
    _open(qtbot, w, bert_model)
    w.ranker.schedule(0)
    qtbot.waitUntil(lambda: any(r.ok and r.delta is not None and r.bytes_saved > 0 for r in w.transformations.rows()),
                    timeout=60_000)
    dock, central = w.transformations, w.centralWidget()
    width, view = dock.width(), central.width()
    r = next(r for r in w.transformations.rows() if r.ok and r.delta is not None and r.bytes_saved > 0)
    assert w.apply(r)
    dock.set_status("re-ranking the matches the apply touched: 12 of 240, whole graph, viewport and selection "
                    "groups after step 1")
    qtbot.wait(300)
    assert abs(dock.width() - width) <= 2 and abs(central.width() - view) <= 2, (width, dock.width())
