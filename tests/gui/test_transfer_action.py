"""Edit → Repeat on equal layers (``qt_transfer``): after steps inside one layer of a 3-layer BERT
built here, the action pushes one undoable transfer step that makes the equal layers look like the
tuned one; undo takes it back; with nothing to repeat, the window says why."""
from __future__ import annotations

from PySide6.QtCore import Qt

from studio.session import Session
from transforms.layers import Family, equal_group, equal_layers, layer_hash, layer_of, layers


def test_repeat_on_equal_layers(make_window, bert3_stack, qtbot, monkeypatch):
    said = []
    w = make_window()
    monkeypatch.setattr(w, "say", lambda text, **kw: said.append((text, kw.get("detail", ""))))
    s = Session.open(bert3_stack, training={"loss": "mse", "optimizer": "adamw"}, autosave=False)
    w.set_session(s)
    w.actions_.repeat_layers.trigger()                  # nothing applied yet
    assert said and said[-1][0] == "The last step is not inside one layer"
    family = Family("layer")
    first, others = equal_group(s.graph, family)
    kernels = [i for i in s.graph.nodes if layer_of(i) == (family, first) and s.graph.nodes[i].op_type == "Softmax"]
    assert kernels and w.apply_step("expand", [kernels[0]])
    assert "Repeat on equal layers" in w.statusBar().currentMessage()
    before, kernels_before = s.metrics().bytes, set(s.graph.nodes)
    w.actions_.repeat_layers.trigger()                  # worked out on a worker, recorded on the GUI thread
    assert s.cursor == 1 and w._transfer_task is not None
    qtbot.waitUntil(lambda: w._transfer_task is None, timeout=60_000)
    w.refresh()
    from studio.gui.scope_tree import ScopeTree
    from tests.gui.test_scope_tree import tree_value
    assert w.view.graph is s.graph and tree_value(w.view.tree) == tree_value(ScopeTree(s.graph)), \
        "the tree the worker derived for the view is the tree of the new graph"
    assert s.steps[-1].is_transfer and s.cursor == 2 and w.stack.count() == 2
    assert w.stack.text(1).startswith("repeat on equal layers ×") and set(s.graph.nodes) != kernels_before
    for k in others:
        assert layer_hash(s.graph, family, k) == layer_hash(s.graph, family, first)
    w.actions_.undo.trigger()
    assert s.cursor == 1 and s.metrics().bytes == before
    w.actions_.redo.trigger()
    assert s.cursor == 2 and s.steps[-1].is_transfer


def test_a_row_for_equal_layers_applies_on_all_of_them(make_window, bert3_stack, qtbot, monkeypatch):
    """The Whole graph listing shows a match of equal layers once, "× N" with the N layers' bytes; Apply
    on it applies the match and repeats it on the other layers as one undoable macro."""
    said = []
    w = make_window()
    monkeypatch.setattr(w, "say", lambda text, **kw: said.append((text, kw.get("detail", ""))))
    s = Session.open(bert3_stack, training={"loss": "mse", "optimizer": "adamw"}, autosave=False)
    w.set_session(s)
    w.ranker.schedule(0)
    qtbot.waitUntil(lambda: any(r.copies and r.delta is not None for r in w.transformations.rows()), timeout=120_000)
    r = next(r for r in w.transformations.rows() if r.ok and r.copies and r.bytes_saved > 0)
    item = next(it for k in range(w.transformations.tree.topLevelItemCount())
                for it in [w.transformations.tree.topLevelItem(k).child(j)
                           for j in range(w.transformations.tree.topLevelItem(k).childCount())]
                if it.data(0, Qt.ItemDataRole.UserRole) is r)
    n = 1 + len(r.copies)
    assert item.text(0) == f"{r.transformation.name} × {n}" and "per layer" in item.toolTip(2)
    before = s.metrics().bytes
    w.transformations.select_row(r)
    w.transformations.apply_button.click()
    qtbot.waitUntil(lambda: w._transfer_task is None, timeout=60_000)
    assert not said, said
    assert s.cursor == 2 and s.steps[-1].is_transfer and w.stack.count() == 1
    assert before - s.metrics().bytes == r.total_saved
    family, first = layer_of(r.match.anchors[0])
    for m in r.copies:
        assert layer_hash(s.graph, family, layer_of(m.anchors[0])[1]) == layer_hash(s.graph, family, first)
    w.actions_.undo.trigger()
    assert s.cursor == 0 and s.metrics().bytes == before and w.stack.index() == 0


