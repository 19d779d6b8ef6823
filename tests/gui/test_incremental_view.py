"""The window after apply, undo, redo and revert: the incrementally updated scope tree, scene labels,
kernel table and minimap equal what a fresh build shows (the speed comes from updating only what changed,
so these tests check that nothing else was left stale)."""
from __future__ import annotations

from PySide6.QtCore import QPoint, Qt

from studio.text import human_bytes
from studio.gui.describe import box_text
from studio.gui.qt_movement import QtKernelModel
from studio.gui.scope_tree import ScopeTree
from tests.gui.test_scope_tree import tree_value
from transforms.registry import create


def _opened(qtbot, make_window, bert_model):
    w = make_window()
    w.open_model(str(bert_model))
    qtbot.waitUntil(lambda: w.session is not None and w.view.placement is not None and w.view.placement.exact,
                    timeout=60000)
    return w


def _check_fresh(qtbot, w, what: str) -> None:
    s, v = w.session, w.view
    peak = f"peak memory {human_bytes(s.peak_bytes())} "
    if peak not in w.movement.summary.text():      # a new graph: computed off the GUI thread, "…" meanwhile
        assert "peak memory … " in w.movement.summary.text(), what
        qtbot.waitUntil(lambda: peak in w.movement.summary.text(), timeout=10000)
    assert v.graph is s.graph, what
    assert tree_value(v.tree) == tree_value(ScopeTree(s.graph)), what
    for key, item in v.boxes.items():
        assert (item.title, item.subtitle) == box_text(s.graph, v.tree, s.ledger, key), (what, key)
    fresh = QtKernelModel()
    fresh.set_graph(s.graph, s.ledger)
    assert sorted(w.movement.model.rows) == sorted(fresh.rows), what
    col = w.movement.model.order[0]
    values = [r[col] for r in w.movement.model.rows]
    assert values == sorted(values, reverse=True), what             # still sorted (bytes, descending)


def test_apply_undo_redo_revert_keep_every_pane_equal_to_a_fresh_build(qtbot, make_window, bert_model):
    w = _opened(qtbot, make_window, bert_model)
    s = w.session
    assert w.movement.model._seeded is None, "the rows the loading worker made were shown"
    _check_fresh(qtbot, w, "opened")
    for m in list(create("expand").matches(s.graph))[:40]:
        assert w.apply_step("expand", m.anchors)
    w.refresh()
    _check_fresh(qtbot, w, "after expanding")
    mf = create("map_fusion")
    for k in range(4):
        m = next(m for m in mf.matches(s.graph) if mf.check(s.graph, m).ok)
        assert w.apply_step("map_fusion", m.anchors)
        w.refresh()
        _check_fresh(qtbot, w, f"map_fusion {k}")
    for what, act in [("undo", w.actions_.undo.trigger), ("undo", w.actions_.undo.trigger),
                      ("redo", w.actions_.redo.trigger), ("revert to 3", lambda: w.history.revert_to(3)),
                      ("revert to 44", lambda: w.history.revert_to(44)), ("revert to 0", lambda: w.history.revert_to(0))]:
        act()
        w.refresh()
        _check_fresh(qtbot, w, what)


def test_the_minimap_renders_once_still_and_moves_the_view(qtbot, make_window, bert_model):
    w = _opened(qtbot, make_window, bert_model)
    mini = w.minimap
    qtbot.waitUntil(lambda: mini.pixmap is not None and not mini.stale, timeout=10000)
    first = mini.pixmap
    m = next(iter(create("expand").matches(w.session.graph)))
    w.apply_step("expand", m.anchors)
    w.refresh()
    assert mini.stale and mini.pixmap is first                     # not rendered inside the edit...
    qtbot.waitUntil(lambda: not mini.stale and mini.pixmap is not first, timeout=10000)   # ...but once still
    w.view.resetTransform()
    w.view.scale(1.0, 1.0)
    before = w.view.mapToScene(w.view.viewport().rect()).boundingRect().center()
    target = mini.target.bottomRight().toPoint() - QPoint(3, 3)
    qtbot.mouseClick(mini, Qt.MouseButton.LeftButton, pos=target)
    after = w.view.mapToScene(w.view.viewport().rect()).boundingRect().center()
    assert after.y() > before.y()
    assert mini.seen_rect().intersects(mini.target)
