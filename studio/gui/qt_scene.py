"""The graph scene, kept in step with a ``Placement`` incrementally.

``QtGraphScene.sync`` compares the new placement with the items it holds: an item
whose key, geometry and text are unchanged stays (moved with ``setPos`` when only
its position changed), others are replaced, and items whose keys are gone are
removed. After applying a transformation only the touched kernels and their edges
are rebuilt (and only the boxes the view names *stale* get their labels again), so the view repaints only that region (rebuilding the whole scene
costs tens of milliseconds on the BERT layer, and repaints everything).
"""
from __future__ import annotations

from PySide6.QtCore import QRectF
from PySide6.QtWidgets import QGraphicsScene

from ir.graph import Graph
from ir.movement import Ledger
from studio.gui import layout as lay
from studio.gui.describe import box_text, edge_label
from studio.gui.placement import Placement
from studio.gui.qt_graph_items import LABEL_H, LABEL_W, QtBoxItem, QtEdgeItem, QtFrameItem
from studio.gui.scope_tree import ScopeTree


class QtGraphScene(QGraphicsScene):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.boxes: dict[str, QtBoxItem] = {}
        self.frames: dict[str, QtFrameItem] = {}
        self.edge_items: dict[tuple[str, str, str], QtEdgeItem] = {}
        self.graph: Graph | None = None
        self.tree: ScopeTree | None = None
        self._edge_labels: dict[tuple[str, str, str], str] = {}

    def edge_label(self, item: QtEdgeItem) -> str:
        """What an edge carries, one line (``describe.edge_label``), made when first painted."""
        key = (item.group, item.src, item.dst)
        text = self._edge_labels.get(key)
        if text is None and self.graph is not None and self.tree is not None:
            containers = self.tree.edges.get(item.group, {}).get((item.src, item.dst), [])
            text = self._edge_labels[key] = edge_label(self.graph, containers)
        return text or ""

    def sync(self, placement: Placement, tree: ScopeTree, graph: Graph, ledger: Ledger,
             stale: set[str] | None = None) -> None:
        """Make the items match ``placement`` (see the module docstring). Only boxes in ``stale`` (all
        when None) and new or resized ones get their text again."""
        self.graph, self.tree, self._edge_labels = graph, tree, {}
        self._sync_frames(placement, tree)
        self._sync_edges(placement, tree)
        self._sync_boxes(placement, tree, graph, ledger, stale)
        self._place_labels()
        m = 60.0
        rect = QRectF(-m, -m, placement.width + 2 * m, placement.height + 2 * m)
        if rect != self.sceneRect():
            self.setSceneRect(rect)

    def _sync_frames(self, placement: Placement, tree: ScopeTree) -> None:
        old, self.frames = self.frames, {}
        for f in placement.frames.values():
            rect, title = QRectF(f.x, f.y, f.w, f.h), tree.label(f.key)
            item = old.pop(f.key, None)
            if item is None or item.rect.size() != rect.size() or item.title != title or item.depth != f.depth:
                if item is not None:
                    self.removeItem(item)
                item = QtFrameItem(f.key, rect, title, f.depth, lay.TITLE)
                self.addItem(item)
            elif item.rect != rect:
                item.rect = rect
                item.setPos(rect.topLeft())
            self.frames[f.key] = item
        for item in old.values():
            self.removeItem(item)

    def _sync_edges(self, placement: Placement, tree: ScopeTree) -> None:
        old, self.edge_items = self.edge_items, {}
        for e in placement.edges:
            key = (e.group, e.src, e.dst)
            weight = len(tree.edges[e.group][(e.src, e.dst)])
            item = old.pop(key, None)
            if item is None or item.points != e.points or item.weight != weight:
                if item is not None:
                    self.removeItem(item)
                item = QtEdgeItem(e.src, e.dst, e.group, e.points, weight)
                self.addItem(item)
            self.edge_items[key] = item
        for item in old.values():
            self.removeItem(item)

    def _place_labels(self) -> None:
        """Give each edge the first of its label spots that overlaps no box and no label placed
        before it (heavier edges first; a grid of ``LABEL_W`` × ``LABEL_H`` cells finds the
        neighbours), or none: a label never hides under a box or covers another label."""
        grid: dict[tuple[int, int], list[QRectF]] = {}

        def cells(r: QRectF) -> list[tuple[int, int]]:
            return [(cx, cy) for cx in range(int(r.left() // LABEL_W), int(r.right() // LABEL_W) + 1)
                    for cy in range(int(r.top() // LABEL_H), int(r.bottom() // LABEL_H) + 1)]
        for b in self.boxes.values():
            r = b.sceneBoundingRect()
            for c in cells(r):
                grid.setdefault(c, []).append(r)
        for item in sorted(self.edge_items.values(), key=lambda e: -e.weight):
            chosen = None
            for box in item.label_spots:
                near = cells(box)
                if not any(box.intersects(o) for c in near for o in grid.get(c, ())):
                    chosen = box
                    for c in near:
                        grid.setdefault(c, []).append(box)
                    break
            item.place_label(chosen)

    def _sync_boxes(self, placement: Placement, tree: ScopeTree, graph: Graph, ledger: Ledger,
                    stale: set[str] | None) -> None:
        old, self.boxes = self.boxes, {}
        for b in placement.boxes.values():
            rect = QRectF(b.x, b.y, b.w, b.h)
            item = old.pop(b.key, None)
            if item is None or stale is None or b.key in stale or item.rect.size() != rect.size():
                title, subtitle = box_text(graph, tree, ledger, b.key)
            else:
                title, subtitle = item.title, item.subtitle
            pass_, is_group = tree.passes.get(b.key), tree.is_group(b.key)
            if item is None or (item.rect.size(), item.title, item.subtitle, item.pass_, item.is_group) != \
                    (rect.size(), title, subtitle, pass_, is_group):
                selected = item is not None and item.isSelected()
                if item is not None:
                    self.removeItem(item)
                item = QtBoxItem(b.key, rect, title, subtitle, pass_, is_group)
                self.addItem(item)
                item.setSelected(selected)
            elif item.rect != rect:
                item.rect = rect
                item.setPos(rect.topLeft())
            self.boxes[b.key] = item
        for item in old.values():
            self.removeItem(item)
