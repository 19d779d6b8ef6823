"""Progressive lowering (ir/lowering): every expansion family against the op-level executor.

Each case imports a one-op ONNX model, runs the reference executor on the op
level and on the graph after ``expand_all``, and compares (fp32: rtol 1e-5,
atol 1e-6).
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes
from onnx import TensorProto, helper, numpy_helper

from codegen.numpy_ref.executor import run
from ir import expr as E
from ir import lowering as L
from ir import onnx_import, serialize
from ir.errors import PreconditionError
from ir.maps import tasklet_accesses, trip_count
from ir.nodes import MapNode, OpNode, Tasklet
from ir.verify import verify

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
MS, STUDIO = "com.microsoft", "ai.dcstudio"
RTOL, ATOL = 1e-5, 1e-6
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "ort_artifacts"


# --- helpers ------------------------------------------------------------------------------

def vi(name, shape, dt=F):
    return helper.make_tensor_value_info(name, dt, shape)


def one_op(op, ins, outs, *, attrs=None, inits=(), domain="", opset=17, name="op"):
    """A model of one node: ``ins``/``outs`` are (name, shape[, dtype]) tuples."""
    node = helper.make_node(op, [i[0] for i in ins], [o[0] for o in outs], name=name,
                            domain=domain, **(attrs or {}))
    init_names = {t.name for t in inits}
    g = helper.make_graph([node], "g", [vi(*i) for i in ins if i[0] and i[0] not in init_names],
                          [vi(*o) for o in outs if o[0]], list(inits))
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    return helper.make_model(g, opset_imports=opsets)


def imp(model):
    return onnx_import.import_proto(model)


def const(name, value, dt=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype=dt), name)


def rand(shape, dt=np.float32, seed=0, lo=None):
    rng = np.random.default_rng(seed)
    if dt == np.bool_:
        return rng.random(shape) > 0.5
    if np.issubdtype(dt, np.integer):
        return rng.integers(-5, 6, size=shape).astype(dt)
    x = rng.standard_normal(shape).astype(dt)
    return np.abs(x) + lo if lo is not None else x


def feeds_for(g, seed=0, positive=()):
    return {n: rand(g.containers[n].concrete_shape(g.bindings), np.dtype(g.containers[n].dtype),
                    seed + k, 0.1 if n in positive else None) for k, n in enumerate(g.inputs)}


def assert_close(ref, out, rtol=RTOL, atol=ATOL):
    assert set(ref) == set(out)
    for key in ref:
        a, b = np.asarray(ref[key]), np.asarray(out[key])
        assert a.shape == b.shape and a.dtype == b.dtype, key
        if a.dtype.kind in "biu":
            np.testing.assert_array_equal(b, a, err_msg=key)
        else:
            np.testing.assert_allclose(b, a, rtol=rtol, atol=atol, err_msg=key)


def check(model, feeds=None, *, positive=(), rtol=RTOL, atol=ATOL, impl=None):
    """Import, run op level, expand every op, verify, run again, compare; return the maps."""
    g = imp(model)
    feeds = feeds if feeds is not None else feeds_for(g, positive=positive)
    ref = run(g, feeds)
    g2 = g.clone()
    ids = L.expand_all(g2) if impl is None else \
        [L.expand_node(g2, n.id, impl).id for n in list(g2.nodes.values())]
    assert ids, [L.can_expand(g, n) for n in g.nodes.values()]
    verify(g2)
    assert_close(ref, run(g2, feeds), rtol, atol)
    return g2, [g2.nodes[i] for i in ids]


def flops(graph, m: MapNode) -> int:
    """Σ (count_flops + wcr) × iterations, the convention of ir.movement."""
    return sum((E.count_flops(t.expr) + (1 if mem.wcr else 0)) * trip_count(params, graph.bindings)
               for t, mem, is_write, params, _ in tasklet_accesses(m) if is_write)


# --- registry, reasons, graph surgery -----------------------------------------------------

def test_matmul_is_a_library_call_with_a_reason():
    g = imp(one_op("MatMul", [("a", [2, 3]), ("b", [3, 4])], [("y", [2, 4])], name="mm"))
    reason = L.can_expand(g, g.nodes["mm"])
    assert reason == "op 'mm' (MatMul, id=mm) is a library call: it keeps a BLAS implementation"
    assert L.impls(g.nodes["mm"]) == ("blas", "blocked")  # library implementations, not expansions
    with pytest.raises(PreconditionError, match="library call"):
        L.expand(g, g.nodes["mm"])


def test_reasons_for_shape_ops_unknown_ops_and_maps():
    g = imp(one_op("Reshape", [("x", [2, 3]), ("s", [1], I64)], [("y", [6])],
                   inits=[const("s", [6], np.int64)], name="rs"))
    assert "shape/data-movement op" in L.can_expand(g, g.nodes["rs"])
    g = imp(one_op("Relu", [("x", [2, 3])], [("y", [2, 3])], name="r"))
    m = L.expand_node(g, "r")
    assert L.can_expand(g, m).endswith("is already a map")
    g = imp(one_op("Hardmax", [("x", [2, 3])], [("y", [2, 3])], name="h"))
    assert "has no expansion rule (ai.onnx::Hardmax)" in L.can_expand(g, g.nodes["h"])


def test_dynamic_shape_reason_and_bound_symbols():
    model = one_op("Relu", [("x", ["batch", 3])], [("y", ["batch", 3])], name="r")
    g = imp(model)
    assert "dynamic shape" in L.can_expand(g, g.nodes["r"]) and "'batch'" in L.can_expand(g, g.nodes["r"])
    g = onnx_import.import_proto(model, bindings={"batch": 2})
    assert L.expand(g, g.nodes["r"]).params[0][1].stop == E.Const(2, "int64")


def test_expand_leaves_graph_alone_and_expand_node_keeps_order():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="n0"),
             helper.make_node("MatMul", ["a", "w"], ["b"], name="n1"),
             helper.make_node("Exp", ["b"], ["c"], name="n2"),
             helper.make_node("Neg", ["c"], ["y"], name="n3")]
    model = helper.make_model(helper.make_graph(nodes, "g", [vi("x", [2, 3]), vi("w", [3, 3])],
                                                [vi("y", [2, 3])]),
                              opset_imports=[helper.make_opsetid("", 17)])
    g = imp(model)
    m = L.expand(g, g.nodes["n2"])
    assert list(g.nodes) == ["n0", "n1", "n2", "n3"] and isinstance(g.nodes["n2"], OpNode)
    assert (m.id, m.name, m.label) == ("n2/expanded", "n2", "Exp")
    L.expand_node(g, "n2")
    assert list(g.nodes) == ["n0", "n1", "n2/expanded", "n3"]
    assert L.expand_all(g) == ["n0/expanded", "n3/expanded"]
    assert list(g.nodes) == ["n0/expanded", "n1", "n2/expanded", "n3/expanded"]
    assert g.producer("c").id == "n2/expanded" and [n.id for n in g.consumers("c")] == ["n3/expanded"]
    verify(g)


def test_impls_and_impl_errors():
    g = imp(one_op("Softmax", [("x", [2, 5])], [("y", [2, 5])], name="sm"))
    assert L.impls(g.nodes["sm"]) == ("two_pass", "online")
    with pytest.raises(PreconditionError, match="unknown implementation 'three_pass'"):
        L.expand(g, g.nodes["sm"], "three_pass")
    g = imp(one_op("Add", [("a", [2]), ("b", [2])], [("y", [2])], name="a"))
    assert L.impls(g.nodes["a"]) == ("default",)


def test_every_registered_rule_has_a_known_domain():
    assert {d for d, _ in L.EXPANSIONS} == {"", MS, STUDIO}
    assert all(rule.op_type == op and rule.impls for (_, op), rule in L.EXPANSIONS.items())


# --- elementwise --------------------------------------------------------------------------

def test_broadcast_add_memlets_and_flops():
    g2, (m,) = check(one_op("Add", [("x", [2, 3, 4]), ("b", [4])], [("y", [2, 3, 4])]))
    assert m.input_names() == ["x", "b"] and m.output_names() == ["y"]
    t = m.body[0]
    assert E.to_text(t.inputs["b"].subset[0]) == "i2" and len(t.inputs["b"].subset) == 1
    assert [E.to_text(ix) for ix in t.output.subset] == ["i0", "i1", "i2"]
    assert flops(g2, m) == 24  # 1 per element
    assert m.inputs[1].volume == 24 and m.outputs[0].volume == 24
    from ir.movement import kernel_estimate  # the consumer of the FLOP convention
    assert kernel_estimate(g2, m).flops == 24


def test_size_one_dims_index_with_zero_and_scalar_constants_fold():
    _, (m,) = check(one_op("Mul", [("x", [2, 1, 4]), ("s", [])], [("y", [2, 1, 4])],
                           inits=[const("s", 0.5)]))
    assert m.input_names() == ["x"] and "0.5" in E.to_text(m.body[0].expr)
    _, (m,) = check(one_op("Sub", [("x", [3, 1]), ("z", [1, 4])], [("y", [3, 4])]))
    assert [E.to_text(i) for i in m.body[0].inputs["a"].subset] == ["i0", "0"]


UNARY = ["Neg", "Abs", "Exp", "Tanh", "Erf", "Sin", "Cos", "Floor", "Ceil", "Sign", "Round",
         "Relu", "Sigmoid", "Softplus", "Softsign", "HardSwish", "Identity", "Atan", "Sinh"]


@pytest.mark.parametrize("op", UNARY)
def test_unary(op):
    check(one_op(op, [("x", [3, 5])], [("y", [3, 5])]))


@pytest.mark.parametrize("op", ["Sqrt", "Log", "Reciprocal"])
def test_unary_positive(op):
    check(one_op(op, [("x", [4, 3])], [("y", [4, 3])]), positive=("x",))


@pytest.mark.parametrize("op,attrs", [("LeakyRelu", {"alpha": 0.2}), ("Elu", {"alpha": 0.7}),
                                      ("Selu", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
                                      ("Celu", {"alpha": 1.3}), ("ThresholdedRelu", {"alpha": 0.3}),
                                      ("Shrink", {"lambd": 0.4, "bias": 0.1}), ("Mish", {})])
def test_activations_with_attributes(op, attrs):
    check(one_op(op, [("x", [2, 3, 4])], [("y", [2, 3, 4])], attrs=attrs, opset=18))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Equal", "Less", "LessOrEqual",
                                "Greater", "GreaterOrEqual", "PRelu"])
def test_binary_broadcasting(op):
    out_dt = BOOL if op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual") else F
    check(one_op(op, [("a", [2, 3, 4]), ("b", [3, 1])], [("y", [2, 3, 4], out_dt)]))


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(op):
    check(one_op(op, [("a", [3, 4], BOOL), ("b", [4], BOOL)], [("y", [3, 4], BOOL)]))
    check(one_op("Not", [("a", [3, 4], BOOL)], [("y", [3, 4], BOOL)]))


def test_integer_division_truncates_like_the_kernel():
    check(one_op("Div", [("a", [6], I64), ("b", [6], I64)], [("y", [6], I64)]),
          {"a": np.array([7, -7, 7, -7, 0, 5]), "b": np.array([2, 2, -2, -2, 3, 5])})


def test_pow_with_constant_and_tensor_exponents():
    _, (m,) = check(one_op("Pow", [("x", [3, 4]), ("e", [])], [("y", [3, 4])],
                           inits=[const("e", 2.0)]))
    assert m.input_names() == ["x"]
    check(one_op("Pow", [("x", [3, 4]), ("e", [4], I64)], [("y", [3, 4])]), positive=("x",))


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic_broadcasting(op):
    _, (m,) = check(one_op(op, [("a", [2, 3]), ("b", [3]), ("c", [2, 1])], [("y", [2, 3])]))
    assert m.input_names() == ["a", "b", "c"]


def test_where_cast_castlike():
    check(one_op("Where", [("c", [2, 3], BOOL), ("x", [2, 3]), ("y", [3])], [("z", [2, 3])]))
    check(one_op("Cast", [("x", [2, 3])], [("y", [2, 3], I64)], attrs={"to": I64}))
    check(one_op("Cast", [("x", [2, 3])], [("y", [2, 3], BOOL)], attrs={"to": BOOL}))
    check(one_op("CastLike", [("x", [2, 3], I64), ("t", [1])], [("y", [2, 3])]))
    g = imp(one_op("Cast", [("x", [2])], [("y", [2], TensorProto.BFLOAT16)],
                   attrs={"to": TensorProto.BFLOAT16}, name="c"))
    assert "bfloat16" in L.can_expand(g, g.nodes["c"])


def test_clip_constant_and_runtime_bounds():
    _, (m,) = check(one_op("Clip", [("x", [3, 4]), ("lo", []), ("hi", [])], [("y", [3, 4])],
                           inits=[const("lo", -0.5), const("hi", 0.6)]))
    assert m.input_names() == ["x"]
    _, (m,) = check(one_op("Clip", [("x", [3, 4]), ("lo", [])], [("y", [3, 4])]))
    assert m.input_names() == ["x", "lo"]
    check(one_op("Clip", [("x", [3, 4])], [("y", [3, 4])], attrs={"min": -0.1, "max": 0.2}, opset=6))


def test_dropout_inference_and_training():
    _, (m,) = check(one_op("Dropout", [("x", [2, 3]), ("r", []), ("t", [], BOOL)],
                           [("y", [2, 3]), ("mask", [2, 3], BOOL)],
                           inits=[const("r", 0.3), const("t", False, np.bool_)]))
    assert m.output_names() == ["y", "mask"]
    g = imp(one_op("Dropout", [("x", [2, 3]), ("r", []), ("t", [], BOOL)], [("y", [2, 3])],
                   inits=[const("r", 0.3), const("t", True, np.bool_)], name="d"))
    assert "random mask" in L.can_expand(g, g.nodes["d"])
    g = imp(one_op("Dropout", [("x", [2, 3]), ("r", []), ("t", [], BOOL)], [("y", [2, 3])], name="d"))
    assert "training_mode (input 2, 't') is a runtime tensor" in L.can_expand(g, g.nodes["d"])


def test_ms_scale_and_dropout_grad():
    check(one_op("Scale", [("x", [2, 3]), ("s", [], I64)], [("y", [2, 3])],
                 attrs={"scale_down": 1}, domain=MS), {"x": rand((2, 3)), "s": np.array(4)})
    check(one_op("Scale", [("x", [2, 3]), ("s", [1])], [("y", [2, 3])], domain=MS,
                 inits=[const("s", [3.0])]))
    model = one_op("DropoutGrad", [("dy", [2, 5]), ("mask", [2, 5], BOOL), ("r", [])],
                   [("dx", [2, 5])], domain=MS, inits=[const("r", 0.25)])
    g2, (m,) = check(model)
    assert flops(g2, m) == 20


def test_transpose():
    _, (m,) = check(one_op("Transpose", [("x", [2, 3, 4])], [("y", [4, 2, 3])],
                           attrs={"perm": [2, 0, 1]}))
    assert [E.to_text(ix) for ix in m.body[0].inputs["x"].subset] == ["i1", "i2", "i0"]
    check(one_op("Transpose", [("x", [2, 3])], [("y", [3, 2])]))


def test_gelu_both_forms_and_flops():
    for approx, per_elem in (("none", 5), ("tanh", 9)):
        model = one_op("Gelu", [("x", [4, 6])], [("y", [4, 6])], attrs={"approximate": approx},
                       opset=20)
        g2, (m,) = check(model)
        assert flops(g2, m) == per_elem * 24
    g2, (m,) = check(one_op("Gelu", [("x", [4, 6])], [("y", [4, 6])], domain=MS))
    assert flops(g2, m) == 5 * 24


@pytest.mark.parametrize("op,ins", [
    ("FastGelu", [("x", [3, 8]), ("b", [8])]), ("FastGelu", [("x", [3, 8])]),
    ("BiasGelu", [("x", [3, 8]), ("b", [8])]), ("QuickGelu", [("x", [3, 8])]),
    ("GeluGrad", [("dy", [3, 8]), ("x", [3, 8])]), ("FastGeluGrad", [("dy", [3, 8]), ("x", [3, 8])]),
    ("QuickGeluGrad", [("dy", [3, 8]), ("x", [3, 8])]), ("ReluGrad", [("dy", [3, 8]), ("x", [3, 8])]),
    ("SigmoidGrad", [("dy", [3, 8]), ("y", [3, 8])]), ("TanhGrad", [("dy", [3, 8]), ("y", [3, 8])]),
    ("BiasGeluGrad_dX", [("dy", [3, 8]), ("x", [3, 8]), ("b", [8])]),
])
def test_microsoft_activations_and_grads(op, ins):
    g2, (m,) = check(one_op(op, ins, [("out", [3, 8])], domain=MS))
    per_elem = {"GeluGrad": 11, "BiasGeluGrad_dX": 12, "QuickGeluGrad": 10, "FastGeluGrad": 18}
    assert op not in per_elem or flops(g2, m) == per_elem[op] * 24


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4),
       st.sampled_from(["Add", "Mul", "Sub", "Max"]))
def test_broadcasting_matches_numpy(shapes, op):
    (sa, sb), out = shapes.input_shapes, shapes.result_shape
    check(one_op(op, [("a", list(sa)), ("b", list(sb))], [("y", list(out))]))


# --- reductions -----------------------------------------------------------------------------

@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", [[1], [0, 2], [-1], [0, 1, 2]])
def test_reduce_mean_attribute_and_input_axes(keepdims, axes):
    shape = [2, 3, 4]
    out = [1 if (a in [x % 3 for x in axes]) else d for a, d in enumerate(shape)] if keepdims else \
        [d for a, d in enumerate(shape) if a not in [x % 3 for x in axes]]
    g2, (m,) = check(one_op("ReduceMean", [("x", shape)], [("y", out)],
                            attrs={"axes": axes, "keepdims": keepdims}, opset=17))
    n = math.prod(shape[a % 3] for a in axes)
    assert flops(g2, m) == (24 // n) * (n + 1)
    check(one_op("ReduceMean", [("x", shape), ("ax", [len(axes)], I64)], [("y", out)],
                 attrs={"keepdims": keepdims}, inits=[const("ax", axes, np.int64)], opset=18))


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
                                "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceLogSum"])
def test_every_reduce_op(op):
    model = one_op(op, [("x", [3, 4, 5]), ("ax", [1], I64)], [("y", [3, 1, 5])],
                   inits=[const("ax", [1], np.int64)], opset=18)
    check(model, positive=("x",) if op == "ReduceLogSum" else ())


def test_reduce_sum_writes_its_output_with_wcr_and_noop_copies():
    _, (m,) = check(one_op("ReduceSum", [("x", [3, 4]), ("ax", [1], I64)], [("y", [4])],
                           attrs={"keepdims": 0}, inits=[const("ax", [0], np.int64)]))
    assert m.outputs[0].wcr == "sum" and m.input_names() == ["x"]
    check(one_op("ReduceSum", [("x", [3, 4]), ("ax", [0], I64)], [("y", [3, 4])],
                 attrs={"noop_with_empty_axes": 1}, inits=[const("ax", np.zeros(0), np.int64)]))
    check(one_op("ReduceSum", [("x", [3, 4])], [("y", [])], attrs={"keepdims": 0}))


def test_runtime_axes_are_not_expandable():
    g = imp(one_op("ReduceSum", [("x", [3, 4]), ("ax", [1], I64)], [("y", [3, 1])], name="rs"))
    assert "axes (input 1, 'ax') is a runtime tensor" in L.can_expand(g, g.nodes["rs"])


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_reduce_random_axes(shape, data):
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
    keep = data.draw(st.sampled_from([0, 1]))
    op = data.draw(st.sampled_from(["ReduceSum", "ReduceMean", "ReduceMax"]))
    out = [1 if a in axes else d for a, d in enumerate(shape)] if keep else \
        [d for a, d in enumerate(shape) if a not in axes]
    check(one_op(op, [("x", shape)], [("y", out)], attrs={"axes": axes, "keepdims": keep},
                 opset=11))


# --- softmax ------------------------------------------------------------------------------

@pytest.mark.parametrize("impl", ["two_pass", "online"])
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax_and_log_softmax(impl, axis):
    for op in ("Softmax", "LogSoftmax"):
        model = one_op(op, [("x", [2, 5, 7])], [("y", [2, 5, 7])], attrs={"axis": axis})
        check(model, {"x": rand((2, 5, 7)) * 20}, impl=impl)


def test_softmax_flops_and_online_agrees_with_two_pass():
    model = one_op("Softmax", [("x", [3, 4, 16])], [("y", [3, 4, 16])], attrs={"axis": -1})
    g = imp(model)
    two = L.expand(g, g.nodes["op"], "two_pass")
    online = L.expand(g, g.nodes["op"], "online")
    assert flops(g, two) == 12 * 7 * 16 and flops(g, online) == 12 * 12 * 16
    x = {"x": rand((3, 4, 16), seed=3) * 30}
    outs = []
    for m in (two, online):
        h = g.clone()
        h.remove_node("op")
        h.add_node(m)
        outs.append(run(h, x)["y"])
    np.testing.assert_allclose(outs[1], outs[0], rtol=RTOL, atol=ATOL)
    assert online.input_names() == ["x"] and online.output_names() == ["y"]


def test_online_softmax_is_the_sequential_recurrence():
    """Running the online sweep's statements element by element gives the same (m, s)."""
    g = imp(one_op("Softmax", [("x", [1, 9])], [("y", [1, 9])]))
    prev_t, max_t, sum_t = L.expand(g, g.nodes["op"], "online").body[0].body
    assert (max_t.output.wcr, sum_t.output.wcr) == ("max", "sum")
    x = rand(9, seed=5) * 10
    m, s = -np.inf, 0.0
    for v in x:
        prev, m = m, max(m, v)
        vals = {"x": v, "max": np.float32(m), "sum": np.float32(s), "prev_max": np.float32(prev)}
        s = s + float(E.evaluate(sum_t.expr, vals))
    assert math.isclose(m, x.max()) and math.isclose(s, np.exp(x - x.max()).sum(), rel_tol=1e-6)