def test_a_failed_row_for_equal_layers_leaves_the_session_as_it_was(make_window, bert3_stack, qtbot, monkeypatch):
    """When the match of a "× N" row no longer applies (its kernel is gone), nothing is applied, the steps
    before stay, and the undo stack is as it was."""
    from dataclasses import replace
    from transforms.base import Match
    said = []
    w = make_window()
    monkeypatch.setattr(w, "say", lambda text, **kw: said.append(text))
    s = Session.open(bert3_stack, training={"loss": "mse", "optimizer": "adamw"}, autosave=False)
    w.set_session(s)
    from transforms.registry import create
    expand = create("expand")
    outside = next(m for m in expand.matches(s.graph) if layer_of(m.anchors[0]) is None)
    assert w.apply_step("expand", outside.anchors)                 # a step before, outside the layers
    w.ranker.schedule(0)
    qtbot.waitUntil(lambda: any(r.copies and r.delta is not None for r in w.transformations.rows()), timeout=120_000)
    r = next(r for r in w.transformations.rows() if r.ok and r.copies)
    gone = replace(r, match=Match(r.match.transformation, ("/layer.0/no-such-kernel",), r.match.label))
    steps, index, moved = s.cursor, w.stack.index(), s.metrics().bytes
    assert w.apply(gone)
    qtbot.waitUntil(lambda: w._transfer_task is None and bool(said), timeout=60_000)
    assert "could not be applied" in said[-1]
    assert s.cursor == steps == 1 and w.stack.index() == index and w.stack.count() == index
    assert s.metrics().bytes == moved and s.steps[0].transformation == "expand"


def test_a_failed_repeat_undoes_only_its_own_apply(make_window, bert3_stack, qtbot, monkeypatch):
    """The row's match applies, then repeating it fails (a layer that is not equal): the macro's undo takes
    back that apply only, never the step before it."""
    from dataclasses import replace
    from transforms.base import Match
    from transforms.registry import create
    said = []
    w = make_window()
    monkeypatch.setattr(w, "say", lambda text, **kw: said.append(text))
    s = Session.open(bert3_stack, training={"loss": "mse", "optimizer": "adamw"}, autosave=False)
    w.set_session(s)
    outside = next(m for m in create("expand").matches(s.graph) if layer_of(m.anchors[0]) is None)
    assert w.apply_step("expand", outside.anchors)
    w.ranker.schedule(0)
    qtbot.waitUntil(lambda: any(r.copies and r.delta is not None for r in w.transformations.rows()), timeout=120_000)
    r = next(r for r in w.transformations.rows() if r.ok and r.copies)
    family, here = layer_of(r.match.anchors[0])
    unequal = next(k for k in layers(s.graph)[family] if k != here and k not in equal_layers(s.graph, family, here))
    bad = replace(r, copies=(Match(r.match.transformation, tuple(family.rename(a, here, unequal)
                                                                for a in r.match.anchors), r.match.label),))
    moved = s.metrics().bytes
    assert w.apply(bad)
    qtbot.waitUntil(lambda: w._transfer_task is None and bool(said), timeout=60_000)
    assert "could not be applied on the equal layers" in said[-1]
    assert s.cursor == 1, (s.cursor, w.stack.index(), w.stack.count(), [w.stack.text(k) for k in range(w.stack.count())])
    assert s.steps[0].anchors == outside.anchors and s.metrics().bytes == moved
    assert w.stack.index() == 1 and w.stack.count() == 1


def test_a_repeat_worked_out_before_an_edit_is_refused_not_recorded(make_window, bert3_stack, monkeypatch):
    """The transfer is planned on a worker; when the session moves on before it is recorded (the user applied
    something meanwhile), the window says so and records nothing: the session keeps the user's edit."""
    from studio.gui import qt_transfer
    from studio.gui.jobs import CancelToken
    from transforms.registry import create
    said = []
    w = make_window()
    monkeypatch.setattr(w, "say", lambda text, **kw: said.append((text, kw.get("detail", ""))))
    s = Session.open(bert3_stack, training={"loss": "mse", "optimizer": "adamw"}, autosave=False)
    w.set_session(s)
    family = Family("layer")
    first, _others = equal_group(s.graph, family)
    kernels = [i for i in s.graph.nodes if layer_of(i) == (family, first) and s.graph.nodes[i].op_type == "Softmax"]
    assert w.apply_step("expand", [kernels[0]])
    planned = qt_transfer._plan(s, family.key(first), 1, None, None, CancelToken(), lambda *a: None)
    assert planned is not None and planned[-1].cursor == 1
    edit = next(m for m in create("expand").matches(s.graph))
    assert w.apply_step("expand", edit.anchors)         # the user's edit, after the plan was made
    assert not qt_transfer._push_repeat(w, family.key(first), 1, planned)
    assert "Could not repeat" in said[-1][0] and "changed since" in said[-1][1]
    assert s.cursor == 2 and s.steps[-1].anchors == edit.anchors and w.stack.count() == 2
