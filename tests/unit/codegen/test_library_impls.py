"""Library nodes keep selectable implementations; every choice gives the same result."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from codegen.numpy_ref.contraction import PANEL, contract
from codegen.numpy_ref.executor import run
from ir import lowering
from ir.onnx_import import import_proto
from tests.unit.ir.onnx_models import model, vi


def test_blocked_contraction_equals_blas():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 7, 2 * PANEL + 17)).astype(np.float32)
    b = rng.standard_normal((2 * PANEL + 17, 5)).astype(np.float32)
    np.testing.assert_allclose(contract(a, b, "blocked"), contract(a, b, "blas"), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="unknown contraction"):
        contract(a, b, "magic")


def _matmul_graph(op: str, **attrs):
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((600, 9)).astype(np.float32), "W")
    node = helper.make_node(op, ["x", "W"], ["y"], name="mm", **attrs)
    return import_proto(model([node], [vi("x", [4, 600])], [vi("y", [4, 9])], [w]))


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_matmul_impls_agree(op):
    g = _matmul_graph(op)
    node = g.node("mm")
    assert lowering.impls(node) == ("blas", "blocked")
    assert "library call" in lowering.can_expand(g, node)
    x = np.random.default_rng(2).standard_normal((4, 600)).astype(np.float32)
    ref = run(g, {"x": x})["y"]
    node.impl = "blocked"
    np.testing.assert_allclose(run(g, {"x": x})["y"], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attrs", [
    {"pads": [1, 1, 1, 1]},
    {"strides": [2, 2], "pads": [0, 1, 1, 0]},
    {"dilations": [2, 2], "group": 2},
    {"group": 4, "strides": [2, 1], "pads": [1, 1, 1, 1]},      # depthwise
    {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
])
def test_conv_direct_equals_im2col(attrs):
    rng = np.random.default_rng(3)
    groups = attrs.get("group", 1)
    w = numpy_helper.from_array(rng.standard_normal((4, 4 // groups, 3, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "B")
    node = helper.make_node("Conv", ["x", "W", "B"], ["y"], name="conv", kernel_shape=[3, 3], **attrs)
    m = model([node], [vi("x", [2, 4, 9, 8])], [helper.make_tensor_value_info("y", 1, None)], [w, b])
    g = import_proto(m)
    x = rng.standard_normal((2, 4, 9, 8)).astype(np.float32)
    ref = run(g, {"x": x})["y"]
    assert lowering.impls(g.node("conv")) == ("im2col", "direct")
    g.node("conv").impl = "direct"
    np.testing.assert_allclose(run(g, {"x": x})["y"], ref, rtol=1e-5, atol=1e-5)
