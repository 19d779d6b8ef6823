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


def bn_dropout_net(batch: int = 4, channels: int = 3, size: int = 5, ratio: float = 0.25, momentum: float = 0.9,
                   seed: int = 0) -> onnx.ModelProto:
    """``Conv -> BatchNormalization (training) -> Relu -> Flatten -> Dropout (training) -> Gemm``, as the legacy
    torch exporter writes a model exported in training mode (a BatchNorm with its running statistics as
    outputs, a Dropout with constant ratio and training flag)."""
    rng = np.random.default_rng(seed)
    flat = channels * (size - 2) ** 2
    weights = {"conv.weight": rng.standard_normal((channels, 2, 3, 3)) * 0.3, "conv.bias": rng.standard_normal(channels),
               "bn.weight": 1 + rng.standard_normal(channels) * 0.1, "bn.bias": rng.standard_normal(channels) * 0.1,
               "bn.running_mean": rng.standard_normal(channels) * 0.1, "bn.running_var": 1 + rng.random(channels),
               "fc.weight": rng.standard_normal((3, flat)) * 0.1, "fc.bias": np.zeros(3)}
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
    inits += [numpy_helper.from_array(np.asarray(ratio, np.float32), "ratio"),
              numpy_helper.from_array(np.asarray(True), "train")]
    nodes = [
        helper.make_node("Conv", ["input", "conv.weight", "conv.bias"], ["c"], name="/conv/Conv"),
        helper.make_node("BatchNormalization", ["c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"],
                         ["b", "b_mean", "b_var"], name="/bn/BatchNormalization", momentum=momentum, training_mode=1),
        helper.make_node("Relu", ["b"], ["r"], name="/relu/Relu"),
        helper.make_node("Flatten", ["r"], ["f"], name="/Flatten"),
        helper.make_node("Dropout", ["f", "ratio", "train"], ["d", "d_mask"], name="/drop/Dropout"),
        helper.make_node("Gemm", ["d", "fc.weight", "fc.bias"], ["output"], name="/fc/Gemm", transB=1),
    ]
    graph = helper.make_graph(nodes, "bn_dropout", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                                  [batch, 2, size, size])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 3])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model.producer_name = "pytorch"
    return model
