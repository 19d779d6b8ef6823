"""memory_reuse: whole-graph plan, in-place and pair matches, near misses, figures (hand-counted)."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from ir import lowering, memory
from ir.movement import Estimate
from ir.onnx_import import import_model, import_proto
from ir.serialize import dumps, loads
from ir.verify import verify
from transforms import engine
from transforms.registry import create
from tests.unit.ir.onnx_models import model, vi
from tests.unit.transforms.harness import assert_applies, assert_fails

F32 = 4
T = 16 * 16 * F32          # one [16, 16] float32 tensor
S = 16 * F32               # one [16, 1] float32 tensor
AXES = 8                   # the int64 axes constant
BERT = "resources/examples/bert_layer_base_train.onnx"


def _inplace_chain():
    """x[16,16] -Relu-> a -Neg-> b -ReduceSum(axis 1)-> out[16] (all expanded)."""
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"), helper.make_node("Neg", ["a"], ["b"], name="n"),
             helper.make_node("ReduceSum", ["b", "axes"], ["out"], name="sum", keepdims=0)]
    g = import_proto(model(nodes, [vi("x", [16, 16])], [vi("out", [16])], [axes]))
    lowering.expand_all(g)
    return g


def _mixed_chain():
    """s = ReduceSum(x) [16,1] -Neg-> s2 (output); a = Relu(x); b = a@w; c = b - a; d = c@w;
    y = Relu(d) (output). Lifetimes: s 0–1, a 2–4, b 3–4, c 4–5, d 5–6."""
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    w = numpy_helper.from_array(np.eye(16, dtype=np.float32), "w")
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["s"], name="red", keepdims=1),
             helper.make_node("Neg", ["s"], ["s2"], name="ns"),
             helper.make_node("Relu", ["x"], ["a"], name="r"),
             helper.make_node("MatMul", ["a", "w"], ["b"], name="mm1"),
             helper.make_node("Sub", ["b", "a"], ["c"], name="n"),
             helper.make_node("MatMul", ["c", "w"], ["d"], name="mm2"),
             helper.make_node("Relu", ["d"], ["y"], name="fin")]
    g = import_proto(model(nodes, [vi("x", [16, 16])], [vi("s2", [16, 1]), vi("y", [16, 16])], [axes, w]))
    lowering.expand_all(g)
    return g


def test_matches_whole_graph_and_inplace_kernels():
    g = _inplace_chain()
    t = create("memory_reuse")
    found = [m.anchors for m in t.matches(g)]
    assert found == [(), ("n/expanded",)]                   # plan all; run Neg in place
    assert [m.anchors for m in t.matches(g, within=["n/expanded"])] == [("n/expanded",)]


def test_whole_graph_plan_runs_neg_in_place():
    g = _inplace_chain()
    t = create("memory_reuse")
    app, work = assert_applies(g, t, t.match())
    assert app.delta.bytes == 0 and app.created == app.removed == app.changed == ()
    assert memory.read_buffers(work) == {"buf0": ["a", "b"]}
    # slots: x | x,a | x,a,b | x,b,out | x,out  — in place, the Neg slot holds a/b once
    assert app.extra["peak_before"] == AXES + 3 * T
    assert app.extra["peak_after"] == AXES + 2 * T + S
    assert app.extra["arena_before"] == AXES + 3 * T + S and app.extra["arena_after"] == AXES + 2 * T + S


def test_whole_graph_plan_shares_disjoint_lifetimes():
    g = _mixed_chain()
    t = create("memory_reuse")
    app, work = assert_applies(g, t, t.match())
    # largest first: a opens buf0; b overlaps a -> buf1; c runs in place of a (Sub reads a at the
    # point it writes c); d touches c at a MatMul (not in place) -> after b in buf1; s fits buf0
    assert memory.read_buffers(work) == {"buf0": ["s", "a", "c"], "buf1": ["b", "d"]}
    iface = 2 * T + AXES                                     # x, w, axes
    assert app.extra["peak_before"] == iface + S + 3 * T     # at Sub: s2, a, b, c
    assert app.extra["peak_after"] == iface + S + 2 * T      # c overwrites a
    assert app.extra["arena_before"] - app.extra["arena_after"] == S + 2 * T   # s, c, d need no memory


def test_inplace_match_and_library_near_miss():
    g = _mixed_chain()
    t = create("memory_reuse")
    assert [m.anchors for m in t.matches(g)] == [(), ("n/expanded",), ("mm2",)]
    _, work = assert_applies(g, t, t.match("n/expanded"))
    assert memory.read_buffers(work) == {"buf0": ["b", "c"]}      # the first dying input of Sub(b, a)
    assert_fails(g, t, t.match("mm1"), "no transient input of 'mm1' dies there")
    assert_fails(g, t, t.match("mm2"), "'mm2' (MatMul) is a library call; it cannot run in place")


def test_pair_match_and_near_misses():
    g = _mixed_chain()
    pair = create("memory_reuse", {"first": "a", "second": "d"})
    assert [m.anchors for m in pair.matches(g)] == [("r/expanded", "mm2")]
    app, work = assert_applies(g, pair, pair.match("r/expanded", "mm2"))
    assert memory.read_buffers(work) == {"buf0": ["a", "d"]}
    assert app.extra["arena_after"] == app.extra["arena_before"] - T
    assert app.extra["peak_after"] == app.extra["peak_before"]      # disjoint sharing: same liveness

    def fails(first, second, anchors, *why, graph=g):
        t = create("memory_reuse", {"first": first, "second": second})
        assert_fails(graph, t, t.match(*anchors), *why)

    fails("a", "b", ("r/expanded", "mm1"), "the lifetimes of 'a' (kernels 2–4) and 'b' (kernels 3–4) overlap")
    fails("c", "d", ("n/expanded", "mm2"), "'c' dies where 'd' is born", "'mm2' (MatMul) is a library call")
    fails("s", "a", ("red/expanded", "r/expanded"), f"'a' ({T} B) is larger than the buffer of 's' ({S} B)")
    fails("c", "y", ("n/expanded", "fin/expanded"), "'y' is not a transient", "graph output")
    fails("a", "d", ("mm1", "mm2"), "anchors ['mm1', 'mm2'] are not the producers")
    fails("b", "d", ("mm1", "mm2"), "'d' already shares buffer 'buf0'", graph=work)


def test_nothing_left_to_plan():
    g = _inplace_chain()
    t = create("memory_reuse")
    engine.apply(g, t, t.match())
    assert_fails(g, t, t.match(), "no further transients can share a buffer")


def test_plan_serializes_and_survives_replayed_figures():
    g = _mixed_chain()
    t = create("memory_reuse")
    engine.apply(g, t, t.match())
    back = loads(dumps(g))
    assert memory.buffers(back) == memory.buffers(g)
    assert memory.arena_bytes(back) == memory.arena_bytes(g)


def test_bert_whole_graph_plan():
    g = import_model(BERT)
    t = create("memory_reuse")
    before = memory.live_profile(g)
    app = engine.apply(g, t, t.match())
    verify(g)
    assert app.delta.bytes == 0
    assert app.extra["peak_before"] == max(before)
    # the peak sits at the Reshape of the GELU output, which now aliases it: that slot drops by
    # one [8, 128, 3072] float32 tensor and the peak moves elsewhere
    gelu = 8 * 128 * 3072 * F32
    at = before.index(max(before))
    assert memory.live_profile(g)[at] == max(before) - gelu
    assert app.extra["peak_after"] == max(memory.live_profile(g)) < app.extra["peak_before"]
    assert app.extra["arena_after"] < 0.35 * app.extra["arena_before"]
    assert app.extra["arena_after"] >= app.extra["peak_after"]          # a static plan cannot beat liveness
    assert app.extra["shared_containers"] >= 250


def test_bert_inplace_reshape():
    g = import_model(BERT)
    t = create("memory_reuse")
    node = "/layer/output/dense/MatMul_Grad/Reshape_3"
    assert node in {m.anchors[0] for m in t.matches(g) if m.anchors}
    app = engine.apply(g, t, t.match(node))
    assert app.extra["peak_before"] - 8 * 128 * 3072 * F32 <= app.extra["peak_after"] < app.extra["peak_before"]


def test_ranking_predicts_a_zero_delta_from_the_check_alone():
    """``moves_bytes`` is false: every rewrite leaves each kernel's figures as they were (the trial's Δ is
    zero), so ranking takes the check's verdict with a zero Δ instead of a trial rewrite."""
    g = import_model(BERT)
    lowering.expand_all(g)
    t = create("memory_reuse")
    assert not t.moves_bytes
    ranked = 0
    for m in list(t.matches(g))[:40]:
        r = engine.rank_one(g, t, m)
        assert r.ok == t.check(g, m).ok
        if r.ok:
            app, _ = engine.trial(g, t, m)
            assert app.delta == r.delta == Estimate() and app.extra["peak_after"] <= app.extra["peak_before"]
            ranked += 1
    assert ranked >= 2


def test_whole_graph_check_agrees_with_the_plan():
    """The whole-graph match's quick check (two free transients with disjoint lifetimes) says what comparing
    the greedy plan with the recorded one says: before planning, after planning, and on small chains."""
    t = create("memory_reuse")
    bert = import_model(BERT)
    lowering.expand_all(bert)
    graphs = [_inplace_chain(), _mixed_chain(), bert]
    planned = bert.clone()
    engine.apply(planned, t, t.match())
    graphs.append(planned)
    verdicts = []
    for g in graphs:
        m = t.match()
        plan = t._plan(g, m)
        verdicts.append(t.check(g, m).ok)
        assert verdicts[-1] == (not hasattr(plan, "reason")), plan
    assert verdicts[2] and not verdicts[3]
