"""Side-by-side compare (issue 6, part 6): the diff record and counterparts (no Qt), then the Compare window:
opened against step 0 after a few applies, its marks equal the diff, selection and zoom are mirrored."""
from __future__ import annotations

import pytest
from PySide6.QtWidgets import QTableWidgetItem
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QMouseEvent, QTransform, QWheelEvent
from PySide6.QtWidgets import QApplication

from studio.gui.compare import compare, counterpart, mirrored
from studio.gui.graph_diff import diff
from studio.gui.scope_tree import ScopeTree
from studio.session import Session
from tests.gui.conftest import EXAMPLE
from transforms import engine
from transforms.registry import create


def _changing_step(graph):
    """A (name, anchors, params) step that changes a kernel in place (same id: select_impl and the like)."""
    from studio.gui.ranking import candidates
    for t, m in candidates(graph, None):
        if t.check(graph, m).ok and engine.diff(graph, engine.trial(graph, t, m)[1])[2]:
            return t.name, m.anchors, t.params()
    raise AssertionError("no step changes a kernel in place")


def _fuse(session, n: int) -> None:
    mf = create("map_fusion")
    for _ in range(n):
        m = next(m for m in mf.matches(session.graph) if mf.check(session.graph, m).ok)
        session.apply("map_fusion", m.anchors)


@pytest.fixture(scope="module")
def expanded():
    s = Session.open(EXAMPLE, autosave=False)
    for m in list(create("expand").matches(s.graph))[:60]:
        s.apply("expand", m.anchors)
    _fuse(s, 3)
    s.apply(*_changing_step(s.graph))
    return s


def test_the_comparison_record(expanded):
    s = expanded
    c = compare(s.graph_at(0), s.graph, s.trend()[0], s.ledger.total.bytes)
    added, removed, changed = engine.diff(s.graph_at(0), s.graph)
    assert (c.diff.added, c.diff.removed, c.diff.changed) == (added, removed, changed)
    assert c.left_marks == {"removed": set(removed), "merged": set(), "changed": set(changed)}
    assert c.right_marks == {"added": set(added), "changed": set(changed)}
    text = c.summary()
    assert text.startswith(f"{len(removed)} removed, {len(added)} added, {len(changed)} changed; bytes ")
    assert "→" in text and removed and added


def test_lineage_turns_the_red_wall_into_merged_kernels(expanded):
    """Before: every kernel a fusion absorbed showed as removed. With the lineage each one is
    merged into the kernel it became part of, and hovering links the two sides."""
    s = expanded
    new = [i for i in s.graph.nodes if i not in s.graph_at(0).nodes or s.graph.nodes[i] is not s.graph_at(0).nodes[i]]
    c = compare(s.graph_at(0), s.graph, s.trend()[0], s.ledger.total.bytes, {i: s.origins(i) for i in new})
    removed = set(c.diff.removed)
    assert set(c.merged) == removed, "every kernel the steps removed became part of a kernel still there"
    assert c.left_marks["removed"] == set() and c.left_marks["merged"] == removed
    fused = next(i for i in new if len(s.origins(i)) > 1)
    assert set(c.linked("right", fused)) == set(s.origins(fused))
    assert all(fused in c.linked("left", o) for o in s.origins(fused) if o in removed)
    into = {r for rs in c.merged.values() for r in rs}
    assert c.summary().startswith(f"{len(removed)} merged into {len(into)}, 0 removed, ")


def test_scope_rows_sum_to_the_totals(expanded):
    from ir.movement import Ledger
    from studio.gui.compare import scope_rows
    s = expanded
    before, after = s.graph_at(0), s.graph
    rows = scope_rows(before, after, Ledger(before), s.ledger)
    assert sum(r.kernels_before for r in rows) == len(before.nodes)
    assert sum(r.kernels_after for r in rows) == len(after.nodes)
    assert sum(r.bytes_before for r in rows) == Ledger(before).total.bytes
    assert sum(r.bytes_after for r in rows) == s.ledger.total.bytes
    assert [r.bytes_after - r.bytes_before for r in rows] == sorted(r.bytes_after - r.bytes_before for r in rows)
    assert any("attention" in r.scope for r in rows)


def test_counterparts_by_id_else_by_scope_group(expanded):
    s = expanded
    left, right = ScopeTree(s.graph_at(0)), ScopeTree(s.graph)
    d = diff(s.graph_at(0), s.graph)
    kept = next(i for i in s.graph.nodes if i in s.graph_at(0).nodes)
    assert counterpart(kept, left, right) == kept
    gone = d.removed[0]                              # only on the left: its scope group on the right
    there = counterpart(gone, left, right)
    assert there is not None and there not in s.graph_at(0).nodes
    assert right.is_group(there) or there in s.graph.nodes
    assert left.raw_parent[gone].startswith(there) or there in right.members(there)
    assert counterpart("group:layer", left, right) == "group:layer"
    group = right.parent[there] if there in s.graph.nodes else there
    closed, opened = mirrored([gone], left, right, set()), mirrored([gone], left, right, {group, there})
    assert closed == [there]                         # a collapsed group: its box
    assert opened and all(k in s.graph.nodes and k not in s.graph_at(0).nodes for k in opened)   # its new kernels


