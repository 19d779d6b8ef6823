"""Dropout's gradient goes through the node's own mask: deterministic cases against finite
differences and torch; random cases by the identity ``loss == sum(x * dx)`` (one draw). A
Dropout that trains with a constant ratio takes its mask as a step input (``dropout_masks``):
the draw is the caller's, so both engines see the mask the test fed."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from codegen.numpy_ref.executor import run
from ir.onnx_import import import_proto
from tests.unit.transforms.autodiff.gradcheck import OpCase, check_op, loss_weights, ort_run, rand, training_model

X = rand((4, 50), 1)


@pytest.mark.parametrize("ratio,mode", [(0.0, True), (0.5, False), (0.5, None)])
def test_dropout_deterministic_cases_are_identity(ratio, mode):
    inputs = [X, np.asarray(ratio)] + ([np.asarray(mode)] if mode is not None else [])
    check_op(OpCase("Dropout", inputs, n_outputs=2, loss_outputs=[0], trainable=[0]), lambda t, *a: t)


def _check_one_draw(result: dict, weights: np.ndarray, ratio: float) -> None:
    dx = result["in0_grad"]
    # the kernels scale by 1/(1-ratio) in float32 (1.7e-8 relative); the generated graph in float64
    np.testing.assert_allclose(result["loss"], np.sum(X * dx), rtol=1e-7)
    kept = dx != 0
    np.testing.assert_allclose(dx[kept], weights[kept] / (1 - ratio), rtol=1e-12)
    assert 0.5 < kept.mean() < 0.9


@pytest.mark.parametrize("n_outputs", [1, 2])
@pytest.mark.parametrize("fed", [(), (1, 2)], ids=["constant", "runtime"])
def test_dropout_training_uses_the_forward_mask(n_outputs, fed):
    ratio = 0.3
    case = OpCase("Dropout", [X, np.asarray(ratio), np.asarray(True)], n_outputs=n_outputs,
                  loss_outputs=[0], trainable=[0], fed=fed)
    weights = loss_weights(OpCase("Identity", [X]))
    weights = {"out0": weights["out0"]}
    model = training_model(case, np.dtype(np.float64), weights)
    feeds = case.feeds()
    if not fed:                                   # constant ratio and flag: the mask is an input
        mask_name = "out1" if n_outputs == 2 else "out0.mask"
        (mask_input,) = [i for i in model.graph.input if i.name == mask_name]
        assert mask_input.type.tensor_type.elem_type == onnx.TensorProto.BOOL
        mask = np.random.default_rng(3).random(X.shape) >= ratio
        feeds[mask_name] = mask
    for result in (ort_run(model, feeds), run(import_proto(model), feeds)):
        _check_one_draw(result, weights["out0"], ratio)
        if not fed:
            np.testing.assert_array_equal(result["in0_grad"] != 0, mask)


def test_dropout_runtime_training_flag_off_is_identity():
    case = OpCase("Dropout", [X, np.asarray(0.3), np.asarray(False)], n_outputs=2, loss_outputs=[0],
                  trainable=[0], fed=(1, 2))
    check_op(case, lambda t, *a: t)
