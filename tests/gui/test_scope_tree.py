"""The scope tree (no Qt): scope paths from names, singleton compression, chunking, aggregated edges."""
from __future__ import annotations

import pytest

from ir.onnx_import import import_model
from studio.gui.passes import Pass, classify
from studio.gui.scope_tree import ROOT, ScopeTree, scope_path
from tests.gui.synthetic import flat_group, training_graph
from tests.gui.conftest import EXAMPLE


@pytest.mark.parametrize("name, path, leaf", [
    ("/layer/attention/self/MatMul_1", ("layer", "attention", "self"), "MatMul_1"),
    ("Add:layer.attention.self.query.weight.denom", ("layer", "attention", "self", "query", "weight"), "denom"),
    ("fused:/layer/output/Add/expanded", ("layer", "output", "Add"), "expanded"),
    ("fused:Pow:adamw.b1t/expanded", ("adamw", "b1t"), "expanded"),
    ("onnx::ReduceMean::7_Grad/Div_2", ("onnx::ReduceMean::7_Grad",), "Div_2"),
    ("node_Mul_12", (), "node_Mul_12"),
])
def test_scope_path(name, path, leaf):
    assert scope_path(name) == (path, leaf)


@pytest.fixture(scope="module")
def bert():
    g = import_model(EXAMPLE)
    return g, ScopeTree(g)


def test_bert_groups_by_scope_without_singletons(bert):
    g, tree = bert
    assert sorted(tree.members(ROOT)) == sorted(g.nodes)
    assert all(len(gr.children) >= 2 for k, gr in tree.groups.items() if k != ROOT)
    layer = tree.groups["group:layer"]
    assert {tree.label(c) for c in layer.children} >= {"attention", "output"}
    assert tree.label("group:layer/intermediate/dense") == "intermediate/dense"   # compressed, joined label
    assert tree.parent["/layer/attention/self/MatMul_1"] == "group:layer/attention/self"


def test_edges_are_aggregated_in_the_lowest_common_group(bert):
    g, tree = bert
    for group, edges in tree.edges.items():
        for (a, b), names in edges.items():
            assert tree.parent[a] == group == tree.parent[b] and a != b and names
    for n in g.nodes.values():                   # every dependency is carried by the edge of its lowest group
        for m in n.inputs:
            if m is None or (p := g.producer(m.container)) is None or p.id == n.id:
                continue
            up, down = tree.chain[p.id] + (p.id,), tree.chain[n.id] + (n.id,)
            k = next(k for k in range(min(len(up), len(down))) if up[k] != down[k])
            assert m.container in tree.edges[up[k - 1]][(up[k], down[k])]


def test_a_big_flat_scope_is_chunked_and_expansion_respects_the_budget():
    g = flat_group(300)
    tree = ScopeTree(g, max_children=120, chunk=48)
    wide = tree.groups["group:wide"]
    assert len(wide.children) <= 120 and all(tree.is_group(c) for c in wide.children)
    assert all(len(tree.groups[c].children) <= 120 for c in tree.groups)
    assert sorted(tree.members("group:wide")) == sorted(i for i in g.nodes if i.startswith("/wide/"))
    flat = ScopeTree(g, max_children=400)
    assert len(flat.groups["group:wide"].children) == 300
    big = ScopeTree(training_graph(8))
    shown = big.initial_expansion(budget=60)
    visible = {big.visible(i, shown) for i in big.members(ROOT)}
    assert len(visible) <= 60


def test_passes_of_the_bert_training_step(bert):
    g, tree = bert
    passes = classify(g)
    loss = next(o for o in g.outputs if g.containers[o].role.value == "output")
    assert passes[g.producer(loss).id] is Pass.FORWARD
    assert passes["/layer/attention/self/MatMul_1"] is Pass.FORWARD
    assert passes["/layer/attention/self/Softmax_Grad/SoftmaxGrad_13_0"] is Pass.BACKWARD
    assert passes["Sub:layer.output.dense.weight.new"] is Pass.OPTIMIZER
    assert tree.groups["group:layer/output/dense/weight"].pass_ is None    # g*g is backward, m/v optimizer


