"""Regression guard (FACTS.md "Qt"): PySide6 6.12.0 decrements None's refcount on every Qt call that
returns nothing and aborts after a few thousand; a trivial test passes anyway. Build a scene of
more than 10,000 of our items and make 50,000 such calls, then render it."""
from __future__ import annotations

import PySide6
from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import QGraphicsScene

from studio.gui.passes import Pass
from studio.gui.qt_graph_items import QtBoxItem, QtEdgeItem


def test_pyside_is_not_the_broken_release():
    assert not PySide6.__version__.startswith("6.12."), "PySide6 6.12 aborts with none_dealloc: pin 6.11.3"


def test_10k_item_scene_survives_50k_qt_calls(qapp):
    scene = QGraphicsScene()
    boxes = []
    for k in range(8000):
        box = QtBoxItem(f"n{k}", QRectF((k % 100) * 170, (k // 100) * 50, 150, 36), "Add", f"n{k}", Pass.FORWARD,
                        False)
        scene.addItem(box)
        boxes.append(box)
    for k in range(2500):
        a, b = boxes[k], boxes[k + 100]
        p0, p1 = a.pos() + QPointF(75, 36), b.pos() + QPointF(75, 0)
        scene.addItem(QtEdgeItem(a.key, b.key, "group:", [(p0.x(), p0.y()), (p0.x(), p0.y() + 5),
                                                          (p1.x(), p1.y() - 5), (p1.x(), p1.y())], 1))
    assert len(scene.items()) >= 10_000
    red = QColor("#d62728")
    calls = 0
    for k in range(50_000):
        box = boxes[k % len(boxes)]
        if k % 3 == 0:
            box.setPos(box.pos() + QPointF(0.0, 0.0))
        elif k % 3 == 1:
            box.setZValue(10 + (k % 7))
        else:
            box.set_heat(red if k % 2 else None)
        calls += 1
    image = QImage(800, 600, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    scene.render(painter)
    painter.end()
    assert calls == 50_000 and not image.isNull()
    scene.clear()
