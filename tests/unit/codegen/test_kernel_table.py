"""The kernel table covers every claimed op, and registration rejects duplicates."""
from __future__ import annotations

import pytest

import codegen.numpy_ref.kernels  # noqa: F401
from codegen.numpy_ref.registry import NUMPY_KERNELS, kernel, lookup
from ir.claimed_ops import CLAIMED_OPS, is_claimed
from ir.recurrent import RECURRENT_OPS


def test_every_claimed_op_has_a_kernel():
    """...or is unrolled at import into ops that have one (recurrent layers: the node suite runs them)."""
    missing = [(d, op) for d, ops in CLAIMED_OPS.items() for op in ops
               if lookup(d, op) is None and not (d == "" and op in RECURRENT_OPS)]
    assert not missing, missing
    assert all(lookup("", op) is None for op in RECURRENT_OPS)     # the exemption covers nothing else


def test_default_domain_aliases():
    assert is_claimed("ai.onnx", "Add") and is_claimed("", "Add")
    assert lookup("ai.onnx", "Add") is lookup("", "Add")
    assert not is_claimed("com.example", "Add")


def test_duplicate_registration_is_an_error():
    assert ("", "Add") in NUMPY_KERNELS
    with pytest.raises(ValueError, match="duplicate"):
        kernel("Add")(lambda inputs, attrs, ctx: inputs)
