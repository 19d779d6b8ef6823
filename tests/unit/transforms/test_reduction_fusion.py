"""reduction_fusion: matches, near misses with reasons, verify, equal outputs, Δ = recount, figures.

Also holds the BERT helpers the other L2/L4 fusion tests share: ``bert`` (the bundled BERT-base
training step after expand + map_fusion to fixpoint) and ``apply_on_bert`` (apply on a clone,
verify, Δ = full recount, and equal outputs of the replaced kernels vs the new one on random
inputs — running the whole BERT step through the reference executor takes ~30 s).
"""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
from onnx import helper, numpy_helper

from codegen.numpy_ref.executor import run
from codegen.numpy_ref.feeds import compare, feeds_for
from ir import lowering
from ir.containers import Role
from ir.graph import Graph
from ir.movement import report
from ir.onnx_import import import_model, import_proto
from ir.verify import verify
from tests.unit.ir.onnx_models import model, vi
from tests.unit.transforms.harness import assert_applies, assert_fails
from transforms import engine
from transforms.registry import create

F32 = 4
BERT = Path(__file__).resolve().parents[3] / "resources" / "examples" / "bert_layer_base_train.onnx"
B, L, H, NH = 8, 128, 768, 12                       # BERT-base layer: batch, length, hidden, heads
rng = np.random.default_rng(0)


def w(name, shape):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def expanded(nodes, inputs, outputs, inits=(), fuse=(), domains=None):
    """Import, expand every op, then map_fusion the given (producer, consumer) pairs."""
    proto = model(nodes, inputs, outputs, list(inits))
    proto.opset_import.extend(helper.make_opsetid(d, v) for d, v in (domains or {}).items())
    g = import_proto(proto)
    lowering.expand_all(g)
    mf = create("map_fusion")
    for p, c in fuse:
        engine.apply(g, mf, mf.match(p, c))
    return g


# --- BERT helpers (shared with the other fusion tests) -----------------------------------------

def bert_expanded_fused() -> Graph:
    """The bundled BERT-base layer training step after expand + map_fusion to fixpoint (~1 s)."""
    g = import_model(BERT)
    lowering.expand_all(g)
    mf = create("map_fusion")
    while (m := next((m for m in mf.matches(g) if mf.check(g, m).ok), None)) is not None:
        mf.rewrite(g, m, 0)
    return g


def subgraph(graph: Graph, ids, outputs) -> Graph:
    """Kernels ``ids`` of ``graph`` alone; what they read from outside becomes graph inputs."""
    nodes = [copy.deepcopy(graph.nodes[i]) for i in ids]
    produced = {m.container for n in nodes for m in n.outputs if m is not None}
    read = list(dict.fromkeys(m.container for n in nodes for m in n.inputs if m is not None))
    sub = Graph("kernels")
    sub.bindings = dict(graph.bindings)
    for name in dict.fromkeys(read + sorted(produced)):
        c = graph.container(name)
        role = c.role if name in produced or c.role is not Role.TRANSIENT else Role.INPUT
        sub.add_container(c.with_role(role))
    sub.values = {n: graph.values[n] for n in read if n in graph.values}
    sub.inputs = [n for n in read if n not in produced and n not in sub.values]
    sub.outputs = list(outputs)
    for n in nodes:
        sub.add_node(n)
    sub.sort()
    return sub


def apply_on_bert(graph: Graph, t, match, rtol: float = 1e-4):
    """Apply on a clone: check, verify, Δ = recount, and the replaced kernels' results equal the
    new kernel's (every container it writes that is read elsewhere or is a graph output)."""
    res = t.check(graph, match)
    assert res.ok, res.reason
    work = graph.clone()
    app = engine.apply(work, t, match, step=1)
    verify(work)
    assert report(work).total - report(graph).total == app.delta
    new = app.created + app.changed
    outs = [m.container for i in new for m in work.nodes[i].outputs if m is not None
            and (m.container in work.outputs or any(c.id not in new for c in work.consumers(m.container)))]
    before, after = subgraph(graph, match.anchors, outs), subgraph(work, new, outs)
    feeds = feeds_for(before)
    problems = compare(run(before, feeds), run(after, feeds), rtol)
    assert not problems, problems
    return app, work


@pytest.fixture(scope="module")
def bert():
    return bert_expanded_fused()


# --- producer side ---------------------------------------------------------------------------

