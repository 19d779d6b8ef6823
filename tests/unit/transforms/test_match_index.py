"""The match index (``transforms.match_index``): after every apply of a random sequence, the
incrementally derived index holds exactly the candidates a full re-match finds, keeps the
rankings outside the neighbourhood, and an earlier state's index is untouched."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from studio.session import load_graph
from transforms import engine
from transforms.match_index import MatchIndex, key_of

EXAMPLE = Path(__file__).resolve().parents[3] / "resources/examples/bert_layer_base_train.onnx"


@pytest.fixture(scope="module")
def imported():
    return load_graph(EXAMPLE)


def _random_step(graph, index, rng):
    """A random applicable candidate: a random transformation first, then one of its matches (a transformation
    with many matches, like view_alias on the imported graph's ~100 views, does not crowd out the fusions)."""
    by_name: dict[str, list] = {}
    for t, m in index.candidates():
        by_name.setdefault(t.name, []).append((t, m))
    names = sorted(by_name)
    rng.shuffle(names)
    for name in names:
        cands = by_name[name]
        rng.shuffle(cands)
        found = next(((t, m) for t, m in cands if t.check(graph, m).ok), None)
        if found is not None:
            return found
    raise AssertionError("no applicable candidate")


@pytest.mark.parametrize("seed", [0, 1])
def test_incremental_index_equals_a_full_rematch(imported, seed):
    rng = random.Random(seed)
    graph, index = imported, MatchIndex(imported)
    applied = set()
    for step in range(1, 61):
        t, m = _random_step(graph, index, rng)
        before_keys = set(index._cands)
        work = graph.clone_sharing(t.affected(graph, m))
        app = engine.apply(work, t, m, step, backup=False)
        new = index.after(work, app)
        listed = {key_of(t, m) for t, m in new.candidates()}       # graph-wide ones are matched now
        assert set(index._cands) == before_keys, "after() must not edit the earlier index"
        full = MatchIndex(work)
        assert listed == set(new._cands)
        extra, missing = listed - set(full._cands), set(full._cands) - listed
        assert not extra and not missing, (step, t.name, sorted(extra)[:3], sorted(missing)[:3])
        applied.add(t.name)
        graph, index = work, new
    assert "expand" in applied and applied & {"map_fusion", "horizontal_fusion", "gemm_epilogue_fusion"}, applied


def test_rankings_are_kept_outside_the_neighbourhood_and_redone_inside(imported):
    graph = imported
    index = MatchIndex(graph)
    expand = [(t, m) for t, m in index.candidates() if t.name == "expand"]
    ranked = {key_of(t, m): index.rank(t, m) for t, m in expand}
    assert all(r.ok and r.delta is not None for r in ranked.values())
    t, m = expand[0]
    work = graph.clone_sharing(t.affected(graph, m))
    app = engine.apply(work, t, m, 1, backup=False)
    new = index.after(work, app)
    kept = [k for k in ranked if k in new._ranked]
    assert len(kept) >= len(ranked) - 10 and key_of(t, m) not in new._ranked
    for k in kept:                        # a kept ranking is what ranking afresh would say
        tt, mm = new._cands[k]
        assert engine.rank_one(work, tt, mm).delta == new._ranked[k].delta
    selection = list(new.candidates(app.created))
    assert selection and all(set(mm.anchors) & set(app.created) for _, mm in selection)


def test_a_sessions_index_is_derived_on_first_use_and_a_long_chain_is_rebuilt():
    """``Session`` records a step without deriving its index (``MatchIndex.after`` ran on the GUI thread at every
    apply); the first ``match_index()`` derives it, through the steps since the last one asked for, and it lists
    what a full re-match does. Past ``MAX_LAZY`` unasked steps a state builds its index afresh instead."""
    from studio.session import Session
    from studio.session.states import MAX_LAZY, LazyIndex
    def an_expand(index):
        return next((t, m) for t, m in index.candidates() if t.name == "expand" and t.check(s.graph, m).ok)
    s = Session.open(EXAMPLE, autosave=False)
    for _ in range(3):                                # each asks for the index: each derives one step
        t, m = an_expand(s.match_index())
        s.apply(t.name, m.anchors, t.params())
    pending = s._indexes[s.cursor]
    assert isinstance(pending, LazyIndex) and pending.index is None and LazyIndex.depth(pending) == 1
    index = s.match_index()
    assert s._indexes[s.cursor] is index and pending.index is index
    assert {key_of(t, m) for t, m in index.candidates()} == set(MatchIndex(s.graph)._cands)
    for _ in range(MAX_LAZY + 1):                     # nobody asks: the chain grows, then stops
        t, m = an_expand(MatchIndex(s.graph))
        s.apply(t.name, m.anchors, t.params())
    assert s._indexes[s.cursor] is None and isinstance(s._indexes[s.cursor - 1], LazyIndex)
    assert {key_of(t, m) for t, m in s.match_index().candidates()} == set(MatchIndex(s.graph)._cands)