def test_legacy_softmax_coerces_trailing_axes():
    check(one_op("Softmax", [("x", [2, 3, 4])], [("y", [2, 3, 4])], attrs={"axis": 1}, opset=11))
    check(one_op("LogSoftmax", [("x", [2, 3, 4])], [("y", [2, 3, 4])], opset=11))


@pytest.mark.parametrize("op,attrs", [("SoftmaxGrad_13", {"axis": -1}), ("SoftmaxGrad_13", {"axis": 1}),
                                      ("SoftmaxGrad", {"axis": 1}), ("LogSoftmaxGrad_13", {}),
                                      ("LogSoftmaxGrad", {"axis": 2})])
def test_softmax_grads(op, attrs):
    y = np.exp(rand((2, 3, 6), seed=1))
    check(one_op(op, [("dy", [2, 3, 6]), ("y", [2, 3, 6])], [("dx", [2, 3, 6])], attrs=attrs,
                 domain=MS), {"dy": rand((2, 3, 6)), "y": y / y.sum(-1, keepdims=True)})


# --- normalization ------------------------------------------------------------------------

def test_layer_norm_three_outputs_memlets_and_flops():
    model = one_op("LayerNormalization", [("x", [2, 3, 8]), ("s", [8]), ("b", [8])],
                   [("y", [2, 3, 8]), ("mu", [2, 3, 1]), ("inv", [2, 3, 1])],
                   attrs={"axis": -1, "epsilon": 1e-5})
    g2, (m,) = check(model)
    assert sorted(m.input_names()) == ["b", "s", "x"] and m.output_names() == ["y", "mu", "inv"]
    assert flops(g2, m) == 6 * (8 * 8 + 5)
    assert m.param_names == ["i0", "i1"] and all(isinstance(b, (MapNode, Tasklet)) for b in m.body)


