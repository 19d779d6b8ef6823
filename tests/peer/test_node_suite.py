"""The ONNX backend node test suite: ≥95 % of the in-scope cases pass, every exclusion is listed."""
from __future__ import annotations

import pytest

from ir.claimed_ops import CLAIMED_OPS, EXCLUDED_CASES
from tests.peer.node_suite import in_scope, load_cases, ops_of, run_case

FACTS_TRAINING_OPS = {
    "Add", "Cast", "Conv", "Div", "Dropout", "Expand", "Flatten", "Gemm", "GlobalAveragePool", "Identity",
    "LayerNormalization", "Less", "MatMul", "MaxPool", "Mul", "Pow", "RandomUniformLike", "ReduceMean",
    "ReduceSum", "Relu", "Reshape", "Shape", "Sigmoid", "Size", "Softmax", "SoftmaxCrossEntropyLoss", "Sub",
    "Sum", "Transpose"}
MODEL_FAMILY_OPS = {  # transformer, CNN and EfficientNet-style networks
    "Erf", "Gelu", "Tanh", "Sqrt", "Exp", "Log", "Neg", "Reciprocal", "Where", "Equal", "Softplus",
    "Concat", "Split", "Slice", "Gather", "Squeeze", "Unsqueeze", "ConvTranspose", "AveragePool",
    "BatchNormalization", "HardSwish", "HardSigmoid", "Clip", "LeakyRelu", "ReduceMax", "LogSoftmax",
    "InstanceNormalization", "Pad", "Max", "Min", "Abs", "Mean", "ConstantOfShape", "Range", "Tile"}


@pytest.fixture(scope="module")
def outcomes():
    cases = [c for c in load_cases() if in_scope(c)]
    return cases, {c.name: run_case(c) for c in cases}


def test_claimed_set_covers_training_and_model_ops():
    missing = (FACTS_TRAINING_OPS | MODEL_FAMILY_OPS) - CLAIMED_OPS[""]
    assert not missing, f"claimed set lacks {sorted(missing)}"


def test_pass_rate_at_least_95_percent(outcomes):
    cases, results = outcomes
    passed = sum(o.ok for o in results.values())
    rate = passed / len(cases)
    print(f"\nnode suite: {passed}/{len(cases)} in-scope cases pass ({rate:.1%}); "
          f"{len(CLAIMED_OPS[''])} default-domain ops claimed")
    assert len(cases) >= 900, f"only {len(cases)} cases in scope"
    assert rate >= 0.95, f"{passed}/{len(cases)} = {rate:.1%}"


def test_every_failure_is_listed_with_a_reason(outcomes):
    cases, results = outcomes
    unlisted = {n: o.detail for n, o in results.items() if not o.ok and n not in EXCLUDED_CASES}
    assert not unlisted, "failing cases missing from EXCLUDED_CASES:\n" + "\n".join(
        f"  {n}: {d}" for n, d in sorted(unlisted.items())[:40])


def test_no_stale_exclusions(outcomes):
    cases, results = outcomes
    stale = [n for n in EXCLUDED_CASES if n in results and results[n].ok]
    assert not stale, f"these excluded cases now pass; remove them from EXCLUDED_CASES: {stale}"
    assert all(reason.strip() for reason in EXCLUDED_CASES.values())


def test_every_claimed_op_is_exercised(outcomes):
    """Claimed ops without a node test of their own must be covered by the fixture graphs instead."""
    cases, _ = outcomes
    seen = set().union(*(ops_of(c) for c in cases))
    untested = CLAIMED_OPS[""] - seen
    covered_elsewhere = {"MaxPoolGrad", "SimplifiedLayerNormalization"}  # ORT ops: tests/unit/codegen
    assert untested <= covered_elsewhere, f"claimed but never exercised by the node suite: {sorted(untested)}"