def _scaled_softmax():
    """softmax(0.5·x + mask) over the last axis (Substation's ``softmax`` kernel)."""
    mask = numpy_helper.from_array(np.where(np.arange(6) < 4, 0, -1e4).astype(np.float32).reshape(1, 6), "mask")
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "sc")
    nodes = [helper.make_node("Mul", ["x", "sc"], ["s"], name="scale"),
             helper.make_node("Add", ["s", "mask"], ["t"], name="addmask"),
             helper.make_node("Softmax", ["t"], ["y"], name="sm", axis=-1)]
    return expanded(nodes, [vi("x", [2, 3, 6])], [vi("y", [2, 3, 6])], [mask, scale],
                    fuse=[("scale/expanded", "addmask/expanded")])


def test_softmax_of_scale_and_mask_recomputes_the_producer_at_every_read():
    g = _scaled_softmax()
    t = create("reduction_fusion")
    assert [m.anchors for m in t.matches(g)] == [("fused:scale/expanded", "sm/expanded")]
    app, work = assert_applies(g, t, t.match("fused:scale/expanded", "sm/expanded"))
    assert list(work.nodes) == ["fused:scale/expanded"] and "t" not in work.containers
    n = 2 * 3 * 6
    assert app.delta.bytes == -2 * n * F32                # t's write and its read
    assert app.delta.flops == 2 * n * (3 - 1)             # scale+mask (2 ops) recomputed in 3 sweeps, not once


def _bias_residual_layernorm(extra_reader: bool):
    """bias + residual → LayerNorm (``bdrln`` without dropout); h optionally read by another kernel."""
    nodes = [helper.make_node("Add", ["x", "b"], ["u"], name="bias"),
             helper.make_node("Add", ["u", "r"], ["h"], name="res"),
             helper.make_node("LayerNormalization", ["h", "gamma", "beta"], ["y"], name="ln", axis=-1)]
    outs = [vi("y", [2, 3, 8])]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["h"], ["z"], name="other"))
        outs.append(vi("z", [2, 3, 8]))
    return expanded(nodes, [vi("x", [2, 3, 8]), vi("r", [2, 3, 8])], outs,
                    [w("b", [8]), w("gamma", [8]), w("beta", [8])], fuse=[("bias/expanded", "res/expanded")])


def test_bias_residual_layernorm_and_the_kept_sum_is_stored_at_the_covering_read():
    t = create("reduction_fusion")
    match = t.match("fused:bias/expanded", "ln/expanded")
    n = 2 * 3 * 8
    app, work = assert_applies(_bias_residual_layernorm(False), t, match)
    assert app.delta.bytes == -2 * n * F32 and "h" not in work.containers
    app, work = assert_applies(_bias_residual_layernorm(True), t, match)
    assert work.producer("h").id == "fused:bias/expanded"     # stored once, in the layernorm's first sweep
    assert app.delta.bytes == -n * F32                         # only the layernorm's read of h is saved
    assert app.delta.flops == 2 * n * (3 - 1)


def test_producer_with_a_second_result_is_absorbed_whole_into_a_bias_gradient_reduction():
    """GeluGrad-like map writing d (reduced) and a copy e (read elsewhere) → ReduceSum(d)."""
    axes = numpy_helper.from_array(np.array([0, 1], np.int64), "axes")
    nodes = [helper.make_node("Tanh", ["x"], ["d"], name="act"),
             helper.make_node("Identity", ["d"], ["e"], name="copy"),
             helper.make_node("ReduceSum", ["d", "axes"], ["db"], name="rs", keepdims=0)]
    g = expanded(nodes, [vi("x", [2, 3, 8])], [vi("e", [2, 3, 8]), vi("db", [8])], [axes],
                 fuse=[("act/expanded", "copy/expanded")])
    t = create("reduction_fusion")
    app, work = assert_applies(g, t, t.match("fused:act/expanded", "rs/expanded"))
    assert list(work.nodes) == ["fused:act/expanded"] and work.producer("e").id == "fused:act/expanded"
    assert app.delta.bytes == -2 * 2 * 3 * 8 * F32 and app.delta.flops == 0


def test_softmax_grad_with_its_dropout_mask_producer():
    """Substation's ``bs``: the dropout gradient (a mask multiply) recomputed in both sweeps of SoftmaxGrad."""
    nodes = [helper.make_node("Mul", ["g", "keep"], ["d"], name="dropout_grad"),
             helper.make_node("SoftmaxGrad_13", ["d", "y"], ["dx"], name="smg", domain="com.microsoft", axis=-1)]
    g = expanded(nodes, [vi("g", [2, 3, 6]), vi("keep", [2, 3, 6]), vi("y", [2, 3, 6])], [vi("dx", [2, 3, 6])],
                 domains={"com.microsoft": 1})
    t = create("reduction_fusion", {"side": "producer"})
    app, work = assert_applies(g, t, t.match("dropout_grad/expanded", "smg/expanded"))
    n = 2 * 3 * 6
    assert app.delta.bytes == -2 * n * F32 and app.delta.flops == n * (2 - 1)   # 1 op, read in 2 sweeps