@pytest.mark.parametrize("axis", [1, -2, 0])
def test_layer_norm_multi_axis_no_bias(axis):
    shape = [2, 3, 4]
    check(one_op("LayerNormalization", [("x", shape), ("s", shape[axis % 3:])], [("y", shape)],
                 attrs={"axis": axis}))


def test_layer_norm_ms_and_opset16_and_fp16():
    ins = [("x", [4, 6]), ("s", [6]), ("b", [6])]
    outs = [("y", [4, 6]), ("mu", [4, 1]), ("inv", [4, 1])]
    check(one_op("LayerNormalization", ins, outs, domain=MS))
    g = imp(one_op("LayerNormalization", ins, [("y", [4, 6])], opset=16))
    feeds = feeds_for(g)
    g2 = g.clone()
    L.expand_all(g2)
    assert_close(run(g, feeds), run(g2, feeds))
    h16 = TensorProto.FLOAT16
    model = one_op("LayerNormalization", [("x", [4, 6], h16), ("s", [6], h16), ("b", [6], h16)],
                   [("y", [4, 6], h16)])
    g = imp(model)
    feeds = {k: v.astype(np.float16) for k, v in feeds_for(g).items()}
    g2 = g.clone()
    L.expand_all(g2)
    assert_close(run(g, feeds), run(g2, feeds), rtol=2e-3, atol=2e-3)


