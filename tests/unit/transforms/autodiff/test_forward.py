"""prepare_forward: explicit masks, indices and statistics; BatchNorm mode; opset upgrade; static types."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from transforms.autodiff.forward import prepare_forward
from transforms.autodiff.options import TrainingOptions


def _model(nodes, inits, out, opset=17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 4])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _ones(*shape):
    return np.ones(shape, np.float32)


NODES = [
    helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn"], name="bn"),
    helper.make_node("MaxPool", ["bn"], ["mp"], kernel_shape=[2, 2], strides=[2, 2], storage_order=1, name="mp"),
    helper.make_node("Dropout", ["mp", "ratio", "train"], ["dr"], name="dr"),
    helper.make_node("LayerNormalization", ["dr", "g"], ["ln"], name="ln"),
]
INITS = {"s": _ones(3), "b": _ones(3), "m": _ones(3), "v": _ones(3), "ratio": np.asarray(0.1, np.float32),
         "train": np.asarray(True), "g": _ones(2)}


def test_values_the_backward_pass_reads_become_outputs():
    fwd = prepare_forward(_model(NODES, INITS, "ln"), TrainingOptions())
    outs = {n.name: list(n.output) for n in fwd.nodes}
    assert outs["bn"] == ["bn", "bn.running_mean", "bn.running_var"]
    assert outs["mp"] == ["mp", "mp.indices"] and outs["dr"] == ["dr", "dr.mask"]
    assert outs["ln"] == ["ln", "ln.mean", "ln.inv_std_dev"]
    attrs = {n.name: {a.name: helper.get_attribute_value(a) for a in n.attribute} for n in fwd.nodes}
    assert attrs["bn"]["training_mode"] == 1 and attrs["mp"]["storage_order"] == 0
    assert fwd.types["mp.indices"] == (TensorProto.INT64, (2, 3, 2, 2))
    assert fwd.types["ln.mean"] == (TensorProto.FLOAT, (2, 3, 2, 1))
    assert fwd.prediction == "ln" and [vi.name for vi in fwd.data_inputs] == ["x"]


def test_batchnorm_eval_keeps_running_statistics():
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn", "rm", "rv"], training_mode=1)
    fwd = prepare_forward(_model([node], INITS, "bn"), TrainingOptions(batchnorm="eval"))
    assert list(fwd.nodes[0].output) == ["bn"]
    assert {a.name: a.i for a in fwd.nodes[0].attribute}["training_mode"] == 0


def test_the_input_model_is_not_modified_and_old_opsets_are_upgraded():
    model = _model(NODES[:1], INITS, "bn", opset=14)
    before = model.SerializeToString()
    fwd = prepare_forward(model, TrainingOptions())
    assert model.SerializeToString() == before and fwd.opset == 17


def test_large_initializers_get_types_without_being_copied():
    big = np.ones((64, 48), np.float32)
    node = helper.make_node("MatMul", ["y", "W"], ["out"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 64])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(big, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    fwd = prepare_forward(model, TrainingOptions())
    assert fwd.types["out"] == (TensorProto.FLOAT, (5, 48))
    assert fwd.initializers["W"] is model.graph.initializer[0]
    assert not fwd.model.graph.initializer
