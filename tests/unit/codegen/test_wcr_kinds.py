"""Every reduction kind (``ir.memlet.Wcr``) is defined once and every backend renders it.

The kinds are enumerated from the Enum, so a kind added there without a backend's support fails
here: the reference executor, the numba loop nest (compiled and run) and the CUDA kernel (run in
the host emulation of ``cuda_emulation``) must each give the reference result for a reduction over
rows (each point owns its accumulator) and over columns (points share one).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from codegen.numpy_ref.executor import run as reference
from codegen.program.prepare import lower_for_codegen
from ir.memlet import WCR_KINDS, Memlet, Wcr
from ir.nodes import MapNode, Tasklet
from ir.onnx_import import import_proto
from tests.unit.codegen import cuda_emulation
from tests.unit.ir.onnx_models import model, vi

ONNX_OP = {Wcr.SUM: "ReduceSum", Wcr.MAX: "ReduceMax", Wcr.MIN: "ReduceMin", Wcr.PROD: "ReduceProd"}
ROWS, COLS = 6, 40


def test_the_kinds_are_the_enum_and_plain_names_still_compare():
    assert WCR_KINDS == tuple(k.value for k in Wcr) == ("sum", "max", "min", "prod")
    assert Wcr.SUM == "sum" and hash(Wcr.MAX) == hash("max") and {"min": 1}[Wcr.MIN] == 1
    assert Memlet.from_json({"container": "a", "wcr": "prod"}).wcr is Wcr.PROD
    assert Memlet("a", wcr=Wcr.MAX).to_json() == {"container": "a", "wcr": "max"}
    with pytest.raises(ValueError, match="unknown wcr 'avg'.*sum, max, min, prod.*memlet of 'a'"):
        Memlet.from_json({"container": "a", "wcr": "avg"})


# sum and prod of bool are left out: no graph writes them (NumPy would widen the result)
@pytest.mark.parametrize(("kind", "dtype"), [(k, d) for k in Wcr for d in ("float32", "float64", "int32", "int64",
                                                                           "uint8", "bool")
                                             if not (d == "bool" and k in (Wcr.SUM, Wcr.PROD))])
def test_identity_is_neutral_for_combine(kind, dtype):
    rng = np.random.default_rng(0)
    x = (rng.random(64) * 100).astype(dtype) if dtype != "bool" else rng.random(64) > 0.5
    ident = np.full_like(x, kind.identity(dtype))
    np.testing.assert_array_equal(kind.combine(ident, x).astype(dtype), x)
    if kind.combine.identity is not None:                      # numpy agrees where it defines one
        assert kind.identity(dtype) == kind.combine.identity


def _reduce_graph(kind: Wcr, axis: int):
    out = [COLS] if axis == 0 else [ROWS]
    nodes = [helper.make_node(ONNX_OP[kind], ["x", "axes"], ["y"], name="reduce", keepdims=0)]
    axes = numpy_helper.from_array(np.array([axis], np.int64), "axes")
    return import_proto(model(nodes, [vi("x", [ROWS, COLS])], [vi("y", out)], [axes], opset=18))


def _feeds():
    return {"x": np.random.default_rng(1).uniform(0.5, 1.5, (ROWS, COLS)).astype(np.float32)}


def _only_map(g) -> MapNode:
    low = lower_for_codegen(g)
    maps = [n for n in low.nodes.values() if isinstance(n, MapNode)]
    assert len(maps) == 1, [n.id for n in low.nodes.values()]
    wcrs = {node.output.wcr for node, _ in maps[0].walk() if isinstance(node, Tasklet)} - {None}
    return low, maps[0], wcrs


@pytest.mark.parametrize("axis", [1, 0], ids=["rows", "columns"])
@pytest.mark.parametrize("kind", list(Wcr))
def test_numba_renders_every_kind(kind, axis):
    pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")
    from codegen.numba_cpu.runner import CompiledGraph
    g = _reduce_graph(kind, axis)
    _, _, wcrs = _only_map(g)
    assert wcrs == {kind}
    want = reference(g, _feeds())["y"]
    got = CompiledGraph(g).run(_feeds())["y"]
    np.testing.assert_allclose(got, want, rtol=2e-6)


@pytest.mark.parametrize("axis", [1, 0], ids=["rows", "columns"])
@pytest.mark.parametrize("kind", list(Wcr))
def test_cuda_renders_every_kind(kind, axis, tmp_path):
    reason = cuda_emulation.available()
    if reason:
        pytest.skip(reason)
    from codegen.cupy_cuda.render import kernel_source
    g = _reduce_graph(kind, axis)
    low, m, wcrs = _only_map(g)
    assert wcrs == {kind}
    ks = kernel_source(m, low)
    arrays = {c: _feeds()[c] for c in ks.arrays if c not in ks.outputs}
    for c in ks.outputs:
        init = ks.init[c]
        shape = low.container(c).concrete_shape(low.bindings)
        arrays[c] = np.full(shape, kind.identity("float32") if init.kind == "full" else 0, np.float32)
    got = cuda_emulation.emulate(ks, arrays, tmp_path)["y"]
    np.testing.assert_allclose(got, reference(g, _feeds())["y"], rtol=2e-6)


def _nan_feeds(where: str):
    """Every row and every column holds a NaN: at its first, middle or last element (the order a combine sees
    it in decides whether a combine that is not NaN-propagating drops it)."""
    x = _feeds()["x"]
    r, c = {"first": (0, 0), "middle": (ROWS // 2, COLS // 2), "last": (ROWS - 1, COLS - 1)}[where]
    x[r, :] = np.nan
    x[:, c] = np.nan
    return {"x": x}


NAN_CASES = [(k, axis, where) for k in (Wcr.MAX, Wcr.MIN) for axis in (1, 0) for where in ("first", "middle", "last")]


@pytest.mark.parametrize(("kind", "axis", "where"), NAN_CASES)
def test_numba_max_and_min_propagate_nan_as_numpy(kind, axis, where):
    """``np.maximum``/``np.minimum`` (the reference) give NaN for any NaN they see; so must a kernel."""
    pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")
    from codegen.numba_cpu.runner import CompiledGraph
    g = _reduce_graph(kind, axis)
    want = reference(g, _nan_feeds(where))["y"]
    assert np.isnan(want).all()
    np.testing.assert_array_equal(CompiledGraph(g).run(_nan_feeds(where))["y"], want)


@pytest.mark.parametrize("schedule", ["auto", "points", "shared"])
@pytest.mark.parametrize(("kind", "axis", "where"), NAN_CASES)
def test_cuda_max_and_min_propagate_nan_as_numpy(kind, axis, where, schedule, tmp_path):
    """The block kernels (``dcs_op``), a thread's own accumulator (``dcs_max``) and, with the reduction's
    loop flattened into the map's points (``shared``), an accumulator the threads share (``dcs_cas``), run
    in the host emulation; every kernel text also compiles under NVRTC (``test_cuda_compile``)."""
    reason = cuda_emulation.available()
    if reason:
        pytest.skip(reason)
    from codegen.cupy_cuda.render import kernel_source
    g = _reduce_graph(kind, axis)
    low, m, _ = _only_map(g)
    if schedule == "shared":
        inner = m.body[0]
        m.params, m.body = list(m.params) + list(inner.params), list(inner.body)
    ks = kernel_source(m, low, schedule="auto" if schedule == "auto" else "points")
    assert (schedule == "shared") == ("dcs_cas<" in ks.source[ks.source.index("extern"):])
    feeds = _nan_feeds(where)
    arrays = {c: feeds[c] for c in ks.arrays if c not in ks.outputs}
    for c in ks.outputs:
        shape = low.container(c).concrete_shape(low.bindings)
        arrays[c] = np.full(shape, kind.identity("float32") if ks.init[c].kind == "full" else 0, np.float32)
    got = cuda_emulation.emulate(ks, arrays, tmp_path)["y"]
    np.testing.assert_array_equal(got, reference(g, feeds)["y"])
