"""ir.onnx_import: fixtures import, roles, deterministic ids, bindings, constants."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from codegen.numpy_ref.executor import run
from ir.containers import Role
from ir.errors import ShapeError
from ir.onnx_import import import_model, import_proto
from ir.serialize import graph_hash
from ir.verify import verify
from tests.unit.ir.onnx_models import mlp, model, vi


def test_every_fixture_imports_and_verifies(fixtures_dir):
    files = sorted(p for p in fixtures_dir.rglob("*.onnx") if p.name != "optimizer_model.onnx")
    assert len(files) >= 30
    for path in files:
        g = import_model(path)
        verify(g)
        assert g.nodes and g.outputs, path


def test_ids_are_deterministic_and_derived_from_names(fixtures_dir):
    path = fixtures_dir / "ort_artifacts/bert_layer_small/legacy_ln3/training_model.onnx"
    a, b = import_model(path), import_model(path)
    assert list(a.nodes) == list(b.nodes) and graph_hash(a) == graph_hash(b)
    assert "/layer/attention/self/Softmax" in a.nodes
    assert a.access_id("input") == "data:input"


def test_unnamed_and_duplicate_names_get_unique_ids():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"], name="r"),
             helper.make_node("Relu", ["b"], ["c"], name="r"), helper.make_node("Relu", ["c"], ["d my"], name="")]
    g = import_proto(model(nodes, [vi("x", [2])], [vi("d my", [2])]))
    assert list(g.nodes) == ["Relu:a", "r", "r~1", "Relu:d_my"]


def test_forward_model_roles_and_symbolic_binding():
    g = import_proto(mlp(), bindings={"batch": 5})
    assert g.containers["x"].shape == (5, 4)
    assert g.containers["W1"].role is Role.PARAMETER
    assert g.containers["y"].role is Role.OUTPUT and g.containers["h"].role is Role.TRANSIENT
    assert g.meta["kind"] == "forward"
    out = run(g, {"x": np.ones((5, 4), np.float32)})["y"]
    assert out.shape == (5, 3)


def test_symbolic_dimension_stays_symbolic_until_bound():
    g = import_proto(mlp())
    assert g.containers["x"].shape == ("batch", 4)
    assert g.containers["y"].symbols == ("batch",)


def test_constant_nodes_become_constant_containers():
    shape = helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.array([4, 2], np.int64)))
    nodes = [shape, helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")]
    g = import_proto(model(nodes, [vi("x", [8])], [vi("y", [4, 2])]))
    assert list(g.nodes) == ["rs"]
    assert g.containers["s"].role is Role.CONSTANT and g.values["s"].tolist() == [4, 2]


def test_out_of_order_nodes_are_sorted():
    nodes = [helper.make_node("Relu", ["a"], ["b"], name="second"), helper.make_node("Neg", ["x"], ["a"], name="first")]
    g = import_proto(model(nodes, [vi("x", [3])], [vi("b", [3])]))
    assert [n.id for n in g.topo_order()] == ["first", "second"]
    assert list(g.nodes) == ["first", "second"]


def test_data_dependent_shape_is_reported_when_counting():
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")]
    m = model(nodes, [vi("x", [8]), vi("s", [2], 7)], [helper.make_tensor_value_info("y", 1, None)])
    g = import_proto(m)
    assert g.containers["y"].shape == ("?", "?")
    from ir.movement import report
    with pytest.raises(ShapeError, match="'y' is data-dependent"):
        report(g)


def test_training_op_outputs_declared_without_a_shape_get_their_rule_shapes():
    """Regression (issue 10, random graphs): a graph output produced by an op onnx does not know
    (``ai.dcstudio::SGD``, com.microsoft grads), declared with a type but no shape, stayed of
    unknown rank ('...'): the shape rules never ran for it, and memory planning and
    ``recompute`` then failed with ``KeyError: '...'``."""
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    nodes = [helper.make_node("ReduceSum", ["dy", "axes"], ["w_grad"], name="grad", keepdims=0),
             helper.make_node("SGD", ["lr", "w", "w_grad", "w.m"], ["w.new", "w.m.new"], name="sgd",
                              domain="ai.dcstudio", momentum=0.9)]
    m = model(nodes, [vi("dy", [3, 4]), vi("lr", [1]), vi("w", [4]), vi("w.m", [4])],
              [helper.make_tensor_value_info(n, 1, None) for n in ("w.new", "w.m.new")], [axes])
    m.opset_import.append(helper.make_opsetid("ai.dcstudio", 1))
    g = import_proto(m)
    assert g.containers["w.new"].shape == (4,) and g.containers["w.m.new"].shape == (4,)


@pytest.mark.parametrize("op", ["TanhGrad", "LogSoftmaxGrad"])
def test_elementwise_training_grads_have_shape_rules(op):
    """Regression (issue 10, random graphs): TanhGrad and LogSoftmaxGrad are claimed and expand,
    but had no shape rule, so an intermediate they produce could not be imported ("cannot infer
    the type and shape")."""
    nodes = [helper.make_node(op, ["dy", "y"], ["dx"], name="g", domain="com.microsoft"),
             helper.make_node("Neg", ["dx"], ["z"], name="n")]
    m = model(nodes, [vi("dy", [2, 3]), vi("y", [2, 3])], [vi("z", [2, 3])])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    g = import_proto(m)
    assert g.containers["dx"].shape == (2, 3)


def test_ops_reading_an_output_declared_without_a_shape_get_shapes():
    """Regression (issue 10, random graphs): onnx types a value by its graph-output declaration,
    so when that declaration has no shape, the ops reading the value stayed of unknown rank —
    after a training op whose output is also a graph output (its rule's shape never reached
    them), or after a graph input that is also a graph output."""
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    nodes = [helper.make_node("SigmoidGrad", ["dy", "y"], ["dx"], name="g", domain="com.microsoft"),
             helper.make_node("ReduceMean", ["dx"], ["m"], name="mean", keepdims=0),
             helper.make_node("Neg", ["m"], ["z"], name="neg"),
             helper.make_node("ReduceSum", ["x", "axes"], ["s"], name="sum", keepdims=0),
             helper.make_node("Neg", ["s"], ["t"], name="neg2")]
    shapeless = [helper.make_tensor_value_info(n, 1, None) for n in ("dx", "x", "z", "t")]
    m = model(nodes, [vi("dy", [2, 3]), vi("y", [2, 3]), vi("x", [4, 3])], shapeless, [axes])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    g = import_proto(m)
    assert g.containers["dx"].shape == (2, 3) and g.containers["m"].shape == ()
    assert g.containers["x"].shape == (4, 3) and g.containers["s"].shape == (3,)
