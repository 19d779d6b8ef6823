"""reshape_elimination: views alias their source — renames, re-indexed maps, composed views, Einsum readers."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from ir import expr as E
from ir import lowering
from ir.onnx_import import import_model, import_proto
from ir.printer import node_to_text
from tests.unit.ir.onnx_models import model, vi
from tests.unit.transforms.harness import assert_applies, assert_fails
from transforms import engine
from transforms.registry import create
from transforms.views import blocks, reindex

F32, I64 = 4, 8
BERT = Path(__file__).resolve().parents[3] / "resources" / "examples" / "bert_layer_base_train.onnx"


def _shape(name, dims):
    return numpy_helper.from_array(np.asarray(dims, dtype=np.int64), name)


def test_blocks_and_reindex():
    assert blocks((8, 128, 768), (1024, 768)) == [([0, 1], [0]), ([2], [1])]
    assert blocks((2, 1, 6), (3, 4)) == [([0, 2], [0, 1])]
    assert blocks((2, 3), (7,)) is None
    i = [E.Var("i0"), E.Var("i1"), E.Var("i2")]
    split = reindex((2, 3, 12), (2, 3, 3, 4))(tuple(i))
    assert [E.to_text(e) for e in split] == ["i0", "i1", "(i2 // 4)", "(i2 % 4)"]
    merged = reindex((2, 3, 12), (6, 12))(tuple(i))
    assert [E.to_text(e) for e in merged] == ["((i0 * 3) + i1)", "i2"]


def _weight_grad_graph():
    """dW = Gemm(reshape(x, [6, 4]), reshape(dy, [6, 5]), transA=1): the MatMul weight gradient."""
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["x2"], name="r1"),
             helper.make_node("Reshape", ["dy", "s2"], ["dy2"], name="r2"),
             helper.make_node("Gemm", ["x2", "dy2"], ["dw"], name="gemm", transA=1)]
    return import_proto(model(nodes, [vi("x", [2, 3, 4]), vi("dy", [2, 3, 5])], [vi("dw", [4, 5])],
                              [_shape("s1", [6, 4]), _shape("s2", [6, 5])]))


def test_matches_every_view_op():
    g = _weight_grad_graph()
    t = create("reshape_elimination")
    assert [m.anchors for m in t.matches(g)] == [("r1",), ("r2",)]


def test_gemm_reads_both_views_reshape_free_as_an_einsum():
    g = _weight_grad_graph()
    t = create("reshape_elimination")
    app, work = assert_applies(g, t, t.match("r1"))
    gemm = work.nodes["gemm"]
    assert (gemm.op_type, gemm.attrs, gemm.input_names()) == ("Einsum", {"equation": "cda,cdb->ab"}, ["x", "dy"])
    assert set(app.removed) == {"r1", "r2"} and not {"x2", "dy2", "s1", "s2"} & set(work.containers)
    assert app.delta.bytes == -(2 * 6 * 4 * F32 + 2 * I64) - (2 * 6 * 5 * F32 + 2 * I64)


def test_identity_readers_read_its_input():
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="relu"),
             helper.make_node("Identity", ["h"], ["hi"], name="id"),
             helper.make_node("MatMul", ["hi", "w"], ["y"], name="mm")]
    g = import_proto(model(nodes, [vi("x", [3, 4]), vi("w", [4, 2])], [vi("y", [3, 2])]))
    t = create("reshape_elimination")
    app, work = assert_applies(g, t, t.match("id"))
    assert work.nodes["mm"].input_names() == ["h", "w"] and app.delta.bytes == -2 * 3 * 4 * F32


def test_identity_to_a_graph_output_is_written_by_the_producer():
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="relu"),
             helper.make_node("Identity", ["h"], ["y"], name="id"),
             helper.make_node("Neg", ["h"], ["z"], name="neg")]
    g = import_proto(model(nodes, [vi("x", [3, 4])], [vi("y", [3, 4]), vi("z", [3, 4])]))
    t = create("reshape_elimination")
    app, work = assert_applies(g, t, t.match("id"))
    assert work.nodes["relu"].output_names() == ["y"] and work.nodes["neg"].input_names() == ["y"]
    assert "h" not in work.containers and app.delta.bytes == -2 * 3 * 4 * F32


def _split_heads_graph(extra_reader: bool = False):
    nodes = [helper.make_node("Add", ["x", "b"], ["h"], name="add"),
             helper.make_node("Reshape", ["h", "s"], ["h4"], name="r"),
             helper.make_node("Mul", ["h4", "h4"], ["y"], name="sq")]
    outs = [vi("y", [2, 3, 2, 4])]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["h"], ["z"], name="neg"))
        outs.append(vi("z", [2, 3, 8]))
    return import_proto(model(nodes, [vi("x", [2, 3, 8]), vi("b", [8])], outs, [_shape("s", [2, 3, 2, 4])]))


def test_map_producer_writes_the_view():
    g = _split_heads_graph()
    lowering.expand_all(g)
    t = create("reshape_elimination")
    app, work = assert_applies(g, t, t.match("r"))
    assert "h4[i0, i1, (i2 // 4), (i2 % 4)] = (x[i0, i1, i2] + b[i2])" in node_to_text(work.nodes["add/expanded"])
    assert "h" not in work.containers and app.delta.bytes == -(2 * 2 * 3 * 8 * F32 + 4 * I64)


def test_map_readers_read_through_the_view():
    g = _split_heads_graph(extra_reader=True)
    lowering.expand_all(g)
    t = create("reshape_elimination")
    app, work = assert_applies(g, t, t.match("r"))
    assert "h[i0, i1, ((i2 * 4) + i3)]" in node_to_text(work.nodes["sq/expanded"])
    assert app.changed == ("sq/expanded",) and app.delta.bytes == -(2 * 2 * 3 * 8 * F32 + 4 * I64)


def test_view_of_a_view_composes_into_one_reshape():
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["a"], name="r1"),
             helper.make_node("Flatten", ["a"], ["b"], name="fl", axis=2),
             helper.make_node("MatMul", ["b", "w"], ["y"], name="mm")]
    g = import_proto(model(nodes, [vi("x", [6, 4]), vi("w", [4, 3])], [vi("y", [6, 3])],
                           [_shape("s1", [2, 3, 4])]))
    t = create("reshape_elimination")
    app, work = assert_applies(g, t, t.match("r1"))
    fl = work.nodes["fl"]
    assert fl.op_type == "Reshape" and fl.input_names()[0] == "x"
    assert work.values[fl.input_names()[1]].tolist() == [6, 4]
    assert app.delta.bytes == -(2 * 6 * 4 * F32 + 3 * I64) + 2 * I64    # the new Reshape reads its shape


def test_near_misses_name_the_reader():
    nodes = [helper.make_node("Reshape", ["x", "s"], ["x2"], name="r"),
             helper.make_node("Softmax", ["x2"], ["y"], name="sm"),
             helper.make_node("Expand", ["x2", "e"], ["z"], name="ex")]
    g = import_proto(model(nodes, [vi("x", [2, 3, 4])], [vi("y", [6, 4]), vi("z", [2, 6, 4])],
                           [_shape("s", [6, 4]), _shape("e", [2, 6, 4])]))
    t = create("reshape_elimination")
    assert_fails(g, t, t.match("r"), "view 'r' ([2, 3, 4] → [6, 4]) stays", "'x' has no producer",
                 "'sm' (Softmax) reads 'x2' and is neither a map, a view nor a contraction")
    assert_fails(g, t, t.match("ex"), "'ex' (Expand) is not a view op", "replicates data")


def test_near_miss_view_merging_an_output_axis():
    nodes = [helper.make_node("Reshape", ["x", "s"], ["x2"], name="r"),
             helper.make_node("MatMul", ["x2", "w"], ["y"], name="mm")]
    g = import_proto(model(nodes, [vi("x", [2, 3, 4]), vi("w", [4, 5])], [vi("y", [6, 5])], [_shape("s", [6, 4])]))
    assert_fails(g, create("reshape_elimination"), create("reshape_elimination").match("r"),
                 "'mm' (MatMul) cannot read 'x' reshape-free", "merges output axis")


def test_bert_identities_and_weight_gradient_reshapes_at_op_level():
    g = import_model(BERT)
    t = create("reshape_elimination")
    saved, removed = 0, set()
    for m in list(t.matches(g)):
        if m.anchors[0] in g.nodes and t.check(g, m).ok:
            app = engine.apply(g, t, m)
            saved += app.bytes_saved
            removed |= set(app.removed)
    assert sum(r.endswith(("Identity_0", "Identity_1", "Identity_2")) for r in removed) == 11
    assert sum("MatMul_Grad/Reshape" in r for r in removed) == 12
    act = 8 * 128 * 768 * F32
    identities = 2 * (9 * act + 4 * act + 8 * 12 * 128 * 128 * F32)   # 9 × [8,128,768], [8,128,3072], scores
    gemm_views = 2 * (4 * 2 * act + 2 * (act + 4 * act)) + 12 * 2 * I64  # A and dY of the six dW GEMMs
    assert saved == identities + gemm_views == 207_618_240


def test_int64_views_keep_their_dtype():
    nodes = [helper.make_node("Unsqueeze", ["x", "ax"], ["y"], name="u"),
             helper.make_node("Add", ["y", "y"], ["z"], name="add")]
    g = import_proto(model(nodes, [vi("x", [3], TensorProto.INT64)], [vi("z", [1, 3], TensorProto.INT64)],
                           [_shape("ax", [0])]))
    lowering.expand_all(g)
    t = create("reshape_elimination")
    _, work = assert_applies(g, t, t.match("u"))
    assert "x[i1]" in node_to_text(work.nodes["add/expanded"])


def test_a_one_element_map_writing_its_view_keeps_its_parameter():
    """Regression (issue 10, random graphs): Neg over c[1] writing y = Reshape(c', [1, 1]) was
    rewritten to ``y[0, 0] = -c[i0]``, a store at constant indices from a map with a parameter,
    which the reference executor failed to run ("setting an array element with a sequence").
    Size-1 dimensions now pass their (zero) index on: ``y[i0, 0]``."""
    c = numpy_helper.from_array(np.array([-1], np.float32), "c")
    nodes = [helper.make_node("Neg", ["c"], ["n"], name="neg"), helper.make_node("Reshape", ["n", "s"], ["y"], name="rs")]
    g = import_proto(model(nodes, [vi("x", [1, 1])], [vi("y", [1, 1])], [c, _shape("s", [1, 1])]))
    lowering.expand_all(g)
    t = create("reshape_elimination")
    _, work = assert_applies(g, t, t.match("rs"))
    assert "y[i0, 0] = (-c[i0])" in node_to_text(work.nodes["neg/expanded"])
    i = (E.Var("i0"), E.Var("i1"))
    assert [E.to_text(e) for e in reindex((1, 5), (5, 1))(i)] == ["i1", "i0"]


def test_a_keepdims_reduction_writing_its_view_keeps_its_parameter():
    """Regression (issue 10, random graphs): ReduceMean over axis 0 of x[1, 1] (keepdims) writes
    m[0, i0]; its view v = Reshape(m, [1]) was written as v[0] (the first size-1 index, a
    constant) and the executor failed as above. The index that names a parameter goes first."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], name="mean", axes=[0], keepdims=1),
             helper.make_node("Reshape", ["m", "s"], ["v"], name="rs")]
    g = import_proto(model(nodes, [vi("x", [1, 1])], [vi("v", [1])], [_shape("s", [1])]))
    lowering.expand_all(g)
    t = create("reshape_elimination")
    _, work = assert_applies(g, t, t.match("rs"))
    assert "v[i0] = (_acc / 1.0)" in node_to_text(work.nodes["mean/expanded"])
