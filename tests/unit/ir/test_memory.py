"""ir.memory: lifetimes, in-place rules, valid sharing, peak and arena bytes (hand-counted)."""
from __future__ import annotations

import json

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from ir import expr as E
from ir import lowering, memory
from ir.containers import Container, Role
from ir.graph import Graph
from ir.maps import finalize
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, Tasklet
from ir.onnx_import import import_model, import_proto
from ir.serialize import dumps, loads
from tests.unit.ir.onnx_models import model, vi

F32 = 4
T = 16 * 16 * F32          # one [16, 16] float32 tensor: 1024 B
BERT = "resources/examples/bert_layer_base_train.onnx"


def _chain(expand: bool = False):
    """x[16,16] -Relu-> a -Neg-> b -ReduceSum(axis 1)-> s[16] (graph output)."""
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"),
             helper.make_node("Neg", ["a"], ["b"], name="n"),
             helper.make_node("ReduceSum", ["b", "axes"], ["s"], name="sum", keepdims=0)]
    g = import_proto(model(nodes, [vi("x", [16, 16])], [vi("s", [16])], [axes]))
    if expand:
        lowering.expand_all(g)
    return g


def test_lifetimes_follow_the_schedule():
    g = _chain()
    lives = memory.lifetimes(g)
    assert (lives["x"].start, lives["x"].end) == (-1, 3)        # input: entry to exit
    assert (lives["a"].start, lives["a"].end) == (0, 1)
    assert (lives["b"].start, lives["b"].end) == (1, 2)
    assert (lives["s"].start, lives["s"].end) == (2, 3)         # graph output: to the exit
    assert lives["a"].nbytes == T


def test_peak_and_arena_without_sharing():
    g = _chain()
    axes = 8
    # slots: entry x | r: x,a | n: x,a,b | sum: x,b,s | exit x,s   (+ the axes constant throughout)
    assert memory.live_profile(g) == [axes + T, axes + 2 * T, axes + 3 * T, axes + 2 * T + 64, axes + T + 64]
    assert memory.peak_bytes(g) == axes + 3 * T
    assert memory.arena_bytes(g) == axes + 3 * T + 64


def test_inplace_sharing_lowers_peak_and_arena():
    g = _chain(expand=True)
    memory.write_buffers(g, {"buf0": ["a", "b"]})                # Neg runs in place: b overwrites a
    assert memory.buffers(g) == {"buf0": ["a", "b"]}
    assert memory.peak_bytes(g) == 8 + 2 * T + 64                 # the Neg slot counts a/b once
    assert memory.arena_bytes(g) == 8 + 2 * T + 64


def test_invalid_sharing_is_ignored():
    g = _chain(expand=True)
    memory.write_buffers(g, {"buf0": ["a", "s"], "buf1": ["x", "b"]})   # s is an output, x an input
    assert memory.buffers(g) == {}
    assert memory.peak_bytes(g) == 8 + 3 * T


def test_buffers_round_trip_through_json_and_print():
    g = _chain(expand=True)
    memory.write_buffers(g, {"buf0": ["a", "b"], "lonely": ["s"]})
    assert json.loads(g.meta["buffers"]) == {"buf0": ["a", "b"]}     # single members are not recorded
    back = loads(dumps(g))
    assert memory.read_buffers(back) == {"buf0": ["a", "b"]}
    assert memory.peak_bytes(back) == memory.peak_bytes(g)
    assert memory.buffers_to_text(back) == [f"buffer buf0 ({T} B): a, b"]


def test_inplace_rules():
    g = _chain()
    assert memory.inplace_reason(g, g.nodes["n"], "a", "b") is None                 # elementwise op
    assert "does not read" in memory.inplace_reason(g, g.nodes["n"], "b", "a")
    assert "differ in size" in memory.inplace_reason(g, g.nodes["sum"], "b", "s")   # a reduction
    lowering.expand_all(g)
    assert memory.inplace_reason(g, g.nodes["n/expanded"], "a", "b") is None


