"""Small forward models written with onnx.helper for the autodiff unit tests."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp(batch: int = 8, d_in: int = 6, hidden: int = 5, d_out: int = 3, dtype=np.float32, seed: int = 0,
        opset: int = 17) -> onnx.ModelProto:
    """``Gemm(transB) -> Relu -> Gemm(transB)`` with torch ``Linear``-style parameter names."""
    rng = np.random.default_rng(seed)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    weights = {
        "fc1.weight": rng.standard_normal((hidden, d_in)) / np.sqrt(d_in),
        "fc1.bias": rng.standard_normal(hidden) * 0.1,
        "fc2.weight": rng.standard_normal((d_out, hidden)) / np.sqrt(hidden),
        "fc2.bias": rng.standard_normal(d_out) * 0.1,
    }
    nodes = [
        helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["h"], name="fc1", transB=1),
        helper.make_node("Relu", ["h"], ["a"], name="relu"),
        helper.make_node("Gemm", ["a", "fc2.weight", "fc2.bias"], ["output"], name="fc2", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("input", elem, [batch, d_in])],
        [helper.make_tensor_value_info("output", elem, [batch, d_out])],
        initializer=[numpy_helper.from_array(v.astype(dtype), k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def mlp_batch(batch: int = 8, d_in: int = 6, d_out: int = 3, dtype=np.float32, seed: int = 1
              ) -> dict[str, np.ndarray]:
    """Random inputs and class labels for ``mlp``."""
    rng = np.random.default_rng(seed)
    return {"input": rng.standard_normal((batch, d_in)).astype(dtype),
            "labels": rng.integers(0, d_out, batch).astype(np.int64)}


def with_node(model: onnx.ModelProto, node: onnx.NodeProto, output: str, elem: int = TensorProto.FLOAT,
              shape: list[int] | None = None) -> onnx.ModelProto:
    """``model`` with one more node whose output replaces the graph output."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.node.append(node)
    del out.graph.output[:]
    out.graph.output.append(helper.make_tensor_value_info(output, elem, shape))
    return out
