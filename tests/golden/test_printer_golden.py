"""Golden text of the IR printer: an imported op graph and its expansion into maps."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from ir import lowering
from ir.onnx_import import import_proto
from ir.printer import to_text
from tests.golden.golden import check_golden
from tests.unit.ir.onnx_models import model, vi


def _layer():
    inits = [numpy_helper.from_array(np.ones(4, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(4, np.float32), "beta"),
             numpy_helper.from_array(np.full(4, 0.5, np.float32), "bias")]
    nodes = [helper.make_node("Add", ["x", "bias"], ["h"], name="bias_add"),
             helper.make_node("LayerNormalization", ["h", "gamma", "beta"], ["n"], name="ln", axis=-1),
             helper.make_node("Softmax", ["n"], ["y"], name="sm", axis=-1)]
    return import_proto(model(nodes, [vi("x", [2, 4])], [vi("y", [2, 4])], inits), name="layer")


def test_op_level_text(update_golden):
    check_golden("layer_ops", to_text(_layer()), update_golden)


def test_expanded_text(update_golden):
    g = _layer()
    lowering.expand_all(g)
    check_golden("layer_expanded", to_text(g, containers=False), update_golden)
