"""Transfer tuning (``transforms.layers``, ``transforms.transfer``, ``Session.transfer``,
``studio.session.recipe.tune_one_layer``) on a 3-layer Hugging Face-style BERT built here and exported by
the TorchScript exporter, trained with MSE + AdamW: layers are found and compared structurally,
tuning one layer and transferring gives the bytes of the whole-graph recipe, the history replays
to the same graph, and the result still matches the original model."""
from __future__ import annotations

from dataclasses import replace

import pytest

from ir.errors import StudioError
from studio.session.recipe import run_recipe, tune_one_layer
from studio.session import Session
from transforms.layers import Family, equal_group, layer_hash, layer_of, layers, parse_key
from transforms.replay import replay

TRAINING = {"loss": "mse", "optimizer": "adamw"}


def _session(model) -> Session:
    return Session.open(model, training=TRAINING, autosave=False)


def test_layer_names_and_renaming():
    assert layer_of("grad//layer.3/attention/Softmax") == (Family("layer"), 3)
    assert layer_of("update/encoder.layer.11.attention.self.query.bias/Sub") == (Family("layer"), 11)
    assert layer_of("/layer1/layer1.0/conv1/Conv") == (Family("layer1"), 0)
    assert layer_of("/encoder/Add_1") is None and layer_of("onnx::Unsqueeze_184") is None
    f = Family("layer")
    assert f.rename("fused:/layer.1/Add encoder.layer.1.w layer.12/x xlayer.1", 1, 4) == \
        "fused:/layer.4/Add encoder.layer.4.w layer.12/x xlayer.1"
    assert parse_key("layer.3") == (f, 3)
    with pytest.raises(StudioError, match="not a layer name"):
        parse_key("layer")


def test_layers_are_found_and_compared_structurally(bert3_stack):
    g = _session(bert3_stack).graph
    family = Family("layer")
    groups = layers(g)[family]
    assert sorted(groups) == [0, 1, 2] and all(len(v) > 50 for v in groups.values())
    first, others = equal_group(g, family)
    assert len(others) >= 1
    h = {k: layer_hash(g, family, k) for k in groups}
    assert all(h[k] == h[first] for k in others)
    # one changed kernel makes a layer unequal
    s = _session(bert3_stack)
    victim = next(i for i in layers(s.graph)[family][others[-1]] if s.graph.nodes[i].op_type == "Softmax")
    s.apply("expand", [victim])
    assert layer_hash(s.graph, family, others[-1]) != layer_hash(s.graph, family, first)
    assert family.key(others[-1]) not in s.equal_layers(family.key(first))


def test_kept_kernel_parts_give_the_hash_a_fresh_computation_gives(bert3_stack):
    """``layer_hash`` keeps each kernel's part (``_piece``): through two expands and their undos in the
    layer, the hash equals one computed with nothing kept, and the edit changes it."""
    import transforms.layers as layers_mod
    from transforms.registry import create
    s = _session(bert3_stack)
    family = Family("layer")

    def fresh(k: int) -> str:
        kept = dict(layers_mod._PIECES)
        layers_mod._PIECES.clear()
        try:
            return layer_hash(s.graph, family, k)
        finally:
            layers_mod._PIECES.update(kept)

    before = layer_hash(s.graph, family, 1)
    victim = next(i for i in layers(s.graph)[family][1] if s.graph.nodes[i].op_type == "Softmax")
    s.apply("expand", [victim])
    after_expand = layer_hash(s.graph, family, 1)
    assert after_expand != before and after_expand == fresh(1)
    expand = create("expand")
    m = next(m for m in expand.matches(s.graph, layers(s.graph)[family][1]) if expand.check(s.graph, m).ok)
    s.apply("expand", m.anchors)
    assert layer_hash(s.graph, family, 1) == fresh(1) != after_expand
    s.undo()
    assert layer_hash(s.graph, family, 1) == after_expand == fresh(1)
    s.undo()
    assert layer_hash(s.graph, family, 1) == before


def test_tune_one_layer_matches_the_whole_graph_recipe_and_replays(bert3_stack):
    plain, tuned = _session(bert3_stack), _session(bert3_stack)
    run_recipe(plain)
    counts = tune_one_layer(tuned)
    assert counts.get("transfer", 0) > 0
    steps = tuned.steps
    transfers = [s for s in steps if s.is_transfer]
    assert len(transfers) == 1 and transfers[0].params["layer"] in {"layer.0", "layer.1"}
    assert any(s.scope for s in steps if s.is_pass)
    a, b = plain.metrics().bytes, tuned.metrics().bytes
    assert abs(b - a) <= 0.01 * a, (a, b)
    # replay on a fresh import: the same graph (hash), every step verified
    fresh = _session(bert3_stack).graph
    reports = replay(fresh, tuned.history())
    assert reports[-1].graph_hash == steps[-1].graph_hash and reports[-1].bytes == b
    result = tuned.validate()
    assert result.ok, result.summary


