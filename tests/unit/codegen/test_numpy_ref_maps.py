"""The reference executor's map stores (codegen.numpy_ref.maps)."""
from __future__ import annotations

import numpy as np
import pytest

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


def test_locals_of_a_map_over_an_offset_strided_range(monkeypatch):
    """map[i=1:9:3] { local s; map[j] { s += x[i, j] }; y[i] = 2·s }: a local's axes count the points of
    i (0, 1, 2), not its values (1, 4, 7), which indexed past the local's end ("index 4 is out of bounds")."""
    i, j = E.Var("i"), E.Var("j")
    inner = MapNode("n", [("j", Range.of(0, 5))], [Tasklet("acc", E.Var("v"), {"v": Memlet("x", (i, j))},
                                                           Memlet("s", wcr="sum"))])
    body = [inner, Tasklet("out", E.Bin("mul", E.Const(2.0), E.Var("v")), {"v": Memlet("s")}, Memlet("y", (i,)))]
    g = Graph("g")
    g.add_container(Container("x", (9, 5), "float32", Role.INPUT))
    g.add_container(Container("y", (9,), "float32", Role.OUTPUT))
    g.inputs, g.outputs = ["x"], ["y"]
    m = MapNode("m", [("i", Range.of(1, 9, 3))], body, locals={"s": Container("s", (), "float32")})
    finalize(m, g)
    g.add_node(m)
    x = np.random.default_rng(0).standard_normal((9, 5)).astype(np.float32)
    want = np.zeros(9, np.float32)
    want[1::3] = 2 * x[1::3].sum(axis=1)
    for out in _both_ways(g, {"x": x}, monkeypatch)[:2]:
        np.testing.assert_allclose(out["y"], want, rtol=1e-6)


# --- basic-indexing path (maps._Sliced) against the advanced-indexing path it stands in for ---------

def _graph(shapes: dict[str, tuple], outputs: list[str], body, params) -> Graph:
    g = Graph("g")
    for name, shape in shapes.items():
        g.add_container(Container(name, shape, "float32", Role.OUTPUT if name in outputs else Role.INPUT))
    g.inputs, g.outputs = [n for n in shapes if n not in outputs], outputs
    m = MapNode("m", params, body)
    finalize(m, g)
    g.add_node(m)
    return g


def _both_ways(g: Graph, feeds, monkeypatch) -> tuple[dict, dict, int]:
    """(outputs with the basic-indexing path, outputs without it, how often it applied)."""
    from codegen.numpy_ref import maps
    real, taken = maps._sliced, []

    def counting(*a, **k):
        got = real(*a, **k)
        taken.append(got is not None)
        return got
    monkeypatch.setattr(maps, "_sliced", counting)
    fast = run(g, feeds)
    monkeypatch.setattr(maps, "_sliced", lambda *a, **k: None)
    slow = run(g, feeds)
    return fast, slow, sum(taken)


V, C = E.Var, (lambda k: E.Const(k, "int64"))
T = lambda i, e, ins, out: Tasklet(i, e, ins, out)  # noqa: E731
MAP_CASES = {
    # y[j, i] = 2·x[i, j] + b[j]: a transposed read and write, a broadcast read
    "transpose": ({"x": (3, 5), "b": (5,), "y": (5, 3)}, ["y"],
                  [T("t", E.Bin("add", E.Bin("mul", E.Const(2.0), V("a")), V("c")),
                     {"a": Memlet("x", (V("i"), V("j"))), "c": Memlet("b", (V("j"),))}, Memlet("y", (V("j"), V("i"))))],
                  [("i", Range.of(0, 3)), ("j", Range.of(0, 5))]),
    # y[k, i, j] = x[j, k, i]: a cyclic permutation of three axes of different extents, read and written
    "permute3": ({"x": (3, 4, 2), "y": (4, 2, 3)}, ["y"],
                 [T("t", E.Un("neg", V("a")), {"a": Memlet("x", (V("j"), V("k"), V("i")))},
                    Memlet("y", (V("k"), V("i"), V("j"))))],
                 [("i", Range.of(0, 2)), ("j", Range.of(0, 3)), ("k", Range.of(0, 4))]),
    # y[1, i] = -x[i, 0] over an offset, strided range, with constant indices
    "offset_step_const": ({"x": (9, 2), "y": (2, 9)}, ["y"],
                          [T("t", E.Un("neg", V("a")), {"a": Memlet("x", (V("i"), C(0)))},
                             Memlet("y", (C(1), V("i"))))],
                          [("i", Range.of(2, 9, 3))]),
    # y[i] = Σ_j x[i, j] and z[j] = max_i x[i, j]: sums and maxima over a parameter the output lacks
    "wcr": ({"x": (4, 6), "y": (4,), "z": (6,)}, ["y", "z"],
            [T("s", V("a"), {"a": Memlet("x", (V("i"), V("j")))}, Memlet("y", (V("i"),), wcr="sum")),
             T("r", V("a"), {"a": Memlet("x", (V("i"), V("j")))}, Memlet("z", (V("j"),), wcr="max"))],
            [("i", Range.of(0, 4)), ("j", Range.of(0, 6))]),
    # a diagonal (one parameter twice) and a shifted index keep the advanced-indexing path
    "fallbacks": ({"x": (5, 5), "y": (5,), "z": (4,)}, ["y", "z"],
                  [T("d", V("a"), {"a": Memlet("x", (V("i"), V("i")))}, Memlet("y", (V("i"),))),
                   T("s", V("a"), {"a": Memlet("x", (E.Bin("add", V("i"), C(1)), C(0)))}, Memlet("z", (V("i"),)))],
                  [("i", Range.of(0, 4))]),
}


@pytest.mark.parametrize("case", sorted(MAP_CASES))
def test_basic_indexing_reads_and_writes_what_advanced_indexing_does(case, monkeypatch):
    shapes, outputs, body, params = MAP_CASES[case]
    g = _graph(shapes, outputs, body, params)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items() if n not in outputs}
    fast, slow, taken = _both_ways(g, feeds, monkeypatch)
    for n in outputs:
        assert fast[n].dtype == slow[n].dtype and np.array_equal(fast[n], slow[n]), n
    if case == "fallbacks":
        assert taken == 2          # the plain writes y[i] and z[i]; neither read
    else:
        assert taken == sum(len(t.inputs) + 1 for t in body)
    if case == "transpose":
        np.testing.assert_allclose(fast["y"], (2 * feeds["x"] + feeds["b"]).T, rtol=1e-6)
    if case == "permute3":      # y[k, i, j] = -x[j, k, i]
        np.testing.assert_array_equal(fast["y"], -feeds["x"].transpose(1, 2, 0))


def test_the_bundled_example_after_its_recipe_is_the_same_both_ways(monkeypatch):
    """Every map of the recipe's BERT-base layer (fused epilogues, reductions, optimizer updates),
    bit for bit; most memlets take the basic-indexing path."""
    from pathlib import Path

    from codegen.numpy_ref.feeds import feeds_for
    from studio.session.exporting import load_with_history
    examples = Path(__file__).resolve().parents[3] / "resources" / "examples"
    graph, _ = load_with_history(str(examples / "bert_layer_base_train.onnx"),
                                 str(examples / "bert_layer_base_train.history.json"), [])
    fast, slow, taken = _both_ways(graph, feeds_for(graph), monkeypatch)
    assert taken > 100
    for n in graph.outputs:
        assert np.array_equal(fast[n], slow[n], equal_nan=True), n
