"""Every op of ``ir.expr`` means on every backend what it means in the reference (``ir.expr.evaluate``, NumPy).

One map per dtype holds one tasklet per op, over operands with both signs, zeros and halves (rounding
ties); the numba kernel and the CUDA kernel (in the host emulation) must give the reference's values.
16-bit floats compute in float32 and round on the store, as the reference rounds each op. This found
numba 0.68's ``np.fmod`` of two ints wrong (-6 fmod 4 gave 2; now ``_ifmod``), and float16 numba kernels
that did not compile (a float16 constant; a store's conversion helper left undefined).

ONNX Mod (``fmod=0``) is NumPy's ``mod``: the result takes the divisor's sign. C's ``%`` takes the
dividend's sign and is no float operator, so the CUDA kernels call ``dcs_mod`` (``device_lib.HELPER_SOURCES``),
defined in the kernels that use it; before, an int32 Mod of -7 by 3 gave -1 where NumPy gives 2, and a
float Mod did not compile. Index expressions keep C's ``%``."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from codegen.numpy_ref.executor import run as reference
from codegen.program.prepare import lower_for_codegen
from ir import dtypes
from ir import expr as E
from ir.containers import Container, Role
from ir.graph import Graph
from ir.maps import finalize
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, Tasklet
from ir.onnx_import import import_proto
from tests.unit.codegen import cuda_emulation
from tests.unit.ir.onnx_models import model

X = [7, 7, -7, -7, -1, 1, 0, -8, 5]
B = [3, -3, 3, -3, 5, -5, 2, 7, 5]
DTYPES = ["float32", "int32", "int64"]


def _mod_graph(dt: str):
    tp = {"float32": TensorProto.FLOAT, "int32": TensorProto.INT32, "int64": TensorProto.INT64}[dt]
    b = numpy_helper.from_array(np.array(B, dt), "b")
    m = model([helper.make_node("Mod", ["x", "b"], ["y"])], [helper.make_tensor_value_info("x", tp, [len(X)])],
              [helper.make_tensor_value_info("y", tp, [len(X)])], [b])
    return import_proto(m)


def _feeds(dt: str) -> dict[str, np.ndarray]:
    return {"x": np.array(X, dt)}


@pytest.mark.parametrize("dt", DTYPES)
def test_reference_mod_is_numpys(dt):
    np.testing.assert_array_equal(reference(_mod_graph(dt), _feeds(dt))["y"], np.mod(np.array(X, dt), np.array(B, dt)))


@pytest.mark.parametrize("dt", DTYPES)
def test_numba_mod_is_numpys(dt):
    pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")
    from codegen.numba_cpu.runner import CompiledGraph
    g = _mod_graph(dt)
    cg = CompiledGraph(g, threads=1)
    assert not cg.extern_nodes(), cg.extern_nodes()
    np.testing.assert_array_equal(cg.run(_feeds(dt))["y"], reference(g, _feeds(dt))["y"])


@pytest.mark.parametrize("dt", DTYPES)
def test_cuda_mod_is_numpys_and_compiles(dt, tmp_path):
    from codegen.cupy_cuda.nvrtc import ARCHS, available, compile_check
    from codegen.cupy_cuda.render import kernel_source
    reason = cuda_emulation.available()
    if reason:
        pytest.skip(reason)
    g = _mod_graph(dt)
    low = lower_for_codegen(g)
    (m,) = [n for n in low.nodes.values() if isinstance(n, MapNode)]
    ks = kernel_source(m, low)
    assert "dcs_mod(" in ks.source and ks.source.count("#define DCS_MOD") == 1
    arrays = {"x": _feeds(dt)["x"], "b": np.array(B, dt), "y": np.zeros(len(X), dt)}
    got = cuda_emulation.emulate(ks, {c: arrays[c] for c in ks.arrays}, tmp_path)["y"]
    np.testing.assert_array_equal(got, reference(g, _feeds(dt))["y"])
    if available() is None:
        twice = ks.source + ks.source[ks.source.index("#ifndef DCS_MOD"):].replace(ks.name, ks.name + "_again")
        assert compile_check(twice, ks.name, ARCHS[0]).ok      # the guard: two kernels in one unit define it once


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("op", ["mod", "floordiv"])
def test_cuda_mod_and_floordiv_tasklets_are_numpys(op, dt, tmp_path):
    """A tasklet's floordiv (no lowering prints one today) floors, as ``np.floor_divide``."""
    from codegen.cupy_cuda.render import kernel_source
    reason = cuda_emulation.available()
    if reason:
        pytest.skip(reason)
    g, m = _pointwise(len(X), {"x": dt, "b": dt}, [(dt, E.Bin(op, E.Var("u"), E.Var("v")))])
    feeds = {"x": np.array(X, dt), "b": np.array(B, dt)}
    ks = kernel_source(m, g)
    got = cuda_emulation.emulate(ks, {**feeds, "y0": np.zeros(len(X), dt)}, tmp_path)["y0"]
    np.testing.assert_array_equal(got, getattr(np, {"mod": "mod", "floordiv": "floor_divide"}[op])(*feeds.values()))
    np.testing.assert_array_equal(got, reference(g, feeds)["y0"])
    from codegen.cupy_cuda.nvrtc import available, compile_check
    assert available() is not None or compile_check(ks.source, ks.name).ok


