"""gemm_epilogue_fusion: matches, near misses with reasons, verify, equal outputs, Δ = recount, figures;
the fused node serializes, prints, keeps its implementation choice and counts bytes and FLOPs right."""
from __future__ import annotations

from onnx import helper

from codegen.numpy_ref.executor import run
from codegen.numpy_ref.feeds import compare, feeds_for
from ir import flops, serialize
from ir.movement import kernel_estimate, report
from ir.printer import node_to_text
from tests.unit.ir.onnx_models import vi
from tests.unit.transforms.harness import assert_applies, assert_fails
from tests.unit.transforms.test_reduction_fusion import B, H, L, NH, F32, apply_on_bert, bert, expanded, w  # noqa: F401
from transforms import engine
from transforms.registry import create

T = create("gemm_epilogue_fusion")


def _mlp(extra_reader: bool = False, transpose: bool = False):
    """x[6,4]·w[4,5] → +b → Relu (fused into one map) [→ Transpose]; h optionally read by Neg."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["u"], name="bias"),
             helper.make_node("Relu", ["u"], ["y"], name="act")]
    outs = [vi("y", [6, 5])]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["h"], ["z"], name="neg"))
        outs.append(vi("z", [6, 5]))
    if transpose:
        nodes.append(helper.make_node("Transpose", ["y"], ["yt"], name="tr", perm=[1, 0]))
        outs = [vi("yt", [5, 6])]
    return expanded(nodes, [vi("x", [6, 4])], outs, [w("w", [4, 5]), w("b", [5])],
                    fuse=[("bias/expanded", "act/expanded")])


def test_bias_and_activation_become_the_epilogue_of_a_matmul():
    g = _mlp()
    assert [m.anchors for m in T.matches(g)] == [("mm", "fused:bias/expanded")]
    app, work = assert_applies(g, T, T.match("mm", "fused:bias/expanded"))
    node = work.nodes["epilogue:mm"]
    assert (node.domain, node.op_type) == ("ai.dcstudio", "MatMul") and app.created == ("epilogue:mm",)
    assert node.input_names() == ["x", "w", "b"] and node.output_names() == ["y"] and "h" not in work.containers
    assert app.delta.bytes == -2 * 6 * 5 * F32               # the product h: written, read back
    est = kernel_estimate(work, node)                        # reads x, w, b once; writes y
    assert (est.bytes_read, est.bytes_written) == ((6 * 4 + 4 * 5 + 5) * F32, 6 * 5 * F32)
    gemm, epilogue = 2 * 6 * 5 * 4, 2 * 6 * 5                 # multiply-adds; add + max per element
    assert flops.fused_flops(work, node) == gemm + epilogue == report(g).total.flops


def test_a_product_with_other_readers_is_still_written():
    app, work = assert_applies(_mlp(extra_reader=True), T, T.match("mm", "fused:bias/expanded"))
    assert work.nodes["epilogue:mm"].output_names() == ["h", "y"] and work.producer("h").id == "epilogue:mm"
    assert app.delta.bytes == -6 * 5 * F32                   # only the read of h is saved


def test_chaining_a_transpose_onto_an_epilogue():
    g = _mlp(transpose=True)
    _, g1 = assert_applies(g, T, T.match("mm", "fused:bias/expanded"))
    assert [m.anchors for m in T.matches(g1)] == [("epilogue:mm", "tr/expanded")]
    app, g2 = assert_applies(g1, T, T.match("epilogue:mm", "tr/expanded"))
    assert app.changed == ("epilogue:mm",) and list(g2.nodes) == ["epilogue:mm"]
    assert app.delta.bytes == -2 * 6 * 5 * F32               # y: written, read by the transpose
    head = node_to_text(g2.nodes["epilogue:mm"]).splitlines()[0]
    assert head.startswith("%epilogue:mm = ai.dcstudio::MatMul(x, w, b)") and "-> (yt)" in head
    assert serialize.dumps(serialize.loads(serialize.dumps(g2))) == serialize.dumps(g2)
    again = serialize.loads(serialize.dumps(g2))
    feeds = feeds_for(g)
    assert not compare(run(g, feeds), run(again, feeds), 1e-5)


def test_gemm_with_bias_and_fused_matmul_with_transposes():
    nodes = [helper.make_node("Gemm", ["a", "bt", "c"], ["h"], name="gemm", transB=1, alpha=0.5, beta=2.0),
             helper.make_node("Tanh", ["h"], ["y"], name="act"),
             helper.make_node("FusedMatMul", ["y", "v"], ["q"], name="fmm", domain="com.microsoft",
                              transA=1, alpha=1.5),
             helper.make_node("Sigmoid", ["q"], ["z"], name="sig")]
    g = expanded(nodes, [vi("a", [6, 4])], [vi("z", [5, 3])], [w("bt", [5, 4]), w("c", [5]), w("v", [6, 3])],
                 domains={"com.microsoft": 1})
    app, g1 = assert_applies(g, T, T.match("gemm", "act/expanded"))
    assert g1.nodes["epilogue:gemm"].input_names() == ["a", "bt", "c"]
    app, g2 = assert_applies(g1, T, T.match("fmm", "sig/expanded"))
    node = g2.nodes["epilogue:fmm"]
    assert (node.op_type, node.attrs["gemm_domain"], node.attrs["transA"]) == ("FusedMatMul", "com.microsoft", 1)
    assert app.delta.bytes == -2 * 5 * 3 * F32


def test_extra_epilogue_operands_of_a_gemm_without_bias_leave_its_bias_slot_empty():
    nodes = [helper.make_node("Gemm", ["a", "b"], ["h"], name="gemm"),
             helper.make_node("Add", ["h", "r"], ["y"], name="res")]
    g = expanded(nodes, [vi("a", [6, 4]), vi("r", [6, 5])], [vi("y", [6, 5])], [w("b", [4, 5])])
    app, work = assert_applies(g, T, T.match("gemm", "res/expanded"))
    assert work.nodes["epilogue:gemm"].input_names() == ["a", "b", None, "r"]
    assert flops.fused_flops(work, work.nodes["epilogue:gemm"]) == 2 * 6 * 5 * 4 + 6 * 5


def test_the_contraction_keeps_its_implementation_choice():
    g = _mlp()
    engine.apply(g, create("select_impl", {"impl": "blocked"}), create("select_impl", {"impl": "blocked"}).match("mm"))
    _, work = assert_applies(g, T, T.match("mm", "fused:bias/expanded"))
    assert work.nodes["epilogue:mm"].impl == "blocked"


def test_near_misses_name_the_kernels():
    g = _mlp(transpose=True)
    assert_fails(g, T, T.match("fused:bias/expanded", "tr/expanded"), "is not a MatMul/Gemm/FusedMatMul")
    assert_fails(g, T, T.match("mm", "tr/expanded"), "'tr/expanded' reads nothing that 'mm' writes")
    soft = expanded([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                     helper.make_node("Softmax", ["h"], ["y"], name="sm")], [vi("x", [6, 4])], [vi("y", [6, 5])],
                    [w("w", [4, 5])])
    assert_fails(soft, T, T.match("mm", "sm/expanded"), "'sm/expanded' is not a pointwise map")
    bcast = expanded([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                      helper.make_node("Add", ["h", "z"], ["y"], name="add")], [vi("x", [1, 4]), vi("z", [6, 5])],
                     [vi("y", [6, 5])], [w("w", [4, 5])])
    assert_fails(bcast, T, T.match("mm", "add/expanded"), "'add/expanded' reads h[0, i1]", "not once per element")
    cyc = expanded([helper.make_node("MatMul", ["x", "x"], ["h"], name="mm"),
                    helper.make_node("Relu", ["h"], ["r"], name="relu"),
                    helper.make_node("Add", ["h", "r"], ["y"], name="add")], [vi("x", [4, 4])], [vi("y", [4, 4])])
    assert_fails(cyc, T, T.match("mm", "add/expanded"), "depends on 'mm' through another kernel", "cycle")


def test_an_einsum_with_an_epilogue_keeps_its_flops():
    """A two-operand Einsum fused with its epilogue (``ai.dcstudio::Einsum``, more than two inputs)
    once counted 0 FLOPs: the roofline then priced the weight-gradient einsums as free, and
    ``tune --objective time`` preferred sequences that left them ungrouped (found by tune)."""
    nodes = [helper.make_node("Einsum", ["x", "w"], ["h"], name="mm", equation="cda,cdb->ab"),
             helper.make_node("Add", ["h", "b"], ["y"], name="bias")]
    g = expanded(nodes, [vi("x", [2, 3, 4])], [vi("y", [4, 5])], [w("w", [2, 3, 5]), w("b", [5])], fuse=[])
    [match] = [m for m in T.matches(g) if m.anchors[0] == "mm"]
    _, work = assert_applies(g, T, match)
    node = work.nodes["epilogue:mm"]
    assert (node.domain, node.op_type) == ("ai.dcstudio", "Einsum") and len(node.inputs) > 2
    contraction, epilogue = 2 * 2 * 3 * 4 * 5, 4 * 5
    assert kernel_estimate(work, node).flops == flops.fused_flops(work, node) == contraction + epilogue
    assert report(work).total.flops == report(g).total.flops


# --- the real BERT-base training step --------------------------------------------------------

def test_bert_bias_and_gelu_epilogue(bert):
    app, work = apply_on_bert(bert, T, T.match("/layer/intermediate/dense/MatMul",
                                               "fused:/layer/intermediate/dense/Add/expanded"))
    node = work.nodes["epilogue:/layer/intermediate/dense/MatMul"]
    assert node.output_names() == ["/layer/intermediate/dense/Add_output_0",   # pre-activation, for GeluGrad
                                   "/layer/intermediate/intermediate_act_fn/Mul_1_output_0"]
    assert app.delta.bytes == -2 * B * L * 4 * H * F32       # the raw product: written, read back


def test_bert_attention_scores_scale_epilogue(bert):
    app, _ = apply_on_bert(bert, T, T.match("/layer/attention/self/MatMul", "/layer/attention/self/Mul/expanded"))
    assert app.delta.bytes == -2 * B * NH * L * L * F32


def test_bert_weight_gradient_with_transpose_and_adamw_epilogue(bert):
    """dWᵀ = Aᵀ·dY (Gemm) → transpose + first half of AdamW, then the second half, chained."""
    gemm = "/layer/attention/self/query/MatMul_Grad/Gemm_4"
    app, g1 = apply_on_bert(bert, T, T.match(gemm, "fused:/layer/attention/self/query/Transpose_Grad/Transpose_0/expanded"))
    assert app.delta.bytes == -2 * H * H * F32               # the gradient: written, read back
    app, _ = apply_on_bert(g1, T, T.match(f"epilogue:{gemm}", "fused:Div:layer.attention.self.query.weight.ratio/expanded"))
    assert app.delta.bytes == -(2 + 1) * H * H * F32         # the denominator written and read, m' read back


def test_peak_memory_counts_the_product_while_the_fused_kernel_runs():
    """h is gone from the graph, but the fused kernel still holds the raw product while it runs."""
    from ir import memory
    g = _mlp()
    app, work = assert_applies(g, T, T.match("mm", "fused:bias/expanded"))
    k = [n.id for n in memory.schedule(work)].index("epilogue:mm")
    live = {name: life for name, life in memory.lifetimes(work).items() if life.start <= k <= life.end}
    assert memory.live_profile(work)[k + 1] == sum(life.nbytes for life in live.values()) + 6 * 5 * F32
