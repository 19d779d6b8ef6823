"""Fused contractions run panel by panel on the CPU (``codegen.program.panels``): the axis and width
chosen, the loop the program runs, its results against the reference executor, and the refusals.
The panel size is lowered so that small graphs are cut into panels."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from codegen.numpy_ref.executor import run
from codegen.numpy_ref.feeds import compare, feeds_for
from codegen.program import panels
from codegen.program.traffic import traffic
from ir import expr as E
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, OpNode, Tasklet
from tests.unit.ir.onnx_models import vi
from tests.unit.transforms.test_reduction_fusion import expanded, w
from transforms import engine
from transforms.registry import create

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")

FUSE = create("gemm_epilogue_fusion")


def _fused(x_shape, w_shape):
    """x · w + b → Relu, the bias and activation fused into the MatMul's epilogue."""
    n = w_shape[-1]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["u"], name="bias"),
             helper.make_node("Relu", ["u"], ["y"], name="act")]
    g = expanded(nodes, [vi("x", list(x_shape))], [vi("y", list(x_shape[:-1]) + [n])],
                 [w("w", list(w_shape)), w("b", [n])], fuse=[("bias/expanded", "act/expanded")])
    engine.apply(g, FUSE, FUSE.match("mm", "fused:bias/expanded"))
    return g


def _program(g):
    from codegen.numba_cpu.runner import CompiledGraph
    return CompiledGraph(g)


@pytest.mark.parametrize("x_shape, w_shape, budget, loop, sliced", [
    ((4, 16, 32), (32, 64), 8 << 10, "for lo in L.panels(4, 2):", "x[lo:lo + 2]"),         # rows of the batch
    ((64, 32), (32, 256), 16 << 10, "for lo in L.panels(256, 64):", "w[:, lo:lo + 64]"),    # columns: x re-read
])
def test_a_fused_matmul_runs_in_panels_and_matches_the_reference(monkeypatch, x_shape, w_shape, budget, loop, sliced):
    monkeypatch.setattr(panels, "PANEL_BYTES", budget)
    g = _fused(x_shape, w_shape)
    cg = _program(g)
    st = next(s for s in cg.program.statements if s.node_id == "epilogue:mm")
    assert st.lines[0] == loop and sliced in st.lines[1] and st.lines[2].lstrip().startswith("K.k_")
    acc = cg.program.temps["epilogue:mm/@acc"]
    assert acc.nbytes(g.bindings) <= budget < 4 * int(np.prod(x_shape[:-1])) * w_shape[-1]   # one panel of the product
    feeds = feeds_for(g)
    assert not compare(run(g, feeds), cg.run(feeds), 1e-5)
    moved = next(s for s in traffic(cg.program).statements if s.node_id == "epilogue:mm")
    assert moved.exported == moved.fused                     # x, w, b read once, y written once


def test_without_panels_the_product_makes_a_round_trip(monkeypatch):
    g = _fused((64, 32), (32, 256))
    monkeypatch.setattr(panels, "PANEL_BYTES", 1 << 10)         # no width fits: one BLAS call, one kernel
    cg = _program(g)
    st = next(s for s in cg.program.statements if s.node_id == "epilogue:mm")
    assert not any("L.panels" in line for line in st.lines)
    moved = next(s for s in traffic(cg.program).statements if s.node_id == "epilogue:mm")
    assert moved.exported == moved.fused + 2 * 64 * 256 * 4
    feeds = feeds_for(g)
    assert not compare(run(g, feeds), cg.run(feeds), 1e-5)


def test_labels_of_each_contraction():
    mm = OpNode("mm", "MatMul", [], [])
    assert panels.labels(mm, [(8, 128, 768), (768, 3072)], (8, 128, 3072)) == (
        [["b0", "m", "k"], ["k", "n"]], ["b0", "m", "n"])
    assert panels.labels(mm, [(1, 4, 5), (3, 5, 6)], (3, 4, 6))[0] == [[None, "m", "k"], ["b0", "k", "n"]]
    fmm = OpNode("f", "FusedMatMul", [], [], domain="com.microsoft", attrs={"transB": 1})
    assert panels.labels(fmm, [(8, 128, 768), (3072, 768)], (8, 128, 3072))[0] == [["b0", "m", "k"], ["n", "k"]]
    gemm = OpNode("g", "Gemm", [], [], attrs={"transA": 1})
    assert panels.labels(gemm, [(4, 6), (4, 5), (5,)], (6, 5))[0] == [["k", "m"], ["k", "n"], ["n"]]
    assert panels.labels(gemm, [(4, 6), (4, 5), (1, 5)], (6, 5))[0][2] == [None, "n"]
    ein = OpNode("e", "Einsum", [], [], attrs={"equation": "cda,cdb->ba"})
    assert panels.labels(ein, [(8, 128, 3072), (8, 128, 768)], (768, 3072)) == (
        [["c", "d", "a"], ["c", "d", "b"]], ["b", "a"])
    assert panels.labels(OpNode("t", "FusedMatMul", [], [], domain="com.microsoft", attrs={"transBatchA": 1}),
                         [(2, 3, 4), (4, 5)], (3, 2, 5)) is None


def _epilogue(out_subset, wcr=None):
    """y[out_subset] (wcr) = relu(@acc[i0, i1]) over (i0, i1) in 6 × 8."""
    params = [("i0", Range.of(0, 6)), ("i1", Range.of(0, 8))]
    t = Tasklet("t", E.Bin("max", E.Var("a"), E.Const(0.0)), {"a": Memlet("acc", (E.Var("i0"), E.Var("i1")))},
                Memlet("y", out_subset, wcr=wcr))
    return MapNode("m", params, [t])


def test_the_panel_map_shifts_global_indices_and_refuses_sums_across_panels():
    m = _epilogue((E.Var("i0"), E.Var("i1")))
    assert panels._acc_param(m, "acc", 1, 8) == "i1"
    pm = panels.panel_map(m, "acc", "i1", 4)
    assert [p for p, _ in pm.params] == [panels.Q, "i0", "i1"] and pm.params[2][1].stop == E.Const(4, "int64")
    t = pm.body[0]
    assert t.inputs["a"].subset == (E.Var("i0"), E.Var("i1"))        # the panel of the product: unshifted
    assert t.output.subset[1] == E.Bin("add", E.Cast(E.Var("i1"), "uint64"), E.Cast(E.Var(panels.Q), "uint64"))
    summed = _epilogue((E.Var("i0"),), wcr="sum")                     # y[i0] = Σ over i1: crosses panels of i1
    assert panels.panel_map(summed, "acc", "i1", 4) is None
    assert panels.panel_map(summed, "acc", "i0", 3) is not None      # … but not panels of i0
    assert panels._acc_param(m, "acc", 0, 5) is None                 # the range is not the product's axis
