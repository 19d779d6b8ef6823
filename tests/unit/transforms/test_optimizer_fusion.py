"""optimizer_fusion: matches, near misses with reasons, verify, equal outputs, Δ = recount, and the
per-parameter bytes of SGD (momentum), AdamW and Lion before and after (ANCHORS, Optimizer Fusion)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from codegen.numpy_ref.feeds import feeds_for
from ir import lowering
from ir.movement import kernel_estimate
from ir.nodes import MapNode, OpNode
from ir.onnx_import import import_model, import_proto
from tests.conftest import FIXTURES
from tests.unit.ir.onnx_models import vi
from tests.unit.transforms.harness import assert_applies, assert_fails
from tests.unit.transforms.test_reduction_fusion import H, F32, apply_on_bert, bert, w  # noqa: F401
from transforms import engine
from transforms.registry import create

T = create("optimizer_fusion")
R, N = 6, 16                                  # rows reduced into the gradient, parameter elements
ORT = FIXTURES / "ort_artifacts/bert_layer_base/legacy16/training_model.onnx"
OPTIMIZERS = {
    "AdamW": (["lr", "step", "p", "g", "p.m", "p.v"], ["p.new", "p.m.new", "p.v.new"],
              {"alpha": 0.9, "beta": 0.999, "epsilon": 1e-6, "weight_decay": 0.01, "adam_mode": 1}),
    "SGD": (["lr", "p", "g", "p.m"], ["p.new", "p.m.new"], {"momentum": 0.9, "nesterov": 1}),
    "Lion": (["lr", "p", "g", "p.m"], ["p.new", "p.m.new"], {"beta1": 0.9, "beta2": 0.99, "weight_decay": 0.1}),
}


def _step(op: str, producer: str = "reduce", grad_is_output: bool = False):
    """g = Σ_rows x (ReduceSum) or g = xᵀ·dy (Gemm), then one ai.dcstudio optimizer op on p."""
    ins, outs, attrs = OPTIMIZERS[op]
    shape = [N] if producer == "reduce" else [4, N]
    if producer == "reduce":
        axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
        grad = helper.make_node("ReduceSum", ["x", "axes"], ["g"], name="grad", keepdims=0)
        data, inits = [vi("x", [R, N])], [axes]
    else:
        grad = helper.make_node("Gemm", ["x", "dy"], ["g"], name="grad", transA=1)
        data, inits = [vi("x", [R, 4]), vi("dy", [R, N])], []
    node = helper.make_node(op, ins, outs, name="update", domain="ai.dcstudio", **attrs)
    inputs = data + [vi("lr", [1])] + ([vi("step", [1], TensorProto.INT64)] if op == "AdamW" else []) + \
        [vi(n, shape) for n in ins if n.startswith("p")]
    outputs = [vi(n, shape) for n in outs] + ([vi("g", shape)] if grad_is_output else [])
    graph = helper.make_graph([grad, node], "step", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.dcstudio", 1)])
    g = import_proto(model)
    if producer == "reduce":
        lowering.expand_node(g, "grad")
    return g


def _feeds(g):
    feeds = feeds_for(g)
    feeds.update({n: np.abs(v) for n, v in feeds.items() if n == "p.v"}, lr=np.full(1, 0.1, np.float32))
    return feeds


@pytest.mark.parametrize("op", ["AdamW", "SGD", "Lion"])
def test_update_op_runs_where_a_reduction_produces_its_gradient(op):
    g = _step(op)
    assert [m.anchors for m in T.matches(g)] == [("grad/expanded", "update")]
    app, work = assert_applies(g, T, T.match("grad/expanded", "update"), feeds=_feeds(g))
    assert list(work.nodes) == ["fused:grad/expanded"] and "g" not in work.containers
    assert app.delta.bytes == -2 * N * F32                  # the gradient: written, then read by the update
    scalars = 4 + (8 if op == "AdamW" else 0)               # lr (and step)
    state = 2 if op == "AdamW" else 1                       # AdamW: m, v; SGD with momentum, Lion: m
    per_param = {"AdamW": 28, "SGD": 20, "Lion": 20}[op]    # read p, g, state; write p, state
    assert per_param == (1 + 1 + state) * F32 + (1 + state) * F32
    assert kernel_estimate(g, g.nodes["update"]).bytes == per_param * N + scalars
    fused = kernel_estimate(work, work.nodes["fused:grad/expanded"]).bytes
    assert fused - R * N * F32 == (per_param - F32) * N + scalars   # 24 B (AdamW), 16 B (SGD, Lion) per param


@pytest.mark.parametrize("op,expand", [("AdamW", False), ("Lion", False), ("SGD", True)])
def test_update_becomes_the_epilogue_of_a_weight_gradient_gemm(op, expand):
    g = _step(op, producer="gemm")
    update = "update"
    if expand:                                              # an expanded update map works the same
        update = engine.apply(g, create("expand"), create("expand").match("update")).created[0]
    app, work = assert_applies(g, T, T.match("grad", update), feeds=_feeds(g))
    node = work.nodes["epilogue:grad"]
    assert isinstance(node, OpNode) and (node.domain, node.op_type) == ("ai.dcstudio", "Gemm")
    assert app.delta.bytes == -2 * 4 * N * F32


def test_a_gradient_that_is_a_graph_output_is_still_written():
    g = _step("AdamW", grad_is_output=True)
    app, work = assert_applies(g, T, T.match("grad/expanded", "update"), feeds=_feeds(g))
    assert work.producer("g").id == "fused:grad/expanded"
    assert app.delta.bytes == -N * F32                      # only the update's read of g is saved


def test_standard_op_update_after_expand_and_map_fusion(bert):
    """The bundled graph's AdamW (Mul/Add/Sqrt/Div/Sub): 112 B/param op by op, one map of 28 B/param
    after expand + map_fusion, 24 B/param inside the bias gradient's reduction (and no gradient)."""
    p = "layer.attention.self.query.bias"
    ops = import_model(Path(__file__).resolve().parents[3] / "resources/examples/bert_layer_base_train.onnx")
    chain = [n for i, n in ops.nodes.items() if i.split(":", 1)[-1].startswith(p + ".")]
    assert len(chain) == 12 and sum(kernel_estimate(ops, n).bytes for n in chain) == 112 * H + 6 * F32
    update = bert.nodes[f"fused:Mul:{p}.g2/expanded"]
    assert kernel_estimate(bert, update).bytes == 28 * H + F32           # + the step size
    reduce = f"/layer/attention/self/query/Add_Grad/ReduceSum_1/expanded"
    grad_in = kernel_estimate(bert, bert.nodes[reduce]).bytes_read
    app, work = apply_on_bert(bert, T, T.match(reduce, update.id))
    assert app.delta.bytes == -2 * H * F32
    assert kernel_estimate(work, work.nodes[f"fused:{reduce}"]).bytes - grad_in == 24 * H + F32


