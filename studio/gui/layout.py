"""Layouts of the open groups of a scope tree: planned here, computed by ``dot`` in a subprocess.

Each open group is laid out on its own (never the whole flat graph): its children
are boxes (kernels, collapsed groups, and open groups at the size of their own
layout), its edges the tree's aggregated edges. Edges between backward items are
written reversed (``"b"``), forward→backward edges are free (``"f"``): the mirrored
layout of FACTS.md. A layout depends only on the group's *shape* (children kinds,
sizes and edges), so ``LayoutBook`` caches it under a structural signature: undo
finds its layout again, and the sixteen identical per-parameter optimizer groups
are laid out once.

``run_layout`` starts ``layout_proc.py`` with the request on stdin and kills it at
its timeout or when the token is cancelled. ``layered`` is a quick pure-Python
layout, used until ``dot`` answers (and when it cannot: timeout, crash, no
pygraphviz); ``patched`` keeps an old layout's positions for a group whose children
changed (after apply) until the new layout arrives. No Qt here.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ir.errors import StudioError
from studio.gui.jobs import Cancelled, CancelToken
from studio.gui.passes import Pass
from studio.gui.scope_tree import ROOT, ScopeTree

NODE_W, NODE_H = 150.0, 36.0
GROUP_W, GROUP_H = 170.0, 44.0
PAD, TITLE = 12.0, 22.0
PROC = Path(__file__).with_name("layout_proc.py")

Box = tuple[float, float, float, float]
Points = tuple[tuple[float, float], ...]


class LayoutTimeout(StudioError):
    """``dot`` took longer than its timeout (the process was killed)."""


class LayoutFailed(StudioError):
    """``dot`` crashed or could not run."""


@dataclass(frozen=True)
class RawLayout:
    """A layout by child index: content size, boxes (x, y, w, h) and edge points, source to destination."""

    width: float
    height: float
    boxes: tuple[Box, ...]
    edges: tuple[Points, ...]
    exact: bool = True


@dataclass(frozen=True)
class GroupShape:
    """What a group's layout depends on: children (kernel, collapsed or open) and edges."""

    key: str
    children: tuple[str, ...]
    kinds: tuple[str, ...]                    # "n" kernel, "g" collapsed group, "x" open group
    edges: tuple[tuple[int, int, str, int], ...]
    signature: tuple
    grid: bool = False                        # laid out here as a grid in reading order (``grid``), not by dot


def edge_kind(src: Pass | None, dst: Pass | None) -> str:
    if src is Pass.BACKWARD and dst is Pass.BACKWARD:
        return "b"
    if src is Pass.FORWARD and dst is Pass.BACKWARD:
        return "f"
    return "n"


def shapes(tree: ScopeTree, expanded: set[str]) -> dict[str, GroupShape]:
    """The shape of every open group, children first (their signatures nest)."""
    out: dict[str, GroupShape] = {}
    for key in reversed(tree.expanded_groups(expanded)):
        children = tuple(tree.groups[key].children)
        index = {c: i for i, c in enumerate(children)}
        kinds = tuple("x" if c in out else "g" if tree.is_group(c) else "n" for c in children)
        edges = tuple(sorted((index[a], index[b], edge_kind(tree.passes.get(a), tree.passes.get(b)), len(names))
                             for (a, b), names in tree.edges.get(key, {}).items()))
        grid = key == ROOT and tree.stacked
        sig = (tuple(out[c].signature if k == "x" else k for c, k in zip(children, kinds)), edges, grid)
        out[key] = GroupShape(key, children, kinds, edges, sig, grid)
    return out


def content_size(layout: RawLayout) -> tuple[float, float]:
    """The box of an open group laid out as ``layout``."""
    return layout.width + 2 * PAD, layout.height + TITLE + PAD


def item_size(kind: str) -> tuple[float, float]:
    return (NODE_W, NODE_H) if kind == "n" else (GROUP_W, GROUP_H)