def test_rms_norms():
    check(one_op("SimplifiedLayerNormalization", [("x", [3, 8]), ("s", [8])],
                 [("y", [3, 8]), ("inv", [3, 1])], domain=MS))
    check(one_op("RMSNormalization", [("x", [3, 8]), ("s", [8])], [("y", [3, 8])], opset=23))


def test_layer_norm_grad_single_map():
    x = rand((2, 3, 8), seed=2)
    mean = x.mean(-1, keepdims=True)
    inv = 1 / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    model = one_op("LayerNormalizationGrad", [("dy", [2, 3, 8]), ("x", [2, 3, 8]), ("s", [8]),
                                              ("mu", [2, 3, 1]), ("inv", [2, 3, 1])],
                   [("dx", [2, 3, 8]), ("ds", [8]), ("db", [8])], attrs={"axis": -1}, domain=MS)
    feeds = {"dy": rand((2, 3, 8)), "x": x, "s": rand(8, seed=4), "mu": mean.astype(np.float32),
             "inv": inv.astype(np.float32)}
    g2, (m,) = check(model, feeds)
    assert {o.container: o.wcr for o in m.outputs} == {"dx": None, "ds": "sum", "db": "sum"}
    assert flops(g2, m) == 6 * (16 * 8 + 2)


def test_batch_norm_inference():
    model = one_op("BatchNormalization", [("x", [2, 3, 4, 4]), ("s", [3]), ("b", [3]), ("m", [3]),
                                          ("v", [3])], [("y", [2, 3, 4, 4])], attrs={"epsilon": 1e-3})
    check(model, positive=("v",))


