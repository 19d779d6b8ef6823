"""recompute: matches, near misses with reasons, verify, equal outputs, Δbytes and Δpeak (hand-counted)."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from ir import lowering, memory
from ir.movement import report
from ir.onnx_import import import_model, import_proto
from ir.verify import verify
from transforms import engine
from transforms.registry import create
from tests.conftest import FIXTURES
from tests.unit.ir.onnx_models import model, vi
from tests.unit.transforms.harness import assert_applies, assert_fails

F32 = 4
A = 8 * 16 * F32           # one [8, 16] activation: 512 B
BERT = "resources/examples/bert_layer_base_train.onnx"
BERT_SMALL = str(FIXTURES / "ort_artifacts/bert_layer_small/legacy_ln3/train_step_adamw.onnx")
mk = helper.make_node


def _toy(expand: bool = True):
    """A training-step shape: forward h = x + b, a = tanh(h), z = a @ w, loss = Σz; a backward
    chain from z (with a wide [8, 64] temporary) that reads a 11 kernels later (mula) and h after
    that (mulh), ending in w_grad."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.linspace(-1, 1, 16).astype(np.float32), "b"),
             numpy_helper.from_array((rng.standard_normal((16, 64)) * 0.1).astype(np.float32), "v"),
             numpy_helper.from_array((rng.standard_normal((64, 16)) * 0.1).astype(np.float32), "u"),
             numpy_helper.from_array(np.array([0], np.int64), "axes")]
    nodes = [mk("Add", ["x", "b"], ["h"], name="add"), mk("Tanh", ["h"], ["a"], name="act"),
             mk("MatMul", ["a", "w"], ["z"], name="fc"), mk("ReduceSum", ["z"], ["loss"], name="lsum", keepdims=0),
             mk("Neg", ["z"], ["d1"], name="n1"), mk("MatMul", ["d1", "v"], ["e"], name="wide"),
             mk("MatMul", ["e", "u"], ["d2"], name="narrow"), mk("Tanh", ["d2"], ["d3"], name="t3"),
             mk("Neg", ["d3"], ["d4"], name="n4"), mk("Tanh", ["d4"], ["d5"], name="t5"),
             mk("Neg", ["d5"], ["d6"], name="n6"), mk("Tanh", ["d6"], ["d7"], name="t7"),
             mk("Mul", ["a", "d7"], ["ga"], name="mula"), mk("Mul", ["ga", "h"], ["gh"], name="mulh"),
             mk("ReduceSum", ["gh", "axes"], ["w_grad"], name="wg", keepdims=0)]
    g = import_proto(model(nodes, [vi("x", [8, 16]), vi("w", [16, 16])],
                           [vi("loss", []), vi("w_grad", [16])], inits))
    if expand:
        lowering.expand_all(g)
    return g


def _far_view():
    """p = relu(x) [8, 64] feeds the loss; its flat view pv is read only by the last backward kernel."""
    shape = numpy_helper.from_array(np.array([512], np.int64), "flat")
    nodes = [mk("Relu", ["x"], ["p"], name="r"), mk("Reshape", ["p", "flat"], ["pv"], name="view"),
             mk("ReduceMax", ["p"], ["s"], name="mx", axes=[1], keepdims=1),
             mk("ReduceSum", ["p"], ["loss"], name="ls", keepdims=0), mk("Reshape", ["x", "flat"], ["d0"], name="xv")]
    nodes += [mk("Neg", [f"d{k}"], [f"d{k + 1}"], name=f"n{k}") for k in range(9)]
    nodes += [mk("Mul", ["pv", "d9"], ["x_grad"], name="m"), mk("Mul", ["s", "x"], ["s_grad"], name="ms")]
    g = import_proto(model(nodes, [vi("x", [8, 64])],
                           [vi("loss", []), vi("x_grad", [512]), vi("s_grad", [8, 64])], [shape], opset=13))
    lowering.expand_all(g)
    return g


def test_matches_far_backward_readers():
    g = _toy()
    t = create("recompute")
    assert [m.anchors for m in t.matches(g)] == [("add/expanded", "mulh/expanded"),
                                                  ("act/expanded", "mula/expanded")]
    assert [m.anchors for m in t.matches(g, within=["mula/expanded"])] == [("act/expanded", "mula/expanded")]


def test_recompute_frees_the_activation_over_the_window():
    g = _toy()
    t = create("recompute")
    app, work = assert_applies(g, t, t.match("act/expanded", "mula/expanded"))
    assert app.created == ("act/expanded/recompute",) and app.changed == ("mula/expanded",)
    assert list(work.nodes).index("act/expanded/recompute") == list(work.nodes).index("mula/expanded") - 1
    assert app.delta.bytes == 2 * A                 # the clone re-reads h and writes a copy of a
    iface = 8 * 16 * F32 + 16 * 16 * F32 + 16 * F32 + 2 * 16 * 64 * F32 + 8   # x, w, b, v, u, axes
    # the peak sits at the wide backward GEMM: h, a, d1, e[8,64] and the loss were live; a is not any more
    assert app.extra["peak_before"] == iface + 3 * A + 8 * 64 * F32 + F32
    assert app.extra["peak_after"] == app.extra["peak_before"] - A
    assert memory.lifetimes(work)["a"].end == list(work.nodes).index("fc")


