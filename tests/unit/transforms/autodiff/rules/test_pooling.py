"""MaxPool, AveragePool and GlobalAveragePool gradient rules against finite differences,
onnxruntime (float32 for the average pools), the executor and torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch.nn.functional as F

from tests.unit.transforms.autodiff.gradcheck import OpCase, check_op, rand
from transforms.autodiff import NoGradientError


def _distinct(shape, seed):
    """Values at least 1e-3 apart, so no window has a near-tie (finite differences stay valid)."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    return (rng.permutation(n).reshape(shape) / n * 4 - 2).astype(np.float64)


MAXPOOL = [  # kernel, strides, pads, dilations, ceil
    ((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), 0),
    ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 0),       # overlapping windows accumulate
    ((3, 2), (2, 1), (1, 0, 0, 1), (1, 1), 0),
    ((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), 1),       # ceil_mode
    ((2, 2), (1, 1), (0, 0, 0, 0), (2, 2), 0),       # dilation
]


@pytest.mark.parametrize("kernel,strides,pads,dil,ceil", MAXPOOL, ids=str)
def test_max_pool(kernel, strides, pads, dil, ceil):
    x = _distinct((2, 2, 5, 5), 1)
    attrs = {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads),
             "dilations": list(dil), "ceil_mode": ceil}
    symmetric = pads[:2] == pads[2:]
    fn = (lambda t: F.max_pool2d(t, kernel, strides, pads[:2], dil, bool(ceil))) if symmetric else None
    check_op(OpCase("MaxPool", [x], attrs, opset=17), fn)


def test_max_pool_1d_with_explicit_indices_output():
    x = _distinct((2, 3, 7), 2)
    check_op(OpCase("MaxPool", [x], {"kernel_shape": [3], "strides": [2]}, n_outputs=2, loss_outputs=[0]),
             lambda t: F.max_pool1d(t, 3, 2))


AVGPOOL = [  # kernel, strides, pads, count_include_pad, ceil
    ((2, 2), (2, 2), (0, 0, 0, 0), 0, 0),
    ((3, 3), (1, 1), (1, 1, 1, 1), 0, 0),
    ((3, 3), (1, 1), (1, 1, 1, 1), 1, 0),
    ((3, 2), (2, 1), (1, 0, 0, 1), 0, 0),
    ((2, 2), (2, 2), (0, 0, 0, 0), 0, 1),
    ((3, 3), (2, 2), (1, 1, 1, 1), 1, 1),
]


@pytest.mark.parametrize("kernel,strides,pads,include,ceil", AVGPOOL, ids=str)
def test_average_pool(kernel, strides, pads, include, ceil):
    x = rand((2, 2, 5, 5), 3)
    attrs = {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads),
             "count_include_pad": include, "ceil_mode": ceil}
    fn = None
    if pads[:2] == pads[2:] and not ceil:
        fn = lambda t: F.avg_pool2d(t, kernel, strides, pads[:2], count_include_pad=bool(include))  # noqa: E731
    check_op(OpCase("AveragePool", [x], attrs, ort_float64=False), fn)


def test_global_average_pool():
    check_op(OpCase("GlobalAveragePool", [rand((2, 3, 4, 5), 4)], ort_float64=False),
             lambda t: t.mean(dim=(2, 3), keepdim=True))


def test_column_major_indices_read_by_the_model_are_refused():
    case = OpCase("MaxPool", [_distinct((1, 1, 4, 4), 5)], {"kernel_shape": [2, 2], "storage_order": 1},
                  n_outputs=2, loss_outputs=[0])
    with pytest.raises(NoGradientError, match="storage_order=1"):
        check_op(case)
