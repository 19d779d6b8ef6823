"""transpose_elimination: GEMM flags, producer/consumer folds, maps, composition, Einsum, BERT figures."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import helper, numpy_helper

from ir import lowering
from ir.onnx_import import import_model, import_proto
from ir.printer import node_to_text
from tests.unit.ir.onnx_models import vi
from tests.unit.transforms.harness import assert_applies, assert_fails
from transforms import engine
from transforms.registry import create

F32 = 4
BERT = Path(__file__).resolve().parents[3] / "resources" / "examples" / "bert_layer_base_train.onnx"


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def _rand(name, shape, seed=0):
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name)


def _weight_graph():
    """Wt = W[6,8]ᵀ read by MatMul(x, Wt) and FusedMatMul(dy, Wt, transB=1) (a Linear fwd + bwd)."""
    nodes = [helper.make_node("Transpose", ["W"], ["Wt"], name="T", perm=[1, 0]),
             helper.make_node("MatMul", ["x", "Wt"], ["y"], name="mm"),
             helper.make_node("FusedMatMul", ["dy", "Wt"], ["dx"], name="g", domain="com.microsoft", transB=1)]
    return import_proto(_model(nodes, [vi("x", [2, 3, 8]), vi("dy", [2, 3, 6])],
                               [vi("y", [2, 3, 6]), vi("dx", [2, 3, 8])], [_rand("W", (6, 8))]))


def test_matches_every_transpose():
    g = _weight_graph()
    t = create("transpose_elimination")
    assert [m.anchors for m in t.matches(g)] == [("T",)]
    assert [m.anchors for m in t.matches(g, within=["mm"])] == []


def test_weight_transpose_folds_into_gemm_flags():
    g = _weight_graph()
    t = create("transpose_elimination")
    app, work = assert_applies(g, t, t.match("T"))
    assert app.removed == ("T",) and set(app.changed) == {"mm", "g"}
    mm, gr = work.nodes["mm"], work.nodes["g"]
    assert (mm.op_type, mm.domain, mm.attrs, mm.input_names()) == ("FusedMatMul", "com.microsoft", {"transB": 1},
                                                                  ["x", "W"])
    assert (gr.op_type, gr.attrs, gr.input_names()) == ("MatMul", {}, ["dy", "W"])
    assert "Wt" not in work.containers
    assert app.delta.bytes == -2 * 8 * 6 * F32               # the transposed copy's write and read


def test_gradient_transpose_folds_into_its_producer_gemm():
    nodes = [helper.make_node("Gemm", ["A", "B"], ["Ct"], name="gemm", transA=1),
             helper.make_node("Transpose", ["Ct"], ["C"], name="T", perm=[1, 0]),
             helper.make_node("Relu", ["C"], ["y"], name="r")]
    g = import_proto(_model(nodes, [vi("A", [5, 4]), vi("B", [5, 3])], [vi("y", [3, 4])]))
    t = create("transpose_elimination")
    app, work = assert_applies(g, t, t.match("T"))
    gemm = work.nodes["gemm"]
    assert gemm.input_names() == ["B", "A"] and gemm.attrs == {"transA": 1} and gemm.output_names() == ["C"]
    assert app.changed == ("gemm",) and app.delta.bytes == -2 * 3 * 4 * F32


def test_map_producer_writes_permuted_indices():
    nodes = [helper.make_node("Add", ["x", "b"], ["h"], name="add"),
             helper.make_node("Transpose", ["h"], ["ht"], name="T", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["ht", "w"], ["y"], name="mm")]
    g = import_proto(_model(nodes, [vi("x", [2, 3, 4]), vi("b", [4]), vi("w", [3, 5])], [vi("y", [2, 4, 5])]))
    lowering.expand_all(g)
    t = create("transpose_elimination")
    app, work = assert_applies(g, t, t.match("T/expanded"))
    text = node_to_text(work.nodes["add/expanded"])
    assert "ht[i0, i2, i1] = (x[i0, i1, i2] + b[i2])" in text and "h" not in work.containers
    assert app.delta.bytes == -2 * 2 * 3 * 4 * F32


def test_map_consumers_read_permuted_indices():
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], name="T", perm=[1, 0]),
             helper.make_node("Relu", ["xt"], ["y"], name="r"),
             helper.make_node("Neg", ["xt"], ["z"], name="n")]
    g = import_proto(_model(nodes, [vi("x", [3, 5])], [vi("y", [5, 3]), vi("z", [5, 3])]))
    lowering.expand_all(g)
    t = create("transpose_elimination")
    app, work = assert_applies(g, t, t.match("T/expanded"))
    assert "x[i1, i0]" in node_to_text(work.nodes["r/expanded"]) and set(app.changed) == {"r/expanded", "n/expanded"}
    assert app.delta.bytes == -2 * 3 * 5 * F32


def test_transposes_compose_and_an_identity_vanishes():
    nodes = [helper.make_node("Transpose", ["x"], ["a"], name="T1", perm=[1, 2, 0]),
             helper.make_node("Transpose", ["a"], ["b"], name="T2", perm=[2, 0, 1]),     # undoes T1
             helper.make_node("Transpose", ["a"], ["c"], name="T3", perm=[0, 2, 1]),
             helper.make_node("Relu", ["b"], ["y"], name="r")]
    g = import_proto(_model(nodes, [vi("x", [2, 3, 4])], [vi("y", [2, 3, 4]), vi("c", [3, 2, 4])]))
    t = create("transpose_elimination")
    app, work = assert_applies(g, t, t.match("T1"))
    assert set(app.removed) == {"T1", "T2"} and work.nodes["r"].input_names() == ["x"]
    assert work.nodes["T3"].attrs["perm"] == [1, 0, 2] and work.nodes["T3"].input_names() == ["x"]
    assert app.delta.bytes == -2 * 2 * (2 * 3 * 4 * F32)     # two transposed copies gone


def test_batch_transpose_becomes_a_trans_batch_flag():
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], name="T", perm=[1, 0, 2]),
             helper.make_node("MatMul", ["xt", "w"], ["y"], name="mm")]
    g = import_proto(_model(nodes, [vi("x", [4, 2, 3]), vi("w", [3, 5])], [vi("y", [2, 4, 5])]))
    t = create("transpose_elimination")
    app, work = assert_applies(g, t, t.match("T"))
    assert (work.nodes["mm"].op_type, work.nodes["mm"].attrs) == ("FusedMatMul", {"transBatchA": 1})
    assert app.delta.bytes == -2 * 4 * 2 * 3 * F32 and app.delta.flops == 0


def _attention_graph():
    nodes = [helper.make_node("Transpose", ["q"], ["qt"], name="T", perm=[0, 2, 1, 3]),
             helper.make_node("MatMul", ["qt", "k"], ["s"], name="mm")]
    return import_proto(_model(nodes, [vi("q", [2, 5, 3, 4]), vi("k", [2, 3, 4, 5])], [vi("s", [2, 3, 5, 5])]))


def test_head_transpose_becomes_an_einsum():
    g = _attention_graph()
    t = create("transpose_elimination")
    app, work = assert_applies(g, t, t.match("T"))
    mm = work.nodes["mm"]
    assert (mm.op_type, mm.attrs["equation"], mm.input_names()) == ("Einsum", "acbe,abed->abcd", ["q", "k"])
    assert app.delta.bytes == -2 * 2 * 5 * 3 * 4 * F32


def test_near_misses_name_the_reason():
    g = _attention_graph()
    assert_fails(g, create("transpose_elimination", {"einsum": False}), create("transpose_elimination").match("T"),
                 "transpose 'T' (perm=[0, 2, 1, 3]) folds into neither side", "'q' has no producer",
                 "'mm' (MatMul) cannot access 'qt' permuted by [0, 2, 1, 3]", "Einsum not allowed")
    nodes = [helper.make_node("Transpose", ["x"], ["y"], name="T", perm=[1, 0]),
             helper.make_node("Softmax", ["y"], ["z"], name="sm")]
    g2 = import_proto(_model(nodes, [vi("x", [3, 4])], [vi("y", [4, 3]), vi("z", [4, 3])]))
    t = create("transpose_elimination")
    assert_fails(g2, t, t.match("T"), "'y' is a graph output")
    g2.outputs.remove("y")
    assert_fails(g2, t, t.match("T"), "'sm' (Softmax) cannot access 'y' in another layout")
    assert_fails(g2, t, t.match("sm"), "'sm' is not a transpose")


def test_bert_every_transpose_folds_at_op_level():
    g = import_model(BERT)
    t = create("transpose_elimination")
    saved = 0
    for m in list(t.matches(g)):
        saved += engine.apply(g, t, m).bytes_saved
    assert not any(n.op_type == "Transpose" for n in g.nodes.values())
    dense = 2 * 768 * 768 * F32                      # q, k, v, attention-output weights and their grads
    wide = 2 * 768 * 3072 * F32                      # intermediate and output weights and their grads
    heads = 2 * 8 * 12 * 128 * 64 * F32              # the 8 head split/merge transposes, fwd + bwd
    assert saved == 8 * dense + 4 * wide + 8 * heads == 163_577_856
