"""BatchNormalization and LayerNormalization gradient rules against finite differences,
onnxruntime, the executor and torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.unit.transforms.autodiff.gradcheck import (OpCase, check_op, generated_gradients, rand,
                                                       training_model)


def _bn_inputs(shape):
    c = shape[1]
    return [rand(shape, 1, -2, 2), rand((c,), 2, 0.5, 1.5), rand((c,), 3), rand((c,), 4),
            rand((c,), 5, 0.5, 1.5)]


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4), (2, 2, 3, 3)], ids=str)
def test_batch_norm_training(shape):
    case = OpCase("BatchNormalization", _bn_inputs(shape), {"epsilon": 1e-3, "training_mode": 1},
                  n_outputs=3, trainable=[0, 1, 2], loss_outputs=[0])
    check_op(case, lambda x, s, b, m, v: F.batch_norm(x, None, None, s, b, training=True, eps=1e-3))


def test_batch_norm_inference_mode():
    case = OpCase("BatchNormalization", _bn_inputs((2, 3, 2, 2)), {"epsilon": 1e-3}, trainable=[0, 1, 2],
                  options={"batchnorm": "eval"})
    check_op(case, lambda x, s, b, m, v: F.batch_norm(x, m, v, s, b, training=False, eps=1e-3))


def test_batch_norm_inference_model_is_trained_with_batch_statistics():
    """batchnorm='train' (the default) turns an inference-mode node into batch statistics."""
    case = OpCase("BatchNormalization", _bn_inputs((3, 2, 2)), {"epsilon": 1e-3}, trainable=[1, 2])
    got, weights = generated_gradients(case)
    ins = [torch.tensor(np.asarray(v)) for v in case.inputs]
    s, b = (t.clone().requires_grad_(True) for t in ins[1:3])
    y = F.batch_norm(ins[0], None, None, s, b, training=True, eps=1e-3)
    (y * torch.tensor(weights["out0"])).sum().backward()
    np.testing.assert_allclose(got["in1"], s.grad.numpy(), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(got["in2"], b.grad.numpy(), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("axis", [-1, 1, -2])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm(axis, bias):
    shape = (2, 3, 4)
    x = rand(shape, 6, -2, 2)
    norm = shape[axis % 3:]
    ins = [x, rand(norm, 7, 0.5, 1.5)] + ([rand(norm, 8)] if bias else [])
    case = OpCase("LayerNormalization", ins, {"axis": axis, "epsilon": 1e-4}, n_outputs=1)
    check_op(case, lambda t, s, b=None: F.layer_norm(t, norm, s, b, eps=1e-4))


def test_layer_norm_reuses_float32_statistics():
    """In float32 the generated graph reads the node's Mean/InvStdDev outputs (ORT float32 run)."""
    x = rand((3, 5), 9, -2, 2)
    case = OpCase("LayerNormalization", [x, rand((5,), 10), rand((5,), 11)], {"epsilon": 1e-4},
                  n_outputs=3, loss_outputs=[0], ort_float64=False)
    check_op(case, lambda t, s, b: F.layer_norm(t, (5,), s, b, eps=1e-4))
    model = training_model(case, np.dtype(np.float32), {"out0": np.ones((3, 5))})
    readers = {i for n in model.graph.node if n.name.startswith("grad/") for i in n.input}
    assert {"out1", "out2"} <= readers
