"""Small ONNX models written inline for unit tests."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def vi(name, shape, dt=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dt, shape)


def model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def mlp(batch="batch") -> onnx.ModelProto:
    """x[batch,4] -> Gemm(W1,b1) -> Relu -> Gemm(W2,b2) -> y[batch,3]."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("W1", (4, 8)), ("b1", (8,)), ("W2", (8, 3)), ("b2", (3,)))]
    nodes = [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["a"], name="act"),
             helper.make_node("Gemm", ["a", "W2", "b2"], ["y"], name="fc2")]
    return model(nodes, [vi("x", [batch, 4])], [vi("y", [batch, 3])], inits)
