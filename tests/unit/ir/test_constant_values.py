"""ConstantValues: constant inputs are folded on demand; anything that depends on a
parameter or a graph input is not constant."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from ir.constant_values import MAX_FOLD_ELEMS, ConstantValues


def _graph(nodes, inits):
    return helper.make_graph(nodes, "g", [], [], initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])


def test_shape_chains_fold_like_the_exporters_write_them():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.asarray([-1], np.int64))),
        helper.make_node("Concat", ["b1", "c"], ["new_shape"], axis=0),
        helper.make_node("Relu", ["x"], ["y"]),
    ]
    types = {"x": (TensorProto.FLOAT, (4, 3, 2)), "new_shape": (TensorProto.INT64, (2,)),
             "b1": (TensorProto.INT64, (1,)), "b": (TensorProto.INT64, ()), "s": (TensorProto.INT64, (3,)),
             "c": (TensorProto.INT64, (1,)), "y": (TensorProto.FLOAT, (4, 3, 2))}
    inits = {"zero": np.asarray(0, np.int64), "axes": np.asarray([0], np.int64)}
    frozen = {t.name: t for t in _graph([], inits).initializer}
    values = ConstantValues(_graph(nodes, inits), frozen, types, 17)
    np.testing.assert_array_equal(values.value("new_shape"), [4, -1])
    np.testing.assert_array_equal(values.value("s"), [4, 3, 2])
    assert values.value("y") is None and values.value("x") is None


def test_trainable_initializers_and_large_results_are_not_constant():
    inits = {"w": np.ones(3, np.float32), "k": np.ones(3, np.float32)}
    big = MAX_FOLD_ELEMS + 1
    nodes = [helper.make_node("Add", ["w", "k"], ["wk"]),
             helper.make_node("ConstantOfShape", ["n"], ["huge"])]
    types = {"wk": (TensorProto.FLOAT, (3,)), "huge": (TensorProto.FLOAT, (big,)), "n": (TensorProto.INT64, (1,))}
    graph = _graph(nodes, {**inits, "n": np.asarray([big], np.int64)})
    frozen = {t.name: t for t in graph.initializer if t.name != "w"}
    values = ConstantValues(graph, frozen, types, 17)
    assert values.value("wk") is None and values.value("huge") is None
    np.testing.assert_array_equal(values.value("k"), np.ones(3))
