"""broadcast_fusion: a BatchNorm-gradient-shaped pair (per-channel sums, then dx over the whole tensor) fuses
into one kernel with a second sweep; the stored elementwise value goes; near misses give reasons; equal
outputs, Δ = recount (``harness.assert_applies``)."""
from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import helper, numpy_helper

from codegen.numpy_ref.executor import run
from codegen.numpy_ref.feeds import compare, feeds_for
from ir.nodes import MapNode
from tests.unit.ir.onnx_models import vi
from tests.unit.transforms.harness import assert_applies, assert_fails
from tests.unit.transforms.test_reduction_fusion import F32, expanded
from transforms import engine
from transforms.registry import create

N, C, H, W = 2, 3, 4, 5


def _bn_gradient(rank: int = 4):
    """g = dy·x; s = Σ g over every axis but 1 (kept); dx = g − x·s·k: the shape of a BatchNorm gradient
    (``g`` is stored by the sum's kernel for dx, ``s·k`` is a per-channel epilogue)."""
    shape = [N, C, H, W][:rank]
    axes = numpy_helper.from_array(np.array([0] + list(range(2, rank)), np.int64), "axes")
    k = numpy_helper.from_array(np.array(0.25, np.float32), "k")
    nodes = [helper.make_node("Mul", ["dy", "x"], ["g"], name="g"),
             helper.make_node("ReduceSum", ["g", "axes"], ["s"], name="sum", keepdims=1),
             helper.make_node("Mul", ["s", "k"], ["sk"], name="scale"),
             helper.make_node("Mul", ["x", "sk"], ["xs"], name="xs"),
             helper.make_node("Sub", ["g", "xs"], ["dx"], name="dx")]
    g = expanded(nodes, [vi("dy", shape), vi("x", shape)], [vi("dx", shape)], [axes, k],
                 fuse=[("xs/expanded", "dx/expanded")])
    rf = create("reduction_fusion")
    engine.apply(g, rf, rf.match("g/expanded", "sum/expanded"))       # g inlined, and stored for dx
    return g


def test_per_channel_epilogue_then_dx_as_a_second_sweep():
    g = _bn_gradient()
    t = create("broadcast_fusion")
    red = "fused:g/expanded"
    assert {m.anchors for m in t.matches(g)} == {(red, "scale/expanded"), (red, "fused:xs/expanded")}
    assert_fails(g, t, t.match(red, "fused:xs/expanded"), "create a cycle")     # sk first: dx reads s·k
    app, g1 = assert_applies(g, t, t.match(red, "scale/expanded"))
    assert app.delta.bytes == -2 * C * F32                     # s read back and sk written and read, per channel
    assert not any(isinstance(s, MapNode) and s.params[0][1] for s in g1.nodes[red].body[-1:])  # no new sweep
    app, g2 = assert_applies(g1, t, t.match(red, "fused:xs/expanded"))
    assert list(g2.nodes) == [red] and "g" not in g2.containers
    n = N * C * H * W
    assert app.delta.bytes == -3 * n * F32 - 2 * C * F32    # g's write and read, x read once; sk's write and read
    assert app.delta.flops == n                              # dy·x computed again in the second sweep
    sweeps = [s for s in g2.nodes[red].body if isinstance(s, MapNode)]
    assert len(sweeps) == 2 and [p for p, _ in sweeps[1].params][0] != "i1"


def test_rank_two_batch_statistics():
    g = _bn_gradient(rank=2)
    t = create("broadcast_fusion")
    work = g
    for _ in range(2):
        match = next(m for m in t.matches(work) if t.check(work, m).ok)
        _, work = assert_applies(work, t, match)
    assert len(work.nodes) == 1 and "g" not in work.containers


def test_refusals_name_the_kernels():
    g = _bn_gradient()
    t = create("broadcast_fusion")
    assert_fails(g, t, t.match("scale/expanded", "fused:xs/expanded"), "'scale/expanded' is not a reduction kernel")
    assert_fails(g, t, t.match("fused:g/expanded", "nope"), "no node 'nope'")
    assert_fails(g, t, t.match("fused:g/expanded"), "needs two anchors")


def test_a_consumer_that_is_not_pointwise_is_refused():
    axes = numpy_helper.from_array(np.array([0, 2, 3], np.int64), "axes")
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["s"], name="sum", keepdims=1),
             helper.make_node("Sub", ["x", "s"], ["d"], name="d"),
             helper.make_node("ReduceSum", ["d", "axes"], ["t"], name="sum2", keepdims=1)]
    shape = [N, C, H, W]
    g = expanded(nodes, [vi("x", shape)], [vi("t", [1, C, 1, 1])], [axes])
    t = create("broadcast_fusion")
    assert_fails(g, t, t.match("sum/expanded", "sum2/expanded"), "'sum2/expanded' is not pointwise")
    _, work = assert_applies(g, t, t.match("sum/expanded", "d/expanded"))     # x − s: one more sweep over x
    assert "s" not in work.containers


def _fused(rank: int = 4):
    g = _bn_gradient(rank)
    t = create("broadcast_fusion")
    for pair in (("fused:g/expanded", "scale/expanded"), ("fused:g/expanded", "fused:xs/expanded")):
        engine.apply(g, t, t.match(*pair))
    return g


def test_the_fused_kernel_runs_on_both_backends(tmp_path):
    """numba: one kernel, equal to the reference; CUDA: a block kernel whose second sweep reads the values the
    first cached in registers, compiled by NVRTC and equal to the reference in the host emulation."""
    pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")
    from codegen.cupy_cuda.nvrtc import available, compile_check
    from codegen.cupy_cuda.render import kernel_source
    from codegen.numba_cpu.runner import CompiledGraph
    from tests.unit.codegen import cuda_emulation
    from tests.unit.codegen.test_cuda_reductions import _assert_close, _launch_arrays
    g = _fused()
    feeds = feeds_for(g)
    want = run(g, feeds)
    cg = CompiledGraph(g, threads=1)
    assert not cg.extern_nodes() and compare(want, cg.run(feeds), 2e-6) == []
    [m] = g.nodes.values()
    ks = kernel_source(m, g)
    assert ks.launch.kind == "warp_rows" and "c0[it] * c1[it]" in ks.source.split("nested map")[2]
    missing = [why for why in (available(), cuda_emulation.available()) if why]
    assert not (missing and os.environ.get("CI")), f"CI runs the CUDA checks: {missing}"
    if available() is None:
        assert compile_check(ks.source, ks.name, "sm_80").ok
    if cuda_emulation.available() is None:
        values = run(g, feeds, outputs=list(ks.arrays))
        got = cuda_emulation.emulate(ks, _launch_arrays(ks, values), tmp_path)
        _assert_close(got, {c: values[c] for c in ks.outputs}, 2e-6)
