"""``codegen.oracle``: float64 truth, onnxruntime baseline, the derived tolerance rule, and the
reference executor's accuracy (it must never be the inaccurate side of a check)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from codegen.numpy_ref.executor import run as reference
from codegen.oracle import K, K_SIMULATED, Oracle, error, stated_tolerance, unit_roundoff
from ir.onnx_import import import_model, import_proto
from tests.unit.ir.onnx_models import model, vi
from transforms.history import Step

U32 = 2.0 ** -24


def _reduce_sum(n: int):
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["s"], name="rs", keepdims=0)]
    proto = model(nodes, [vi("x", [16, n])], [vi("s", [16])], [numpy_helper.from_array(np.array([1]), "axes")])
    return import_proto(proto), proto


def test_unit_roundoff_per_dtype():
    assert unit_roundoff(np.float32) == U32 and unit_roundoff(np.float64) == 2.0 ** -53
    assert unit_roundoff(np.int64) == 0.0


def test_a_reduction_order_difference_passes_and_a_1e3_error_fails():
    g, proto = _reduce_sum(4096)
    o = Oracle.of(g, proto)
    assert o.basis == "onnxruntime fp32 vs float64 truth" and o.truth["s"].dtype == np.float64
    assert o.tolerances["s"] == pytest.approx(K * max(o.baseline_errors["s"], U32))
    x = o.feeds["x"]
    orders = {"sequential": np.cumsum(x, axis=1, dtype=np.float32)[:, -1],
              "blocks of 64": x.reshape(16, -1, 64).sum(axis=2, dtype=np.float32).sum(axis=1, dtype=np.float32),
              "reversed pairwise": np.ascontiguousarray(x[:, ::-1]).sum(axis=1)}
    for name, s in orders.items():
        assert s.dtype == np.float32 and error(s, o.truth["s"], o.scales["s"]) > 0, name
        result = o.check({"s": s})
        assert result.ok, (name, result.summary)
        assert result.summary.startswith("1 output compared with the original model (onnxruntime fp32 vs "
                                         "float64 truth): all within tolerance, worst err/tol ")
    wrong = orders["blocks of 64"].copy()
    wrong[3] += np.float32(1e-3 * o.scales["s"])
    bad = o.compare({"s": wrong})
    assert [m.output for m in bad] == ["s"] and bad[0].error == pytest.approx(1e-3, rel=0.01)
    assert f"s: error 0.001 > tolerance {o.tolerances['s']:.3g}" == str(bad[0])
    assert "1 outside tolerance, worst: s: error" in o.check({"s": wrong}).summary


def test_stated_tolerances_widen_and_the_default_is_no_statement():
    g, proto = _reduce_sum(256)
    o = Oracle.of(g, proto)
    wrong = {"s": (o.truth["s"] * (1 + 1e-3)).astype(np.float32)}
    assert not o.check(wrong).ok
    assert o.widened_to(1e-2).check(wrong).ok
    assert stated_tolerance([Step("expand", {}, ("rs",))]) == 0.0
    assert stated_tolerance([Step("mixed_precision", {"dtype": "bfloat16"}, ("rs",))]) >= 1e-3


def test_integer_outputs_compare_exactly():
    nodes = [helper.make_node("ArgMax", ["x"], ["i"], name="am", axis=1, keepdims=0),
             helper.make_node("Relu", ["x"], ["y"], name="act")]
    proto = model(nodes, [vi("x", [8, 5])], [vi("i", [8], TensorProto.INT64), vi("y", [8, 5])])
    g = import_proto(proto)
    o = Oracle.of(g, proto)
    out = reference(g, o.feeds)
    assert o.check(out).ok and set(o.exact) == {"i"}
    out["i"] = out["i"].copy()
    out["i"][0] = (out["i"][0] + 1) % 5
    (bad,) = o.compare(out)
    assert bad.output == "i" and bad.tolerance == 0.0 and "compare exactly" in str(bad)


def test_random_draws_leave_onnxruntime_out_and_say_why():
    nodes = [helper.make_node("RandomUniformLike", ["x"], ["r"], name="draw", seed=3.0),
             helper.make_node("Add", ["x", "r"], ["y"], name="add")]
    proto = model(nodes, [vi("x", [4, 6])], [vi("y", [4, 6])])
    g = import_proto(proto)
    o = Oracle.of(g, proto)
    assert o.basis == "reference executor fp32 and simulated fp32 rounding vs float64 truth"
    assert "draws random numbers (1 node(s), e.g. RandomUniformLike 'draw')" in o.notes[0]
    result = o.run_and_check(g)
    assert result.ok and "onnxruntime left out" in result.summary


def test_training_artifacts_fall_back_to_the_reference_executor(fixtures_dir):
    path = fixtures_dir / "ort_artifacts/mlp/legacy/gradient_model.onnx"
    from ir.onnx_load import read_model
    g = import_model(path)
    o = Oracle.of(g, read_model(path))
    assert o.basis == "reference executor fp32 and simulated fp32 rounding vs float64 truth"
    assert "onnxruntime cannot load the model (com.microsoft:SoftmaxCrossEntropyLossGrad(-1) is not a " \
           "registered function/op)" in o.notes[0]
    assert o.run_and_check(g).ok


def test_why_onnxruntime_cannot_load_a_model_is_said():
    """onnxruntime has no float64 Erf: the note said "onnxruntime cannot load the model ()"."""
    from codegen.oracle_baseline import _short
    said = _short("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for Erf(13) node "
                  "with name '/Erf'")
    assert said == "Could not find an implementation for Erf(13) node with name '/Erf'"
    assert _short("[ONNXRuntimeError] : 1 : FAIL : Load model failed. com.microsoft:Foo(-1) is not a registered "
                  "function/op") == "com.microsoft:Foo(-1) is not a registered function/op"


JOINT = ["mlp_joint_adamw", "tiny_resnet_joint", "bert_layer_small_joint"]


@pytest.mark.parametrize("name", JOINT)
def test_the_reference_executor_is_never_the_inaccurate_side(fixtures_dir, name):
    """Per output: the fp32 reference executor's error vs the float64 truth is at most twice
    onnxruntime's fp32 error (or twice the unit roundoff). Measured: at most 0.81× (tiny_resnet
    fc.weight_grad); before float64 accumulation, 11.8× (block2.bn2.weight_grad)."""
    from ir.onnx_load import read_model
    path = fixtures_dir / "joint_standard" / f"{name}.onnx"
    g = import_model(path)
    o = Oracle.of(g, read_model(path))
    assert o.basis == "onnxruntime fp32 vs float64 truth"
    ours = reference(g, o.feeds)
    worse = {n: error(ours[n], t, o.scales[n]) / max(o.baseline_errors[n], U32) for n, t in o.truth.items()}
    assert max(worse.values()) <= 2.0, sorted(worse.items(), key=lambda kv: -kv[1])[:3]
    assert max(o.baseline_errors.values()) < 8 * U32       # the fixtures' onnxruntime error, measured ≤ 3.9 u


def test_unbound_symbolic_dimensions_are_a_clear_error():
    from ir.errors import StudioError
    from tests.unit.ir.onnx_models import mlp
    with pytest.raises(StudioError, match="bind the symbolic dimension 'batch' \\(--bind batch=N\\)"):
        Oracle.of(import_proto(mlp()), mlp())
    g = import_proto(mlp(), bindings={"batch": 3})
    assert Oracle.of(g, mlp()).run_and_check(g).ok


def test_without_onnxruntime_a_simulated_fp32_run_sets_the_tolerance():
    """The reference executor's fp32 run sums in float64, so it is no measure of what an fp32
    implementation may do with a sum that cancels (over a normalized tensor). With no model
    for onnxruntime, the simulated fp32 run gives the tolerance: a sequential fp32 sum passes (its
    error is ~100× the reference's), a 1e-3 error still fails."""
    n = 8192
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["m"], name="sum", keepdims=0)]
    proto = model(nodes, [vi("x", [4, n])], [vi("m", [4])], [numpy_helper.from_array(np.array([1]), "axes")])
    g = import_proto(proto)
    z = np.random.default_rng(7).standard_normal((4, n))
    x = (z - z.mean(axis=1, keepdims=True) + 1e-3).astype(np.float32)     # the sum nearly cancels
    o = Oracle.of(g, None, {"x": x})
    assert o.basis == "reference executor fp32 and simulated fp32 rounding vs float64 truth"
    sequential = np.cumsum(x, axis=1, dtype=np.float32)[:, -1]
    err_seq = error(sequential, o.truth["m"], o.scales["m"])
    err_ref = error(reference(g, o.feeds)["m"], o.truth["m"], o.scales["m"])
    assert err_seq > 20 * max(err_ref, U32)           # the reference run alone would have failed it
    assert o.tolerances["m"] == pytest.approx(K_SIMULATED * o.baseline_errors["m"])
    assert o.check({"m": sequential}).ok, o.check({"m": sequential}).summary
    wrong = sequential.copy()
    wrong[1] += np.float32(1e-3 * o.scales["m"])
    assert not o.check({"m": wrong}).ok


