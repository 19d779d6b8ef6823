"""Losses: loss value and prediction gradient against torch (cross-entropy with and without
ignore_index, spatial labels; MSE), through onnxruntime and the executor."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper

from codegen.numpy_ref.executor import run
from ir.onnx_import import import_proto
from tests.unit.transforms.autodiff.gradcheck import ort_run
from transforms.autodiff import build_training_graph


def identity_model(pred: np.ndarray) -> onnx.ModelProto:
    """``output = Identity(P)`` with the prediction ``P`` as the only parameter."""
    elem = helper.np_dtype_to_tensor_dtype(pred.dtype)
    graph = helper.make_graph([helper.make_node("Identity", ["P"], ["output"])], "identity", [],
                              [helper.make_tensor_value_info("output", elem, list(pred.shape))],
                              initializer=[numpy_helper.from_array(pred, "P")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _both(model, feeds):
    return [("onnxruntime", ort_run(model, feeds)), ("executor", run(import_proto(model), feeds))]


@pytest.mark.parametrize("shape", [(5, 4), (3, 4, 2, 2)], ids=str)
@pytest.mark.parametrize("ignore_index", [None, 1, -100])
def test_cross_entropy_matches_torch(shape, ignore_index):
    rng = np.random.default_rng(0)
    logits = rng.standard_normal(shape)
    labels = rng.integers(0, shape[1], (shape[0],) + shape[2:]).astype(np.int64)
    if ignore_index is not None:
        labels.reshape(-1)[::3] = ignore_index
    model = build_training_graph(identity_model(logits), loss="cross_entropy", optimizer=None, trainable="all",
                                 ignore_index=ignore_index)
    t = torch.tensor(logits, requires_grad=True)
    loss = F.cross_entropy(t, torch.tensor(labels), ignore_index=-100 if ignore_index is None else ignore_index)
    loss.backward()
    for label, out in _both(model, {"labels": labels}):
        np.testing.assert_allclose(out["loss"], loss.item(), rtol=1e-10, err_msg=label)
        np.testing.assert_allclose(out["P_grad"], t.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=label)


def test_mse_matches_torch():
    rng = np.random.default_rng(1)
    pred, target = rng.standard_normal((3, 4, 5)), rng.standard_normal((3, 4, 5))
    model = build_training_graph(identity_model(pred), loss="mse", optimizer=None, trainable="all")
    t = torch.tensor(pred, requires_grad=True)
    loss = F.mse_loss(t, torch.tensor(target))
    loss.backward()
    for label, out in _both(model, {"labels": target}):
        np.testing.assert_allclose(out["loss"], loss.item(), rtol=1e-12, err_msg=label)
        np.testing.assert_allclose(out["P_grad"], t.grad.numpy(), rtol=1e-12, err_msg=label)


def test_labels_input_has_the_loss_type_and_shape():
    logits = np.zeros((2, 3, 4), np.float32)
    ce = build_training_graph(identity_model(logits), loss="cross_entropy", optimizer=None, trainable="all")
    mse = build_training_graph(identity_model(logits), loss="mse", optimizer=None, trainable="all")
    (ce_labels,) = [i for i in ce.graph.input if i.name == "labels"]
    (mse_labels,) = [i for i in mse.graph.input if i.name == "labels"]
    assert ce_labels.type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert [d.dim_value for d in ce_labels.type.tensor_type.shape.dim] == [2, 4]
    assert mse_labels.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert [d.dim_value for d in mse_labels.type.tensor_type.shape.dim] == [2, 3, 4]
