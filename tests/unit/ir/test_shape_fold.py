"""ir.shape_fold: the shape computations of legacy exports fold into constants at import."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from codegen.numpy_ref.executor import run
from ir.movement import report
from ir.onnx_import import import_proto
from tests.unit.ir.onnx_models import model, vi


def _legacy_expand():
    """``Expand(b, Where(Equal(shape, -1), ones, shape))`` with ``shape = Shape(x)``, as the
    TorchScript exporter writes ``b.expand_as(x)``; onnx's data propagation stops at Where."""
    inits = [numpy_helper.from_array(np.arange(6, dtype=np.float32), "b"),
             numpy_helper.from_array(np.asarray(-1, np.int64), "minus_one")]
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Shape", ["s"], ["rank"], name="rank"),
             helper.make_node("ConstantOfShape", ["rank"], ["ones"], name="ones",
                              value=numpy_helper.from_array(np.asarray([1], np.int64))),
             helper.make_node("Mul", ["ones", "minus_one"], ["neg"], name="neg"),
             helper.make_node("Equal", ["s", "neg"], ["is_neg"], name="eq"),
             helper.make_node("Where", ["is_neg", "ones", "s"], ["target"], name="where"),
             helper.make_node("Expand", ["b", "target"], ["bb"], name="expand"),
             helper.make_node("Add", ["x", "bb"], ["y"], name="add")]
    return model(nodes, [vi("x", [4, 6])], [vi("y", [4, 6])], inits)


def test_a_legacy_shape_computation_folds_and_the_graph_computes_the_same():
    proto = _legacy_expand()
    g = import_proto(proto)
    assert g.containers["bb"].shape == (4, 6)
    assert int(g.meta["shape_values_folded"]) >= 1
    assert not {"shape", "rank", "ones", "neg", "eq", "where"} & set(g.nodes)   # the shape chain is gone
    assert report(g).total.bytes > 0
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    proto.ir_version = 10                      # onnxruntime 1.31 reads IR ≤ 13; onnx 1.23 writes 14
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(run(g, {"x": x})["y"], want, rtol=1e-6)


def test_values_that_depend_on_an_input_are_not_folded():
    """A Reshape target computed from a graph input's *values* stays a computation."""
    nodes = [helper.make_node("Cast", ["n"], ["n64"], name="cast", to=TensorProto.INT64),
             helper.make_node("Reshape", ["x", "n64"], ["y"], name="reshape")]
    g = import_proto(model(nodes, [vi("x", [4, 6]), vi("n", [2], TensorProto.INT64)], [vi("y", [24])]))
    assert "shape_values_folded" not in g.meta and "cast" in g.nodes


def test_a_data_dependent_shape_comes_from_one_onnxruntime_run_and_inspect_says_so(tmp_path, capsys):
    """``NonZero`` has no static shape; onnxruntime runs the model on inputs of the declared
    shapes and its result's shape is used (and reported)."""
    import onnx
    from studio.cli import main
    inits = [numpy_helper.from_array(np.asarray([[1, 0, 2], [0, 3, 0]], np.float32), "mask")]
    nodes = [helper.make_node("NonZero", ["mask"], ["nz"], name="nonzero"),
             helper.make_node("Cast", ["nz"], ["nzf"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["nzf"], ["s"], name="sum", keepdims=0),
             helper.make_node("Add", ["x", "s"], ["y"], name="add")]
    proto = model(nodes, [vi("x", [])], [vi("y", [])], inits)
    g = import_proto(proto)
    assert g.containers["nz"].shape == (2, 3) and g.meta["shapes_from_onnxruntime"] == "2"   # nz and its cast
    path = tmp_path / "nonzero.onnx"
    onnx.save(proto, path)
    assert main(["inspect", str(path)]) == 0
    assert "shapes from an onnxruntime run: 2 values" in capsys.readouterr().out


def test_a_shape_set_by_an_input_value_is_left_unknown():
    """Slice bounds fed as graph inputs: one run cannot pin the shape, so no probe pins it."""
    from ir.shape_fold import shapes_from_input_values
    nodes = [helper.make_node("Slice", ["x", "start", "end"], ["y"], name="slice"),
             helper.make_node("Relu", ["y"], ["z"], name="relu")]
    proto = model(nodes, [vi("x", [4, 6]), vi("start", [1], TensorProto.INT64), vi("end", [1], TensorProto.INT64)],
                  [vi("z", None)])
    g = import_proto(proto)
    assert "?" in g.containers["z"].shape and "shapes_from_onnxruntime" not in g.meta
    from ir.shape_infer import infer_types
    assert {"y", "z"} <= shapes_from_input_values(proto, infer_types(proto, {"": 17}))
