"""Equal layers rank once (``MatchIndex.class_key``): on a 3-layer BERT built here, every match that takes
its ranking from its class's first member is ranked exactly as ranking it on its own would (verdict, reason,
Δ); the Whole graph listing shows each class once with its copies; after an apply, the graph-wide
transformations' rankings outside the rewrite are kept."""
from __future__ import annotations

import pytest

from studio.gui.ranking import copy_layers, rank_groups
from studio.session import Session
from transforms import engine
from transforms.layers import equal_layers, layer_of
from transforms.match_index import key_of

TRAINING = {"loss": "mse", "optimizer": "adamw"}


@pytest.fixture(scope="module")
def listed(bert3_stack):
    s = Session.open(bert3_stack, training=TRAINING, autosave=False)
    index = s.match_index()
    return s, index, rank_groups(s.graph, None, None, index=index)["Whole graph"]


def test_a_class_member_ranks_as_it_would_alone(listed):
    s, index, rows = listed
    derived = [(r.transformation, m) for r in rows for m in r.copies]
    assert len(derived) >= 200 and {t.name for t, _ in derived} >= {"expand", "recompute", "memory_reuse"}
    for t, m in derived:
        mine, alone = index.rank(t, m), engine.rank_one(s.graph, t, m)
        assert (mine.ok, mine.reason, mine.delta) == (alone.ok, alone.reason, alone.delta), (t.name, m.anchors)


def test_the_whole_graph_lists_each_class_once_with_its_copies(listed):
    s, index, rows = listed
    classes = [index.class_key(r.transformation, r.match) for r in rows]
    named = [c for c in classes if c is not None]
    assert len(named) == len(set(named))
    assert len(rows) + sum(len(r.copies) for r in rows) == len(index)       # every candidate listed once
    r = next(r for r in rows if r.ok and r.copies and r.bytes_saved > 0)
    family, here = layer_of(r.match.anchors[0])
    assert copy_layers(r) == [family.key(k) for k in equal_layers(s.graph, family, here)]
    assert r.total_saved == (1 + len(r.copies)) * r.bytes_saved
    for m in r.copies:
        assert index.class_key(r.transformation, m) == index.class_key(r.transformation, r.match)


def test_an_apply_keeps_the_graph_wide_rankings_outside_the_rewrite(bert3_stack):
    s = Session.open(bert3_stack, training=TRAINING, autosave=False)
    rows = rank_groups(s.graph, None, None, index=s.match_index())["Whole graph"]
    r = next(r for r in rows if r.ok and r.transformation.name == "transpose_elimination")
    app = s.apply(r.transformation.name, r.match.anchors)
    new = s.match_index()
    wide = [(t, m) for t, m in new.candidates() if not t.local_matches]
    kept = [(t, m) for t, m in wide if new.known(t, m) is not None]
    assert len(kept) >= len(wide) - 40 and kept
    touched = set(app.created + app.removed + app.changed)
    for t, m in kept:
        assert not touched & set(m.anchors)
        assert key_of(t, m) in {key_of(t2, m2) for t2, m2 in new.candidates()}


def test_ranking_without_checking_first_derives_failed_verdicts_too(bert3_stack):
    """``Session.matches`` ranks each candidate directly: a member whose class holds only a failed check's
    verdict takes that verdict (renamed), as ranking it alone says."""
    s = Session.open(bert3_stack, training=TRAINING, autosave=False)
    index = s.match_index()
    failed = [(t, m) for t, m in index.candidates() if index.class_key(t, m) is not None and not index.check(t, m).ok]
    assert failed
    fresh = Session.open(bert3_stack, training=TRAINING, autosave=False).match_index()
    for t, m in failed[:60:2]:                  # these classes hold only a check's verdict
        fresh.check(t, m)
    for t, m in failed[:60]:
        mine, alone = fresh.rank(t, m), engine.rank_one(s.graph, t, m)
        assert (mine.ok, mine.reason) == (alone.ok, alone.reason), (t.name, m.anchors)
