"""Arithmetic gradient rules against finite differences, onnxruntime, the executor and torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.transforms.autodiff.gradcheck import OpCase, check_op, rand

BINARY = {
    "Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div,
}
BROADCAST_SHAPES = [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1, 3), (2, 1)), ((1,), (2, 3)),
                    ((), (2, 2)), ((2, 1, 4), (1, 3, 1))]


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("shapes", BROADCAST_SHAPES, ids=str)
def test_binary_broadcasting(op, shapes):
    a, b = rand(shapes[0], 1), rand(shapes[1], 2, 0.5, 1.5)
    check_op(OpCase(op, [a, b]), BINARY[op])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 3), min_size=1, max_size=3), st.data())
def test_mul_broadcasting_hypothesis(shape, data):
    """Any shape B that broadcasts against A: drop leading dims, set some dims to 1."""
    lead = data.draw(st.integers(0, len(shape)))
    ones = data.draw(st.lists(st.booleans(), min_size=len(shape) - lead, max_size=len(shape) - lead))
    other = [1 if o else d for o, d in zip(ones, shape[lead:])]
    check_op(OpCase("Mul", [rand(shape, 3), rand(other, 4)]), torch.mul)


def test_one_side_only_trainable():
    check_op(OpCase("Mul", [rand((2, 3), 1), rand((3,), 2)], trainable=[1]), torch.mul)


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, "tensor"])
def test_pow(exponent):
    base = rand((2, 3), 5, 0.5, 2.0)
    if exponent == "tensor":
        check_op(OpCase("Pow", [base, rand((3,), 6, 0.5, 2.0)]), torch.pow)
    else:
        check_op(OpCase("Pow", [base, np.asarray(exponent)], trainable=[0]),
                 lambda a, b: torch.pow(a, float(exponent)))


@pytest.mark.parametrize("op,domain,fn", [
    ("Neg", (-1, 1), torch.neg), ("Sqrt", (0.5, 2), torch.sqrt), ("Reciprocal", (0.5, 2), torch.reciprocal),
    ("Exp", (-1, 1), torch.exp), ("Log", (0.5, 2), torch.log), ("Abs", (-1, 1), torch.abs),
    ("Sin", (-2, 2), torch.sin), ("Cos", (-2, 2), torch.cos),
])
def test_unary(op, domain, fn):
    x = rand((3, 4), 7, *domain, away=0.05 if op == "Abs" else 0.0)
    check_op(OpCase(op, [x]), fn)


@pytest.mark.parametrize("op", ["Sum", "Mean"])
def test_variadic_sum_mean(op):
    xs = [rand((2, 3), 1), rand((3,), 2), rand((1, 3), 3)]

    def ref(*ts):
        total = ts[0] + ts[1] + ts[2]
        return total if op == "Sum" else total / 3
    check_op(OpCase(op, xs, ort_float64=op == "Sum"), ref)