def test_transfer_in_a_session_is_one_undoable_step(bert3_stack):
    s = _session(bert3_stack)
    family = Family("layer")
    first, others = equal_group(s.graph, family)
    layer = family.key(first)
    s.apply_pass("expand", scope=layer)
    s.apply_pass("map_fusion", scope=layer)
    before = s.metrics().bytes
    app = s.transfer(layer, 2)
    assert s.cursor == 3 and s.steps[-1].is_transfer and s.steps[-1].params["to"] == [family.key(k) for k in others]
    assert s.metrics().bytes < before and app.removed and app.created
    for k in others:                          # the targets now look like the tuned layer
        assert layer_hash(s.graph, family, k) == layer_hash(s.graph, family, first)
    s.undo()
    assert s.metrics().bytes == before
    with pytest.raises(StudioError, match="ran on the whole graph, not on layer"):
        t = _session(bert3_stack)
        t.apply_pass("expand")
        t.transfer(layer, 1)
    with pytest.raises(StudioError, match="not structurally equal"):
        s.transfer(layer, 2, to=["layer.7"])


def test_planned_steps_change_nothing_until_committed_and_a_stale_plan_is_refused(bert3_stack):
    """``plan_apply`` and ``plan_transfer`` (a GUI worker's half) leave the session as it is; ``commit`` records
    them exactly as ``apply`` then ``transfer`` would (same graph hash and bytes), and refuses a plan made on a
    state the session has left."""
    from transforms.registry import create
    s, t = _session(bert3_stack), _session(bert3_stack)
    family = Family("layer")
    first, others = equal_group(s.graph, family)
    layer = family.key(first)
    softmax = next(i for i in s.graph.nodes if layer_of(i) == (family, first) and s.graph.nodes[i].op_type == "Softmax")
    graph, kernels = s.graph, s.metrics().kernels
    applied = s.plan_apply("expand", [softmax])
    repeat = s.plan_transfer(layer, 1, after=applied)
    assert s.cursor == 0 and s.graph is graph and s.metrics().kernels == kernels, "planning changed the session"
    assert repeat.step.params["to"] == [family.key(k) for k in others] and repeat.cursor == 1
    s.commit(applied)
    s.commit(repeat)
    t.apply("expand", [softmax])
    t.transfer(layer, 1)
    assert [x.graph_hash for x in s.steps] == [x.graph_hash for x in t.steps]
    assert s.metrics() == t.metrics() and set(s.graph.nodes) == set(t.graph.nodes) != set(graph.nodes)
    s.undo()
    stale = s.plan_apply(*next((m.transformation, m.anchors) for m in create("expand").matches(s.graph)))
    s.undo()
    with pytest.raises(StudioError, match=r"worked out on step 1, and the session has changed since \(now at step 0\)"):
        s.commit(stale)
    assert s.cursor == 0 and s.can_redo()


def test_a_transfer_that_no_longer_fits_names_the_layer_and_step(bert3_stack, tmp_path):
    s = _session(bert3_stack)
    family = Family("layer")
    first, others = equal_group(s.graph, family)
    layer = family.key(first)
    s.apply_pass("expand", scope=layer)
    s.transfer(layer, 1)
    hist = s.history()
    g = _session(bert3_stack).graph
    target = family.key(others[0])
    victim = next(i for i in g.nodes if layer_of(i) == (family, others[0]) and g.nodes[i].op_type == "Softmax")
    from transforms import engine
    from transforms.registry import create
    engine.apply(g, create("expand"), create("expand").match(victim))   # the target layer differs now
    unchecked = hist.with_steps([replace(hist.steps[0], graph_hash=None), hist.steps[1]])
    with pytest.raises(StudioError, match=r"step 2 \(transfer\): the transfer applied \d+ times, \d+ when"):
        replay(g, unchecked)
    assert target in s.steps[1].params["to"]
    bad = hist.with_steps([hist.steps[1]])                 # a transfer with nothing before it
    with pytest.raises(StudioError, match="repeats the 1 steps before it, but only 0"):
        replay(_session(bert3_stack).graph, bad)