class LayoutBook:
    """Cached layouts by signature, and the request for the missing ones."""

    def __init__(self, max_entries: int = 5000) -> None:
        self.cache: dict[tuple, RawLayout] = {}
        self.last: dict[str, tuple[GroupShape, RawLayout]] = {}   # group key -> latest shown
        self.max_entries = max_entries
        self.grid_aspect = GRID_ASPECT                              # the view's width over height

    def request(self, all_shapes: dict[str, GroupShape]) -> tuple[dict, dict[str, tuple]]:
        """The layout_proc request for the shapes not cached (children first), and spec id -> signature."""
        groups, ids = [], {}
        by_sig: dict[tuple, str] = {}
        for shape in all_shapes.values():
            if shape.grid or shape.signature in self.cache or shape.signature in by_sig:
                continue
            items = []
            for child, kind in zip(shape.children, shape.kinds):
                if kind == "x":
                    inner = all_shapes[child].signature
                    if inner in self.cache:
                        w, h = content_size(self.cache[inner])
                        items.append({"w": w, "h": h})
                    else:
                        items.append({"group": by_sig[inner]})
                else:
                    w, h = item_size(kind)
                    items.append({"w": w, "h": h})
            spec_id = f"s{len(groups)}"
            by_sig[shape.signature] = spec_id
            ids[spec_id] = shape.signature
            groups.append({"key": spec_id, "items": items, "edges": [list(e) for e in shape.edges]})
        return {"pad": PAD, "title": TITLE, "groups": groups}, ids

    def store(self, reply: dict, ids: dict[str, tuple]) -> None:
        for spec_id, lay in reply["layouts"].items():
            boxes = tuple(tuple(b) for b in lay["boxes"])
            edges = tuple(tuple(tuple(p) for p in e) for e in lay["edges"])
            self.cache[ids[spec_id]] = RawLayout(lay["w"], lay["h"], boxes, edges)
        while len(self.cache) > self.max_entries:
            self.cache.pop(next(iter(self.cache)))

    def store_layered(self, request: dict, ids: dict[str, tuple]) -> None:
        """Cache quick layered layouts for a request ``dot`` could not serve (no retry loop)."""
        done: dict[str, RawLayout] = {}
        for g in request["groups"]:
            sizes = [content_size(done[i["group"]]) if "group" in i else (i["w"], i["h"]) for i in g["items"]]
            done[g["key"]] = layered(sizes, [tuple(e) for e in g["edges"]])
            self.cache[ids[g["key"]]] = done[g["key"]]

    def resolve(self, all_shapes: dict[str, GroupShape]) -> tuple[dict[str, RawLayout], bool]:
        """A layout for every open group (cached, else patched/layered); True when some were missing."""
        out: dict[str, RawLayout] = {}
        missing = False
        for key, shape in all_shapes.items():           # children first
            if shape.grid:                              # from its children's sizes as they are now
                out[key] = grid([content_size(out[c]) if k == "x" else item_size(k)
                                 for c, k in zip(shape.children, shape.kinds)], shape.edges, self.grid_aspect)
                continue
            lay = self.cache.get(shape.signature)
            if lay is None:
                missing = True
                sizes = [content_size(out[c]) if k == "x" else item_size(k)
                         for c, k in zip(shape.children, shape.kinds)]
                old = self.last.get(key)
                lay = patched(old, shape, sizes) if old else layered(sizes, shape.edges)
            else:
                self.last[key] = (shape, lay)
            out[key] = lay
        return out, missing


