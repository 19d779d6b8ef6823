"""The GRADIENTS registry: at least the ops the issue names, each one exercised by a rule test."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from transforms.autodiff import GRADIENTS, supported_ops
from transforms.autodiff.registry import gradient

REQUIRED = """Add Sub Mul Div Pow Neg Sqrt Reciprocal Exp Log Tanh Sigmoid Relu LeakyRelu Gelu Erf HardSigmoid
HardSwish Softmax LogSoftmax MatMul Gemm Conv BatchNormalization LayerNormalization MaxPool AveragePool
GlobalAveragePool ReduceSum ReduceMean Reshape Flatten Transpose Concat Split Slice Gather Squeeze Unsqueeze
Expand Where Cast Dropout Identity""".split()
RULE_TESTS = Path(__file__).parent / "rules"


def test_required_ops_have_rules():
    assert len(supported_ops()) >= 40
    assert not set(REQUIRED) - set(GRADIENTS)


def _strings_in_rule_tests() -> set[str]:
    found: set[str] = set()
    for path in RULE_TESTS.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return found


def test_every_rule_is_exercised_by_a_rule_test():
    assert not set(supported_ops()) - _strings_in_rule_tests()


def test_duplicate_registration_is_refused():
    with pytest.raises(ValueError, match="duplicate gradient rule for Relu"):
        gradient("Relu")(lambda em, req: [])