def test_gradients_share_the_worst_baseline_error_of_their_kind(fixtures_dir):
    """One output's baseline error is a single draw; gradients (and optimizer state, parameters)
    are measured against one scale per kind, so each gets K × the worst baseline error of its kind."""
    from ir.containers import Role
    from ir.onnx_load import read_model
    path = fixtures_dir / "joint_standard" / "mlp_joint_adamw.onnx"
    g = import_model(path)
    o = Oracle.of(g, read_model(path))
    grads = [n for n in o.truth if g.containers[n].role is Role.GRADIENT]
    worst = max(o.baseline_errors[n] for n in grads)
    assert len(grads) >= 4 and min(o.baseline_errors[n] for n in grads) < worst
    for n in grads:
        assert o.tolerances[n] == pytest.approx(K * max(worst, U32))
    loss = next(n for n in o.truth if g.containers[n].role is Role.OUTPUT)
    assert o.tolerances[loss] == pytest.approx(K * max(o.baseline_errors[loss], U32))


def test_error_counts_equal_infinities_and_nans_as_equal_and_any_other_nan_as_inf():
    want = np.array([1.0, np.inf, -np.inf, np.nan])
    assert error(np.array([1.5, np.inf, -np.inf, np.nan], np.float32), want, 2.0) == 0.25
    assert error(np.array([1.0, -np.inf, -np.inf, np.nan]), want, 1.0) == np.inf       # inf where -inf is
    assert error(np.array([np.nan, np.inf, -np.inf, np.nan]), want, 1.0) == np.inf     # NaN where 1 is
    assert error(np.float32(3), np.float64(1), 4.0) == 0.5 and error(np.ones(3), np.ones(2), 1.0) == np.inf
    assert error(np.array([True, False]), np.array([True, True]), 1.0) == 1.0


def test_start_runs_the_oracle_of_a_snapshot_on_another_thread():
    """``Oracle.start``: the caller may change the graph meanwhile; feeding problems fail at once."""
    from ir.errors import StudioError
    from tests.unit.ir.onnx_models import mlp
    g = import_proto(mlp(), bindings={"batch": 3})
    want = Oracle.of(g, mlp())
    pending = Oracle.start(g, mlp())
    g.outputs = []                                  # the caller's graph changes under the running oracle
    got = pending.result()
    assert got.outputs == want.outputs == ["y"] and got.basis == want.basis
    assert all(np.array_equal(got.truth[n], want.truth[n]) for n in want.truth)
    assert got.tolerances == want.tolerances
    with pytest.raises(StudioError, match="bind the symbolic dimension 'batch'"):
        Oracle.start(import_proto(mlp()), mlp())
    failing = Oracle.start(g, b"not an onnx model")      # onnxruntime cannot load it: the reference stands in
    assert "onnxruntime cannot load the model" in failing.result().basis + "; ".join(failing.result().notes)
