"""The Pad gradient rule (constant, reflect, edge, wrap; negative pads; axes input; the constant
value's gradient) against finite differences, onnxruntime, the executor and torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.unit.transforms.autodiff.gradcheck import OpCase, check_op, rand

X = rand((2, 3, 4, 5), 1)
TORCH_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}


def ints(*v):
    return np.asarray(v, dtype=np.int64)


def _torch_pad(onnx_pads):
    """ONNX pads (all begins, then all ends, for the last two axes) as torch's (last axis first) pairs."""
    b, e = onnx_pads[:4], onnx_pads[4:]
    return (b[3], e[3], b[2], e[2])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [(0, 0, 1, 2, 0, 0, 3, 1), (0, 0, 0, 3, 0, 0, 2, 0), (0, 0, 3, 4, 0, 0, 3, 4)],
                         ids=str)
def test_pad_modes(mode, pads):
    opset = 19 if mode == "wrap" else 18
    tp = _torch_pad(pads)
    check_op(OpCase("Pad", [X, ints(*pads)], {"mode": mode}, opset=opset, trainable=[0]),
             lambda t, p: F.pad(t, tp, mode=TORCH_MODES[mode]), ort32_rtol=2e-4)


def test_pad_constant_value_gets_the_padded_cells_gradient():
    check_op(OpCase("Pad", [X, ints(0, 1, 0, 2, 0, 0, 1, 1), np.asarray(0.5)], {"mode": "constant"}))


def test_negative_pads_crop():
    check_op(OpCase("Pad", [X, ints(0, -1, 2, 0, 0, 0, -1, 1)], trainable=[0]),
             lambda t, p: F.pad(t, (0, 1, 2, -1, -1, 0)))


def test_pad_with_axes_input_opset18():
    check_op(OpCase("Pad", [X, ints(1, 2, 0, 1), None, ints(-1, 1)], {"mode": "reflect"}, opset=18,
                    trainable=[0]),
             lambda t, p, v, a: _ref_axes(t))


def _ref_axes(t):
    """reflect-pad axis 3 by (1, 0) and axis 1 by (2, 1), as ONNX Pad with axes (-1, 1)."""
    y = F.pad(t, (1, 0, 0, 0), mode="reflect")
    y = y.transpose(1, 2)   # put axis 1 last but one for torch's 2-D reflect pad
    y = F.pad(y, (0, 0, 2, 1), mode="reflect")
    return y.transpose(1, 2)