# --- the window -----------------------------------------------------------------------------
@pytest.fixture
def compared(qtbot, make_window, bert_model):
    w = make_window()
    w.open_model(str(bert_model))
    qtbot.waitUntil(lambda: w.session is not None and w.view.placement is not None, timeout=60000)
    s = w.session
    for m in list(create("expand").matches(s.graph))[:60]:
        w.apply_step("expand", m.anchors)
    mf = create("map_fusion")
    for _ in range(3):
        m = next(m for m in mf.matches(s.graph) if mf.check(s.graph, m).ok)
        assert w.apply_step("map_fusion", m.anchors)
    assert w.apply_step(*_changing_step(s.graph))
    w.refresh()
    win = w.show_compare()
    assert win._task is None and not win.ready()      # the comparison starts once the window has painted
    qtbot.waitUntil(lambda: win.ready() and all(v.placement is not None and v.placement.exact and v.task is None
                                                for v in (win.left, win.right)), timeout=60000)
    return w, win


def test_compare_marks_equal_the_diff(compared):
    w, win = compared
    s = w.session
    assert win.step == 0 and win.picker.count() == len(s.steps) + 1
    assert win.left.graph is s.graph_at(0) and win.right.graph is s.graph
    d = diff(s.graph_at(0), s.graph)
    assert d.removed and d.added and d.changed
    assert win.left.marks["removed"] | win.left.marks["merged"] == set(d.removed)
    assert win.left.marks["merged"] == set(win.comparison.merged) and win.left.marks["merged"]
    assert win.left.marks["changed"] == set(d.changed)
    assert win.right.marks["added"] == set(d.added) and win.right.marks["changed"] == set(d.changed)
    assert "added" not in win.left.marks and "removed" not in win.right.marks
    assert win.summary.text() == win.comparison.summary()
    assert win.summary.text().startswith(f"{len(win.comparison.merged)} merged into ")
    assert win.table.rowCount() > 1 and win.table.item(0, 0).text()
    assert win.table.item(0, 5).text().endswith("×") or win.table.item(0, 5).text() == "new"
    marked = {k for k, item in win.right.boxes.items() if "added" in item.marks}   # drawn on visible boxes
    assert marked == {win.right.tree.visible(i, win.right.expanded) for i in d.added}
    assert w.actions_.compare.isEnabled() and w.actions_.compare in w.actions()    # menu and palette


def test_no_table_header_is_cut(qtbot, compared):
    """Before: "ytes after / befor" and "me after / befor" at the window's default size."""
    _w, win = compared
    win.resize(1400, 800)
    win.table.setItem(0, 7, QTableWidgetItem("123.45 ms"))     # a measured time: its column widens to it
    qtbot.wait(50)
    header = win.table.horizontalHeader()
    metrics = header.fontMetrics()
    for c in range(win.table.columnCount()):
        for line in win.table.horizontalHeaderItem(c).text().splitlines():
            assert header.sectionSize(c) >= metrics.horizontalAdvance(line) + 8, f"{line!r} is cut"
    assert header.sectionSize(7) >= win.table.fontMetrics().horizontalAdvance("123.45 ms") + 4
    assert header.length() <= win.table.viewport().width() + 2, "the columns fit without scrolling"


def test_selection_is_mirrored_by_id_or_scope_group(qtbot, compared):
    w, win = compared
    s = w.session
    kept = "/layer/attention/self/MatMul_1"
    win.left.reveal(kept)
    win.right.reveal(kept)
    win.left.select([kept])
    assert win.right.selected_ids() == [kept]
    gone = diff(s.graph_at(0), s.graph).removed[0]
    win.left.reveal(gone)
    win.left.select([gone])
    right_keys = win.right.selected_keys()
    assert right_keys and all(k not in s.graph_at(0).nodes for k in right_keys)   # its group, or what replaced it
    assert set(right_keys) == {win.right.tree.visible(k, win.right.expanded) for k in
                               mirrored([gone], win.left.tree, win.right.tree,
                                        set(win.right.tree.expanded_groups(win.right.expanded)))}
    win.right.select([kept])                            # and back, right to left
    assert win.left.selected_ids() == [kept]