@pytest.mark.parametrize("x_shape", [[2, 3, 4, 5], [6, 3]])
def test_batch_norm_training_is_one_map_over_the_channels(x_shape):
    """With the ``batch_stats`` implementation: batch statistics over every axis but the channel
    (float64 sums, two passes), y, and the running statistics; by default, and in the 5-output form
    of opsets before 14, a library call."""
    model = one_op("BatchNormalization", [("x", x_shape), ("s", [3]), ("b", [3]), ("m", [3]), ("v", [3])],
                   [("y", x_shape), ("rm", [3]), ("rv", [3])],
                   attrs={"training_mode": 1, "momentum": 0.8, "epsilon": 1e-3}, opset=15)
    g2, (m,) = check(model, positive=("v",), impl="batch_stats")
    assert len(m.params) == 1 and m.params[0][1].stop.value == 3
    assert sorted(o.container for o in m.outputs) == ["rm", "rv", "y"]
    g = imp(model)
    assert "'batch_stats' implementation" in L.can_expand(g, next(iter(g.nodes.values())))   # not by default
    old = imp(one_op("BatchNormalization", [("x", [2, 3]), ("s", [3]), ("b", [3]), ("m", [3]), ("v", [3])],
                     [("y", [2, 3]), ("rm", [3]), ("rv", [3]), ("sm", [3]), ("sv", [3])], opset=9, name="bn"))
    assert "before opset 14" in L.can_expand(old, old.nodes["bn"], "batch_stats")


