"""ir.verify: structural errors name the node and print the graph around it."""
from __future__ import annotations

import pytest

from ir import expr as E
from ir.containers import Container
from ir.errors import VerificationError
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, OpNode, Tasklet
from ir.onnx_import import import_proto
from ir.verify import verify
from tests.unit.ir.onnx_models import mlp


@pytest.fixture
def g():
    return import_proto(mlp(), bindings={"batch": 2})


def test_valid_graph_verifies(g):
    verify(g)


def test_unknown_container_names_node_and_shows_window(g):
    g.node("act").inputs[0] = Memlet("nope")
    with pytest.raises(VerificationError) as info:
        verify(g)
    err = info.value
    assert "'act' (Relu, id=act)" in str(err) and "unknown container 'nope'" in str(err)
    notes = "\n".join(err.__notes__)
    assert "in graph:" in notes and ">> %act = Relu" in notes


def test_second_writer_is_reported(g):
    node = OpNode("dup", "Relu", [Memlet("x")], [Memlet("h")])
    g.nodes["dup"] = node  # bypass add_node's own check to test verify
    with pytest.raises(VerificationError, match="also written by"):
        verify(g)


def test_undefined_read(g):
    g.add_container(Container("ghost", (2, 8), "float32"))
    g.node("fc2").inputs[1] = Memlet("ghost")
    with pytest.raises(VerificationError, match="reads 'ghost', which nothing defines"):
        verify(g)


def test_map_tasklet_with_unbound_variable(g):
    t = Tasklet("t0", E.Bin("add", E.Var("a"), E.Var("zz")), {"a": Memlet("h", (E.Var("i0"), E.Var("i1")))},
                Memlet("a", (E.Var("i0"), E.Var("i1"))))
    m = MapNode("act/expanded", [("i0", Range.of(0, 2)), ("i1", Range.of(0, 8))], [t],
                inputs=[Memlet("h")], outputs=[Memlet("a")])
    g.remove_node("act")
    g.add_node(m, before="fc2")
    with pytest.raises(VerificationError, match=r"unbound variable\(s\) \['zz'\]"):
        verify(g)


def test_map_reading_unpropagated_container(g):
    t = Tasklet("t0", E.Var("a"), {"a": Memlet("x", (E.Var("i0"), E.Var("i1")))},
                Memlet("a", (E.Var("i0"), E.Var("i1"))))
    m = MapNode("act/expanded", [("i0", Range.of(0, 2)), ("i1", Range.of(0, 8))], [t],
                inputs=[Memlet("h")], outputs=[Memlet("a")])
    g.remove_node("act")
    g.add_node(m, before="fc2")
    with pytest.raises(VerificationError, match="finalize"):
        verify(g)