def run_layout(request: dict, timeout_s: float, token: CancelToken | None = None) -> dict:
    """Run layout_proc on ``request``; kill it at ``timeout_s`` or on cancel."""
    if not request["groups"]:
        return {"layouts": {}}
    data = json.dumps(request)
    proc = subprocess.Popen([sys.executable, str(PROC)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout_s
    pending: str | None = data
    while True:
        try:
            out, err = proc.communicate(pending, timeout=0.05)
            break
        except subprocess.TimeoutExpired:
            pending = None
            stop = "cancel" if token is not None and token.cancelled else \
                "timeout" if time.monotonic() > deadline else None
            if stop:
                proc.kill()
                proc.communicate()
                n = sum(len(g["items"]) for g in request["groups"])
                if stop == "cancel":
                    raise Cancelled(f"the layout of {len(request['groups'])} groups was cancelled") from None
                raise LayoutTimeout(f"the layout of {len(request['groups'])} groups ({n} boxes) took longer "
                                    f"than {timeout_s:g} s and was stopped; showing a simple layered layout. "
                                    "Collapse big groups, or raise the layout timeout (View menu)") from None
    if proc.returncode != 0:
        last = (err or "").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        why = f"crashed (signal {-proc.returncode})" if proc.returncode < 0 else f"failed: {last[0]}"
        raise LayoutFailed(f"the layout process {why}; showing a simple layered layout")
    return json.loads(out)


def _ranks(n: int, edges) -> list[int]:
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for i, j, kind, _ in edges:
        if kind == "f" or i == j:
            continue
        a, b = (j, i) if kind == "b" else (i, j)
        succ[a].append(b)
        indeg[b] += 1
    rank, done = [0] * n, [False] * n
    ready = [i for i in range(n) if indeg[i] == 0]
    for _ in range(n):
        if not ready:                                   # a cycle: break it at the first unplaced item
            ready = [next(i for i in range(n) if not done[i])]
        i = ready.pop(0)
        if done[i]:
            continue
        done[i] = True
        for j in succ[i]:
            rank[j] = max(rank[j], rank[i] + 1)
            indeg[j] -= 1
            if indeg[j] == 0 and not done[j]:
                ready.append(j)
    return rank


def layered(sizes: list[tuple[float, float]], edges) -> RawLayout:
    """A quick layered layout: longest-path ranks (backward edges reversed), rows left to right."""
    rank = _ranks(len(sizes), edges)
    rows: dict[int, list[int]] = {}
    for i, r in enumerate(rank):
        rows.setdefault(r, []).append(i)
    boxes: list[Box] = [(0.0, 0.0, 0.0, 0.0)] * len(sizes)
    y, width = 0.0, 0.0
    for r in sorted(rows):
        x = 0.0
        for i in rows[r]:
            w, h = sizes[i]
            boxes[i] = (x, y, w, h)
            x += w + 18.0
        width = max(width, x - 18.0)
        y += max(sizes[i][1] for i in rows[r]) + 30.0
    return RawLayout(width, max(0.0, y - 30.0), tuple(boxes), straight_edges(boxes, edges), exact=False)


GRID_GAP_X, GRID_GAP_Y = 12.0, 14.0
GRID_ASPECT = 1.6          # width over height the grid aims for: a landscape canvas


def _shelves(sizes: list[tuple[float, float]], width: float) -> tuple[list[Box], float, float]:
    """Items in reading order, in rows no wider than ``width`` (an item wider than that gets a row of its
    own); their boxes and the content's width and height."""
    boxes: list[Box] = []
    x = y = row_h = right = 0.0
    for w, h in sizes:
        if x > 0 and x + w > width:
            x, y, row_h = 0.0, y + row_h + GRID_GAP_Y, 0.0
        boxes.append((x, y, w, h))
        right, row_h = max(right, x + w), max(row_h, h)
        x += w + GRID_GAP_X
    return boxes, right, y + row_h


def grid(sizes: list[tuple[float, float]], edges, aspect: float = GRID_ASPECT) -> RawLayout:
    """A stacked tree's root (issue 38): its items (the layers' plates, the loss, the pieces outside the
    layers) in reading order, in rows as wide as lets a Fit into a canvas ``aspect`` times as wide as
    high (the view's own shape) zoom in furthest, so a deep model fills the canvas instead of a thin column.
    Only edges between neighbours in that order are drawn (straight, border to border): the others
    (a step counter feeding every layer's update) would cross the whole grid; opening a group shows them."""
    if not sizes:
        return RawLayout(0.0, 0.0, (), ())
    widest, total = max(w for w, _ in sizes), sum(w for w, _ in sizes) + GRID_GAP_X * (len(sizes) - 1)
    best = None
    for k in range(41):                              # row widths from the widest item to one row of all
        boxes, w, h = _shelves(sizes, widest * (total / widest) ** (k / 40))
        score = (max(w / aspect, h), w * h)          # the zoom a Fit at that shape needs: the larger side
        if best is None or score < best[0]:
            best = (score, boxes, w, h)
    _, boxes, w, h = best
    return RawLayout(w, h, tuple(boxes), tuple(_border_to_border(boxes[i], boxes[j]) if abs(i - j) == 1 else ()
                                               for i, j, _, _ in edges))


def _border_to_border(a: Box, b: Box) -> Points:
    """A straight edge between the borders of boxes ``a`` and ``b``, along the line joining their centres."""
    (ax, ay), (bx, by) = (a[0] + a[2] / 2, a[1] + a[3] / 2), (b[0] + b[2] / 2, b[1] + b[3] / 2)

    def exit_point(cx: float, cy: float, box: Box, dx: float, dy: float) -> tuple[float, float]:
        sx = box[2] / 2 / abs(dx) if dx else math.inf
        sy = box[3] / 2 / abs(dy) if dy else math.inf
        t = min(sx, sy, 1.0)
        return cx + dx * t, cy + dy * t
    p = exit_point(ax, ay, a, bx - ax, by - ay)
    q = exit_point(bx, by, b, ax - bx, ay - by)
    return p, p, q, q


def straight_edges(boxes, edges) -> tuple[Points, ...]:
    out = []
    for i, j, _, _ in edges:
        (x0, y0, w0, h0), (x1, y1, w1, _) = boxes[i], boxes[j]
        a, b = (x0 + w0 / 2, y0 + h0), (x1 + w1 / 2, y1)
        out.append((a, a, b, b))
    return tuple(out)


def patched(old: tuple[GroupShape, RawLayout], shape: GroupShape, sizes) -> RawLayout:
    """Keep the positions (and edge curves) of children that stayed; new ones take the places of those that
    went; new edges are straight until ``dot`` answers."""
    old_shape, old_lay = old
    where = dict(zip(old_shape.children, old_lay.boxes))
    free = [where[c] for c in old_shape.children if c not in set(shape.children)]
    boxes: list[Box] = []
    bottom = old_lay.height + 30.0
    for child, (w, h) in zip(shape.children, sizes):
        if child in where:
            x, y = where[child][:2]
        elif free:
            x, y = free.pop(0)[:2]
        else:
            x, y, bottom = 0.0, bottom, bottom + h + 30.0
        boxes.append((x, y, w, h))
    curves = {(old_shape.children[i], old_shape.children[j]): pts
              for (i, j, _, _), pts in zip(old_shape.edges, old_lay.edges)}
    straight = straight_edges(boxes, shape.edges)
    edges = []
    for k, (i, j, _, _) in enumerate(shape.edges):
        a, b = shape.children[i], shape.children[j]
        kept = a in where and b in where and where[a] == boxes[i] and where[b] == boxes[j]
        edges.append(curves.get((a, b), straight[k]) if kept else straight[k])
    width = max([b[0] + b[2] for b in boxes] + [0.0])
    height = max([b[1] + b[3] for b in boxes] + [0.0])
    return RawLayout(width, height, tuple(boxes), tuple(edges), exact=False)
