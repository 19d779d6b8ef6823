"""constant_folding: metadata and constant-only kernels become initializers; reasons name the node."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from ir.containers import Role
from ir.onnx_import import import_model, import_proto
from tests.unit.ir.onnx_models import model, vi
from tests.unit.transforms.harness import assert_applies, assert_fails
from transforms import engine
from transforms.fold_rules import evaluate
from transforms.registry import create

F32, I64 = 4, 8
BERT = Path(__file__).resolve().parents[3] / "resources" / "examples" / "bert_layer_base_train.onnx"


def _const(name, value, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _mean_scale_graph():
    """y = x * (1 / float(shape(x)[1])): a shape chain that folds to one constant."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "idx"], ["d"], name="gather", axis=0),
             helper.make_node("Cast", ["d"], ["df"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Div", ["one", "df"], ["r"], name="div"),
             helper.make_node("Mul", ["x", "r"], ["y"], name="mul")]
    return import_proto(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])],
                              [_const("idx", 1), _const("one", 1.0, np.float32)]))


def _fold_all(g, t):
    """Apply ``t`` wherever it applies until nothing changes; return (graph, bytes saved, removed ids)."""
    saved, removed = 0, []
    while True:
        ok = [m for m in t.matches(g) if t.check(g, m).ok]
        if not ok:
            return g, saved, removed
        app, g = assert_applies(g, t, ok[0])
        saved += app.bytes_saved
        removed += list(app.removed)


def test_matches_metadata_and_constant_kernels_only():
    g = _mean_scale_graph()
    t = create("constant_folding")
    assert [m.anchors for m in t.matches(g)] == [("shape",)]       # gather waits until s is constant


def test_shape_chain_folds_to_one_constant():
    g = _mean_scale_graph()
    work, saved, removed = _fold_all(g, create("constant_folding"))
    assert removed == ["shape", "gather", "cast", "div"] and list(work.nodes) == ["mul"]
    assert work.values["r"] == np.float32(1 / 3) and work.container("r").role is Role.CONSTANT
    assert not {"s", "d", "df", "idx", "one"} & set(work.containers)
    # Shape writes 2 int64 and reads nothing; Gather reads 2+1, writes 1; Cast 8 → 4; Div 4 + 4 → 4
    assert saved == 2 * I64 + (3 * I64 + I64) + (I64 + F32) + 3 * F32


def test_near_misses_name_the_node():
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add"),
             helper.make_node("Exp", ["c"], ["ex"], name="exp"),
             helper.make_node("Expand", ["c", "big"], ["e"], name="expand"),
             helper.make_node("Shape", ["q"], ["qs"], name="qshape"),
             helper.make_node("Neg", ["c"], ["y"], name="neg"),
             helper.make_node("Neg", ["w"], ["wn"], name="negw"),
             helper.make_node("Identity", ["e"], ["eo"], name="ident")]
    g = import_proto(model(nodes, [vi("x", [4]), vi("q", ["batch", 4])],
                           [vi("a", [4]), vi("ex", []), vi("eo", [64, 512, 4]), vi("qs", [2]), vi("y", []),
                            vi("wn", [4])],
                           [_const("c", 2.0, np.float32), _const("big", [64, 512, 4]),
                            _const("w", [1, 2, 3, 4], np.float32)]))
    t = create("constant_folding")
    assert g.container("w").role is Role.PARAMETER                  # a weight: never folded
    assert_fails(g, t, t.match("add"), "'add' (Add) reads a tensor that is not a constant initializer")
    assert_fails(g, t, t.match("negw"), "'negw' (Neg) reads a tensor that is not a constant initializer")
    assert_fails(g, t, t.match("exp"), "'exp' (Exp) has no folding rule")
    assert_fails(g, t, t.match("expand"), "would become a 524,288-byte constant 'e'", "max_bytes=65,536")
    assert_fails(g, t, t.match("qshape"), "'qshape' (Shape) reads 'q', whose shape is not static")
    assert_fails(g, t, t.match("neg"), "writes graph output 'y'")


def test_a_larger_limit_folds_the_broadcast():
    nodes = [helper.make_node("Expand", ["c", "shape"], ["e"], name="expand"),
             helper.make_node("Mul", ["x", "e"], ["y"], name="mul")]
    g = import_proto(model(nodes, [vi("x", [3, 4])], [vi("y", [3, 4])],
                           [_const("c", 2.0, np.float32), _const("shape", [3, 4])]))
    app, work = assert_applies(g, create("constant_folding", {"max_bytes": 1 << 20}),
                               create("constant_folding").match("expand"))
    assert work.values["e"].shape == (3, 4) and app.delta.bytes == -(F32 + 2 * I64 + 3 * 4 * F32)


def test_fold_rules_follow_onnx_semantics():
    shapes = [(2, 3)]
    assert evaluate("", "Div", [np.array(-7), np.array(2)], shapes, {}, 17)[0] == -3          # truncates
    assert evaluate("", "Shape", [None], [(2, 3, 4)], {"start": 1}, 17)[0].tolist() == [3, 4]
    assert evaluate("", "Unsqueeze", [np.zeros(3), np.array([0, -1])], shapes, {}, 17)[0].shape == (1, 3, 1)
    assert evaluate("", "Flatten", [np.zeros((2, 3, 4))], shapes, {"axis": -1}, 17)[0].shape == (6, 4)
    assert evaluate("com.microsoft", "Scale", [np.float32(1), np.int64(4)], shapes, {"scale_down": 1}, 1)[0] == 0.25


def test_bert_folds_the_reduce_mean_gradient_scale():
    g = import_model(BERT)
    t = create("constant_folding")
    saved, removed = 0, []
    while ok := [m for m in t.matches(g) if t.check(g, m).ok]:
        app = engine.apply(g, t, ok[0])
        saved, removed = saved + app.bytes_saved, removed + list(app.removed)
    assert len(removed) == 6 and not any(n.op_type in ("Shape", "Size") for n in g.nodes.values())
    assert g.values["onnx::ReduceMean::7_Grad/Scaled_Grad"] == np.float32(1 / (8 * 128 * 768))
    # Shape [3], Size, Size (writes only); Div 8+8 → 8; Scale 4+8 → 4; Sub of two scalars 4+4 → 4
    assert saved == 3 * I64 + I64 + I64 + 3 * I64 + (F32 + I64 + F32) + 3 * F32 == 92
    reason = t.check(g, t.match("onnx::ReduceMean::7_Grad/Expand_5")).reason
    assert "3,145,728-byte constant" in reason
