"""Conv gradient rule (groups, depthwise, strides, pads, dilations, auto_pad, 1-D/2-D) against
finite differences, onnxruntime (float32: ORT has no float64 Conv), the executor and torch."""
from __future__ import annotations

import pytest
import torch.nn.functional as F

from tests.unit.transforms.autodiff.gradcheck import OpCase, check_op, rand

CASES = [  # (C, O, group, kernel, strides, pads, dilations, spatial)
    (2, 3, 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (5, 5)),
    (2, 2, 1, (3, 2), (2, 1), (0, 1, 1, 0), (1, 1), (6, 5)),
    (2, 2, 1, (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), (5, 5)),       # stride skips the last row/col
    (2, 2, 1, (2, 2), (1, 1), (1, 1, 1, 1), (2, 2), (5, 4)),       # dilation
    (4, 4, 2, (3, 3), (1, 2), (1, 1, 1, 1), (1, 1), (5, 5)),       # groups
    (3, 3, 3, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (5, 5)),       # depthwise, strided
    (2, 4, 2, (2, 2), (1, 1), (0, 0, 0, 0), (2, 1), (5, 4)),       # grouped, channel multiplier 2, dilated
]


def _torch_conv(strides, pads, dil, group, nd):
    def fn(x, w, b=None):
        if nd == 2:
            x = F.pad(x, (pads[1], pads[3], pads[0], pads[2]))
            return F.conv2d(x, w, b, stride=strides, dilation=dil, groups=group)
        x = F.pad(x, (pads[0], pads[1]))
        return F.conv1d(x, w, b, stride=strides, dilation=dil, groups=group)
    return fn


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("bias", [False, True])
def test_conv2d(case, bias):
    c, o, group, kernel, strides, pads, dil, spatial = case
    x, w = rand((2, c) + spatial, 1), rand((o, c // group) + kernel, 2)
    inputs = [x, w] + ([rand((o,), 3)] if bias else [])
    attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dil), "group": group,
             "kernel_shape": list(kernel)}
    check_op(OpCase("Conv", inputs, attrs, ort_float64=False), _torch_conv(strides, pads, dil, group, 2))


@pytest.mark.parametrize("strides,pads,dil", [((1,), (1, 1), (1,)), ((2,), (0, 1), (2,)), ((3,), (2, 0), (1,))])
def test_conv1d(strides, pads, dil):
    x, w = rand((2, 2, 7), 4), rand((3, 2, 3), 5)
    attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dil)}
    check_op(OpCase("Conv", [x, w], attrs, ort_float64=False), _torch_conv(strides, pads, dil, 1, 1))


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_auto_pad(auto_pad):
    x, w = rand((1, 2, 5, 4), 6), rand((2, 2, 2, 3), 7)
    check_op(OpCase("Conv", [x, w], {"auto_pad": auto_pad, "strides": [2, 1]}, ort_float64=False))


def test_conv_data_input_gets_no_gradient_but_weight_does():
    x, w = rand((2, 2, 4, 4), 8), rand((2, 2, 3, 3), 9)
    grads = check_op(OpCase("Conv", [x, w], {"pads": [1, 1, 1, 1]}, trainable=[1], ort_float64=False))
    assert set(grads) == {"in1"}


TRANSPOSED = [  # (C, O, group, kernel, strides, pads, dilations, output_padding, spatial)
    (2, 3, 1, (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), (0, 0), (3, 3)),     # a U-Net's 2x up-sampling
    (2, 2, 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (1, 1), (3, 4)),     # output_padding
    (2, 2, 1, (3, 2), (1, 2), (1, 0, 0, 1), (2, 1), (0, 1), (4, 3)),     # dilation, asymmetric pads
    (4, 6, 2, (3, 3), (2, 1), (1, 1, 1, 1), (1, 1), (1, 0), (3, 3)),     # groups (O/G = 3)
    (3, 3, 3, (4, 4), (2, 2), (1, 1, 1, 1), (1, 1), (0, 0), (3, 3)),     # depthwise
]


def _torch_conv_transpose(strides, pads, dil, group, out_pad):
    def fn(x, w, b=None):
        y = F.conv_transpose2d(x, w, b, stride=strides, dilation=dil, groups=group, output_padding=out_pad)
        return y[:, :, pads[0]:y.shape[2] - pads[2], pads[1]:y.shape[3] - pads[3]]
    return fn


@pytest.mark.parametrize("case", TRANSPOSED, ids=str)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose2d(case, bias):
    c, o, group, kernel, strides, pads, dil, out_pad, spatial = case
    x, w = rand((2, c) + spatial, 11), rand((c, o // group) + kernel, 12)
    inputs = [x, w] + ([rand((o,), 13)] if bias else [])
    attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dil), "group": group,
             "output_padding": list(out_pad)}
    check_op(OpCase("ConvTranspose", inputs, attrs, ort_float64=False),
             _torch_conv_transpose(strides, pads, dil, group, out_pad))


@pytest.mark.parametrize("attrs", [{"auto_pad": "SAME_UPPER", "strides": [2, 2]},
                                   {"auto_pad": "SAME_LOWER", "strides": [2, 1]},
                                   {"auto_pad": "VALID", "strides": [2, 2]},
                                   {"output_shape": [6, 5], "strides": [2, 2]}], ids=str)
def test_conv_transpose_resolves_auto_pad_and_output_shape(attrs):
    x, w = rand((1, 2, 3, 3), 14), rand((2, 2, 3, 2), 15)
    check_op(OpCase("ConvTranspose", [x, w], attrs, ort_float64=False))


def test_conv_transpose1d():
    x, w = rand((2, 2, 5), 16), rand((2, 3, 3), 17)
    attrs = {"strides": [2], "pads": [1, 0], "output_padding": [1]}
    check_op(OpCase("ConvTranspose", [x, w], attrs, ort_float64=False),
             lambda x, w: F.conv_transpose1d(x, w, stride=2, output_padding=1)[:, :, 1:])
