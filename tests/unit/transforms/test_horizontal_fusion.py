"""horizontal_fusion: matches, near misses with reasons, verify, equal outputs, Δ = recount, figures."""
from __future__ import annotations

from onnx import helper, numpy_helper
import numpy as np

from ir import flops, serialize
from ir.movement import report
from tests.unit.ir.onnx_models import vi
from tests.unit.transforms.harness import assert_applies, assert_fails
from tests.unit.transforms.test_reduction_fusion import B, H, L, NH, F32, apply_on_bert, bert, expanded, w  # noqa: F401
from transforms.registry import create

T = create("horizontal_fusion")


def _qkv(bias_epilogue: bool = False):
    """Three projections of one activation x[6,4] (optionally q with a bias epilogue)."""
    nodes = [helper.make_node("MatMul", ["x", f"w{n}"], [n], name=n) for n in "qkv"]
    outs = [vi(n, [6, 5]) for n in "qkv"]
    if bias_epilogue:
        nodes.append(helper.make_node("Add", ["q", "bq"], ["qb"], name="bias"))
        outs[0] = vi("qb", [6, 5])
    g = expanded(nodes, [vi("x", [6, 4])], outs, [w(f"w{n}", [4, 5]) for n in "qkv"] + [w("bq", [5])])
    if bias_epilogue:
        t = create("gemm_epilogue_fusion")
        g = assert_applies(g, t, t.match("q", "bias/expanded"))[1]
    return g


def test_qkv_projections_read_the_activation_once():
    g = _qkv()
    assert [m.anchors for m in T.matches(g)] == [("q", "k"), ("k", "v")]
    app, g1 = assert_applies(g, T, T.match("q", "k"))
    assert app.delta.bytes == -6 * 4 * F32 and app.created == ("group:q",)
    assert [m.anchors for m in T.matches(g1)] == [("v", "group:q")]
    app, g2 = assert_applies(g1, T, T.match("v", "group:q"))
    node = g2.nodes["group:q"]
    assert list(g2.nodes) == ["group:q"] and app.changed == ("group:q",)
    assert node.input_names() == ["x", "wv", "wq", "wk"] and node.output_names() == ["v", "q", "k"]
    assert [m["inputs"] for m in node.attrs["members"]] == [[0, 1], [0, 2], [0, 3]]
    assert report(g2).total.bytes == report(g).total.bytes - 2 * 6 * 4 * F32
    assert flops.fused_flops(g2, node) == 3 * 2 * 6 * 5 * 4 == report(g).total.flops
    assert serialize.dumps(serialize.loads(serialize.dumps(g2))) == serialize.dumps(g2)


def test_members_keep_their_epilogues():
    g = _qkv(bias_epilogue=True)
    app, g1 = assert_applies(g, T, T.match("epilogue:q", "k"))
    members = g1.nodes["group:epilogue:q"].attrs["members"]
    assert [(m["domain"], "epilogue" in m["attrs"]) for m in members] == [("ai.dcstudio", True), ("", False)]


def test_dx_and_dw_of_one_gradient():
    """dX = dY·Wᵀ (FusedMatMul) and dW = Xᵀ·dY (Gemm) read dY once."""
    nodes = [helper.make_node("FusedMatMul", ["dy", "wt"], ["dx"], name="dx", domain="com.microsoft", transB=1),
             helper.make_node("Gemm", ["x", "dy"], ["dw"], name="dw", transA=1)]
    g = expanded(nodes, [vi("dy", [6, 5]), vi("x", [6, 4])], [vi("dx", [6, 4]), vi("dw", [4, 5])], [w("wt", [4, 5])],
                 domains={"com.microsoft": 1})
    app, _ = assert_applies(g, T, T.match("dx", "dw"))
    assert app.delta.bytes == -6 * 5 * F32


def test_maps_over_the_same_space_run_both_bodies():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"), helper.make_node("Neg", ["x"], ["b"], name="b")]
    g = expanded(nodes, [vi("x", [3, 5])], [vi("a", [3, 5]), vi("b", [3, 5])])
    app, work = assert_applies(g, T, T.match("a/expanded", "b/expanded"))
    assert list(work.nodes) == ["fused:a/expanded"] and app.delta.bytes == -3 * 5 * F32