BOOL_RESULT = {"not", "isnan", "isinf", "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor"}
FLOAT_ONLY = {"sqrt", "log", "exp", "tanh", "erf", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
              "asinh", "acosh", "atanh", "log1p", "expm1", "recip", "isnan", "isinf", "pow"}
OPERANDS = {"float32": ([-3, -2.5, -1.5, -1, -0.5, -0.25, 0, 0.25, 0.5, 1, 1.5, 2, 2.5, 3, 0.75, -0.75],
                        [2, -2, 1.5, -1.5, 3, -3, 1, 2, -1, 0.5, 2.5, -0.5, 3, 1, 4, -4]),
            "int32": ([-6, -5, -3, -2, -1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 2, -2],
                      [4, -4, 3, -3, 6, -6, 2, 4, -2, 1, 5, -1, 6, 2, 8, -8])}
OPERANDS.update(int64=OPERANDS["int32"], float64=OPERANDS["float32"], float16=OPERANDS["float32"],
                bfloat16=OPERANDS["float32"])
FULL_MATH = ("float32", "float64")
"""The dtypes whose every op is checked (16-bit floats compute in float32: their arithmetic, casts and stores)."""


def _pointwise(n: int, inputs: dict[str, str], outputs: list[tuple[str, E.Expr]]):
    """map[i] { y<k>[i] = expr_k(u, v) } over ``n`` elements: ``inputs`` (name → dtype; ``u`` reads the first
    at ``i``, ``v`` the second), ``outputs`` (dtype, expression) for each y<k>. Returns the graph and its map."""
    g = Graph("g")
    for name, dt in inputs.items():
        g.add_container(Container(name, (n,), dt, Role.INPUT))
    i, body = E.Var("i"), []
    reads = {conn: Memlet(name, (i,)) for conn, name in zip(("u", "v"), inputs)}
    for k, (dt, e) in enumerate(outputs):
        g.add_container(Container(f"y{k}", (n,), dt, Role.OUTPUT))
        body.append(Tasklet(f"t{k}", e, dict(reads), Memlet(f"y{k}", (i,))))
    g.inputs, g.outputs = list(inputs), [f"y{k}" for k in range(len(outputs))]
    m = MapNode("m", [("i", Range.of(0, n))], body)
    finalize(m, g)
    g.add_node(m)
    return g, m


