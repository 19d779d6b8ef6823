"""map_fusion: matches, near misses with reasons, verify, equal outputs, Δ = recount."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from ir import lowering
from ir.onnx_import import import_proto
from transforms.registry import create
from tests.unit.ir.onnx_models import model, vi
from tests.unit.transforms.harness import assert_applies, assert_fails

F32 = 4


def _chain(extra_reader: bool = False):
    """x[8,16] + b[16] -> h; gelu(h) -> y (and optionally h also read by Neg -> z)."""
    b = numpy_helper.from_array(np.linspace(-1, 1, 16).astype(np.float32), "b")
    nodes = [helper.make_node("Add", ["x", "b"], ["h"], name="add"),
             helper.make_node("Tanh", ["h"], ["y"], name="act")]
    outs = [vi("y", [8, 16])]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["h"], ["z"], name="neg"))
        outs.append(vi("z", [8, 16]))
    g = import_proto(model(nodes, [vi("x", [8, 16])], outs, [b]))
    lowering.expand_all(g)
    return g


def test_matches_producer_consumer_pairs():
    g = _chain()
    t = create("map_fusion")
    assert [m.anchors for m in t.matches(g)] == [("add/expanded", "act/expanded")]


def test_fuses_and_the_intermediate_costs_nothing():
    g = _chain()
    t = create("map_fusion")
    app, work = assert_applies(g, t, t.match("add/expanded", "act/expanded"))
    assert app.created == ("fused:add/expanded",) and set(app.removed) == {"add/expanded", "act/expanded"}
    assert "h" not in work.containers                   # the intermediate became a local
    assert app.delta.bytes == -2 * 8 * 16 * F32           # h's write and its read disappear
    assert app.delta.flops == 0


def test_intermediate_with_other_readers_is_still_stored():
    g = _chain(extra_reader=True)
    t = create("map_fusion")
    app, work = assert_applies(g, t, t.match("add/expanded", "act/expanded"))
    assert "h" in work.containers and work.producer("h").id == "fused:add/expanded"
    assert app.delta.bytes == -8 * 16 * F32               # only the consumer's read of h is saved


def test_near_miss_library_node_is_named():
    g = import_proto(model([helper.make_node("Relu", ["x"], ["h"], name="r"),
                            helper.make_node("Relu", ["h"], ["y"], name="s")],
                           [vi("x", [4])], [vi("y", [4])]))
    lowering.expand_node(g, "s")
    assert_fails(g, create("map_fusion"), create("map_fusion").match("r", "s/expanded"),
                 "'r' is a library node", "expand it first")


def test_near_miss_different_iteration_spaces():
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="r"),
             helper.make_node("ReduceSum", ["h"], ["y"], name="sum", keepdims=0)]
    g = import_proto(model(nodes, [vi("x", [4, 3])], [vi("y", [])], opset=17))
    lowering.expand_all(g)
    reason = assert_fails(g, create("map_fusion"), create("map_fusion").match("r/expanded", "sum/expanded"))
    assert "iteration spaces" in reason or "point" in reason


def test_near_miss_cycle_through_another_kernel():
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="p"),
             helper.make_node("MatMul", ["h", "h"], ["m"], name="mm"),
             helper.make_node("Add", ["h", "m"], ["y"], name="c")]
    g = import_proto(model(nodes, [vi("x", [4, 4])], [vi("y", [4, 4])]))
    lowering.expand_all(g)
    assert_fails(g, create("map_fusion"), create("map_fusion").match("p/expanded", "c/expanded"),
                 "depends on", "cycle")


def test_chain_of_three_fuses_to_one_kernel():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"), helper.make_node("Neg", ["a"], ["b"], name="b"),
             helper.make_node("Exp", ["b"], ["y"], name="c")]
    g = import_proto(model(nodes, [vi("x", [3, 5])], [vi("y", [3, 5])]))
    lowering.expand_all(g)
    t = create("map_fusion")
    _, g1 = assert_applies(g, t, t.match("a/expanded", "b/expanded"))
    _, g2 = assert_applies(g1, t, t.match("fused:a/expanded", "c/expanded"))
    assert list(g2.nodes) == ["fused:a/expanded"]


def _same_local_names():
    """x → Neg → ``p/Mul`` → Exp → ``q/Mul``; y = ``q/Mul`` + ``p/Mul``: both intermediates end
    in ``Mul``, so the local made for each is ``_Mul`` (the names a LayerNorm-backward chain and
    a Pow-backward chain produced in the ViT and GPT-2 training steps)."""
    nodes = [helper.make_node("Neg", ["x"], ["p/Mul"], name="p"), helper.make_node("Exp", ["p/Mul"], ["q/Mul"], name="q"),
             helper.make_node("Add", ["q/Mul", "p/Mul"], ["y"], name="r")]
    g = import_proto(model(nodes, [vi("x", [3, 5])], [vi("y", [3, 5])]))
    lowering.expand_all(g)
    return g


def test_a_consumer_local_named_like_the_new_local_is_renamed():
    """Regression (issue 10): fusing P into a consumer that already holds a local ``_Mul`` made a
    second ``_Mul`` for the shared container, and the two aliased: y became 2·exp(-x), not
    exp(-x) - x, with no error (``assert_applies`` compares the outputs)."""
    g = _same_local_names()
    t = create("map_fusion")
    _, g1 = assert_applies(g, t, t.match("q/expanded", "r/expanded"))
    assert "_Mul" in g1.nodes["fused:q/expanded"].locals
    _, g2 = assert_applies(g1, t, t.match("p/expanded", "fused:q/expanded"))
    fused = g2.nodes["fused:p/expanded"]
    assert len(fused.locals) == 2 and "_Mul" in fused.locals