def test_then_fusing_the_clone_cancels_the_copy():
    g = _toy()
    t, fuse = create("recompute"), create("map_fusion")
    _, work = assert_applies(g, t, t.match("act/expanded", "mula/expanded"))
    app, fused = assert_applies(work, fuse, fuse.match("act/expanded/recompute", "mula/expanded"))
    assert app.delta.bytes == -2 * A                # the copy of a becomes a local
    # net effect: mula re-reads h instead of the saved a (same size): 0 bytes, one activation less live
    assert report(fused).total.bytes == report(g).total.bytes
    assert memory.peak_bytes(fused) == memory.peak_bytes(g) - A


def test_clone_of_a_fused_map_reads_the_stored_preactivation():
    g = _toy()
    fuse, t = create("map_fusion"), create("recompute")
    _, g = assert_applies(g, fuse, fuse.match("add/expanded", "act/expanded"))   # h is still stored
    app, work = assert_applies(g, t, t.match("fused:add/expanded", "mula/expanded"))
    clone = work.nodes[app.created[0]]
    assert clone.input_names() == ["h"] and clone.output_names() == ["a/recompute"]
    assert app.delta.bytes == 2 * A                 # not x and b: the GEMM-free slice tanh(h)


def test_moving_a_view_removes_the_original():
    g = _far_view()
    t = create("recompute")
    app, work = assert_applies(g, t, t.match("view", "m/expanded"))
    assert app.removed == ("view",) and app.created == ("view/recompute",)
    assert app.delta.bytes == 0 and "pv" not in work.containers


def test_near_miss_forward_consumer():
    g = _toy()
    assert_fails(g, create("recompute"), create("recompute").match("act/expanded", "fc"),
                 "'fc' is part of the forward pass")


def test_near_miss_too_close():
    g = _toy()
    t = create("recompute", {"min_distance": 20})
    assert_fails(g, t, t.match("act/expanded", "mula/expanded"),
                 "'mula/expanded' runs 11 kernel(s) after 'act/expanded' (< min_distance=20)")


def test_near_miss_library_call():
    g = _toy()
    t = create("recompute", {"min_distance": 1})
    assert_fails(g, t, t.match("fc", "n1/expanded"), "'fc' (MatMul) is a library call")


def test_near_miss_keeps_more_alive_than_it_frees():
    g = _far_view()
    t = create("recompute", {"max_flops_per_element": 1000})
    assert_fails(g, t, t.match("mx/expanded", "ms/expanded"),
                 f"keeps {8 * 64 * F32} B of its inputs (p) alive longer, more than the {8 * F32} B of s")


def test_near_miss_no_loss_and_planned_memory():
    g = _toy()
    g.outputs = ["w_grad"]
    assert_fails(g, create("recompute"), create("recompute").match("act/expanded", "mula/expanded"),
                 "no loss output")
    g = _toy()
    reuse = create("memory_reuse")
    engine.apply(g, reuse, reuse.match())
    assert_fails(g, create("recompute"), create("recompute").match("act/expanded", "mula/expanded"),
                 "shares a buffer (memory_reuse)", "plan memory after recompute")


def _apply_counted(g, t, match):
    """engine.apply plus verify and Δ == full recount (no executor: BERT-base runs take seconds)."""
    before = report(g).total
    app = engine.apply(g, t, match)
    verify(g)
    assert report(g).total - before == app.delta
    return app


def test_bert_gelu_and_layernorm():
    g = import_model(BERT)
    t = create("recompute")
    gelu = _apply_counted(g.clone(), t, t.match("Gelu", "/layer/output/dense/MatMul_Grad/Reshape_3"))
    assert gelu.delta.bytes == 2 * 8 * 128 * 3072 * F32      # re-read the pre-activation, write a copy
    assert gelu.extra["peak_after"] == gelu.extra["peak_before"]   # the peak is at that Reshape itself
    ln = _apply_counted(g, t, t.match("/layer/attention/output/LayerNorm/Mul/LayerNormFusion/",
                                      "/layer/intermediate/dense/MatMul_Grad/Reshape_3"))
    assert ln.delta.bytes == 2 * 8 * 128 * 768 * F32 + 2 * 768 * F32   # x, y copy, gamma, beta
    assert ln.extra["peak_after"] < ln.extra["peak_before"]
    assert g.nodes["/layer/attention/output/LayerNorm/Mul/LayerNormFusion//recompute"].outputs[1:] == [None, None]


def test_bert_small_outputs_unchanged():
    g = import_model(BERT_SMALL)
    t = create("recompute")
    ok = [m for m in t.matches(g) if t.check(g, m).ok]
    assert len(ok) >= 10
    work = g
    for m in ok[:6]:
        if t.check(work, m).ok:
            _, work = assert_applies(work, t, m)