@pytest.mark.parametrize("x_shape", [[2, 3, 4, 5], [6, 3]])
def test_onnxruntime_training_batch_norms_are_maps_over_the_channels(x_shape):
    """BatchNormInternal (with its saved mean and inverse standard deviation) and BatchNormalizationGrad, the
    forward and backward BatchNorm of onnxruntime-training artifacts: one map each under ``batch_stats``,
    equal to the reference kernels; library calls by default."""
    fwd = one_op("BatchNormInternal", [("x", x_shape), ("s", [3]), ("b", [3]), ("m", [3]), ("v", [3])],
                 [("y", x_shape), ("rm", [3]), ("rv", [3]), ("sm", [3]), ("si", [3])],
                 attrs={"momentum": 0.8, "epsilon": 1e-3}, domain=MS)
    _, (m,) = check(fwd, positive=("v",), impl="batch_stats")
    assert sorted(o.container for o in m.outputs) == ["rm", "rv", "si", "sm", "y"]
    x = rand(x_shape, seed=5)
    axes = tuple(a for a in range(len(x_shape)) if a != 1)
    mean, inv = x.mean(axes), 1 / np.sqrt(x.var(axes) + 1e-3)
    grad = one_op("BatchNormalizationGrad", [("dy", x_shape), ("x", x_shape), ("s", [3]), ("sm", [3]), ("si", [3])],
                  [("dx", x_shape), ("ds", [3]), ("db", [3])], domain=MS)
    feeds = {"dy": rand(x_shape, seed=6), "x": x, "s": rand(3, seed=7), "sm": mean.astype(np.float32),
             "si": inv.astype(np.float32)}
    _, (m,) = check(grad, feeds, impl="batch_stats")
    assert sorted(o.container for o in m.outputs) == ["db", "ds", "dx"]
    for model in (fwd, grad):
        g = imp(model)
        assert "'batch_stats' implementation" in L.can_expand(g, next(iter(g.nodes.values())))