def test_hovering_a_fused_kernel_marks_its_originals_on_the_other_side(qtbot, compared):
    w, win = compared
    s = w.session
    fused = next(i for i in s.graph.nodes if len(s.origins(i)) > 1 and i in win.right.boxes)
    win.right.hoveredKernel.emit(fused)
    assert win.right.marks["hover"] == {fused}
    assert win.left.marks["hover"] == set(s.origins(fused))
    original = s.origins(fused)[0]
    win.left.hoveredKernel.emit(original)
    assert fused in win.right.marks["hover"]
    win.left.hoveredKernel.emit("")
    assert not win.left.marks["hover"] and not win.right.marks["hover"]
    win.right.reveal(fused)
    box = win.right.boxes[fused]                      # a real mouse move over the box emits the signal
    pos = win.right.mapFromScene(box.sceneBoundingRect().center())
    move = QMouseEvent(QEvent.Type.MouseMove, QPointF(pos), win.right.viewport().mapToGlobal(QPointF(pos)),
                       Qt.MouseButton.NoButton, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(win.right.viewport(), move)
    assert win.right.marks.get("hover") == {fused} and win.left.marks["hover"] == set(s.origins(fused))


def test_zoom_and_scroll_stay_in_step(qtbot, compared):
    w, win = compared
    before = win.left.transform().m11()
    assert win.right.transform().m11() == pytest.approx(before)       # in step from the start
    win.right.setTransform(QTransform.fromScale(0.6, 0.6))            # close enough that both sides can scroll
    win.right.zoomed.emit(1.0)
    before = win.left.transform().m11()
    assert before == pytest.approx(0.6)
    pos = QPointF(win.right.viewport().rect().center())
    event = QWheelEvent(pos, win.right.mapToGlobal(pos), QPoint(0, 0), QPoint(0, 240), Qt.MouseButton.NoButton,
                        Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    win.right.wheelEvent(event)
    assert win.right.transform().m11() == pytest.approx(before * 1.44)
    assert win.left.transform().m11() == pytest.approx(win.right.transform().m11())
    win.left.verticalScrollBar().setValue(win.left.verticalScrollBar().value() + 200)
    a = win.left.mapToScene(win.left.viewport().rect().center())
    b = win.right.mapToScene(win.right.viewport().rect().center())
    assert abs(a.y() - b.y()) < 2 and win.right.transform().m11() == pytest.approx(win.left.transform().m11())


def test_group_toggles_mirror_and_the_window_follows_undo(qtbot, compared):
    w, win = compared
    key = next(k for k in win.left.tree.groups if k in win.right.tree.groups and k not in win.left.expanded
               and k != "group:" and win.left.tree.parent[k] in win.left.tree.expanded_groups(win.left.expanded))
    qtbot.waitUntil(lambda: key in win.left.boxes, timeout=10000)
    win.left.expand(key)
    win.left.groupToggled.emit(key, True)
    assert key in win.right.expanded
    w.actions_.undo.trigger()
    qtbot.waitUntil(lambda: win.right.graph is w.session.graph, timeout=10000)
    assert win.right.marks["added"] == set(diff(w.session.graph_at(0), w.session.graph).added)
    win.set_step(2)
    qtbot.waitUntil(win.ready, timeout=10000)
    assert win.left.graph is w.session.graph_at(2)


def test_scope_rows_sum_measured_times_per_side(expanded):
    """Times per kernel id add up per scope; a side with no times shows None, a scope one timed side
    lacks took no time there."""
    from ir.movement import Ledger
    from studio.gui.compare import scope_rows
    s = expanded
    before, after = s.graph_at(0), s.graph
    tb = {k: 1e-3 for k in before.nodes}
    ta = {k: 2e-3 for k in after.nodes}
    rows = scope_rows(before, after, Ledger(before), s.ledger, times_before=tb, times_after=ta)
    assert sum(r.time_before for r in rows) == pytest.approx(1e-3 * len(before.nodes))
    assert sum(r.time_after for r in rows) == pytest.approx(2e-3 * len(after.nodes))
    assert all(r.time_ratio == pytest.approx(2.0 * r.kernels_after / r.kernels_before)
               for r in rows if r.kernels_before)
    half = scope_rows(before, after, Ledger(before), s.ledger, times_before=tb)
    assert all(r.time_after is None and r.time_ratio is None for r in half)


def test_every_mark_colour_is_told_apart():
    """The hover mark (amber #ffbf00) was hard to tell from "changed" (orange #ff9f1c) in Compare:
    every two mark colours now differ by at least 80 in RGB distance."""
    from PySide6.QtGui import QColor
    from studio.gui.qt_graph_items import MARK_COLORS
    rgb = {k: QColor(v).getRgb()[:3] for k, v in MARK_COLORS.items()}
    close = [(a, b) for a in rgb for b in rgb if a < b and sum((x - y) ** 2 for x, y in zip(rgb[a], rgb[b])) ** 0.5 < 80]
    assert close == []


def test_the_compare_views_fit_at_their_shown_size(compared):
    """Before: the views fitted while the window was still being built (a viewport a few pixels wide),
    so they opened at zoom 0.004 where a pointer covers three kernels. The first fit waits for the real size."""
    _w, win = compared
    for v in (win.left, win.right):
        r, vp = v.scene().sceneRect(), v.viewport().rect()
        fit = min(vp.width() / r.width(), vp.height() / r.height())
        assert v.transform().m11() >= 0.9 * fit > 0.01


def test_scopes_with_equal_savings_sort_by_their_numbers():
    """Ties in the scope table read layer numbers as numbers: layer/2 before layer/10."""
    from studio.gui.compare import natural_key
    names = ["layer/10/attention", "layer/2/attention", "layer/1/attention", "head", "layer/1"]
    assert sorted(names, key=natural_key) == ["head", "layer/1", "layer/1/attention", "layer/2/attention",
                                              "layer/10/attention"]
