"""The overview at low zoom: which groups carry a summary plate, and what the plate says.

Zoomed out below ``LOD_TEXT`` a kernel's box is too small for its label, so the view
draws a *plate* on each group (an open frame or a collapsed group) big enough on screen
to hold one: the group's name and a line "N kernels · bytes moved · share of the step",
with the measured time of its kernels once a profile has run. A group shows its plate
from the zoom at which it is ``FIT_W`` × ``FIT_H`` screen pixels (``Level.own``), zooming
in names inner blocks too, and from ``LOD_TEXT`` on the kernels' own labels take over. A
top-level group (forward, loss, gradients, optimizer update) shows its plate at every zoom
below ``LOD_TEXT`` however small it is on screen, so Fit always names the step's parts — on
a 12-layer step the optimizer's updates make the layout so wide that no group reaches its
plate size at Fit. Plates are placed outer groups first, each at its group's top-left corner,
moved down past the plates already placed, and left out when it no longer fits inside its
group — a top-level plate never is: it may cover its neighbours (``place_plates``).
No Qt here (the view draws the plates; see ``QtGraphView.plates``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ir.movement import Ledger
from studio.text import human_bytes
from studio.gui.describe import group_bytes
from studio.gui.placement import Placement
from studio.gui.scope_tree import ScopeTree
from studio.gui.timings import human_seconds

LOD_TEXT = 0.45                  # zoom below which boxes draw no text and frames no title (qt_graph_items)
PLATE_H = 34.0                   # a plate's height in screen pixels (two lines)
FIT_W, FIT_H = 72.0, 2.2 * PLATE_H    # screen pixels a group needs to show its plate
INF = float("inf")
TOP_DEPTH = 1                    # groups this deep (directly under the root) always carry a plate


@dataclass(frozen=True)
class Level:
    """Group ``key`` (scene rectangle ``x, y, w, h``, ``depth`` groups deep) shows its plate from
    zoom ``own`` up to ``LOD_TEXT``."""

    key: str
    x: float
    y: float
    w: float
    h: float
    own: float
    depth: int

    def shows(self, zoom: float) -> bool:
        return self.own <= zoom < LOD_TEXT


def plate_levels(placement: Placement, tree: ScopeTree) -> dict[str, Level]:
    """The plate level of every group the placement shows (open frames and collapsed groups)."""
    rects = {f.key: (f.x, f.y, f.w, f.h) for f in placement.frames.values()}
    rects.update({b.key: (b.x, b.y, b.w, b.h) for b in placement.boxes.values() if tree.is_group(b.key)})
    out = {}
    for k, (x, y, w, h) in rects.items():
        depth = len(tree.chain.get(k, ()))
        own = 0.0 if depth <= TOP_DEPTH else max(FIT_W / max(w, 1e-9), FIT_H / max(h, 1e-9))
        out[k] = Level(k, x, y, w, h, own, depth)
    return out


def place_plates(groups: list[tuple[str, int, tuple[float, float, float, float]]],
                 widths: dict[str, float]) -> dict[str, tuple[float, float, float, float]]:
    """Where each plate goes, in screen pixels: ``groups`` are (key, depth, screen rect x, y, w, h),
    ``widths`` the plates' text widths (a plate may be wider than a narrow group: it then covers
    part of its neighbour, whose boxes carry no text at these zooms). Outer groups first; a plate
    starts at its group's top-left and moves down past every placed plate it overlaps while it
    stays inside its group (a top-level group's plate is placed wherever that takes it)."""
    placed: dict[str, tuple[float, float, float, float]] = {}
    for key, depth, (x, y, w, h) in sorted(groups, key=lambda g: (g[1], g[2][1], g[2][0])):
        pw = widths[key]
        px, py = x + 3, y + 3
        moved = True
        while moved:
            moved = False
            for qx, qy, qw, qh in placed.values():
                if px < qx + qw and qx < px + pw and py < qy + qh and qy < py + PLATE_H:
                    py, moved = qy + qh + 2, True
        if py + PLATE_H <= y + h - 2 or depth <= TOP_DEPTH:
            placed[key] = (px, py, pw, PLATE_H)
    return placed


def readable_zoom(levels: dict[str, Level]) -> tuple[float, Level | None]:
    """The smallest zoom at which some group shows a plate, and that group (the topmost of equals);
    (INF, None) when there are no groups."""
    best = min(levels.values(), key=lambda lv: (lv.own, lv.y, lv.x), default=None)
    return (best.own, best) if best is not None else (INF, None)


def plate_text(tree: ScopeTree, ledger: Ledger, key: str, times_us: dict[str, float] | None = None) -> tuple[str, str]:
    """(name, "N kernels · moved · share [· measured time]") of group ``key``."""
    size = tree.groups[key].size if tree.is_group(key) else 1
    moved = group_bytes(tree, ledger).get(key, 0) if tree.is_group(key) else ledger.kernels[key].bytes
    total = ledger.total.bytes or 1
    line = f"{size} kernels · {human_bytes(moved)} · {100 * moved / total:.1f} %"
    if times_us:
        members = tree.members(key)
        measured = [times_us[i] for i in members if i in times_us]
        if measured:
            line += f" · {human_seconds(sum(measured) * 1e-6)}"
            if len(measured) < len(members):
                line += f" ({len(measured)} timed)"
    return tree.label(key), line


def canvas_use(placement: Placement, scale: float, view_w: float, view_h: float) -> float:
    """The share of a ``view_w`` × ``view_h`` canvas that the top-level items (the root's plates and
    boxes) cover at ``scale`` (issue 38: a Fit of a 12-layer step left about 90 % of it empty)."""
    top = [p for p in (*placement.frames.values(), *placement.boxes.values()) if p.depth == 1]
    covered = sum(p.w * p.h for p in top) * scale * scale
    return min(1.0, covered / (view_w * view_h)) if view_w > 0 and view_h > 0 else 0.0

