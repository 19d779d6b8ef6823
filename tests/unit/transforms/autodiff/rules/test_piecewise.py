"""Floor Ceil Round Sign (zero gradient wherever it exists, as torch) and the shape/index producers:
a path through them carries no gradient; a parameter reaching the loss only through them is not
trained by default."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from tests.unit.transforms.autodiff.gradcheck import OpCase, check_op, rand
from codegen.numpy_ref.executor import run
from ir.onnx_import import import_proto
from transforms.autodiff import build_training_graph
from transforms.autodiff.options import OptionError
from transforms.autodiff.training_graph import plan_parameters


@pytest.mark.parametrize("op,fn", [("Floor", torch.floor), ("Ceil", torch.ceil), ("Round", torch.round),
                                   ("Sign", torch.sign)])
def test_zero_gradient(op, fn):
    x = rand((2, 3), 1, low=-3, high=3) + 0.25          # away from the jumps
    grads = check_op(OpCase(op, [x], trainable=[0]), fn)
    assert not grads["in0"].any()


def test_shape_and_size_of_a_trained_value_carry_no_gradient():
    """y = Reshape(x @ W, Shape(x @ W)) * Size(x @ W): the gradient flows through the data only."""
    rng = np.random.default_rng(3)
    w, x = rng.standard_normal((3, 2)), rng.standard_normal((2, 3))
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Shape", ["h"], ["s"]),
             helper.make_node("Size", ["h"], ["n"]), helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.DOUBLE),
             helper.make_node("Reshape", ["h", "s"], ["r"]), helper.make_node("Mul", ["r", "nf"], ["y"])]
    g = helper.make_graph(nodes, "f", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2, 2])],
                          [numpy_helper.from_array(w, "W")])
    model = build_training_graph(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), loss="mse",
                                 optimizer=None)
    labels = np.zeros((2, 2))
    got = run(import_proto(model), {"x": x, "labels": labels})["W_grad"]
    wt = torch.tensor(w, requires_grad=True)
    torch.nn.functional.mse_loss((torch.tensor(x) @ wt) * 4, torch.tensor(labels)).backward()
    np.testing.assert_allclose(got, wt.grad.numpy(), rtol=1e-12)


def test_a_path_through_floor_carries_no_gradient():
    w = np.asarray([[0.5, 1.5], [2.5, 3.5]], np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Floor", ["h"], ["f"]),
             helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("Add", ["f", "r"], ["y"])]
    inits = [numpy_helper.from_array(w, "W")] + [numpy_helper.from_array(np.asarray(v, np.float32), n)
                                                 for n, v in (("start", 0), ("limit", 2), ("delta", 1))]
    g = helper.make_graph(nodes, "f", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], inits)
    forward = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(OptionError, match=r"nothing to train: .*1 does not reach the loss: W"):
        plan_parameters(forward, loss="mse", optimizer=None)
    assert plan_parameters(forward, loss="mse", optimizer=None, trainable=["W"]).trained == ["W"]