def test_weight_update_in_two_parts_then_into_its_gradient_gemm(bert):
    p, gemm = "layer.attention.self.key.weight", "/layer/attention/self/key/MatMul_Grad/Gemm_4"
    first = "fused:/layer/attention/self/key/Transpose_Grad/Transpose_0/expanded"
    app, g1 = apply_on_bert(bert, T, T.match(first, f"fused:Div:{p}.ratio/expanded"))
    assert app.delta.bytes == -3 * H * H * F32               # denominator written and read, m' read back
    app, g2 = apply_on_bert(g1, T, T.match(gemm, first))
    assert app.delta.bytes == -2 * H * H * F32               # the gradient: written and read back
    node = g2.nodes[f"epilogue:{gemm}"]
    assert sorted(node.output_names()) == sorted([f"{p}.new", f"{p}.m.new", f"{p}.v.new"])
    operands = kernel_estimate(g2, node).bytes
    grad_inputs = sum(g2.container(n).nbytes(g2.bindings) for n in node.input_names()[:2])
    assert operands - grad_inputs == 24 * H * H + F32        # p, m, v in and out; the step size


def test_ort_artifact_adamw_op_fused_directly():
    """The ORT artifact's per-parameter ai.dcstudio::AdamW op, not expanded; its gradient is a graph
    output, so only the update's read of it is saved."""
    g = import_model(ORT)
    src = "/layer/attention/self/value/Transpose_Grad/Transpose_0"
    lowering.expand_node(g, src)
    upd = "onnx::AdamWOptimizer::9/layer.attention.self.value.weight"
    assert (src + "/expanded", upd) in [m.anchors for m in T.matches(g)]
    app, work = apply_on_bert(g, T, T.match(src + "/expanded", upd))
    assert app.delta.bytes == -H * H * F32
    assert isinstance(work.nodes[f"fused:{src}/expanded"], MapNode)


def test_near_misses_name_the_kernels(bert):
    g = _step("SGD")
    assert_fails(g, T, T.match("grad/expanded", "nope"), "no node 'nope'")
    assert_fails(g, T, T.match("update", "grad/expanded"), "'grad/expanded' is not an optimizer update")
    relu = import_proto(helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"], name="act")],
        "m", [vi("x", [3, 4])], [vi("y", [3, 5])], [w("w", [4, 5])]), opset_imports=[helper.make_opsetid("", 17)]))
    lowering.expand_node(relu, "act")
    assert_fails(relu, T, T.match("mm", "act/expanded"), "'act/expanded' is not an optimizer update")
    lng = "/layer/output/LayerNorm/Mul/LayerNormFusion/_Grad/LayerNormalizationGrad_0/expanded"
    assert_fails(bert, T, T.match(lng, "fused:Mul:layer.output.LayerNorm.weight.g2/expanded"),
                 f"'{lng}' does not write 'layer.output.LayerNorm.weight_grad' once per element")
    ort = import_model(ORT)
    assert_fails(ort, T, T.match("/layer/attention/self/value/Transpose_Grad/Transpose_0",
                                 "onnx::AdamWOptimizer::9/layer.attention.self.value.weight"),
                 "(Transpose) is neither a map nor a MatMul/Gemm/FusedMatMul", "expand it first")