# --- optimizers ---------------------------------------------------------------------------

def _opt_feeds(g, names):
    feeds = {**feeds_for(g), "lr": np.array([1e-2], np.float32), "step": np.array([3], np.int64)}
    return {n: np.abs(v) if n in names else v for n, v in feeds.items() if n in g.inputs}


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("wd,correct", [(0.0, 1), (0.01, 1), (0.01, 0)])
def test_adamw(mode, wd, correct):
    model = one_op("AdamW", [("lr", [1]), ("step", [1], I64), ("p", [4, 5]), ("g", [4, 5]),
                             ("m", [4, 5]), ("v", [4, 5])],
                   [("p.new", [4, 5]), ("m.new", [4, 5]), ("v.new", [4, 5])], domain=STUDIO,
                   attrs={"alpha": 0.9, "beta": 0.999, "epsilon": 1e-6, "weight_decay": wd,
                          "adam_mode": mode, "correct_bias": correct})
    g = imp(model)
    g2, (m,) = check(model, _opt_feeds(g, ["v"]))
    assert set(m.output_names()) == {"p.new", "m.new", "v.new"}
    base = (19 if mode else 18) if correct else 12
    assert flops(g2, m) == 20 * (base + (3 if wd else 0))


@pytest.mark.parametrize("attrs", [{}, {"momentum": 0.9}, {"momentum": 0.9, "nesterov": 1},
                                   {"momentum": 0.8, "dampening": 0.1, "weight_decay": 0.01},
                                   {"weight_decay": 0.1}])
