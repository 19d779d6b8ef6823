"""A full tuning session through the real main window (offscreen), and the stale-history failure.

open the bundled example → select kernels → ranked matches → preview → apply → the data
movement dock updates → undo → redo → revert-to → save history → reopen with it → replay
headless (``dcstudio replay``) gives the same graph → export the replayed session through the
Export dialog (File → Export module…) → the package's own ``--check`` passes.
"""
from __future__ import annotations

import json

from ir.serialize import graph_hash
from studio.cli import main as cli_main
from tests.gui.conftest import export_and_check

LOAD_MS = 60000


def _open(qtbot, window, model, history=None):
    window.open_model(str(model), history)
    qtbot.waitUntil(lambda: window.session is not None and window.view.placement is not None
                    and window.view.placement.exact and not window.tasks - {window.rank_task}, timeout=LOAD_MS)


def _selection_rows(qtbot, window):
    """The Selection group once ranked (it is listed first checked but unpredicted, then ranked)."""
    def rows():
        head = window.transformations.tree.topLevelItem(0)
        return [r for j in range(head.childCount()) if (r := head.child(j).data(0, 0x0100)) is not None] if head else []

    qtbot.waitUntil(lambda: bool(rows()) and all(r.delta is not None for r in rows() if r.ok), timeout=LOAD_MS)
    assert window.transformations.tree.topLevelItem(0).text(0) == "Selection"
    return rows()


def test_full_tuning_session(qtbot, make_window, bert_model, tmp_path, capsys):
    w = make_window()
    _open(qtbot, w, bert_model)
    s = w.session
    assert w.view.boxes and w.movement.model.rowCount() == len(s.graph.nodes)
    bytes0 = s.metrics().bytes

    # select the attention scope's kernels: the Selection group lists their matches, best first
    ids = [i for i in s.graph.nodes if i.startswith("/layer/attention/self/")]
    w.view.select(ids)
    assert set(w.movement.selected_ids()) == set(ids)
    rows = _selection_rows(qtbot, w)
    ok = [r for r in rows if r.ok]
    assert ok and all(a.bytes_saved >= b.bytes_saved for a, b in zip(ok, ok[1:]))
    assert all(not r.ok for r in rows[len(ok):]) and all(r.reason for r in rows[len(ok):])
    best = ok[0]

    # hover marks the kernels it touches; preview shows the diff without changing the graph
    w.transformations.hovered.emit(best)
    assert w.view.marks["hover"] >= set(best.match.anchors)
    w.transformations.select_row(best)
    w.preview_current()
    assert best.transformation.name in w.transformations.diff.toPlainText()
    assert w.view.marks["removed"] | w.view.marks["changed"]
    assert s.cursor == 0 and s.metrics().bytes == bytes0

    # apply: one undo command; the data-movement dock and the trend follow
    w.apply_current()
    assert s.cursor == 1 and w.stack.count() == 1
    w.refresh()
    bytes1 = s.metrics().bytes
    assert bytes1 == bytes0 - best.bytes_saved
    assert f"{bytes1 / 1e6:,.1f} MB" in w.metrics_label.text()
    assert w.movement.trend.values == [bytes0, bytes1]
    assert w.movement.model.rowCount() == len(s.graph.nodes)

    # undo, redo, a second step, revert-to
    w.actions_.undo.trigger()
    w.refresh()
    assert s.cursor == 0 and w.movement.trend.values == [bytes0]
    w.actions_.redo.trigger()
    assert s.cursor == 1 and s.metrics().bytes == bytes1
    second = next(m for m in _whole_graph_ok(w) if not set(m.match.anchors) & set(best.match.anchors))
    assert w.apply(second) and s.cursor == 2
    hash2 = graph_hash(s.graph)
    w.history.revert_to(1)
    assert s.cursor == 1 and s.can_redo() and w.stack.index() == 1
    w.history.revert_to(2)
    assert graph_hash(s.graph) == hash2

    # save, reopen in a new window with the history, replay headless
    hist = tmp_path / "tuning.json"
    w.save_history(str(hist))
    assert [st["transformation"] for st in json.loads(hist.read_text())["steps"]] == \
        [best.transformation.name, second.transformation.name]
    w2 = make_window()
    _open(qtbot, w2, bert_model, str(hist))
    assert w2.session.cursor == 2 and graph_hash(w2.session.graph) == hash2 and w2.stack.count() == 2
    assert cli_main(["replay", str(bert_model), str(hist), "--quiet"]) == 0
    assert graph_hash(w2.session.graph)[:12] in capsys.readouterr().out

    # export the replayed session through the dialog; the package's own --check passes
    export_and_check(qtbot, w2, tmp_path, "tuned_step", [best.transformation.name, second.transformation.name])


def _whole_graph_ok(w):
    from studio.gui.ranking import candidates
    from transforms import engine
    g = w.session.graph
    for t, m in candidates(g, None):
        if t.check(g, m).ok:
            yield engine.Ranked(t, m, True, "", None)


def test_stale_history_step_shows_a_dialog(qtbot, make_window, bert_model, tmp_path):
    w = make_window()
    _open(qtbot, w, bert_model)
    good = next(_whole_graph_ok(w))
    w.apply(good)
    hist = tmp_path / "h.json"
    w.save_history(str(hist))
    doc = json.loads(hist.read_text())
    doc["steps"].append({"transformation": good.transformation.name, "params": good.transformation.params(),
                         "anchors": ["/layer/no_such_node"]})
    hist.write_text(json.dumps(doc))

    w2 = make_window()
    _open(qtbot, w2, bert_model, str(hist))
    qtbot.waitUntil(lambda: bool(w2.messages), timeout=LOAD_MS)
    box = w2.messages[-1]
    text = box.text() + "\n" + box.informativeText()
    assert "step 2" in text and good.transformation.name in text and "/layer/no_such_node" in text
    assert "The 1 steps before it are applied" in text and "Traceback" not in text
    assert w2.session.cursor == 1                      # the good step stayed applied
    assert not box.isModal()
    box.close()


def test_the_selection_follows_lineage_through_apply_undo_and_redo(qtbot, make_window, bert_model):
    """A multi-selection keeps its untouched kernels across an apply, and a fused kernel takes the place of
    the selected kernels it was made from; undo gives them back, redo fuses them again."""
    from studio.session import Session
    from transforms.registry import create
    w = make_window()
    s = Session.open(bert_model, autosave=False)
    s.apply_pass("expand")
    w.set_session(s)
    qtbot.waitUntil(lambda: w.view.task is None, timeout=60_000)
    mf = create("map_fusion")
    m = next(m for m in mf.matches(s.graph) if mf.check(s.graph, m).ok)
    other = next(i for i in s.graph.nodes if i not in m.anchors and "MatMul" in i)
    w.view.select([*m.anchors, other])
    before = set(w.view.selected_ids())
    assert set(m.anchors) | {other} <= before
    assert w.apply_step("map_fusion", m.anchors)
    w.refresh()
    qtbot.waitUntil(lambda: w.view.task is None, timeout=60_000)
    app = s.application_at(s.cursor)
    fused = set(app.created + app.changed)
    assert other in w.view.selected_ids() and fused <= set(w.view.selected_ids())
    w.actions_.undo.trigger()
    w.refresh()
    qtbot.waitUntil(lambda: w.view.task is None, timeout=60_000)
    assert set(m.anchors) | {other} <= set(w.view.selected_ids())
    w.actions_.redo.trigger()
    w.refresh()
    qtbot.waitUntil(lambda: w.view.task is None, timeout=60_000)
    assert other in w.view.selected_ids() and fused <= set(w.view.selected_ids())
