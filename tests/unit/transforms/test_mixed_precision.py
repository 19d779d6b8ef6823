"""mixed_precision: matches, near misses with reasons, verify, outputs within the stated tolerance,
halved bytes (hand-counted), and the measured bf16/fp16 tolerance on the BERT-small training step."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from codegen.numpy_ref.executor import run
from codegen.numpy_ref.feeds import feeds_for
from ir import lowering
from ir.containers import Role
from ir.movement import report
from ir.onnx_import import import_model, import_proto
from ir.printer import node_to_text
from transforms import engine
from transforms.mixed_precision import BF16_RTOL, FP16_RTOL
from transforms.registry import create
from tests.conftest import FIXTURES
from tests.unit.ir.onnx_models import model, vi
from tests.unit.transforms.harness import assert_applies, assert_fails

N = 8 * 16                  # elements of one [8, 16] activation
BERT_SMALL = str(FIXTURES / "ort_artifacts/bert_layer_small/legacy_ln3/train_step_adamw.onnx")
mk = helper.make_node


def _graph():
    """h = x + b; a = tanh(h); m = a * x; z = a @ w; av = reshape(a); y2 = -av; r = Σ_row m; y1 = z + r."""
    inits = [numpy_helper.from_array(np.linspace(-1, 1, 16).astype(np.float32), "b"),
             numpy_helper.from_array(np.eye(16, dtype=np.float32) * 0.5, "w"),
             numpy_helper.from_array(np.array([128], np.int64), "flat"),
             numpy_helper.from_array(np.array([1], np.int64), "axes")]
    nodes = [mk("Add", ["x", "b"], ["h"], name="add"), mk("Tanh", ["h"], ["a"], name="act"),
             mk("Mul", ["a", "x"], ["m"], name="mul"), mk("MatMul", ["a", "w"], ["z"], name="mm"),
             mk("Reshape", ["a", "flat"], ["av"], name="view"), mk("Neg", ["av"], ["y2"], name="neg"),
             mk("ReduceSum", ["m", "axes"], ["r"], name="red", keepdims=1),
             mk("Add", ["z", "r"], ["y1"], name="out")]
    g = import_proto(model(nodes, [vi("x", [8, 16])], [vi("y1", [8, 16]), vi("y2", [128])], inits))
    lowering.expand_all(g)
    return g


def test_matches_maps_with_float_transients():
    g = _graph()
    t = create("mixed_precision")
    assert [m.anchors for m in t.matches(g)] == [("add/expanded",), ("act/expanded",), ("mul/expanded",),
                                                  ("red/expanded",)]
    one = create("mixed_precision", {"container": "a"})
    assert [m.anchors for m in one.matches(g)] == [("act/expanded",)]
    assert [t.dtype for t in type(t).instances()] == ["bfloat16"]      # float16: dtype="float16"


def test_bf16_storage_halves_every_access_of_a_and_its_view():
    g = _graph()
    t = create("mixed_precision")
    app, work = assert_applies(g, t, t.match("act/expanded"), rtol=BF16_RTOL)
    assert work.containers["a"].dtype == work.containers["av"].dtype == "bfloat16"
    assert work.containers["h"].dtype == "float32"
    # a: written once, read by mul, mm and the view; the view writes av, neg reads it: 6 accesses halve
    assert app.delta.bytes == -6 * N * 2
    assert app.extra == {"containers": ["a", "av"], "storage_bytes_saved": 2 * N * 2}
    assert set(app.changed) == {"act/expanded", "mul/expanded", "mm", "view", "neg/expanded"}
    printed = {k: node_to_text(work.nodes[k]).splitlines()[1].strip() for k in ("act/expanded", "mul/expanded")}
    assert printed["act/expanded"] == "act/expanded/out: a[i0, i1] = bfloat16(tanh(h[i0, i1]))"       # cast on store
    assert printed["mul/expanded"] == "mul/expanded/out: m[i0, i1] = (float32(a[i0, i1]) * x[i0, i1])"  # upcast on load


def test_fp16_single_container():
    g = _graph()
    t = create("mixed_precision", {"dtype": "float16", "container": "m"})
    app, work = assert_applies(g, t, t.match("mul/expanded"), rtol=FP16_RTOL)
    assert work.containers["m"].dtype == "float16" and app.delta.bytes == -2 * N * 2   # mul writes, red reads
    # the row sum still accumulates in float32: the wcr output r stays float32
    assert work.containers["r"].dtype == "float32"


def test_near_misses_name_the_node():
    g = _graph()
    t = create("mixed_precision")
    assert_fails(g, t, t.match("red/expanded"), "'red/expanded' accumulates into 'r' (wcr=sum)")
    assert_fails(g, t, t.match("mm"), "'mm' (MatMul) is a library node", "expand it first")
    out = create("mixed_precision", {"container": "y2"})
    assert_fails(g, out, out.match("neg/expanded"), "'y2' is part of the graph's interface (output)")
    bad = create("mixed_precision", {"dtype": "int8"})
    assert_fails(g, bad, bad.match("act/expanded"), "'int8' is not a storage type")
    engine.apply(g, t, t.match("act/expanded"))
    assert_fails(g, create("mixed_precision", {"container": "a"}), t.match("act/expanded"),
                 "'a' is bfloat16, not float32")


def test_near_miss_library_reader_that_does_not_widen():
    g = import_proto(model([mk("Relu", ["x"], ["a"], name="r"), mk("Softmax", ["a"], ["y"], name="sm")],
                           [vi("x", [4, 8])], [vi("y", [4, 8])]))
    lowering.expand_node(g, "r")
    t = create("mixed_precision")
    assert_fails(g, t, t.match("r/expanded"), "'sm' (Softmax) is a library node that reads 'a' without widening it")


def test_near_miss_planned_memory():
    g = _graph()
    reuse = create("memory_reuse")
    engine.apply(g, reuse, reuse.match())
    t = create("mixed_precision", {"container": "a"})
    assert_fails(g, t, t.match("act/expanded"), "shares a buffer (memory_reuse)")


def test_near_miss_float16_gradients():
    g = import_model(BERT_SMALL)
    lowering.expand_all(g)
    t = create("mixed_precision", {"dtype": "float16"})
    node = "Gelu_Grad/GeluGrad_0/expanded"
    assert_fails(g, t, t.match(node), f"'{node}' belongs to the backward pass",
                 "float16 gradients underflow without loss scaling")
    assert create("mixed_precision").check(g, t.match(node)).ok                  # bfloat16 may


def test_contraction_result_keeps_its_declared_type():
    g = _graph()
    t = create("mixed_precision", {"container": "a"})
    engine.apply(g, t, t.match("act/expanded"))
    assert run(g, feeds_for(g), outputs=["z"])["z"].dtype == np.float32


def _relative_errors(ref: dict, got: dict) -> dict[str, float]:
    """max |Δ| / max(max |ref|, 1e-3): gradients that are zero up to rounding (the key bias's:
    softmax ignores it) are measured against 1e-3 instead of their own noise."""
    out = {}
    for name, r in ref.items():
        r64, g64 = np.asarray(r, np.float64), np.asarray(got[name], np.float64)
        out[name] = float(np.abs(r64 - g64).max() / max(np.abs(r64).max(), 1e-3))
    return out


def _lower_everything(g, dtype: str) -> int:
    t = create("mixed_precision", {"dtype": dtype})
    applied = 0
    for m in list(t.matches(g)):
        if t.check(g, m).ok:
            engine.apply(g, t, m, check_verify=False)
            applied += 1
    return applied


@pytest.mark.parametrize("dtype,rtol,loss_rtol,kernels,bytes_ratio", [
    ("bfloat16", BF16_RTOL, 1e-3, 200, 0.66),      # every eligible transient: -35 % bytes
    ("float16", FP16_RTOL, 1e-4, 20, 0.94)])       # forward activations only: -7 % bytes
def test_bert_small_training_step_within_stated_tolerance(dtype, rtol, loss_rtol, kernels, bytes_ratio):
    g = import_model(BERT_SMALL)
    lowering.expand_all(g)
    grads = [n for n in g.containers if n.endswith("_grad") and g.containers.get(n[:-5]) is not None
             and g.containers[n[:-5]].role is Role.PARAMETER]
    loss = next(n for n in g.outputs if g.containers[n].role is Role.OUTPUT)
    assert len(grads) == 16
    wanted = [loss] + grads
    feeds = feeds_for(g)
    ref = run(g, feeds, outputs=wanted)
    bytes_before = report(g).total.bytes
    assert _lower_everything(g, dtype) >= kernels
    assert all(g.containers[n].dtype == "float32" for n in g.inputs + g.outputs)   # interface untouched
    assert report(g).total.bytes < bytes_ratio * bytes_before
    errors = _relative_errors(ref, run(g, feeds, outputs=wanted))
    assert errors[loss] <= loss_rtol, errors[loss]
    worst = max(grads, key=errors.get)
    assert errors[worst] <= rtol, (worst, errors[worst])


def test_a_gemm_reading_bfloat16_keeps_a_float32_product():
    """Found by the random-graph tests (issue 10): contractions "widen and accumulate in fp32"
    (module docstring) and their output container stays float32, but the reference MatMul/Gemm/
    Einsum/FusedMatMul kernels cast the product to operand 0's dtype, so the output was the
    product rounded to bfloat16 (fixed: ``codegen.numpy_ref.linalg.product_dtype``). The
    transformed graph computes exactly the original with ``a`` rounded to bfloat16 where it is read."""
    import ml_dtypes
    w = numpy_helper.from_array(np.linspace(-1, 1, 12).astype(np.float32).reshape(4, 3), "w")
    nodes = [mk("Tanh", ["x"], ["a"], name="act"), mk("MatMul", ["a", "w"], ["y"], name="mm")]
    g = import_proto(model(nodes, [vi("x", [2, 4])], [vi("y", [2, 3])], [w]))
    lowering.expand_all(g)
    t = create("mixed_precision")
    _, work = assert_applies(g, t, t.match("act/expanded"), rtol=BF16_RTOL)
    feeds = feeds_for(g)
    a = np.tanh(feeds["x"]).astype(ml_dtypes.bfloat16).astype(np.float64)
    want = (a @ np.linspace(-1, 1, 12).reshape(4, 3)).astype(np.float32)
    np.testing.assert_allclose(run(work, feeds)["y"], want, rtol=1e-6, atol=0)


def test_a_gemm_with_an_epilogue_reading_bfloat16_keeps_a_float32_product():
    """As above, for a contraction that carries an epilogue (``gemm_epilogue_fusion``): the
    product ``@acc`` (acc_dtype float32) must be the wide product of the rounded operand, not
    that product rounded to bfloat16 before the epilogue runs."""
    import ml_dtypes
    w = numpy_helper.from_array(np.linspace(-1, 1, 12).astype(np.float32).reshape(4, 3), "w")
    nodes = [mk("Tanh", ["x"], ["a"], name="act"), mk("MatMul", ["a", "w"], ["p"], name="mm"),
             mk("Neg", ["p"], ["y"], name="neg")]
    g = import_proto(model(nodes, [vi("x", [2, 4])], [vi("y", [2, 3])], [w]))
    lowering.expand_all(g)
    epi = create("gemm_epilogue_fusion")
    engine.apply(g, epi, epi.match("mm", "neg/expanded"))
    t = create("mixed_precision")
    _, work = assert_applies(g, t, t.match("act/expanded"), rtol=BF16_RTOL)
    feeds = feeds_for(g)
    a = np.tanh(feeds["x"]).astype(ml_dtypes.bfloat16).astype(np.float64)
    want = (-(a @ np.linspace(-1, 1, 12).reshape(4, 3))).astype(np.float32)
    np.testing.assert_allclose(run(work, feeds)["y"], want, rtol=1e-6, atol=0)
