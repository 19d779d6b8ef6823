"""layout_select: store a tensor permuted — writers and readers follow, transposes vanish, strides become unit."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import helper, numpy_helper

from ir import lowering
from ir.onnx_import import import_model, import_proto
from ir.printer import node_to_text, to_text
from tests.unit.ir.onnx_models import model, vi
from tests.unit.transforms.harness import assert_applies, assert_fails
from transforms import engine
from transforms.registry import create

F32 = 4
BERT = Path(__file__).resolve().parents[3] / "resources" / "examples" / "bert_layer_base_train.onnx"


def _two_reader_graph():
    """h = relu(x) is read by a transpose (into a Softmax) and by a Neg map."""
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="relu"),
             helper.make_node("Transpose", ["h"], ["ht"], name="T", perm=[1, 0]),
             helper.make_node("Softmax", ["ht"], ["s"], name="sm", axis=-1),
             helper.make_node("Neg", ["h"], ["z"], name="neg")]
    g = import_proto(model(nodes, [vi("x", [3, 5])], [vi("s", [5, 3]), vi("z", [3, 5])]))
    lowering.expand_node(g, "relu")
    lowering.expand_node(g, "neg")
    return g


def test_matches_offer_the_layout_a_transpose_reads():
    g = _two_reader_graph()
    t = create("layout_select")
    assert [m.anchors for m in t.matches(g)] == [("relu/expanded", "T")]


def test_transpose_vanishes_when_its_source_is_stored_transposed():
    g = _two_reader_graph()
    assert_fails(g, create("transpose_elimination"), create("transpose_elimination").match("T"),
                 "'h' is also read by 'neg/expanded'", "'sm' (Softmax) cannot access 'ht'")
    t = create("layout_select")
    app, work = assert_applies(g, t, t.match("relu/expanded", "T"))
    assert app.removed == ("T",) and work.container("h").shape == (5, 3)
    assert "h[i1, i0] = max(x[i0, i1], 0.0)" in node_to_text(work.nodes["relu/expanded"])
    assert "h[i1, i0]" in node_to_text(work.nodes["neg/expanded"]) and work.nodes["sm"].input_names() == ["h"]
    assert app.delta.bytes == -2 * 3 * 5 * F32


def test_an_explicit_perm_gives_the_same_rewrite():
    g = _two_reader_graph()
    t = create("layout_select", {"perm": [1, 0]})
    assert [m.anchors for m in t.matches(g)] == [("relu/expanded", "T")]
    app, _ = assert_applies(g, t, t.match("relu/expanded"))
    assert app.removed == ("T",)


def _strided_graph():
    """ht = (x + b)ᵀ written by the Add map after transpose_elimination: ht[i1, i0] (stride 4)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32), "w")
    nodes = [helper.make_node("Add", ["x", "b"], ["h"], name="add"),
             helper.make_node("Transpose", ["h"], ["ht"], name="T", perm=[1, 0]),
             helper.make_node("MatMul", ["ht", "w"], ["y"], name="mm")]
    g = import_proto(model(nodes, [vi("x", [4, 6]), vi("b", [6])], [vi("y", [6, 5])], [w]))
    lowering.expand_all(g)
    engine.apply(g, create("transpose_elimination"), create("transpose_elimination").match("T/expanded"))
    return g


def test_unit_stride_layout_keeps_bytes_and_turns_the_reader_into_a_flagged_gemm():
    g = _strided_graph()
    assert "ht[i1, i0]" in node_to_text(g.nodes["add/expanded"])
    t = create("layout_select")
    assert [m.anchors for m in t.matches(g)] == [("add/expanded",)]
    app, work = assert_applies(g, t, t.match("add/expanded"))
    assert "ht[i0, i1] = (x[i0, i1] + b[i1])" in node_to_text(work.nodes["add/expanded"])
    mm = work.nodes["mm"]
    assert (mm.op_type, mm.attrs, work.container("ht").shape) == ("Gemm", {"transA": 1}, (4, 6))
    assert app.delta.bytes == 0 and app.delta.flops == 0
    assert not list(t.matches(work))                         # now unit-stride: nothing more to offer