# --- consumer side ---------------------------------------------------------------------------

def test_pointwise_epilogue_of_a_layernorm():
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"], name="ln", axis=-1),
             helper.make_node("Relu", ["y"], ["z"], name="relu")]
    g = expanded(nodes, [vi("x", [2, 3, 8])], [vi("z", [2, 3, 8]), vi("y", [2, 3, 8])],
                 [w("gamma", [8]), w("beta", [8])])
    t = create("reduction_fusion", {"side": "consumer"})
    assert [m.anchors for m in t.matches(g)] == [("ln/expanded", "relu/expanded")]
    app, work = assert_applies(g, t, t.match("ln/expanded", "relu/expanded"))
    assert app.delta.bytes == -2 * 3 * 8 * F32               # y is a graph output: only its read is saved


def test_consumer_after_a_wcr_reduction_runs_once_per_reduced_element():
    axes = numpy_helper.from_array(np.array([0, 1], np.int64), "axes")
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["s"], name="rs", keepdims=0),
             helper.make_node("Mul", ["s", "k"], ["y"], name="mul")]
    g = expanded(nodes, [vi("x", [2, 3, 8]), vi("k", [8])], [vi("y", [8])], [axes])
    t = create("reduction_fusion")
    app, work = assert_applies(g, t, t.match("rs/expanded", "mul/expanded"))
    fused = work.nodes["fused:rs/expanded"]
    assert "_acc" in fused.locals and not fused.outputs[0].wcr   # the wcr became a local accumulator
    assert app.delta.bytes == -2 * 8 * F32


def test_single_sweep_reduction_runs_inside_the_reduction_that_produces_its_input():
    """LayerNorm → ReduceSum over the rows (a layernorm gradient's dX → a bias gradient)."""
    axes = numpy_helper.from_array(np.array([0, 1], np.int64), "axes")
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"], name="ln", axis=-1),
             helper.make_node("ReduceSum", ["y", "axes"], ["db"], name="rs", keepdims=0)]
    g = expanded(nodes, [vi("x", [2, 3, 8])], [vi("db", [8])], [w("gamma", [8]), w("beta", [8]), axes])
    t = create("reduction_fusion")
    app, work = assert_applies(g, t, t.match("ln/expanded", "rs/expanded"))
    assert work.nodes["fused:ln/expanded"].outputs[0].wcr == "sum"
    assert app.delta.bytes == -2 * 2 * 3 * 8 * F32


# --- near misses -----------------------------------------------------------------------------

def test_near_misses_name_the_kernels():
    t = create("reduction_fusion")
    g = _scaled_softmax()
    assert_fails(g, t, t.match("fused:scale/expanded", "nope"), "no node 'nope'")
    assert_fails(g, create("reduction_fusion", {"side": "consumer"}), t.match("fused:scale/expanded", "sm/expanded"),
                 "is a producer-side fusion", "not consumer-side")
    chain = expanded([helper.make_node("Relu", ["x"], ["a"], name="a"), helper.make_node("Neg", ["a"], ["y"], name="b")],
                     [vi("x", [4])], [vi("y", [4])])
    assert_fails(chain, t, t.match("a/expanded", "b/expanded"), "neither", "use map_fusion")
    lib = import_proto(model([helper.make_node("Relu", ["x"], ["h"], name="r"),
                              helper.make_node("Softmax", ["h"], ["y"], name="sm")], [vi("x", [2, 4])], [vi("y", [2, 4])]))
    lowering.expand_node(lib, "sm")
    assert_fails(lib, t, t.match("r", "sm/expanded"), "'r' is a library node", "expand it first")


def test_near_miss_cycle_through_another_kernel():
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma"], ["y"], name="ln", axis=-1),
             helper.make_node("MatMul", ["y", "y"], ["m"], name="mm"),
             helper.make_node("Add", ["y", "m"], ["z"], name="add")]
    g = expanded(nodes, [vi("x", [8, 8])], [vi("z", [8, 8])], [w("gamma", [8])])
    assert_fails(g, create("reduction_fusion"), create("reduction_fusion").match("ln/expanded", "add/expanded"),
                 "depends on 'ln/expanded' through another kernel", "cycle")


def test_near_miss_consumer_reading_a_broadcast():
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    nodes = [helper.make_node("ReduceMax", ["x", "axes"], ["s"], name="mx", keepdims=0),
             helper.make_node("Sub", ["x", "s"], ["y"], name="sub")]
    g = import_proto(model(nodes, [vi("x", [2, 3, 8])], [vi("y", [2, 3, 8])], [axes], opset=18))
    lowering.expand_all(g)
    assert_fails(g, create("reduction_fusion"), create("reduction_fusion").match("mx/expanded", "sub/expanded"),
                 "'sub/expanded' reads s[i1, i2]", "not once per element")


