"""Maps whose params start above 0 or step by more than 1, printed by every backend and run against the
reference executor: elementwise, a row sum into a local, a row sum and a column max into global elements.

Lowered ONNX ops give maps from 0 with step 1, so these ranges come only from hand-built or transformed
maps; two bugs lived here (the numba row-cache loops printed the stop only; the reference indexed a
map's locals by param value). The CUDA kernels run in the host emulation (``cuda_emulation``)."""
from __future__ import annotations

import numpy as np
import pytest

from codegen.numpy_ref.executor import run as reference
from ir import expr as E
from ir.containers import Container, Role
from ir.errors import KernelError
from ir.graph import Graph
from ir.maps import finalize
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, Tasklet
from tests.unit.codegen import cuda_emulation

SIZES = {"serial": (9, 11), "prange": (300, 600)}     # the second is large enough for a parallel outer loop
RANGES = {"from 0": ((0, 1), (0, 1)), "offset": ((1, 1), (1, 2)), "strided rows": ((2, 3), (0, 1)),
          "both": ((0, 2), (3, 1))}
i, j = E.Var("i"), E.Var("j")


def _range(start_step: tuple[int, int], stop: int) -> Range:
    start, step = start_step
    return Range.of(start, stop, step)


def _graph(body: str, ranges, size: str = "serial") -> Graph:
    ROWS, COLS = SIZES[size]
    g = Graph("g")
    g.add_container(Container("x", (ROWS, COLS), "float32", Role.INPUT))
    out = {"elementwise": (ROWS, COLS), "column max": (COLS,)}.get(body, (ROWS,))
    g.add_container(Container("y", out, "float32", Role.OUTPUT))
    g.inputs, g.outputs = ["x"], ["y"]
    rows, cols = ("i", _range(ranges[0], ROWS)), ("j", _range(ranges[1], COLS))
    x = {"v": Memlet("x", (i, j))}
    locals_ = {}
    if body == "elementwise":
        stmts = [Tasklet("t", E.Bin("add", E.Bin("mul", E.Const(2.0), E.Var("v")), E.Const(1.0)), x, Memlet("y", (i, j)))]
        params = [rows, cols]
    elif body == "row sum into a local":
        stmts = [MapNode("n", [cols], [Tasklet("acc", E.Var("v"), x, Memlet("s", wcr="sum"))]),
                 Tasklet("out", E.Bin("mul", E.Const(2.0), E.Var("v")), {"v": Memlet("s")}, Memlet("y", (i,)))]
        params, locals_ = [rows], {"s": Container("s", (), "float32")}
    else:
        wcr, index = ("sum", (i,)) if body == "row sum" else ("max", (j,))
        stmts = [Tasklet("acc", E.Var("v"), x, Memlet("y", index, wcr=wcr))]
        params = [rows, cols]
    m = MapNode("m", params, stmts, locals=locals_)
    finalize(m, g)
    g.add_node(m)
    return g


def _feeds(size: str = "serial") -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal(SIZES[size]).astype(np.float32)}


BODIES = ["elementwise", "row sum into a local", "row sum", "column max"]


@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("ranges", sorted(RANGES))
@pytest.mark.parametrize("body", BODIES)
def test_numba_kernels_walk_the_ranges_as_the_reference(body, ranges, size):
    """With ``prange`` too, whose loops must step by 1 (a strided outer loop stays serial)."""
    pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")
    from codegen.numba_cpu.render import kernel_source
    from codegen.numba_cpu.runner import CompiledGraph
    g = _graph(body, RANGES[ranges], size)
    (m,) = g.nodes.values()
    parallel = kernel_source(m, g, parallel=True).parallel
    assert parallel == (size == "prange" and body != "column max" and RANGES[ranges][0][1] == 1)
    cg = CompiledGraph(g, threads=2 if parallel else 1)
    assert not cg.extern_nodes(), cg.extern_nodes()
    np.testing.assert_allclose(cg.run(_feeds(size))["y"], reference(g, _feeds(size))["y"], rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("ranges", sorted(RANGES))
@pytest.mark.parametrize("body", BODIES)
def test_cuda_kernels_walk_the_ranges_as_the_reference(body, ranges, tmp_path):
    reason = cuda_emulation.available()
    if reason:
        pytest.skip(reason)
    from codegen.cupy_cuda.render import kernel_source
    g = _graph(body, RANGES[ranges])
    (m,) = g.nodes.values()
    ks = kernel_source(m, g)
    shape = g.container("y").concrete_shape(g.bindings)
    fill = -np.inf if body == "column max" and ks.init["y"].kind == "full" else 0
    got = cuda_emulation.emulate(ks, {"x": _feeds()["x"], "y": np.full(shape, fill, np.float32)}, tmp_path)["y"]
    np.testing.assert_allclose(got, reference(g, _feeds())["y"], rtol=2e-6, atol=1e-6)


def test_a_range_that_depends_on_an_outer_param_is_refused_by_the_reference_by_name():
    """The reference runs rectangular iteration spaces (every statement over all points at once)."""
    g = _graph("row sum into a local", RANGES["from 0"])
    (m,) = g.nodes.values()
    (p, r), = m.body[0].params
    m.body[0].params = [(p, Range(r.start, E.Bin("add", i, E.Const(1, "int64")), r.step))]
    with pytest.raises(KernelError, match="param .j. has a range that depends on .i.; the reference executor"):
        reference(g, _feeds())
