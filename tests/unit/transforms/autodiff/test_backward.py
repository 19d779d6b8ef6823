"""The reverse sweep: fan-out accumulation, parameters the loss does not reach, which
initializers "all" trains, and the error for an op without a rule."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper

from tests.unit.transforms.autodiff.gradcheck import ort_run
from transforms.autodiff import NoGradientError, build_training_graph, supported_ops


def _model(nodes, inits: dict[str, np.ndarray], out_shape) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, [2, 3])],
                              [helper.make_tensor_value_info("output", onnx.TensorProto.DOUBLE, out_shape)],
                              initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_fan_out_gradients_are_summed():
    """output = (W*x) * W + tanh(W) + W*W: W is read five times, twice by one node."""
    rng = np.random.default_rng(0)
    w, x, target = rng.standard_normal((2, 3)), rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    nodes = [helper.make_node("Mul", ["W", "x"], ["a"]), helper.make_node("Mul", ["a", "W"], ["b"]),
             helper.make_node("Tanh", ["W"], ["t"]), helper.make_node("Add", ["b", "t"], ["c"]),
             helper.make_node("Mul", ["W", "W"], ["sq"]), helper.make_node("Add", ["c", "sq"], ["output"])]
    model = build_training_graph(_model(nodes, {"W": w}, [2, 3]), loss="mse", optimizer=None, trainable="all")
    assert sum(n.op_type == "Sum" for n in model.graph.node) == 1
    tw = torch.tensor(w, requires_grad=True)
    y = tw * torch.tensor(x) * tw + torch.tanh(tw) + tw * tw
    torch.nn.functional.mse_loss(y, torch.tensor(target)).backward()
    got = ort_run(model, {"x": x, "labels": target})
    np.testing.assert_allclose(got["W_grad"], tw.grad.numpy(), rtol=1e-12)


def test_a_listed_parameter_the_loss_does_not_reach_gets_zeros():
    nodes = [helper.make_node("Mul", ["W", "x"], ["output"]), helper.make_node("Neg", ["U"], ["unused"])]
    forward = _model(nodes, {"W": np.ones((2, 3)), "U": np.ones(4)}, [2, 3])
    assert [i.name for i in build_training_graph(forward, loss="mse", trainable="all").graph.input
            if i.name in "WU"] == ["W"]
    model = build_training_graph(forward, loss="mse", optimizer="sgd", trainable=["W", "U"])
    got = ort_run(model, {"x": np.ones((2, 3)), "labels": np.zeros((2, 3)),
                          "W.momentum": np.zeros((2, 3)), "U.momentum": np.zeros(4),
                          "learning_rate": np.asarray(0.1, np.float32)})
    np.testing.assert_array_equal(got["U_grad"], np.zeros(4))
    np.testing.assert_array_equal(got["U.new"], np.ones(4))


def test_all_trains_float_initializers_that_reach_the_loss_through_differentiable_inputs():
    """Scalars, integer shapes and BatchNorm running statistics stay constants."""
    c = 3
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["x4"]),
             helper.make_node("BatchNormalization", ["x4", "scale", "bias", "mean", "var"], ["bn"]),
             helper.make_node("Mul", ["bn", "half"], ["h"]),
             helper.make_node("Reshape", ["h", "back"], ["output"])]
    inits = {"shape": np.asarray([2, c, 1, 1]), "back": np.asarray([2, c]), "scale": np.ones(c),
             "bias": np.zeros(c), "mean": np.zeros(c), "var": np.ones(c), "half": np.asarray(0.5)}
    model = build_training_graph(_model(nodes, inits, [2, c]), loss="mse", optimizer=None)
    assert [i.name for i in model.graph.input] == ["x", "labels", "scale", "bias"]


def test_no_rule_error_lists_every_supported_op():
    nodes = [helper.make_node("Mul", ["W", "x"], ["a"]), helper.make_node("Selu", ["a"], ["output"], name="act")]
    with pytest.raises(NoGradientError) as info:
        build_training_graph(_model(nodes, {"W": np.ones((2, 3))}, [2, 3]), loss="mse", trainable="all")
    msg = str(info.value)
    assert msg.startswith("node 'act' (Selu, id=act): no gradient rule for op Selu")
    assert f"Gradient rules exist for {len(supported_ops())} ops: " + ", ".join(supported_ops()) in msg
    assert info.value.op_type == "Selu"