def test_a_bias_gradient_reduction_runs_inside_the_copy_of_its_gradient():
    axes = numpy_helper.from_array(np.array([0, 1], np.int64), "axes")
    nodes = [helper.make_node("Identity", ["dy"], ["dx"], name="copy"),
             helper.make_node("ReduceSum", ["dy", "axes"], ["db"], name="rs", keepdims=0)]
    g = expanded(nodes, [vi("dy", [2, 3, 8])], [vi("dx", [2, 3, 8]), vi("db", [8])], [axes])
    app, work = assert_applies(g, T, T.match("copy/expanded", "rs/expanded"))
    fused = work.nodes["fused:copy/expanded"]
    assert len(fused.params) == 3 and {m.container: m.wcr for m in fused.outputs} == {"dx": None, "db": "sum"}
    assert app.delta.bytes == -2 * 3 * 8 * F32


def test_near_misses_name_the_kernels():
    g = expanded([helper.make_node("Relu", ["x"], ["a"], name="a"), helper.make_node("Add", ["x", "a"], ["b"], name="b")],
                 [vi("x", [3, 5])], [vi("b", [3, 5])])
    assert_fails(g, T, T.match("a/expanded", "b/expanded"), "'b/expanded' depends on 'a/expanded'", "independent")
    mixed = expanded([helper.make_node("MatMul", ["x", "x"], ["m"], name="mm"), helper.make_node("Relu", ["x"], ["r"], name="r")],
                     [vi("x", [4, 4])], [vi("m", [4, 4]), vi("r", [4, 4])])
    assert_fails(mixed, T, T.match("mm", "r/expanded"), "a map and a library node", "expand the library node")
    scalar = expanded([helper.make_node("Mul", ["x", "s"], ["a"], name="a"), helper.make_node("Mul", ["y", "s"], ["b"], name="b")],
                      [vi("x", [3]), vi("y", [3]), vi("s", [1])], [vi("a", [3]), vi("b", [3])])
    assert list(T.matches(scalar)) == []
    assert_fails(scalar, T, T.match("a/expanded", "b/expanded"), "read no tensor in common")
    norms = expanded([helper.make_node("LayerNormalization", ["x", "g"], ["a"], name="ln", axis=-1),
                      helper.make_node("Softmax", ["x"], ["b"], name="sm", axis=1)],
                     [vi("x", [2, 3, 8])], [vi("a", [2, 3, 8]), vi("b", [2, 3, 8])], [w("g", [8])])
    assert_fails(norms, T, T.match("ln/expanded", "sm/expanded"), "different iteration spaces",
                 "neither runs inside the other", "neither pointwise nor a single sweep")


# --- the real BERT-base training step --------------------------------------------------------

def test_bert_qkv_projections(bert):
    att = "/layer/attention/self"
    pairs = [m.anchors for m in T.matches(bert) if "input" in m.label]
    assert (f"{att}/value/MatMul", f"{att}/query/MatMul") in pairs
    app1, g1 = apply_on_bert(bert, T, T.match(f"{att}/value/MatMul", f"{att}/query/MatMul"))
    pair = next(m.anchors for m in T.matches(g1) if f"{att}/key/MatMul" in m.anchors and "input" in m.label)
    app2, g2 = apply_on_bert(g1, T, T.match(*pair))
    assert app1.delta.bytes + app2.delta.bytes == -2 * B * L * H * F32   # 'input' read once, not three times
    assert len(g2.nodes[f"group:{att}/value/MatMul"].attrs["members"]) == 3


def test_bert_backward_contractions_sharing_the_score_gradient(bert):
    att = "/layer/attention/self"
    app, _ = apply_on_bert(bert, T, T.match(f"{att}/MatMul_Grad/FusedMatMul_0", f"{att}/MatMul_Grad/FusedMatMul_1"))
    assert app.delta.bytes == -B * NH * L * L * F32


def test_bert_bias_gradient_beside_the_copy_of_its_gradient(bert):
    v = "/layer/attention/self/value/Add_Grad"
    app, _ = apply_on_bert(bert, T, T.match(f"{v}/ReduceSum_1/expanded", f"{v}/Identity_2/expanded"))
    assert app.delta.bytes == -B * L * H * F32
