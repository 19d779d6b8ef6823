"""MatMul and Gemm gradient rules against finite differences, onnxruntime, the executor and torch."""
from __future__ import annotations

import pytest
import torch

from tests.unit.transforms.autodiff.gradcheck import OpCase, check_op, rand

MATMUL_SHAPES = [
    ((2, 3), (3, 4)), ((3,), (3, 4)), ((2, 3), (3,)), ((3,), (3,)), ((2, 2, 3), (3, 4)),
    ((2, 3), (2, 3, 4)), ((2, 1, 2, 3), (3, 3, 2)), ((4, 2, 3), (4, 3, 2)), ((2, 2, 3), (3,)),
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=str)
def test_matmul(sa, sb):
    check_op(OpCase("MatMul", [rand(sa, 1), rand(sb, 2)]), torch.matmul)


def test_matmul_weight_only():
    check_op(OpCase("MatMul", [rand((2, 3, 4), 1), rand((4, 5), 2)], trainable=[1]), torch.matmul)


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (4,), (3, 1), (3, 4), ()], ids=str)
def test_gemm(trans_a, trans_b, c_shape):
    a = rand((2, 3) if trans_a else (3, 2), 1)
    b = rand((4, 2) if trans_b else (2, 4), 2)
    alpha, beta = 0.75, 1.5
    inputs = [a, b] + ([rand(c_shape, 3)] if c_shape is not None else [])

    def ref(ta, tb, tc=None):
        y = alpha * ((ta.T if trans_a else ta) @ (tb.T if trans_b else tb))
        return y if tc is None else y + beta * tc
    check_op(OpCase("Gemm", inputs, {"transA": trans_a, "transB": trans_b, "alpha": alpha, "beta": beta}),
             ref)
