"""Layouts (no Qt): dot in a subprocess (mirrored backward edges, nesting, timeout, cancel, crash), the
signature cache, and the quick layered and patched layouts."""
from __future__ import annotations

import math
import threading

import pytest

from studio.gui import layout as lay
from studio.gui.jobs import Cancelled, CancelToken
from studio.gui.placement import place
from studio.gui.scope_tree import ROOT, ScopeTree
from tests.gui.synthetic import flat_group, training_graph

BOX = {"w": 100.0, "h": 30.0}


def _request(groups):
    return {"pad": lay.PAD, "title": lay.TITLE, "groups": groups}


def test_dot_lays_out_nested_groups_with_the_backward_chain_mirrored():
    chain = {"key": "a", "items": [BOX] * 4,
             "edges": [[0, 1, "n", 1], [1, 2, "n", 1], [0, 3, "f", 1], [3, 2, "b", 1]]}
    outer = {"key": "r", "items": [{"group": "a"}, BOX], "edges": [[0, 1, "n", 1]]}
    out = lay.run_layout(_request([chain, outer]), 30)["layouts"]
    boxes = out["a"]["boxes"]
    assert boxes[0][1] < boxes[1][1] < boxes[2][1]               # forward chain downwards
    assert boxes[2][1] < boxes[3][1]                            # backward 3 -> 2 written reversed: 2 above 3
    e = out["a"]["edges"][3]
    assert abs(e[0][1] - (boxes[3][1])) < abs(e[-1][1] - boxes[3][1])   # points still run source (3) -> dest (2)
    w, h = out["a"]["w"] + 2 * lay.PAD, out["a"]["h"] + lay.TITLE + lay.PAD
    assert out["r"]["boxes"][0][2:] == [pytest.approx(w, abs=0.5), pytest.approx(h, abs=0.5)]


def test_timeout_cancel_and_crash_are_reported():
    big = _request([{"key": "s0", "items": [BOX] * 120,
                     "edges": [[i, j, "n", 1] for i in range(120) for j in range(i + 1, min(120, i + 12))]}])
    with pytest.raises(lay.LayoutTimeout, match="took longer than 0.5 s"):
        lay.run_layout(big, 0.5)
    token = CancelToken()
    threading.Timer(0.3, token.cancel).start()
    with pytest.raises(Cancelled):
        lay.run_layout(big, 60, token)
    with pytest.raises(lay.LayoutFailed, match="KeyError"):
        lay.run_layout(_request([{"key": "s0", "items": [{"group": "nowhere"}], "edges": []}]), 30)


def test_the_book_lays_out_each_shape_once_and_caches_it():
    tree = ScopeTree(training_graph(3))
    expanded = set(tree.groups) - {ROOT}
    shapes = lay.shapes(tree, expanded)
    book = lay.LayoutBook()
    request, ids = book.request(shapes)
    assert len(request["groups"]) < len(shapes)                 # identical per-parameter groups share a layout
    book.store(lay.run_layout(request, 60), ids)
    layouts, missing = book.resolve(shapes)
    assert not missing and book.request(shapes)[0]["groups"] == []
    placement = place(shapes, layouts)
    assert set(placement.boxes) | set(placement.frames) == {i for i in tree.parent}
    for f in placement.frames.values():                          # children inside their frame
        for child in tree.groups[f.key].children:
            c = placement.boxes.get(child) or placement.frames[child]
            assert f.x <= c.x and c.x + c.w <= f.x + f.w + 0.5 and f.y <= c.y and c.y + c.h <= f.y + f.h + 0.5


def test_layered_breaks_cycles_and_patched_keeps_positions():
    quick = lay.layered([(10.0, 10.0)] * 3, [(0, 1, "n", 1), (1, 2, "n", 1), (2, 0, "n", 1)])
    assert len({b[1] for b in quick.boxes}) == 3 and not quick.exact
    tree = ScopeTree(flat_group(30))
    shapes = lay.shapes(tree, {"group:wide"})
    book = lay.LayoutBook()
    first, _ = book.resolve(shapes)
    old = (shapes["group:wide"], first["group:wide"])
    shape = old[0]
    renamed = lay.GroupShape(shape.key, ("new",) + shape.children[1:], shape.kinds, shape.edges, ("other",))
    patched = lay.patched(old, renamed, [lay.item_size(k) for k in shape.kinds])
    assert patched.boxes == old[1].boxes                         # the new child took the old one's place


def test_a_grid_fills_rows_in_reading_order_at_the_asked_shape():
    """A stacked tree's root (issue 38): items in reading order, in rows, the whole about as wide as the
    aspect asks; no two boxes overlap; only neighbours in that order get an edge, border to border."""
    sizes = [(380.0, 150.0)] * 12 + [(150.0, 36.0)] * 5
    edges = [(k, k + 1, "n", 1) for k in range(16)] + [(16, 0, "n", 1)]
    for aspect in (0.8, 1.6, 3.0):
        g = lay.grid(sizes, edges, aspect)
        assert abs(math.log(g.width / g.height / aspect)) < 0.45, (aspect, g.width, g.height)
        order = sorted(range(len(sizes)), key=lambda i: (g.boxes[i][1], g.boxes[i][0]))
        assert order == list(range(len(sizes))), "reading order"
        for i, a in enumerate(g.boxes):
            assert a[0] + a[2] <= g.width + 1e-6 and a[1] + a[3] <= g.height + 1e-6
            for b in g.boxes[i + 1:]:
                assert a[0] + a[2] <= b[0] or b[0] + b[2] <= a[0] or a[1] + a[3] <= b[1] or b[1] + b[3] <= a[1]
        assert all(pts for pts in g.edges[:16]) and g.edges[16] == (), "a far edge is not drawn"
        (x0, y0), (x1, y1) = g.edges[0][0], g.edges[0][-1]
        a, b = g.boxes[0], g.boxes[1]
        assert a[0] <= x0 <= a[0] + a[2] + 1e-6 and b[0] - 1e-6 <= x1 <= b[0] + b[2], "border to border"
    assert lay.grid([], []).boxes == ()
