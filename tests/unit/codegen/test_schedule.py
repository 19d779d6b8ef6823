"""The fork-join schedule (``codegen.program.schedule``): dependencies, which statements pair, that a
step's members never share a buffer, and that the exported step runs them side by side and stays right."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from codegen.numpy_ref.executor import run as reference
from codegen.numpy_ref.feeds import compare, feeds_for
from codegen.program import schedule
from codegen.program.module_plan import function_plan
from codegen.program.program import Statement
from ir.onnx_import import import_proto
from tests.unit.ir.onnx_models import model, vi

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

from codegen.export.package import export_package  # noqa: E402
from codegen.numba_cpu.backend import program  # noqa: E402
from tests.peer.test_export_fixtures import load_package  # noqa: E402

N = 1 << 20          # 4 MB a tensor: each kernel takes about a millisecond


def _st(k, reads, writes, kind="kernel"):
    return Statement(f"n{k}", "x", kind, "", [], tuple(reads), tuple(writes))


def test_dependencies_follow_data_views_and_recorded_buffers():
    sts = [_st(0, ["x"], ["a"]), _st(1, ["a"], ["v"], "view"), _st(2, ["v"], ["b"]), _st(3, ["y"], ["c"]),
           _st(4, ["c"], ["d"]), _st(5, ["x"], ["e"])]
    deps = schedule.dependencies(sts)
    assert deps == [set(), {0}, {0, 1}, set(), {3}, set()]                 # v is a's memory
    recorded = schedule.dependencies(sts, {"buf0": ["b", "e"]})       # e overwrites b's memory: after b's users
    assert recorded[5] == {2}
    sts.append(_st(6, ["v"], ["a2"], "reference"))                      # a reference kernel may return a view
    sts.append(_st(7, ["x"], ["a2"]))                                   # so overwriting its output waits for v's users
    assert schedule.dependencies(sts)[7] >= {2, 6}


def _two_branches():
    """Two independent element-wise chains on separate inputs, joined at the end."""
    nodes = [helper.make_node("Exp", ["x"], ["a"], name="exp"), helper.make_node("Tanh", ["a"], ["b"], name="tanh"),
             helper.make_node("Sigmoid", ["y"], ["c"], name="sig"), helper.make_node("Neg", ["c"], ["d"], name="neg"),
             helper.make_node("Add", ["b", "d"], ["out"], name="add")]
    return import_proto(model(nodes, [vi("x", [N]), vi("y", [N])], [vi("out", [N])]))


def test_independent_kernels_pair_and_never_share_a_slot():
    prog = program(_two_branches())
    sched = schedule.fork_join(prog, 2)
    assert sorted(k for step in sched.steps for k in step) == list(range(len(prog.statements)))
    pairs = [[prog.statements[k].node_id for k in step] for step in sched.steps if len(step) > 1]
    assert len(pairs) == 2 and all({a.split("/")[0], b.split("/")[0]} in ({"exp", "sig"}, {"tanh", "neg"})
                                   for a, b in pairs), pairs
    steps = schedule.units(prog.statements, sched)
    plan = function_plan(prog, schedule.merged(steps), list(prog.graph.outputs))
    for step in steps:
        if len(step) > 1:
            slots = [plan.slot_of[c] for st in step for c in st.reads + st.writes if c in plan.slot_of]
            assert len(slots) == len(set(slots)), (step, slots)          # no buffer shared inside a step
    assert sched.overlap() > 0.3 and "side by side" in "\n".join(sched.table(prog.statements))
    assert schedule.fork_join(prog, 1).steps == [[k] for k in range(len(prog.statements))]


@pytest.mark.parametrize("threads", [1, 2])
def test_the_exported_step_runs_pairs_side_by_side_and_matches(tmp_path, threads):
    g = _two_branches()
    feeds = feeds_for(g)
    pkg = load_package(export_package(g, tmp_path / f"pairs{threads}", inputs=feeds, version="t",
                                      parallel=False).path)   # prange kernels would run alone
    assert len(pkg.model.SCHEDULE) == 2 and "L.parallel(_p0, _p1)" in open(pkg.model.__file__).read()
    lib = pkg.model.L
    lib.TRACE = []
    try:
        got = pkg.Model(threads=threads).step(**feeds)
    finally:
        trace, lib.TRACE = lib.TRACE, None
    assert compare(reference(g, feeds), got, 1e-6) == []
    workers = {k for k, _, _ in trace}
    assert workers == ({0, 1} if threads == 2 else set())               # one thread: in order, untraced


def test_a_gemm_does_not_pair_with_a_much_shorter_kernel():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["y"], ["r"], name="relu"),
             helper.make_node("ReduceSum", ["h"], ["s"], name="sum", keepdims=0),
             helper.make_node("ReduceSum", ["r"], ["t"], name="sum2", keepdims=0)]
    g = import_proto(model(nodes, [vi("x", [512, 512]), vi("w", [512, 512]), vi("y", [64])],
                           [vi("s", []), vi("t", [])]))
    prog = program(g)
    sched = schedule.fork_join(prog, 2)
    mm = next(k for k, st in enumerate(prog.statements) if st.node_id == "mm")
    assert [mm] in sched.steps                                          # 27 ms of GEMM beside 3 µs: alone


def test_a_grouped_gemm_runs_its_members_side_by_side_where_blas_scales_poorly(monkeypatch, tmp_path):
    from transforms.registry import create
    from transforms import engine
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"], name="m1"),
             helper.make_node("MatMul", ["x", "w2"], ["b"], name="m2"),
             helper.make_node("Add", ["a", "b"], ["out"], name="add")]
    g = import_proto(model(nodes, [vi("x", [512, 512]), vi("w1", [512, 512]), vi("w2", [512, 512])],
                           [vi("out", [512, 512])]))
    t = create("horizontal_fusion")
    engine.apply(g, t, next(iter(t.matches(g))))
    prog = program(g)
    group = next(k for k, st in enumerate(prog.statements) if len(st.tasks) == 2)
    assert group not in schedule.fork_join(prog, 2).split                # BLAS on two threads wins here
    monkeypatch.setattr(schedule, "BLAS_SPEEDUP", 1.2)
    assert group in schedule.fork_join(prog, 2).split
    feeds = feeds_for(g)
    res = export_package(g, tmp_path / "grouped", inputs=feeds, version="t")
    text = (res.path / "model.py").read_text()
    assert "members side by side" in text and "L.parallel(_p0, _p1)" in text
    got = load_package(res.path).Model(threads=2).step(**feeds)
    assert compare(reference(g, feeds), got, 1e-5) == []
    assert np.isfinite(got["out"]).all()


def test_prange_kernels_never_share_a_step(tmp_path):
    """A kernel compiled with ``prange`` uses every thread itself; two of them launched from two threads
    would oversubscribe the cores (OpenMP) or abort the process (numba's workqueue layer)."""
    g = _two_branches()
    prog = program(g, parallel=True)
    assert any(ks.parallel for ks in prog.kernels.values())
    sched = schedule.fork_join(prog, 2)
    wide = {k for k, st in enumerate(prog.statements) if st.kernel and prog.kernels[st.kernel].parallel}
    assert wide and wide <= sched.wide and all(len(step) == 1 for step in sched.steps if set(step) & wide)


def test_a_failing_member_is_raised_after_the_others_end():
    from codegen.numba_cpu import library as L
    done = []

    def slow():
        import time
        time.sleep(0.2)
        done.append("slow")

    def boom():
        raise ValueError("member failed")
    saved = L._THREADS[0]
    L._THREADS[0] = 2
    try:
        with pytest.raises(ValueError, match="member failed"):
            L.parallel(boom, slow)
    finally:
        L._THREADS[0] = saved
    assert done == ["slow"]                          # the pool's member had ended before the error surfaced


def test_names_never_take_the_step_parameters():
    nodes = [helper.make_node("Relu", ["B"], ["B_output_0"], name="r"), helper.make_node("Neg", ["B_output_0"], ["R"])]
    g = import_proto(model(nodes, [vi("B", [4])], [vi("R", [4])]))
    prog = program(g)
    assert {prog.var(c) for c in ("B", "B_output_0", "R")}.isdisjoint({"W", "B", "R", "T", "S", "P"})


def test_the_loss_runs_first_unless_a_step_pairs_it_with_the_backward():
    """``loss_first`` moves the steps the loss needs ahead of the rest (in order); a step that pairs one of
    them with a backward statement keeps the order, and ``_forward`` then gets a plan of its own (0)."""
    from codegen.program.module_plan import loss_first
    fwd, grad, loss = _st(0, ("x",), ("h",)), _st(1, ("h",), ("dh",)), _st(2, ("h",), ("loss",))
    steps, shared = loss_first([[fwd], [grad], [loss]], [fwd, loss])
    assert steps == [[fwd], [loss], [grad]] and shared == 2
    paired = [[fwd], [grad, loss]]
    assert loss_first(paired, [fwd, loss]) == (paired, 0)


def test_a_loss_output_no_statement_writes_keeps_forward_separate(tmp_path):
    """A gradient graph (no plain outputs: every output is the 'loss') that also returns an initializer
    as it is: no statement writes it, so ``_forward`` keeps its own plan and returns it from ``W``."""
    from onnx import numpy_helper
    two = numpy_helper.from_array(np.array([2.0, 2.0, 2.0], np.float32), "two")
    m = model([helper.make_node("Mul", ["x", "two"], ["x_grad"])], [vi("x", [3])],
              [vi("x_grad", [3]), vi("two", [3])], [two])
    g = import_proto(m)
    pkg = load_package(export_package(g, tmp_path / "grad_pkg", inputs=feeds_for(g)).path)
    assert "def _step_forward(" not in (tmp_path / "grad_pkg" / "model.py").read_text()
    x = np.array([1.0, -2.0, 3.0], np.float32)
    out = pkg.Model().loss(x=x)
    np.testing.assert_array_equal(out["x_grad"], 2 * x)
    np.testing.assert_array_equal(out["two"], [2.0, 2.0, 2.0])
