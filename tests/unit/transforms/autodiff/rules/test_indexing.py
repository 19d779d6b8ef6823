"""Concat, Split, Slice, Gather and Where gradient rules against finite differences, onnxruntime,
the executor and torch (constant and run-time index inputs)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.unit.transforms.autodiff.gradcheck import OpCase, check_op, rand


def ints(*v):
    return np.asarray(v, dtype=np.int64)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis):
    a = rand((2, 3, 2), 1)
    b_shape = [2, 3, 2]
    b_shape[axis] = 1
    b, c = rand(b_shape, 2), rand((2, 3, 2), 3)
    check_op(OpCase("Concat", [a, b, c], {"axis": axis}), lambda *ts: torch.cat(ts, axis))
    check_op(OpCase("Concat", [a, b, c], {"axis": axis}, trainable=[1]), lambda *ts: torch.cat(ts, axis))


def test_split_with_sizes_and_an_unused_output():
    x = rand((2, 6), 4)
    check_op(OpCase("Split", [x, ints(1, 3, 2)], {"axis": 1}, n_outputs=3),
             lambda t, s: torch.split(t, [1, 3, 2], 1))
    check_op(OpCase("Split", [x, ints(1, 3, 2)], {"axis": -1}, n_outputs=3, loss_outputs=[0, 2]),
             lambda t, s: torch.split(t, [1, 3, 2], 1))


def test_split_num_outputs_opset18():
    check_op(OpCase("Split", [rand((4, 3), 5)], {"axis": 0, "num_outputs": 2}, n_outputs=2, opset=18),
             lambda t: torch.split(t, 2, 0))


SLICES = [  # starts, ends, axes, steps
    ((1,), (3,), (1,), None),
    ((0, 1), (2, 100), (0, 2), None),                     # end clamped
    ((-2,), (2**62,), (-1,), (1,)),                       # negative start, huge end
    ((0, 3), (4, 0), (1, 2), (2, -1)),                    # strided and reversed
    ((3,), (-100,), (1,), (-2,)),                         # negative step to the front
    ((1,), (2,), None, None),                             # axes omitted
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES, ids=str)
@pytest.mark.parametrize("runtime", [False, True], ids=["constant", "runtime"])
def test_slice(starts, ends, axes, steps, runtime):
    x = rand((3, 4, 5), 6)
    inputs = [x, ints(*starts), ints(*ends)] + ([ints(*axes)] if axes or steps else []) + (
        [ints(*steps)] if steps else [])
    if steps and not axes:
        inputs[3] = ints(*range(len(starts)))
    fed = tuple(range(1, len(inputs))) if runtime else ()
    region = _py_slices(x.shape, starts, ends, axes, steps)
    assert x[region].size > 0
    forward_steps = all(s.step is None or s.step > 0 for s in region)   # torch slices forward only
    check_op(OpCase("Slice", inputs, fed=fed, trainable=[0]),
             (lambda t, *_: t[region]) if forward_steps else None)


def _py_slices(shape, starts, ends, axes, steps):
    sl = [slice(None)] * len(shape)
    for k, a in enumerate(axes or range(len(starts))):
        sl[a] = slice(starts[k], ends[k], (steps or [1] * len(starts))[k])
    return tuple(sl)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("indices", [ints(2), ints(0, 2, 2), ints(-1, 0, 1, 1).reshape(2, 2)], ids=str)
def test_gather(axis, indices):
    x = rand((3, 4, 3), 7)

    def ref(t, i):
        return torch.index_select(t, axis % 3, torch.where(i < 0, i + t.shape[axis], i).reshape(-1)
                                  ).reshape(t.shape[:axis % 3] + tuple(i.shape) + t.shape[axis % 3 + 1:])
    check_op(OpCase("Gather", [x, indices], {"axis": axis}), ref)


def test_gather_embedding_with_runtime_token_ids():
    table = rand((6, 4), 8)
    tokens = ints(1, 5, 1, 0, 5, 5).reshape(2, 3)
    check_op(OpCase("Gather", [table, tokens], fed=(1,)), lambda w, i: torch.nn.functional.embedding(i, w))


@pytest.mark.parametrize("shapes", [((2, 3), (2, 3), (2, 3)), ((3,), (2, 3), (1,)), ((2, 1), (3,), (2, 3))],
                         ids=str)
def test_where(shapes):
    rng = np.random.default_rng(9)
    cond = rng.uniform(size=shapes[0]) > 0.5
    a, b = rand(shapes[1], 10), rand(shapes[2], 11)
    check_op(OpCase("Where", [cond, a, b]), torch.where)
    check_op(OpCase("Where", [cond, a, b], fed=(0,)), torch.where)
