"""Paint debris: an item that paints outside its bounding rect leaves pieces on screen after
incremental repaints (seen after Find revealed a node at zoom ~0.44). Every graph item is painted
into an image at several zooms, selected and marked, and nothing may land outside its bounds."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QColor, QImage, QPainter, QTransform
from PySide6.QtWidgets import QGraphicsScene, QStyleOptionGraphicsItem

from studio.gui.qt_graph_items import QtBoxItem, QtEdgeItem, QtFrameItem

ZOOMS = (0.05, 0.2, 0.44, 1.0, 2.5)


def _outside(item, zoom: float) -> int:
    """Pixels ``item`` paints outside its bounding rect at ``zoom``."""
    bounds = item.boundingRect()
    margin = 40
    size = (int(bounds.width() * zoom) + 2 * margin, int(bounds.height() * zoom) + 2 * margin)
    image = QImage(size[0], size[1], QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(QColor(0, 0, 0, 0))
    painter = QPainter(image)
    t = QTransform().translate(margin, margin).scale(zoom, zoom).translate(-bounds.x(), -bounds.y())
    painter.setWorldTransform(t)
    item.paint(painter, QStyleOptionGraphicsItem(), None)
    painter.end()
    inside = t.mapRect(bounds).adjusted(-1, -1, 1, 1)
    return sum(1 for x in range(size[0]) for y in range(size[1])
               if QColor.fromRgba(image.pixel(x, y)).alpha() and not inside.contains(QPointF(x + 0.5, y + 0.5)))


@pytest.mark.parametrize("zoom", ZOOMS)
def test_items_paint_inside_their_bounds(qapp, zoom):
    scene = QGraphicsScene()
    box = QtBoxItem("k", QRectF(0, 0, 160, 40), "MatMul", "/layer/attention/self/MatMul", None, False)
    group = QtBoxItem("g", QRectF(0, 0, 160, 40), "⊞ attention", "188 kernels · 770 MB", None, True)
    frame = QtFrameItem("f", QRectF(0, 0, 400, 300), "attention", 1, 24.0)
    edge = QtEdgeItem("a", "b", "g", [(0, 0), (0, 30), (40, 60), (40, 90)], 3)
    for item in (box, group, frame, edge):
        scene.addItem(item)
    box.setSelected(True)
    group.set_marks({"current"})
    frame.set_marks({"removed"})
    edge.hovered = True
    for item in (box, group, frame, edge):
        assert _outside(item, zoom) == 0, f"{type(item).__name__} paints outside its bounds at zoom {zoom}"
