"""The difference between two session states (no Qt): it agrees with the preview's ``engine.diff``;
recorded steps (``hint``) and reversed pairs (undo) are answered from memory."""
from __future__ import annotations

import pytest

from studio.gui import graph_diff
from studio.session import Session
from tests.gui.conftest import EXAMPLE
from tests.gui.test_scope_tree import _varied_steps
from transforms import engine


@pytest.fixture(scope="module")
def session():
    s = Session.open(EXAMPLE, autosave=False)
    _varied_steps(s, 8)
    return s


def test_diff_agrees_with_the_engine_between_any_two_states(session):
    s = session
    kinds = set()
    for i in range(0, s.cursor + 1, 2):
        for j in range(0, s.cursor + 1, 3):
            a, b = s.graph_at(i), s.graph_at(j)
            d = graph_diff.diff(a, b)
            added, removed, changed = engine.diff(a, b)
            assert (d.added, d.removed, d.changed) == (added, removed, changed), (i, j)
            assert bool(d) == (i != j and bool(added or removed or changed))
            kinds |= {k for k, v in (("added", added), ("removed", removed), ("changed", changed)) if v}
    assert kinds == {"added", "removed", "changed"}        # the steps exercise all three


def test_same_node_sees_any_changed_field(session):
    g = session.graph
    node = next(n for n in g.nodes.values() if hasattr(n, "impl"))
    copy = g.clone().nodes[node.id]
    assert graph_diff.same_node(node, copy)
    copy.impl = node.impl + "_other"
    assert not graph_diff.same_node(node, copy)
    m = next(n for n in g.nodes.values() if hasattr(n, "body") and n.body)
    twin = g.clone().nodes[m.id]
    assert graph_diff.same_node(m, twin)
    twin.body[0].name = "renamed"
    assert not graph_diff.same_node(m, twin)


def test_a_hinted_step_and_its_undo_need_no_comparison(session, monkeypatch):
    s = session
    before, after = s.graph_at(2), s.graph_at(3)

    class App:
        removed, created, changed = ("r",), ("c",), ("x",)

    graph_diff.hint(before, after, App)
    monkeypatch.setattr(graph_diff, "same_node", lambda a, b: pytest.fail("compared nodes"))
    assert graph_diff.changes(before, after) == graph_diff.GraphDiff(("r",), ("c",), ("x",))
    assert graph_diff.changes(after, before) == graph_diff.GraphDiff(("c",), ("r",), ("x",))   # undo
    assert graph_diff.changes(before, after).touched == {"r", "c", "x"}
