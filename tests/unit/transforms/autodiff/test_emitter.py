"""Emitter: one namespace that never reuses a forward name, shared small constants, and
``sum_to`` for broadcast gradients."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from ir.errors import GraphError, ShapeError
from transforms.autodiff.emitter import Emitter


def test_names_are_fresh_and_scoped():
    em = Emitter(17, {}, taken={"grad/x/Mul", "loss"})
    em.scope = "grad/x"
    a, b = em.op("Mul", "p", "q"), em.op("Mul", "p", "q")
    assert (a, b) == ("grad/x/Mul_1", "grad/x/Mul_2")
    assert [n.name for n in em.nodes] == [a, b]
    with pytest.raises(GraphError, match="'loss' is already used"):
        em.claim("loss")
    assert em.claim("loss2") == "loss2"


def test_small_constants_are_shared_and_keep_rank_zero():
    em = Emitter(17, {"x": (TensorProto.DOUBLE, (2,))}, taken=())
    s1, s2 = em.scalar(0.5, "x"), em.scalar(0.5, "x")
    assert s1 == s2 and len(em.initializers) == 1
    assert list(em.initializers[0].dims) == [] and em.initializers[0].data_type == TensorProto.DOUBLE


@pytest.mark.parametrize("src,dst,axes,reshaped", [
    ((2, 3), (2, 3), None, False),
    ((2, 3), (3,), [0], True),
    ((4, 2, 3), (2, 1), [0, 2], True),
    ((2, 3), (1, 3), [0], False),
    ((2, 3), (), [0, 1], True),
])
def test_sum_to(src, dst, axes, reshaped):
    em = Emitter(17, {}, taken=())
    out = em.sum_to("g", src, dst)
    ops = [n.op_type for n in em.nodes]
    assert ops == (["ReduceSum"] if axes else []) + (["Reshape"] if reshaped else [])
    if axes:
        red = em.nodes[0]
        axes_init = {t.name: t for t in em.initializers}[red.input[1]]
        assert list(np.frombuffer(axes_init.raw_data, np.int64)) == axes
    assert (out == "g") == (axes is None)


def test_unknown_shapes_are_named_in_the_error():
    em = Emitter(17, {"x": (TensorProto.FLOAT, None)}, taken=())
    with pytest.raises(ShapeError, match="'x' has no static shape"):
        em.shape("x")
    assert helper.make_node("Relu", ["x"], ["y"]).op_type == "Relu"