def _every_op(dt: str):
    """map[i] { y<k>[i] = op_k(x[i], z[i]) } for every op defined on ``dt`` (logical ops on x > 0, z > 0)."""
    ops = [op for op in E.UNARY_OPS + E.BINARY_OPS if dt in FULL_MATH or op not in FLOAT_ONLY]
    positive = {name: E.Bin("gt", E.Var(name), E.Const(0, dt)) for name in ("u", "v")}
    outputs = []
    for op in ops:
        u, v = (positive["u"], positive["v"]) if op in ("not", "and", "or", "xor") else (E.Var("u"), E.Var("v"))
        outputs.append(("bool" if op in BOOL_RESULT else dt, E.Un(op, u) if op in E.UNARY_OPS else E.Bin(op, u, v)))
    g, m = _pointwise(len(OPERANDS[dt][0]), {"x": dt, "z": dt}, outputs)
    return g, m, ops, {name: np.array(values, np.float32).astype(dtypes.to_numpy(dt))
                       for name, values in zip(("x", "z"), OPERANDS[dt])}


def _same_per_op(got: dict, want: dict, ops: list[str], dt: str) -> None:
    """Equal up to the math of the compute type (float32 for 16-bit floats and ints' float functions): 64 units
    of its rounding, which covers the fast exp/tanh/erf forms and CUDA's functions (a few ulp); NaN where NaN.
    A float64 op computed in float32 (CUDA's ``expf`` of a double) is off by ~1e-8: 10⁶ times this."""
    eps = float(np.finfo(np.float64 if dt == "float64" else np.float32).eps)
    wrong = [op for k, op in enumerate(ops) if not np.allclose(np.asarray(got[f"y{k}"], np.float64),
                                                              np.asarray(want[f"y{k}"], np.float64),
                                                              rtol=64 * eps, atol=8 * eps, equal_nan=True)]
    assert not wrong, {op: (got[f"y{ops.index(op)}"], want[f"y{ops.index(op)}"]) for op in wrong}


@pytest.mark.parametrize("dt", sorted(set(OPERANDS) - {"bfloat16"}))   # NumPy holds no bfloat16 interface
def test_numba_prints_every_op_as_the_reference(dt):
    pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")
    from codegen.numba_cpu.runner import CompiledGraph
    g, _, ops, feeds = _every_op(dt)
    cg = CompiledGraph(g, threads=1)
    assert not cg.extern_nodes(), cg.extern_nodes()
    with np.errstate(all="ignore"):
        _same_per_op(cg.run(feeds), reference(g, feeds), ops, dt)


@pytest.mark.parametrize("dt", sorted(OPERANDS))
def test_cuda_prints_every_op_as_the_reference(dt, tmp_path):
    from codegen.cupy_cuda.render import kernel_source
    reason = cuda_emulation.available()
    if reason:
        pytest.skip(reason)
    g, m, ops, feeds = _every_op(dt)
    ks = kernel_source(m, g)
    arrays = {c: feeds[c] if c in feeds else np.zeros(len(feeds["x"]), g.container(c).dtype) for c in ks.arrays}
    with np.errstate(all="ignore"):
        _same_per_op(cuda_emulation.emulate(ks, arrays, tmp_path), reference(g, feeds), ops, dt)
    _compiles(ks)


def _compiles(ks) -> None:
    """NVRTC takes the kernel where it is installed (the emulation compiles it with g++, whose overloads differ)."""
    from codegen.cupy_cuda.nvrtc import available, compile_check
    if available() is None:
        result = compile_check(ks.source, ks.name)
        assert result.ok, result


WIDE = ([2**40 + 1, -(2**40 + 3), 2**53 + 1, -(2**62), 7, 0, -1, 2**31],
        [2**40, -(2**40 + 2), 2**53, 2**62 - 1, -7, 1, 0, 2**31 - 1])
"""int64 operands a float32 (or float64) rounding changes: max, min, abs and sign must keep every bit."""


