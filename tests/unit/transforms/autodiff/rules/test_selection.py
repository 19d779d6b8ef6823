"""Max Min ReduceMax ReduceMin GatherElements ScatterND CumSum gradient rules against finite
differences, onnxruntime, the executor and torch (ties: executor against torch only, where finite
differences are undefined)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.unit.transforms.autodiff.gradcheck import OpCase, assert_close, check_op, generated_gradients, rand
from tests.unit.transforms.autodiff.gradcheck import torch_grads

X = rand((2, 3, 4), 1)


def ints(*v):
    return np.asarray(v, dtype=np.int64)


@pytest.mark.parametrize("op,fn", [("Max", torch.maximum), ("Min", torch.minimum)])
def test_max_min_broadcasting(op, fn):
    check_op(OpCase(op, [X, rand((3, 1), 2)]), fn)
    check_op(OpCase(op, [X, rand((4,), 3), rand((2, 1, 4), 4)]), lambda a, b, c: fn(fn(a, b), c))


def test_max_splits_ties_evenly_like_torch():
    a = np.asarray([[1.0, 2.0, 3.0]])
    case = OpCase("Max", [a, np.asarray([[1.0, 5.0, 0.0]])])
    got, weights = generated_gradients(case)
    want = torch_grads(case, torch.maximum, weights)
    for n in got:
        assert_close(got[n], want[n], 1e-12, f"Max tie, {n}")


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([-1], 0), ([0, 2], 1), (None, 0)], ids=str)
def test_reduce_max_min(op, axes, keepdims):
    inputs = [X] + ([ints(*axes)] if axes else [])
    dims = tuple(axes) if axes else (0, 1, 2)
    fn = torch.amax if op == "ReduceMax" else torch.amin
    check_op(OpCase(op, inputs, {"keepdims": keepdims}, opset=18), lambda t, *_: fn(t, dims, bool(keepdims)))


def test_reduce_max_attribute_axes_and_ties_like_torch():
    check_op(OpCase("ReduceMax", [X], {"axes": [2], "keepdims": 0}, opset=17), lambda t: torch.amax(t, 2))
    x = np.asarray([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    case = OpCase("ReduceMax", [x, ints(1)], opset=18)
    got, weights = generated_gradients(case)
    want = torch_grads(case, lambda t, a: torch.amax(t, 1, keepdim=True), weights)
    assert_close(got["in0"], want["in0"], 1e-12, "ReduceMax ties")


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_with_repeated_indices(axis):
    rng = np.random.default_rng(5)
    shape = [2, 3, 4]
    idx_shape = list(shape)
    idx_shape[axis] = 5
    idx = rng.integers(0, shape[axis], idx_shape).astype(np.int64)
    check_op(OpCase("GatherElements", [X, idx], {"axis": axis}), lambda t, i: torch.gather(t, axis % 3, i))


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_nd(reduction):
    idx = ints(2, 0, 1).reshape(3, 1) if reduction == "none" else ints(2, 0, 2).reshape(3, 1)
    data, updates = rand((4, 3), 6), rand((3, 3), 7)

    def ref(d, i, u):
        rows = i.reshape(-1)
        if reduction == "add":
            return d.index_add(0, rows, u)
        return d.index_put((rows,), u)
    check_op(OpCase("ScatterND", [data, idx, updates], {"reduction": reduction}, opset=18), ref)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("axis", [1, -1])
def test_cumsum(axis, exclusive, reverse):
    def ref(t, a):
        t = t.flip(axis) if reverse else t
        c = torch.cumsum(t, axis)
        c = c - t if exclusive else c
        return c.flip(axis) if reverse else c
    check_op(OpCase("CumSum", [X, ints(axis)], {"exclusive": exclusive, "reverse": reverse}), ref)
