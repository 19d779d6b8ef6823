"""The Outline dock (``outline``, ``qt_outline``) on a 3-layer BERT built here: one row per layer plus the
kernels outside layers, each split into forward, grad and update with kernels, bytes and share; the rows
cover every kernel once; the filter hides other layers; a click selects and frames a layer's kernels."""
from __future__ import annotations

from PySide6.QtCore import Qt

from studio.gui.outline import OUTSIDE, outline, phase_of
from studio.session import Session
from transforms.phases import forward_kernels


def test_the_outline_covers_every_kernel_by_layer_and_phase(bert3_stack):
    s = Session.open(bert3_stack, training={"loss": "mse", "optimizer": "adamw"}, autosave=False)
    rows = outline(s.graph, s.ledger)
    assert [r.label for r in rows] == ["layer 0", "layer 1", "layer 2", OUTSIDE]
    kernels = [i for r in rows for c in r.children for i in c.kernels]
    assert sorted(kernels) == sorted(s.graph.nodes)
    assert abs(sum(r.share for r in rows) - 1) < 1e-9 and sum(r.bytes for r in rows) == s.ledger.total.bytes
    layer = rows[1]
    assert [c.label for c in layer.children] == ["forward", "grad", "update"]
    update = layer.children[2]
    assert all(any(s.graph.containers[m.container].role.value in ("parameter", "optimizer_state")
                   for m in s.graph.nodes[i].outputs if m is not None) for i in update.kernels)
    forward = forward_kernels(s.graph)
    assert set(layer.children[0].kernels) <= forward and not set(layer.children[1].kernels) & forward
    assert all(phase_of(s.graph, i, forward) == "grad" for i in layer.children[1].kernels)


def test_the_outline_dock_filters_and_frames_a_layer(qtbot, make_window, bert3_stack):
    w = make_window()
    s = Session.open(bert3_stack, training={"loss": "mse", "optimizer": "adamw"}, autosave=False)
    w.set_session(s)
    w.outline.show()
    w.outline.raise_()
    qtbot.waitUntil(lambda: w.outline.tree.topLevelItemCount() == 4, timeout=30_000)
    top = [w.outline.tree.topLevelItem(k) for k in range(4)]
    assert [t.text(0) for t in top] == ["layer 0", "layer 1", "layer 2", OUTSIDE]
    assert top[1].childCount() == 3 and top[1].text(4).endswith("%")
    tree = w.outline.tree                                  # before: Bytes, Time and Share were cut at the edge
    assert tree.isColumnHidden(3), "no profile yet: no Time column"
    shown = sum(tree.columnWidth(c) for c in range(5) if not tree.isColumnHidden(c))
    assert shown <= tree.viewport().width() + 2, (shown, tree.viewport().width())
    w.outline.filter.setText("layer 1")
    assert [t.isHidden() for t in top] == [True, False, True, True]
    qtbot.waitUntil(lambda: w.view.task is None, timeout=60_000)
    w.outline.tree.itemClicked.emit(top[1], 0)
    row = top[1].data(0, Qt.ItemDataRole.UserRole)
    assert set(w.view.selected_ids()) == set(row.kernels)


def test_a_model_without_repeated_layers_is_one_row_by_phase():
    from studio.gui.outline import WHOLE
    s = Session.open("resources/examples/bert_layer_base_train.onnx", autosave=False)
    rows = outline(s.graph, s.ledger)
    assert [r.label for r in rows] == [WHOLE] and [c.label for c in rows[0].children] == ["forward", "grad", "update"]
    assert len(rows[0].kernels) == len(s.graph.nodes) and abs(rows[0].share - 1) < 1e-9


def test_a_fit_of_the_stacked_step_fills_the_canvas_with_named_layer_plates(qtbot, make_window, tmp_path):
    """Issue 38: the view stacks each layer's forward, grad and update in a plate named "layer k", and lays the
    root out as a grid the shape of the view: a Fit of a 6-layer step covers at least 60 % of the canvas (one
    wide update strip beside thin columns left about 90 % of it empty); the plates read "layer 1", never "1"."""
    from studio.gui.overview import canvas_use
    from studio.gui.scope_tree import OUTSIDE_LAYERS, STACKED
    from tests.peer.hf_style_models import save_bert_stack
    save_bert_stack(tmp_path / "bert6.onnx", layers=6)
    w = make_window()
    w.resize(1500, 950)
    s = Session.open(tmp_path / "bert6.onnx", training={"loss": "mse", "optimizer": "adamw"}, autosave=False)
    w.set_session(s)
    v = w.view
    qtbot.waitUntil(lambda: v.task is None and v.placement is not None and v.placement.exact, timeout=60_000)
    v.fit()
    port = v.viewport()
    used = canvas_use(v.placement, v.transform().m11(), port.width(), port.height())
    assert used >= 0.6, used
    frames = [v.tree.label(k) for k in v.placement.frames if v.placement.frames[k].depth == 1]
    assert sorted(frames) == [f"layer {k}" for k in range(6)]
    inner = {v.tree.label(k) for k in v.placement.boxes if k.startswith(STACKED)}
    assert inner == {"forward", "grad", "update", OUTSIDE_LAYERS}, "the rest of the step: one box, last"
    rows = {round(f.y) for f in v.placement.frames.values() if f.depth == 1}
    assert len(rows) <= 3, "the layers share rows: not one thin column"
    names = {name for _key, _rect, name, _line in v.plates()}
    assert not names or names <= {*frames, "forward", "grad", "update", OUTSIDE_LAYERS}
    w.actions_.stack_layers.setChecked(False)             # View → Stack layers, off: grouped by names alone
    qtbot.waitUntil(lambda: v.task is None and v.placement is not None, timeout=60_000)
    assert not v.tree.stacked and not any(k.startswith(STACKED) for k in v.tree.groups)
    w.actions_.stack_layers.setChecked(True)
    assert v.tree.stacked and w.actions_.stack_layers in w.actions()