def test_near_misses():
    g = _two_reader_graph()
    t = create("layout_select")
    assert_fails(g, create("layout_select", {"perm": [1, 0]}), t.match("neg/expanded"),
                 "'z' is not a transient intermediate")
    assert_fails(g, create("layout_select", {"perm": [0, 1]}), t.match("relu/expanded"),
                 "[0, 1] is not a non-trivial permutation")
    assert_fails(g, t, t.match("relu/expanded", "neg/expanded"), "every map access of 'h' is already unit-stride")
    assert_fails(g, t, t.match("neg/expanded", "T"), "'T' reads nothing that 'neg/expanded' writes")
    g.outputs.remove("s")
    g2 = import_proto(model([helper.make_node("Relu", ["x"], ["h"], name="relu"),
                             helper.make_node("Softmax", ["h"], ["s"], name="sm")],
                            [vi("x", [3, 5])], [vi("s", [3, 5])]))
    assert_fails(g2, create("layout_select", {"perm": [1, 0]}), t.match("relu"),
                 "'h' cannot be stored as transpose(…, [1, 0])", "'relu' (Relu) cannot access 'h'")


def test_bert_weight_gradient_layout_makes_its_transpose_vanish():
    g = import_model(BERT)
    t = create("layout_select")
    ms = {m.anchors[-1]: m for m in t.matches(g)}
    app = engine.apply(g, t, ms["/layer/output/dense/Transpose_Grad/Transpose_0"])
    assert app.bytes_saved == 2 * 768 * 3072 * F32
    gemm = g.nodes["/layer/output/dense/MatMul_Grad/Gemm_5"]
    assert gemm.attrs == {"transA": 1} and g.container("/layer/output/dense/Transpose_output_0_grad").shape == \
        (768, 3072)


def _gemm_strided_graph():
    """g = x^T·dy (an Einsum) read transposed by the update map the transpose was fused into."""
    nodes = [helper.make_node("Einsum", ["x", "dy"], ["g"], name="dw", equation="cda,cdb->ab"),
             helper.make_node("Transpose", ["g"], ["gt"], name="T", perm=[1, 0]),
             helper.make_node("Mul", ["gt", "s"], ["u"], name="upd")]
    g = import_proto(model(nodes, [vi("x", [2, 3, 4]), vi("dy", [2, 3, 5]), vi("s", [5, 4])], [vi("u", [5, 4])]))
    lowering.expand_node(g, "T")
    lowering.expand_node(g, "upd")
    fusion = create("map_fusion")
    engine.apply(g, fusion, next(iter(fusion.matches(g))))
    return g


def test_contraction_only_offers_gemm_outputs_and_refuses_maps():
    g = _gemm_strided_graph()
    only = create("layout_select", {"contraction_only": True})
    assert "g[i1, i0]" in to_text(g)                        # the update reads the gradient strided
    assert [m.anchors for m in only.matches(g)] == [("dw",)]
    app, work = assert_applies(g, only, only.match("dw"))
    assert app.delta.bytes == 0 and work.container("g").shape == (5, 4)
    assert "g[i0, i1]" in to_text(work) and work.nodes["dw"].attrs["equation"].endswith("->ba")
    strided = _strided_graph()                              # the producer there is a map
    assert not list(only.matches(strided))
    assert_fails(strided, only, only.match("add/expanded"), "'add/expanded' is not a contraction (contraction_only)")


def test_a_reader_of_both_the_tensor_and_its_vanishing_transpose_keeps_both_edits():
    """Regression (issue 10, random graphs): y = transpose(h) + h. Storing h transposed makes
    the transpose vanish; the Add map reads h (re-indexed) and t (renamed to h). The rename was
    made first and the re-indexing then started again from the original map, so the Add still
    read the dropped t and the graph failed to verify."""
    nodes = [helper.make_node("Neg", ["x"], ["h"], name="neg"),
             helper.make_node("Transpose", ["h"], ["t"], name="tr", perm=[1, 0]),
             helper.make_node("Add", ["t", "h"], ["y"], name="add")]
    g = import_proto(model(nodes, [vi("x", [2, 2])], [vi("y", [2, 2])]))
    lowering.expand_all(g)
    t = create("layout_select")
    app, work = assert_applies(g, t, t.match("neg/expanded", "tr/expanded"))
    assert app.removed == ("tr/expanded",) and "t" not in work.containers
    assert "y[i0, i1] = (h[i0, i1] + h[i1, i0])" in node_to_text(work.nodes["add/expanded"])