def test_inplace_rules_for_library_views_and_rows():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"], name="view"),
             helper.make_node("MatMul", ["r", "r"], ["m"], name="mm"),
             helper.make_node("Transpose", ["m"], ["t"], name="tr", perm=[1, 0]),
             helper.make_node("Softmax", ["t"], ["y"], name="sm", axis=-1)]
    shape = numpy_helper.from_array(np.array([8, 8], np.int64), "shape")
    g = import_proto(model(nodes, [vi("x", [64])], [vi("y", [8, 8])], [shape]))
    assert memory.inplace_reason(g, g.nodes["view"], "x", "r") is None               # a view aliases
    assert "library call" in memory.inplace_reason(g, g.nodes["mm"], "r", "m")
    lowering.expand_all(g)
    assert "another element" in memory.inplace_reason(g, g.nodes["tr/expanded"], "m", "t")
    # softmax reads its row three times, all before it writes the row: in place is safe
    assert memory.inplace_reason(g, g.nodes["sm/expanded"], "t", "y") is None


def _two_statement_map(second_reads: str) -> tuple[Graph, MapNode]:
    """map[i0=0:4] { b[i0] = -a[i0]; c[i0] = <second_reads>[i0] + 1 } with a produced by a Relu."""
    g = import_proto(model([helper.make_node("Relu", ["x"], ["a"], name="r")], [vi("x", [4])], [vi("a", [4])]))
    g.outputs = []
    for name in ("b", "c"):
        g.add_container(Container(name, (4,), "float32", Role.TRANSIENT))
    i = E.Var("i0")
    body = [Tasklet("t0", E.Un("neg", E.Var("v")), {"v": Memlet("a", (i,))}, Memlet("b", (i,))),
            Tasklet("t1", E.Bin("add", E.Var("v"), E.Const(1.0)), {"v": Memlet(second_reads, (i,))},
                    Memlet("c", (i,)))]
    m = finalize(MapNode("m", [("i0", Range.of(0, 4))], body), g)
    g.add_node(m)
    g.outputs = ["c"]
    return g, m


def test_map_that_reads_after_writing_is_not_in_place():
    g, m = _two_statement_map("a")
    assert "reads 'a' after writing 'b'" in memory.inplace_reason(g, m, "a", "b")
    assert memory.inplace_reason(g, m, "a", "c") is None            # every read of a comes first
    g, m = _two_statement_map("b")
    assert memory.inplace_reason(g, m, "a", "b") is None


def test_bert_peak_is_a_sweep_and_matches_the_schedule():
    g = import_model(BERT)
    profile = memory.live_profile(g)
    assert len(profile) == len(g.nodes) + 2
    peak = memory.peak_bytes(g)
    assert peak == max(profile)
    # at the peak the GELU output [8,128,3072] and its 2-d reshape (both 12582912 B) are live
    at = profile.index(peak) - 1
    assert g.topo_order()[at].op_type == "Reshape"
    assert memory.arena_bytes(g) == sum(life.nbytes for life in memory.lifetimes(g).values())


def test_unused_sharing_table_costs_nothing():
    g = _chain()
    assert memory.buffers(g) == {} and memory.buffer_groups(g) == {}
    g.meta["buffers"] = json.dumps({"gone": ["no_such_container", "a"]})
    assert memory.read_buffers(g) == {"gone": ["a"]}


def test_dtypes_change_bytes():
    g = import_proto(model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                           [vi("x", [10], TensorProto.FLOAT16)], [vi("y", [10], TensorProto.FLOAT16)]))
    assert memory.peak_bytes(g) == 2 * 10 * 2


def test_holding_a_graph_builds_its_analyses_once_and_only_for_that_graph():
    g, other = _chain(), _chain()
    assert memory.sharing(g) is not memory.sharing(g)              # outside: a fresh analysis each time
    with memory.holding(g):
        sh, lives = memory.sharing(g), memory.lifetimes(g)
        assert memory.sharing(g) is sh and memory.lifetimes(g) is lives
        assert memory.sharing(other) is not memory.sharing(other)  # a copy a trial rewrite edits: fresh
        assert memory.lifetimes(g, memory.schedule(g)) is not lives  # an explicit order: computed
        assert lives == memory.lifetimes(g, memory.schedule(g))
    assert memory.lifetimes(g) is not lives and memory.sharing(g) is not sh
