"""The reference executor's map stores (codegen.numpy_ref.maps)."""
from __future__ import annotations

import numpy as np

from codegen.numpy_ref.executor import run
from ir import expr as E
from ir.containers import Container, Role
from ir.graph import Graph
from ir.maps import finalize
from ir.memlet import Memlet, Range
from ir.nodes import MapNode, Tasklet


def test_a_store_at_constant_indices_from_a_map_of_extent_one():
    """``y[0, 0] = -x[i, j]`` over i, j in 0:1 (what a view of size-1 dimensions leaves): the value
    has the loop's shape (1, 1), the target one element (the random-graph tests found it crashing
    with "setting an array element with a sequence")."""
    g = Graph("g")
    g.add_container(Container("x", (1, 1), "float32", Role.INPUT))
    g.add_container(Container("y", (1, 1), "float32", Role.OUTPUT))
    g.inputs, g.outputs = ["x"], ["y"]
    t = Tasklet("t", E.Un("neg", E.Var("a")), {"a": Memlet("x", (E.Var("i"), E.Var("j")))},
                Memlet("y", (E.Const(0, "int64"), E.Const(0, "int64"))))
    m = MapNode("m", [("i", Range.of(0, 1)), ("j", Range.of(0, 1))], [t])
    finalize(m, g)
    g.add_node(m)
    out = run(g, {"x": np.array([[2.5]], np.float32)})
    np.testing.assert_array_equal(out["y"], [[-2.5]])