def test_sgd(attrs):
    model = one_op("SGD", [("lr", [1]), ("p", [3, 4]), ("g", [3, 4]), ("m", [3, 4])],
                   [("p.new", [3, 4]), ("m.new", [3, 4])], domain=STUDIO, attrs=attrs)
    check(model, _opt_feeds(imp(model), []))


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_lion(wd):
    model = one_op("Lion", [("lr", [1]), ("p", [3, 4]), ("g", [3, 4]), ("m", [3, 4])],
                   [("p.new", [3, 4]), ("m.new", [3, 4])], domain=STUDIO, attrs={"weight_decay": wd})
    check(model, _opt_feeds(imp(model), []))


# --- end to end -----------------------------------------------------------------------------

def _bert_feeds(g, folder):
    ref = np.load(folder / "reference.npz")
    feeds = {"input": ref["input0"], "target": ref["labels"],
             "learning_rate": np.array([1e-3], np.float32), "step": np.array([1], np.int64)}
    for p in (key[len("param0/"):] for key in ref.files if key.startswith("param0/")):
        value = ref["param0/" + p]
        feeds.update({p: value, p + ".m": np.zeros_like(value), p + ".v": np.zeros_like(value)})
    return feeds, ref


def test_bert_small_training_step_expanded_matches_op_level_and_ort():
    folder = FIXTURES / "bert_layer_small" / "legacy_ln3"
    g = onnx_import.import_model(folder / "training_model.onnx")
    feeds, ref = _bert_feeds(g, folder)
    op_level = run(g, feeds)
    g2 = g.clone()
    ids = L.expand_all(g2)
    verify(g2)
    assert serialize.dumps(serialize.loads(serialize.dumps(g2))) == serialize.dumps(g2)
    kinds = {g.nodes[i.removesuffix("/expanded")].qualified_type for i in ids}
    assert {"Softmax", "LayerNormalization", "com.microsoft::LayerNormalizationGrad",
            "com.microsoft::SoftmaxGrad_13", "com.microsoft::GeluGrad", "ai.dcstudio::AdamW",
            "ReduceSum", "Transpose"} <= kinds
    expanded = run(g2, feeds)
    assert_close(op_level, expanded)
    np.testing.assert_allclose(expanded["onnx::reducemean_output::6"], ref["loss"], rtol=1e-5)
    for p in (key[len("param1/"):] for key in ref.files if key.startswith("param1/")):
        np.testing.assert_allclose(expanded[p + ".new"], ref["param1/" + p], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(expanded[p + "_grad"], ref["grad/" + p], rtol=1e-4, atol=1e-7)


@pytest.mark.slow
def test_bert_base_layer_every_expandable_op_matches_op_level():
    """The acceptance bar: BERT-base layer (B=8, L=128, H=768), random inputs."""
    path = FIXTURES / "bert_layer_base" / "legacy16" / "training_model.onnx"
    start = time.perf_counter()
    g = onnx_import.import_model(path)
    feeds = {n: v * np.float32(0.1) if v.dtype == np.float32 else v for n, v in feeds_for(g).items()}
    feeds.update(step=np.ones(1, np.int64), learning_rate=np.full(1, 1e-3, np.float32))
    feeds.update({n: np.abs(v) * np.float32(1e-2) for n, v in feeds.items() if n.endswith(".v")})
    op_level = run(g, feeds)
    g2 = g.clone()
    ids = L.expand_all(g2)
    verify(g2)
    assert len(ids) == sum(L.can_expand(g, n) is None for n in g.nodes.values()) > 60
    remaining = {n.op_type for n in g2.nodes.values() if isinstance(n, OpNode)}
    assert remaining <= {"MatMul", "Gemm", "FusedMatMul", "Reshape", "Shape", "Size", "Expand"}
    assert_close(op_level, run(g2, feeds))
    assert time.perf_counter() - start < 60