def test_near_miss_kept_result_with_no_covering_read():
    """gamma = Relu(g0) is read by every row of the layernorm (no read visits it once) and by Neg."""
    nodes = [helper.make_node("Relu", ["g0"], ["gamma"], name="relu"),
             helper.make_node("LayerNormalization", ["x", "gamma"], ["y"], name="ln", axis=-1),
             helper.make_node("Neg", ["gamma"], ["z"], name="neg")]
    g = expanded(nodes, [vi("x", [2, 3, 8]), vi("g0", [8])], [vi("y", [2, 3, 8]), vi("z", [8])])
    t = create("reduction_fusion")
    assert_fails(g, t, t.match("relu/expanded", "ln/expanded"), "'gamma' of 'relu/expanded' is still needed",
                 "visits each element once")
    g.remove_node("neg/expanded")
    g.outputs.remove("z")
    app, _ = assert_applies(g, t, t.match("relu/expanded", "ln/expanded"))
    assert app.delta.bytes == -2 * 8 * F32                 # without the other reader: recomputed per row


# --- the real BERT-base training step --------------------------------------------------------

ATT = "/layer/attention"


def test_bert_scaled_softmax(bert):
    t = create("reduction_fusion")
    app, work = apply_on_bert(bert, t, t.match(f"{ATT}/self/Mul/expanded", f"{ATT}/self/Softmax/expanded"))
    scores = B * NH * L * L
    assert app.delta.bytes == -2 * scores * F32           # the scaled scores: written and read back
    assert app.delta.flops == 2 * scores                   # one multiply, recomputed in 3 sweeps


def test_bert_bias_residual_layernorm_keeps_the_sum_for_the_gradient(bert):
    t = create("reduction_fusion")
    app, work = apply_on_bert(bert, t, t.match(f"fused:{ATT}/output/dense/Add/expanded",
                                               f"{ATT}/output/LayerNorm/Mul/LayerNormFusion//expanded"))
    assert work.producer(f"{ATT}/output/Add_output_0").id == f"fused:{ATT}/output/dense/Add/expanded"
    assert app.delta.bytes == -B * L * H * F32            # the layernorm's read of h (LayerNormGrad still reads it)


def test_bert_softmax_grad_absorbs_the_scale_gradient(bert):
    t = create("reduction_fusion")
    app, _ = apply_on_bert(bert, t, t.match(f"{ATT}/self/Softmax_Grad/SoftmaxGrad_13_0/expanded",
                                            f"fused:{ATT}/self/Mul_Grad/Mul_0/expanded"))
    assert app.delta.bytes == -2 * B * NH * L * L * F32


def test_bert_layernorm_grad_with_residual_gradients_and_bias_gradient(bert):
    """blnrd + baob: the residual-gradient sum inlined, dX copies and the dense bias gradient absorbed."""
    t = create("reduction_fusion")
    lng = f"{ATT}/output/LayerNorm/Mul/LayerNormFusion/_Grad/LayerNormalizationGrad_0/expanded"
    act = B * L * H * F32
    app, g1 = apply_on_bert(bert, t, t.match("fused:/layer/output/Add_Grad/Identity_1/expanded", lng))
    assert app.delta.bytes == -2 * act                     # (2 reads + sum write) + sum read → 2 reads
    fused = "fused:/layer/output/Add_Grad/Identity_1/expanded"
    app, g2 = apply_on_bert(g1, t, t.match(fused, f"fused:{ATT}/output/Add_Grad/Identity_0/expanded"))
    assert app.delta.bytes == -2 * act                     # dX written and read by the copies
    app, g3 = apply_on_bert(g2, t, t.match(fused, f"{ATT}/output/dense/Add_Grad/ReduceSum_1/expanded"))
    assert app.delta.bytes == -2 * act                     # the dense-bias gradient's input: written, read
    assert g3.producer(f"layer.attention.output.dense.bias_grad").id == fused   # accumulated over the rows


def test_bert_near_miss_layernorm_parameter_gradient_reduces_over_rows(bert):
    t = create("reduction_fusion")
    lng = "/layer/output/LayerNorm/Mul/LayerNormFusion/_Grad/LayerNormalizationGrad_0/expanded"
    assert_fails(bert, t, t.match(lng, "fused:Mul:layer.output.LayerNorm.weight.g2/expanded"),
                 f"'{lng}' does not write 'layer.output.LayerNorm.weight_grad' once per element")
