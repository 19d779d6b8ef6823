"""ReduceSum, ReduceMean and ReduceSumSquare gradient rules (axes attribute and input forms,
keepdims 0/1, negative axes, empty axes) against finite differences, onnxruntime, the executor
and torch."""
from __future__ import annotations

import numpy as np
import pytest

from tests.unit.transforms.autodiff.gradcheck import OpCase, check_op, rand
from transforms.autodiff import NoGradientError

X = rand((2, 3, 4), 1)
AXES = [[1], [-1], [0, 2], [-3, -2], None]


def _torch(op, axes, keepdims):
    dims = tuple(axes) if axes else (0, 1, 2)

    def fn(t, *_):
        if op == "ReduceSumSquare":
            t = t * t
        y = t.mean(dim=dims, keepdim=bool(keepdims)) if op == "ReduceMean" else t.sum(dim=dims,
                                                                                    keepdim=bool(keepdims))
        return y
    return fn


@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("op,opset", [("ReduceSum", 17), ("ReduceMean", 17), ("ReduceMean", 18),
                                      ("ReduceSumSquare", 18)])
def test_reduce(op, opset, axes, keepdims):
    attr_axes = op != "ReduceSum" and opset < 18
    inputs = [X]
    attrs = {"keepdims": keepdims}
    if axes is not None and attr_axes:
        attrs["axes"] = axes
    elif axes is not None:
        inputs.append(np.asarray(axes, dtype=np.int64))
    check_op(OpCase(op, inputs, attrs, opset=opset, ort_float64=op != "ReduceSumSquare"),
             _torch(op, axes, keepdims))


def test_reduce_sum_noop_with_empty_axes_is_identity():
    check_op(OpCase("ReduceSum", [X], {"noop_with_empty_axes": 1}), lambda t: t)


def test_axes_that_are_not_constant_are_refused_by_name():
    case = OpCase("ReduceSum", [X, np.asarray([1], np.int64)], fed=(1,))
    with pytest.raises(NoGradientError, match="no gradient rule for op ReduceSum with axes that are not constant"):
        check_op(case)
