"""Floor Ceil Round Sign (zero gradient wherever it exists, as torch) and the shape/index producers:
a path through them carries no gradient; a parameter reaching the loss only through them is not
trained by default."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from tests.unit.transforms.autodiff.gradcheck import OpCase, check_op, rand
from transforms.autodiff.training_graph import plan_parameters


@pytest.mark.parametrize("op,fn", [("Floor", torch.floor), ("Ceil", torch.ceil), ("Round", torch.round),
                                   ("Sign", torch.sign)])
def test_zero_gradient(op, fn):
    x = rand((2, 3), 1, low=-3, high=3) + 0.25          # away from the jumps
    grads = check_op(OpCase(op, [x], trainable=[0]), fn)
    assert not grads["in0"].any()


def test_a_path_through_floor_carries_no_gradient():
    w = np.asarray([[0.5, 1.5], [2.5, 3.5]], np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Floor", ["h"], ["f"]),
             helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("Add", ["f", "r"], ["y"])]
    inits = [numpy_helper.from_array(w, "W")] + [numpy_helper.from_array(np.asarray(v, np.float32), n)
                                                 for n, v in (("start", 0), ("limit", 2), ("delta", 1))]
    g = helper.make_graph(nodes, "f", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], inits)
    plan = plan_parameters(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), loss="mse",
                           optimizer=None)
    assert plan.trained == [] and plan.reasons["W"] == "does not reach the loss"
