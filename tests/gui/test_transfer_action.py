"""Edit → Repeat on equal layers (``qt_transfer``): after steps inside one layer of a 3-layer BERT
built here, the action pushes one undoable transfer step that makes the equal layers look like the
tuned one; undo takes it back; with nothing to repeat, the window says why."""
from __future__ import annotations

import pytest

from studio.session import Session
from tests.peer.hf_style_models import save_bert_stack
from transforms.layers import Family, equal_group, layer_hash, layer_of


@pytest.fixture(scope="module")
def stack_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("stack") / "bert3.onnx"
    save_bert_stack(path, layers=3)
    return path


def test_repeat_on_equal_layers(make_window, stack_model, monkeypatch):
    said = []
    w = make_window()
    monkeypatch.setattr(w, "say", lambda text, **kw: said.append((text, kw.get("detail", ""))))
    s = Session.open(stack_model, training={"loss": "mse", "optimizer": "adamw"}, autosave=False)
    w.set_session(s)
    w.actions_.repeat_layers.trigger()                  # nothing applied yet
    assert said and said[-1][0] == "The last step is not inside one layer"
    family = Family("layer")
    first, others = equal_group(s.graph, family)
    kernels = [i for i in s.graph.nodes if layer_of(i) == (family, first) and s.graph.nodes[i].op_type == "Softmax"]
    assert kernels and w.apply_step("expand", [kernels[0]])
    assert "Repeat on equal layers" in w.statusBar().currentMessage()
    before, kernels_before = s.metrics().bytes, set(s.graph.nodes)
    w.actions_.repeat_layers.trigger()
    assert s.steps[-1].is_transfer and s.cursor == 2 and w.stack.count() == 2
    assert w.stack.text(1).startswith("repeat on equal layers ×") and set(s.graph.nodes) != kernels_before
    for k in others:
        assert layer_hash(s.graph, family, k) == layer_hash(s.graph, family, first)
    w.actions_.undo.trigger()
    assert s.cursor == 1 and s.metrics().bytes == before
    w.actions_.redo.trigger()
    assert s.cursor == 2 and s.steps[-1].is_transfer
