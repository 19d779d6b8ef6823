"""ir.graph: dependence queries pruned by topological position, and copy-on-write clones."""
from __future__ import annotations

from onnx import helper

from ir.containers import Container
from ir.graph import Graph
from ir.memlet import Memlet
from ir.nodes import OpNode
from ir.onnx_import import import_proto
from tests.unit.ir.onnx_models import model, vi


def _diamond():
    """a → b → d, a → c → d, and e independent: d depends on a directly? no — through b and c."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"), helper.make_node("Neg", ["a"], ["b"], name="b"),
             helper.make_node("Exp", ["a"], ["c"], name="c"), helper.make_node("Add", ["b", "c"], ["d"], name="d"),
             helper.make_node("Add", ["a", "d"], ["y"], name="y"), helper.make_node("Relu", ["x"], ["e"], name="e")]
    return import_proto(model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3]), vi("e", [2, 3])]))


def test_depends_directly_transitively_and_not_at_all():
    g = _diamond()
    assert g.depends("a", "b") and g.depends("a", "d") and g.depends("b", "y")
    assert not g.depends("b", "c") and not g.depends("c", "b") and not g.depends("d", "a")
    assert not g.depends("e", "y") and not g.depends("a", "e")
    assert g.depends("a", "y", indirectly=True)        # y reads a, and also d, which depends on a
    assert not g.depends("a", "b", indirectly=True)    # b reads a and nothing else downstream of a
    assert not g.depends("d", "y", indirectly=True)


def test_positions_follow_edits():
    g = _diamond()
    assert g.position("a") < g.position("b") < g.position("d") < g.position("y")
    b = g.nodes["b"]
    g.remove_node("b")
    g.remove_node("d")
    g.remove_node("y")
    g.outputs = ["e"]
    b.inputs[0] = b.inputs[0].__class__("e", b.inputs[0].subset)
    g.add_node(b)                                      # b now reads e
    assert g.depends("e", "b") and not g.depends("a", "b")


def test_clone_sharing_copies_only_what_an_edit_may_touch():
    g = _diamond()
    work = g.clone_sharing(["b"])
    assert work.nodes["b"] is not g.nodes["b"] and work.nodes["c"] is g.nodes["c"]
    work.nodes["b"].attrs["mark"] = 1
    work.remove_node("e")
    work.outputs.remove("e")
    assert "mark" not in g.nodes["b"].attrs and "e" in g.nodes and "e" in g.outputs
    assert g.consumers("x") and [n.id for n in g.consumers("x")] != [n.id for n in work.consumers("x")]


def test_depends_agrees_with_a_walk_of_every_path_on_random_graphs():
    """Random DAGs (each kernel reads up to three earlier results): ``depends`` (both frontiers) against the
    transitive closure, directly and ``indirectly`` (through at least one other kernel)."""
    import random
    for seed in range(40):
        rng = random.Random(seed)
        g, preds = Graph(), {}
        n = rng.randint(2, 30)
        for k in range(n):
            g.add_container(Container(f"t{k}", (4,), "float32"))
            srcs = sorted(set(rng.sample(range(k), min(k, rng.randint(0, 3)))))
            preds[k] = srcs
            g.add_node(OpNode(f"k{k}", "Add", [Memlet(f"t{s}") for s in srcs], [Memlet(f"t{k}")]))
        reach = {k: set() for k in range(n)}        # reach[k]: kernels k depends on
        for k in range(n):
            for s in preds[k]:
                reach[k] |= {s} | reach[s]
        for a in range(n):
            for b in range(n):
                assert g.depends(f"k{a}", f"k{b}") == (a in reach[b]), (seed, a, b)
                indirect = any(a in reach[s] for s in preds[b])
                assert g.depends(f"k{a}", f"k{b}", indirectly=True) == indirect, (seed, a, b)