def _wide_ints():
    u, v = E.Var("u"), E.Var("v")
    exprs = {"max": E.Bin("max", u, v), "min": E.Bin("min", u, v), "abs": E.Un("abs", u), "sign": E.Un("sign", u),
             "round": E.Un("round", u), "fmod": E.Bin("fmod", u, E.Bin("add", E.Un("abs", v), E.Const(2, "int64")))}
    g, m = _pointwise(len(WIDE[0]), {"x": "int64", "z": "int64"}, [("int64", e) for e in exprs.values()])
    return g, m, list(exprs), {"x": np.array(WIDE[0], np.int64), "z": np.array(WIDE[1], np.int64)}


def test_int64_ops_keep_every_bit_on_both_backends(tmp_path):
    """The CUDA printer computed integer max and min as ``dcs_max<float>`` and abs as ``fabsf``: 2⁴⁰ + 1 lost its 1."""
    pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")
    from codegen.cupy_cuda.render import kernel_source
    from codegen.numba_cpu.runner import CompiledGraph
    g, m, ops, feeds = _wide_ints()
    want = reference(g, feeds)
    assert want["y0"][0] == 2**40 + 1 and want["y2"][1] == 2**40 + 3        # the reference keeps them
    outputs = {"numba": CompiledGraph(g, threads=1).run(feeds)}
    if cuda_emulation.available() is None:
        ks = kernel_source(m, g)
        arrays = {c: feeds[c] if c in feeds else np.zeros(len(WIDE[0]), np.int64) for c in ks.arrays}
        outputs["cuda"] = cuda_emulation.emulate(ks, arrays, tmp_path)
        _compiles(ks)
    for backend, got in outputs.items():
        wrong = {op: (got[f"y{k}"], want[f"y{k}"]) for k, op in enumerate(ops)
                 if not np.array_equal(got[f"y{k}"], want[f"y{k}"])}
        assert not wrong, (backend, wrong)


CAST_SOURCES = ["float32", "float16", "int32", "int64", "bool"]
CAST_TARGETS = ["float32", "float64", "float16", "int32", "int64", "int8", "bool"]
CAST_VALUES = [-3, -2.5, -1.5, -1, -0.5, -0.25, 0, 0.25, 0.5, 1, 1.5, 2, 2.5, 3, 0.75, 100.7]
"""In range for every target (C leaves a float out of an integer type's range undefined; NumPy wraps)."""


def _casts(src: str):
    """map[i] { y<k>[i] = target_k(x[i]) } from ``src`` to every other dtype: floats truncate toward zero."""
    targets = [t for t in CAST_TARGETS if t != src]
    g, m = _pointwise(len(CAST_VALUES), {"x": src}, [(t, E.Cast(E.Var("u"), t)) for t in targets])
    x = np.array(CAST_VALUES, np.float32)
    x = x > 0 if src == "bool" else x.astype(dtypes.to_numpy(src)) if src.startswith("float") else np.trunc(x).astype(src)
    return g, m, targets, {"x": x}


@pytest.mark.parametrize("src", CAST_SOURCES)
def test_casts_are_the_references_on_both_backends(src, tmp_path):
    pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")
    from codegen.cupy_cuda.render import kernel_source
    from codegen.numba_cpu.runner import CompiledGraph
    g, m, targets, feeds = _casts(src)
    want = reference(g, feeds)
    cg = CompiledGraph(g, threads=1)
    assert not cg.extern_nodes(), cg.extern_nodes()
    outputs = {"numba": cg.run(feeds)}
    if cuda_emulation.available() is None:
        ks = kernel_source(m, g)
        arrays = {c: feeds[c] if c in feeds else np.zeros(len(CAST_VALUES), dtypes.to_numpy(g.container(c).dtype))
                  for c in ks.arrays}
        outputs["cuda"] = cuda_emulation.emulate(ks, arrays, tmp_path)
    for backend, got in outputs.items():
        wrong = [t for k, t in enumerate(targets) if not np.array_equal(np.asarray(got[f"y{k}"]), want[f"y{k}"])]
        assert not wrong, (backend, wrong)
