"""expand: lowering an op into a map keeps outputs and bytes; library nodes give a reason."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from ir.nodes import MapNode
from ir.onnx_import import import_proto
from tests.unit.ir.onnx_models import model, vi
from tests.unit.transforms.harness import assert_applies, assert_fails
from transforms.registry import create


def _graph():
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((6, 6)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Softmax", ["h"], ["y"], name="sm", axis=-1)]
    return import_proto(model(nodes, [vi("x", [4, 6])], [vi("y", [4, 6])], [w]))


def test_matches_expandable_ops_only():
    assert [m.anchors for m in create("expand").matches(_graph())] == [("sm",)]


def test_expand_keeps_outputs_and_bytes():
    g = _graph()
    t = create("expand")
    app, work = assert_applies(g, t, t.match("sm"))
    assert isinstance(work.nodes["sm/expanded"], MapNode) and app.created == ("sm/expanded",)
    assert app.delta.bytes == 0 and app.delta.flops == 0       # op-level FLOPs come from the expansion
    assert work.nodes["sm/expanded"].provenance == ("expand", 1)


def test_online_implementation():
    g = _graph()
    t = create("expand", {"impl": "online"})
    app, work = assert_applies(g, t, t.match("sm"))
    assert app.delta.bytes == 0 and app.delta.flops > 0        # one sweep, more arithmetic per element


def test_near_misses_name_the_node():
    g = _graph()
    assert_fails(g, create("expand"), create("expand").match("mm"), "'mm' (MatMul", "library call")
    assert_fails(g, create("expand", {"impl": "blocked"}), create("expand").match("sm"),
                 "has no implementation 'blocked'", "two_pass")
    assert_fails(g, create("expand"), create("expand").match("ghost"), "no node 'ghost'")


def test_predicted_delta_is_the_trial_delta():
    """``Expand.predict`` (the map's figures less the op's, without a graph copy) equals the Δ of applying
    the match to a copy, for every expandable op of the bundled BERT training step."""
    from ir.onnx_import import import_model
    from transforms import engine
    from transforms.registry import create
    g = import_model("resources/examples/bert_layer_base_train.onnx")
    t = create("expand")
    found = list(t.matches(g))
    assert len(found) > 100
    for m in found:
        assert t.predict(g, m) == engine.trial(g, t, m)[0].delta, m.anchors
        assert engine.rank_one(g, t, m).delta == t.predict(g, m)
