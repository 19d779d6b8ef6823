"""Gradient rules of data-movement ops (Reshape Flatten Squeeze Unsqueeze Transpose Expand Tile
Identity Cast) against finite differences, onnxruntime, the executor and torch."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from tests.unit.transforms.autodiff.gradcheck import OpCase, check_op, rand

X = rand((2, 3, 4), 1)


def ints(*v):
    return np.asarray(v, dtype=np.int64)


@pytest.mark.parametrize("shape", [(6, 4), (-1, 2), (0, -1), (24,)], ids=str)
def test_reshape(shape):
    target = tuple(X.shape[i] if d == 0 else d for i, d in enumerate(shape))
    check_op(OpCase("Reshape", [X, ints(*shape)]), lambda t, s: t.reshape(target))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_flatten(axis):
    a = axis % 3
    check_op(OpCase("Flatten", [X], {"axis": axis}),
             lambda t: t.reshape(int(np.prod(X.shape[:a])), -1))


def test_squeeze_unsqueeze():
    x = rand((2, 1, 3, 1), 2)
    check_op(OpCase("Squeeze", [x, ints(1, -1)]), lambda t, a: t.squeeze(3).squeeze(1))
    check_op(OpCase("Squeeze", [x]), lambda t: t.squeeze())
    check_op(OpCase("Unsqueeze", [X, ints(0, -1)]), lambda t, a: t.unsqueeze(0).unsqueeze(-1))


@pytest.mark.parametrize("perm", [[1, 0, 2], [2, 0, 1], None], ids=str)
def test_transpose(perm):
    attrs = {"perm": perm} if perm else {}
    check_op(OpCase("Transpose", [X], attrs), lambda t: t.permute(*(perm or [2, 1, 0])))


@pytest.mark.parametrize("src,shape", [((3, 1), (2, 3, 4)), ((4,), (3, 4)), ((2, 1, 1), (2, 3, 1)),
                                       ((1, 4), (1, 4))], ids=str)
def test_expand(src, shape):
    check_op(OpCase("Expand", [rand(src, 3), ints(*shape)]), lambda t, s: t.expand(*shape))


def test_tile():
    check_op(OpCase("Tile", [rand((2, 3), 4), ints(2, 3)]), lambda t, r: t.repeat(2, 3))


def test_identity():
    check_op(OpCase("Identity", [X]), lambda t: t)


def test_cast_float_round_trip_and_integer_input():
    check_op(OpCase("Cast", [X], {"to": TensorProto.DOUBLE}), lambda t: t)
    check_op(OpCase("Cast", [X], {"to": TensorProto.FLOAT}, fd_step=1e-2), lambda t: t.float(),
             fd_rtol=1e-5)
    grads = check_op(OpCase("Pow", [X, ints(3)]), lambda t, k: t ** 3)  # an int exponent gets no gradient
    assert set(grads) == {"in0"}


def test_cast_like():
    check_op(OpCase("CastLike", [X, np.zeros(1)], trainable=[0]), lambda t, like: t)
