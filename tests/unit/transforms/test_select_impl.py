"""select_impl: switch an op's implementation; outputs and bytes stay, reasons name the node."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from ir.nodes import MapNode
from ir.onnx_import import import_proto
from tests.unit.ir.onnx_models import model, vi
from tests.unit.transforms.harness import assert_applies, assert_fails
from transforms.registry import create


def _graph():
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((300, 5)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Softmax", ["h"], ["y"], name="sm", axis=-1)]
    return import_proto(model(nodes, [vi("x", [4, 300])], [vi("y", [4, 5])], [w]))


def test_matches_offer_other_choices():
    g = _graph()
    assert [m.anchors for m in create("select_impl", {"impl": "online"}).matches(g)] == [("sm",)]
    assert [m.anchors for m in create("select_impl", {"impl": "blocked"}).matches(g)] == [("mm",)]
    assert not list(create("select_impl", {"impl": "blas"}).matches(g))      # already the default
    names = {t.impl for t in create("select_impl").instances()}
    assert {"online", "two_pass", "blas", "blocked", "im2col", "direct"} <= names


def test_switch_softmax_to_online_then_expand():
    g = _graph()
    t = create("select_impl", {"impl": "online"})
    app, work = assert_applies(g, t, t.match("sm"))
    assert work.nodes["sm"].impl == "online" and app.changed == ("sm",) and app.delta.bytes == 0
    _, expanded = assert_applies(work, create("expand"), create("expand").match("sm"))
    sweeps = [b for b in expanded.nodes["sm/expanded"].body if isinstance(b, MapNode)]
    assert len(sweeps) == 2                      # online: one statistics sweep + the output sweep


def test_blocked_matmul():
    g = _graph()
    t = create("select_impl", {"impl": "blocked"})
    _, work = assert_applies(g, t, t.match("mm"))
    assert work.nodes["mm"].impl == "blocked"


def test_near_misses():
    g = _graph()
    assert_fails(g, create("select_impl", {"impl": "online"}), create("select_impl").match("mm"),
                 "'mm' (MatMul) has no implementation 'online'", "blas, blocked")
    assert_fails(g, create("select_impl", {"impl": "two_pass"}), create("select_impl").match("sm"),
                 "already uses 'two_pass'")
