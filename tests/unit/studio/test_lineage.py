"""Lineage: every kernel knows the original kernels it was made from.

Each ``Application`` records, for the kernels it created or changed, the kernels (before the step)
they were made from; passes and transfers compose their applications' records; ``Session.origins``
walks the steps back to the opened graph. Checked on the bundled BERT layer and on a 3-layer
BERT-style stack tuned on one layer and transferred (a model built for this test).
"""
from __future__ import annotations

import shutil

from studio.session.recipe import run_recipe, tune_one_layer
from studio.session import Session
from transforms.registry import create

EXAMPLE = "resources/examples/bert_layer_base_train.onnx"


def _example(tmp_path):
    from tests.conftest import REPO_ROOT
    path = tmp_path / "bert.onnx"
    shutil.copy(REPO_ROOT / EXAMPLE, path)
    return Session.open(path, autosave=False)


def test_a_fusion_is_made_from_the_pair_and_untouched_kernels_from_themselves(tmp_path):
    s = _example(tmp_path)
    s.apply_pass("expand")
    mf = create("map_fusion")
    m = next(m for m in mf.matches(s.graph) if mf.check(s.graph, m).ok)
    app = s.apply("map_fusion", m.anchors)
    fused = (app.created + app.changed)[0]
    assert app.parents[fused] == m.anchors
    assert set(s.origins(fused, since=1)) == set(m.anchors)          # the two maps of step 1
    originals = s.origins(fused)                                     # the ops they were expanded from
    assert len(originals) == 2 and all(i in s.graph_at(0).nodes for i in originals)
    untouched = next(i for i in s.graph.nodes if i not in app.created + app.changed and i in s.graph_at(1).nodes)
    assert s.origins(untouched, since=1) == (untouched,)
    s.undo()
    assert s.origins(m.anchors[0]) == s.origins(m.anchors[0], k=1)


def test_the_recipe_accounts_for_every_original_kernel(tmp_path):
    s = _example(tmp_path)
    run_recipe(s)
    g0 = s.graph_at(0)
    covered = set()
    for i in s.graph.nodes:
        o = s.origins(i)
        assert o and all(x in g0.nodes for x in o), f"{i} names kernels that were never in the model"
        assert list(o) == [x for x in g0.nodes if x in set(o)], "in the original graph's order"
        covered |= set(o)
    assert covered == set(g0.nodes), "a removed kernel is part of some kernel that replaced it"
    assert max(len(s.origins(i)) for i in s.graph.nodes) > 10      # the fused GEMM epilogues and optimizers


def test_a_transfer_composes_lineage_per_layer(bert3_stack):
    s = Session.open(bert3_stack, training={"loss": "mse", "optimizer": "adamw"}, autosave=False)
    tune_one_layer(s)
    g0 = s.graph_at(0)
    transfer = next(k for k, st in enumerate(s.steps, start=1) if st.is_transfer)
    app = s._states[transfer].application
    assert app.parents and all(x in s.graph_at(transfer - 1).nodes for v in app.parents.values() for x in v)
    for i in s.graph.nodes:
        assert all(x in g0.nodes for x in s.origins(i))
    layer2 = [i for i in s.graph.nodes if "layer.2" in i or "layer/2" in i]
    assert any(len(s.origins(i)) > 1 for i in layer2), "the transferred fusions know their originals"


def test_follow_maps_kernels_forward_and_back_through_the_steps(tmp_path):
    """``Session.follow``: after the recipe, every kernel of the opened graph follows to kernels of the final
    graph whose origins include it (or to nothing, when the recipe removed it without a successor), and back,
    each final kernel follows to exactly its origins."""
    s = _example(tmp_path)
    run_recipe(s)
    final = s.graph
    for ident in list(s.graph_at(0).nodes)[::7]:
        ahead = s.follow([ident], 0)
        assert all(ident in s.origins(x) for x in ahead) and set(ahead) <= set(final.nodes)
    for ident in list(final.nodes)[::3]:
        assert set(s.follow([ident], s.cursor, 0)) == set(s.origins(ident))
    assert s.follow(list(final.nodes), s.cursor, s.cursor) == list(final.nodes)
