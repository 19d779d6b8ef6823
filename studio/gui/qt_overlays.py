"""Overlays of the graph view: the heatmap legend and the minimap.

``QtLegend`` sits in the view's bottom-left corner: a colour bar with tick values,
the scale and what is measured ("bytes moved per kernel · log · 309 of 309
kernels"). ``QtMinimap`` shows the whole scene small, with the main view's visible
area as a rectangle; clicking or dragging in it moves the main view.
"""
from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QLinearGradient, QPainter, QPen
from PySide6.QtWidgets import QFrame, QGraphicsView, QWidget

from studio.cli import human_bytes
from studio.gui.heatmap import RAMP, legend


class QtLegend(QWidget):
    """The heatmap's colour bar (see the module docstring)."""

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.ticks: list[tuple[float, float]] = []
        self.caption = ""
        self.fmt = human_bytes
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.resize(300, 62)
        self.hide()

    def set_values(self, values: dict[str, float], scale: str, caption: str, fmt=human_bytes,
                   show_empty: bool = False) -> None:
        """``fmt`` labels the ticks (bytes by default); ``show_empty`` shows the caption without values."""
        self.ticks = legend(values, scale)
        self.caption, self.fmt = caption, fmt
        self.resize(max(300, QFontMetrics(QFont("DejaVu Sans", 7)).horizontalAdvance(caption) + 24), self.height())
        self.setVisible(bool(values) or show_empty)
        self.update()

    def paintEvent(self, event) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.fillRect(self.rect(), QColor(255, 255, 255, 225))
        p.setPen(QPen(QColor("#888888")))
        p.drawRect(self.rect().adjusted(0, 0, -1, -1))
        bar = QRectF(10, 22, self.width() - 20, 12)
        grad = QLinearGradient(bar.topLeft(), bar.topRight())
        for k, rgb in enumerate(RAMP):
            grad.setColorAt(k / (len(RAMP) - 1), QColor(*rgb))
        p.fillRect(bar, grad)
        p.setFont(QFont("DejaVu Sans", 7))
        p.setPen(QColor("#1b1b1b"))
        p.drawText(QRectF(10, 3, self.width() - 20, 16), Qt.AlignmentFlag.AlignLeft, self.caption)
        for t, v in self.ticks:
            x = bar.left() + t * bar.width()
            p.drawLine(int(x), int(bar.bottom()), int(x), int(bar.bottom()) + 3)
            align = Qt.AlignmentFlag.AlignLeft if t == 0 else Qt.AlignmentFlag.AlignRight if t == 1 \
                else Qt.AlignmentFlag.AlignHCenter
            box = QRectF(x - 40 if 0 < t < 1 else x - 80 if t == 1 else x, bar.bottom() + 4, 80 if 0 < t < 1 else 80, 14)
            p.drawText(box, align, self.fmt(v))


class QtMinimap(QGraphicsView):
    """The whole scene, small, with the main view's visible area (see the module docstring)."""

    def __init__(self, view: QGraphicsView, parent: QWidget | None = None) -> None:
        super().__init__(view.scene(), parent)
        self.view = view
        self.setInteractive(False)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setMinimumSize(120, 120)
        self.setBackgroundBrush(QColor("#fbfbfb"))
        for bar in (view.horizontalScrollBar(), view.verticalScrollBar()):
            bar.valueChanged.connect(self.viewport().update)
        view.scene().sceneRectChanged.connect(lambda _r: self.fit())

    def fit(self) -> None:
        self.fitInView(self.sceneRect(), Qt.AspectRatioMode.KeepAspectRatio)
        self.viewport().update()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.fit()

    def drawForeground(self, painter: QPainter, rect: QRectF) -> None:
        seen = self.view.mapToScene(self.view.viewport().rect()).boundingRect()
        pen = QPen(QColor("#d62728"), 0)
        pen.setCosmetic(True)
        pen.setWidth(2)
        painter.setPen(pen)
        painter.setBrush(QColor(214, 39, 40, 30))
        painter.drawRect(seen)

    def mousePressEvent(self, event) -> None:
        self.view.centerOn(self.mapToScene(event.position().toPoint()))

    def mouseMoveEvent(self, event) -> None:
        if event.buttons() & Qt.MouseButton.LeftButton:
            self.view.centerOn(self.mapToScene(event.position().toPoint()))

    def wheelEvent(self, event) -> None:
        event.ignore()
