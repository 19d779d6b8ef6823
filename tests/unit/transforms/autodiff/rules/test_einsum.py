"""The Einsum gradient rule (contractions, batched, outer product, implicit output, an index summed
inside one operand, one operand) against finite differences, onnxruntime, the executor and torch;
an ellipsis is refused by name."""
from __future__ import annotations

import pytest
import torch

from tests.unit.transforms.autodiff.gradcheck import OpCase, check_op, rand
from transforms.autodiff import NoGradientError

CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("ijk,k->i", [(2, 3, 4), (4,)]),
    ("ij->ji", [(2, 3)]),
    ("ij,ij,j->i", [(2, 3), (2, 3), (3,)]),
]


@pytest.mark.parametrize("equation,shapes", CASES, ids=[c[0] for c in CASES])
def test_einsum(equation, shapes):
    inputs = [rand(s, k) for k, s in enumerate(shapes)]
    check_op(OpCase("Einsum", inputs, {"equation": equation}), lambda *ts: torch.einsum(equation, *ts))


def test_einsum_with_an_ellipsis_is_refused():
    with pytest.raises(NoGradientError, match="Einsum with equation '...ij,...jk->...ik'"):
        check_op(OpCase("Einsum", [rand((2, 2, 3), 1), rand((2, 3, 4), 2)], {"equation": "...ij,...jk->...ik"}))
