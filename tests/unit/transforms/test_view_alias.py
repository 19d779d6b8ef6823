"""view_alias: a view reshape_elimination cannot remove (it splits an axis an Einsum reads, and a GEMM writes
its input) becomes an alias of its input — 0 bytes, the same values, the same exported program."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import helper, numpy_helper

from ir.movement import kernel_estimate, report
from ir.onnx_import import import_proto
from ir.printer import node_to_text
from tests.unit.ir.onnx_models import model, vi
from tests.unit.transforms.harness import assert_applies, assert_fails
from transforms.registry import create

F32 = 4
EXAMPLES = Path(__file__).resolve().parents[3] / "resources" / "examples"


def _heads_graph():
    """q = x·Wq, k = x·Wk split into 2 heads of 3 by Reshape, scores = Einsum over the heads: the attention
    pattern whose Reshapes reshape_elimination leaves (an Einsum cannot read a split axis, a GEMM writes q)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((6, 6)).astype(np.float32), n) for n in ("wq", "wk")]
    inits.append(numpy_helper.from_array(np.array([2, 4, 2, 3], np.int64), "heads"))
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"], name="q_proj"),
             helper.make_node("MatMul", ["x", "wk"], ["k"], name="k_proj"),
             helper.make_node("Reshape", ["q", "heads"], ["q4"], name="split_q"),
             helper.make_node("Reshape", ["k", "heads"], ["k4"], name="split_k"),
             helper.make_node("Einsum", ["q4", "k4"], ["s"], name="scores", equation="bqhd,bkhd->bhqk")]
    return import_proto(model(nodes, [vi("x", [2, 4, 6])], [vi("s", [2, 2, 4, 4])], inits))


def test_a_view_reshape_elimination_leaves_becomes_an_alias_of_its_input():
    g = _heads_graph()
    assert not create("reshape_elimination").check(g, create("reshape_elimination").match("split_q")).ok
    t = create("view_alias")
    assert [m.anchors for m in t.matches(g)] == [("split_q",), ("split_k",)]
    before = kernel_estimate(g, g.nodes["split_q"]).bytes
    assert before >= 2 * 2 * 4 * 6 * F32                        # read and written: a copy
    app, work = assert_applies(g, t, t.match("split_q"))         # same outputs; Δ equals a recount
    assert app.delta.bytes == -before
    assert kernel_estimate(work, work.nodes["split_q"]).bytes == 0
    assert work.nodes["split_q"].impl == "alias" and "impl=alias" in node_to_text(work.nodes["split_q"])
    assert [m.anchors for m in t.matches(work)] == [("split_k",)]
    assert_fails(work, t, t.match("split_q"), "already an alias")


def test_a_view_of_a_broadcast_stays_a_copy():
    nodes = [helper.make_node("Expand", ["b", "shape"], ["e"], name="bcast"),
             helper.make_node("Reshape", ["e", "flat"], ["f"], name="flatten"),
             helper.make_node("Add", ["f", "x"], ["y"], name="add")]
    inits = [numpy_helper.from_array(np.array([4, 3], np.int64), "shape"),
             numpy_helper.from_array(np.array([12], np.int64), "flat")]
    g = import_proto(model(nodes, [vi("b", [3]), vi("x", [12])], [vi("y", [12])], inits))
    t = create("view_alias")
    assert_fails(g, t, t.match("flatten"), "'bcast' (Expand)", "copies")
    assert_fails(g, t, t.match("add"), "is not a view op")
    assert_fails(g, t, t.match("nothing"), "no library node")


def test_the_exported_program_is_the_same_and_runs_the_alias_as_a_view():
    """The program already gave the view as ``x.reshape(…)``: the alias changes the count, not the code."""
    pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")
    from codegen.numba_cpu.backend import program
    from codegen.program.traffic import traffic
    g = _heads_graph()
    t = create("view_alias")
    work = g.clone()
    for m in list(t.matches(work)):
        assert t.check(work, m).ok
        t.rewrite(work, m, 1)

    def lines(graph):
        prog = program(graph)
        return [(st.kind, tuple(st.lines)) for st in prog.statements], traffic(prog)
    (before, moved_before), (after, moved_after) = lines(g), lines(work)
    assert before == after
    assert [k for k, text in after if any(".reshape(" in line for line in text)] == ["view", "view"]
    assert moved_before.exported == moved_after.exported
    assert moved_before.fused - moved_after.fused == 2 * (2 * (2 * 4 * 6 * F32) + 4 * 8)   # data both ways + shape


def test_on_the_bundled_recipe_every_leftover_view_becomes_an_alias_and_replays(tmp_path):
    """The BERT layer after the bundled 514-step history: eight head Reshapes stay (−50.3 MB as aliases);
    the pass is recorded and replays to the same graph."""
    from studio.session.recipe import Pass, run_pass
    from studio.session import Session
    s = Session.open(EXAMPLES / "bert_layer_base_train.onnx", autosave=False)
    s.load_history(EXAMPLES / "bert_layer_base_train.history.json")
    before = report(s.graph).total.bytes
    assert run_pass(s, Pass("view_alias")) == 8
    after = report(s.graph).total.bytes
    assert before - after == pytest.approx(50.33e6, rel=1e-3)
    path = tmp_path / "alias.history.json"
    s.save_history(path)
    assert json.loads(path.read_text())["steps"][-1]["transformation"] == "view_alias"
    again = Session.open(EXAMPLES / "bert_layer_base_train.onnx", autosave=False)
    again.load_history(path)
    assert report(again.graph).total.bytes == after
