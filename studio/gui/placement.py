"""Absolute scene positions of what the view shows: open-group frames, boxes and edges.

``place`` nests the per-group layouts: the root's content starts at (0, 0); an open
group sits in its parent's layout as a box whose frame holds a title bar and, at
(``PAD``, ``TITLE``) inside it, its own layout. Boxes are kernels and collapsed
groups; every edge is an aggregated edge of one open group, in absolute points.
No Qt here: the view turns a ``Placement`` into scene items.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from studio.gui.layout import PAD, TITLE, GroupShape, Points, RawLayout, content_size
from studio.gui.scope_tree import ROOT


@dataclass(frozen=True)
class Placed:
    key: str
    x: float
    y: float
    w: float
    h: float
    depth: int


@dataclass(frozen=True)
class PlacedEdge:
    src: str
    dst: str
    group: str
    points: Points


@dataclass
class Placement:
    boxes: dict[str, Placed] = field(default_factory=dict)      # kernels and collapsed groups
    frames: dict[str, Placed] = field(default_factory=dict)     # open groups (not the root)
    edges: list[PlacedEdge] = field(default_factory=list)
    width: float = 0.0
    height: float = 0.0
    exact: bool = True


def place(all_shapes: dict[str, GroupShape], layouts: dict[str, RawLayout], exact: bool = True) -> Placement:
    """Nest ``layouts`` (one per open group, keyed like ``all_shapes``) into absolute positions."""
    out = Placement(exact=exact)
    root = layouts[ROOT]
    out.width, out.height = root.width, root.height
    _place_group(out, all_shapes, layouts, ROOT, 0.0, 0.0, 0)
    return out


def _place_group(out: Placement, all_shapes, layouts, key: str, ox: float, oy: float, depth: int) -> None:
    shape, lay = all_shapes[key], layouts[key]
    for child, kind, (x, y, w, h) in zip(shape.children, shape.kinds, lay.boxes):
        if kind == "x":
            fw, fh = content_size(layouts[child])
            out.frames[child] = Placed(child, ox + x, oy + y, fw, fh, depth + 1)
            _place_group(out, all_shapes, layouts, child, ox + x + PAD, oy + y + TITLE, depth + 1)
        else:
            out.boxes[child] = Placed(child, ox + x, oy + y, w, h, depth + 1)
    for (i, j, _, _), pts in zip(shape.edges, lay.edges):
        if pts:
            out.edges.append(PlacedEdge(shape.children[i], shape.children[j], key,
                                        tuple((ox + px, oy + py) for px, py in pts)))