# --- incremental updates (ScopeTree.updated) ----------------------------------------------
def tree_value(tree: ScopeTree) -> dict:
    """Everything a tree holds, as plain values (groups compared field by field)."""
    groups = {k: (g.label, g.parent, list(g.children), g.size, g.pass_) for k, g in tree.groups.items()}
    return {"groups": groups, "parent": tree.parent, "chain": tree.chain, "edges": tree.edges,
            "passes": tree.passes, "leaf_label": tree.leaf_label, "order": tree.order}


def _varied_steps(session, n: int, where: str = "") -> None:
    """Apply ``n`` steps, cycling through the transformations that apply (not just one kind); ``where``: only
    at kernels whose id holds it."""
    from studio.gui.ranking import candidates
    for k in range(n):
        within = [i for i in session.graph.nodes if where in i] if where else None
        ok = [(t, m) for t, m in candidates(session.graph, within) if t.check(session.graph, m).ok]
        kinds = sorted({t.name for t, _ in ok})
        t, m = [(t, m) for t, m in ok if t.name == kinds[k % len(kinds)]][k // len(kinds) % 2 - 1]
        session.apply(t.name, m.anchors, t.params())


@pytest.mark.parametrize("options", [{}, {"max_children": 6, "chunk": 3}, {"stacked": True}],
                         ids=["default", "chunked", "stacked"])
def test_incremental_tree_equals_a_fresh_one_through_apply_undo_redo_revert(options, request):
    from studio.gui import graph_diff
    from studio.session import Session
    options, where = dict(options), ""
    if options.pop("stacked", False):             # a training step's layers, stacked (issue 38): edits in layer 1
        s = Session.open(request.getfixturevalue("bert3_stack"), training={"loss": "mse", "optimizer": "adamw"},
                         autosave=False)
        assert ScopeTree(s.graph).stacked
        where = "layer.1"
    else:
        s = Session.open(EXAMPLE, autosave=False)
    shown, tree = s.graph, ScopeTree(s.graph, **options)
    shared = 0

    def follow(what: str) -> None:
        nonlocal shown, tree, shared
        new = tree.updated(s.graph, graph_diff.changes(shown, s.graph).touched)
        assert tree_value(new) == tree_value(ScopeTree(s.graph, **options)), f"after {what}"
        shared += sum(1 for k, g in new.groups.items() if tree.groups.get(k) is g)
        shown, tree = s.graph, new

    _varied_steps(s, 1, where)
    follow("the first apply")
    for k in range(2, 9):
        _varied_steps(s, 1, where)
        follow(f"apply {k}")
    for what, act in [("undo", s.undo), ("undo", s.undo), ("redo", s.redo), ("revert to 2", lambda: s.revert_to(2)),
                      ("redo", s.redo), ("revert to 0", lambda: s.revert_to(0)), ("revert to 8", lambda: s.revert_to(8))]:
        act()
        follow(what)
    s.revert_to(3)
    _varied_steps(s, 2, where)                       # a new branch drops the redo tail
    follow("a new branch")
    assert shared > 0                                # groups away from the touched kernels were reused, not rebuilt


def test_an_untouched_tree_is_reused_and_a_touched_kernel_rebuilds_only_its_groups(bert):
    g, tree = bert
    same = tree.updated(g, set())
    assert tree_value(same) == tree_value(tree)
    below_top = [k for k in tree.groups if k != ROOT and tree.parent[k] != ROOT]
    assert below_top and all(same.groups[k] is tree.groups[k] for k in below_top)   # top groups are copied
    kernel = "/layer/attention/self/MatMul_1"
    again = tree.updated(g, {kernel})
    assert tree_value(again) == tree_value(tree)
    assert all(again.groups[k] is not tree.groups[k] for k in tree.chain[kernel])   # realized again
    inner = [k for k in tree.groups if k != ROOT and tree.chain[k][:3] == (ROOT, "group:layer", "group:layer/output")]
    assert inner and all(again.groups[k] is tree.groups[k] for k in inner)          # elsewhere: shared


def test_a_numbered_group_is_named_with_its_family(tmp_path):
    """Layers read as "layer 1", not "1", on their plates and boxes."""
    from studio.session import Session
    from tests.peer.hf_style_models import save_bert_stack
    save_bert_stack(tmp_path / "bert2.onnx", layers=2)
    s = Session.open(tmp_path / "bert2.onnx", training={"loss": "mse", "optimizer": "adamw"}, autosave=False)
    for tree in (ScopeTree(s.graph), ScopeTree(s.graph, stack=False)):
        labels = {g.label for g in tree.groups.values()}
        assert {"layer 0", "layer 1"} <= labels and not {"0", "1"} & labels


def test_a_training_step_stacks_each_layers_forward_grad_and_update(bert3_stack):
    """Issue 38: the layers of a training step are the root's groups, "layer k", each holding its own
    forward, grad and update (the kernels ``transforms.layers`` puts in that layer, split by pass), and they
    open first; the rest of the step follows them as "outside layers", split the same way and keeping its
    scopes inside (loss, the head's grad, the embeddings' update). Without ``stack``, or for a forward model,
    the tree follows the names alone."""
    from studio.gui.passes import Pass
    from studio.gui.scope_tree import OUTSIDE_LAYERS, PHASE_NAMES, STACKED
    from studio.session import Session
    from transforms.layers import layer_of
    s = Session.open(bert3_stack, training={"loss": "mse", "optimizer": "adamw"}, autosave=False)
    tree = ScopeTree(s.graph)
    assert tree.stacked
    outside = STACKED + OUTSIDE_LAYERS
    assert tree.groups[ROOT].children == [STACKED + f"layer {k}" for k in range(3)] + [outside]
    layers = tree.groups[ROOT].children[:3]
    assert [tree.label(c) for c in layers] == ["layer 0", "layer 1", "layer 2"]
    for key in layers:
        assert [tree.label(c) for c in tree.groups[key].children] == ["forward", "grad", "update"]
        index = int(tree.label(key).split()[1])
        assert {k for k in tree.members(key)} == {k for k in s.graph.nodes if (layer_of(k) or (0, -1))[1] == index}
        for phase in tree.groups[key].children:
            assert {PHASE_NAMES[tree.passes[k]] for k in tree.members(phase)} == {tree.label(phase)}
    assert set(tree.members(outside)) == {k for k in s.graph.nodes if layer_of(k) is None}
    assert {tree.label(c) for c in tree.groups[outside].children} == {"forward", "grad", "update"}
    assert any(tree.label(g) == "loss" for g in tree.groups if g.startswith(outside)), "scopes kept inside"
    assert tree.initial_expansion() == set(layers), "the layers open, each showing its three phases"
    assert sorted(tree.members(ROOT)) == sorted(s.graph.nodes)
    plain = ScopeTree(s.graph, stack=False)
    assert not plain.stacked and not any(k.startswith(STACKED) for k in plain.groups)
    forward = Session.open(bert3_stack, autosave=False).graph
    assert all(p is Pass.FORWARD for p in ScopeTree(forward).passes.values())
    assert not ScopeTree(forward).stacked, "a forward model has no grad or update to stack"


def test_group_sums_in_one_pass_equal_each_groups_members(bert):
    """``sums`` (the plates' and boxes' bytes, one pass over the tree) gives every group the sum over its
    members; ``describe.group_bytes`` keeps it per tree and ledger, and a new tree is summed afresh."""
    from ir.movement import Ledger
    from studio.gui.describe import group_bytes
    graph, tree = bert
    ledger = Ledger(graph)
    got = group_bytes(tree, ledger)
    assert set(got) == set(tree.groups) and len(got) > 3
    for key in tree.groups:
        assert got[key] == sum(ledger.kernels[k].bytes for k in tree.members(key)), key
    assert group_bytes(tree, ledger) is got, "kept for the same tree and ledger"
    other = ScopeTree(graph, max_children=8, chunk=4)
    assert set(group_bytes(other, ledger)) == set(other.groups)
    assert group_bytes(tree, ledger) == got
