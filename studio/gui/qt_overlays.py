"""Overlays of the graph view: the heatmap legend and the minimap.

``QtLegend`` sits in the view's bottom-left corner: a colour bar with tick values,
the scale and what is measured ("bytes moved per kernel · log · 309 of 309
kernels"). ``QtMinimap`` shows the whole scene small (a pixmap rendered once the
scene is still), with the main view's visible area as a rectangle; clicking or
dragging in it moves the main view.
"""
from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt, QTimer
from PySide6.QtGui import QColor, QFont, QFontMetrics, QLinearGradient, QPainter, QPen, QPixmap
from PySide6.QtWidgets import QGraphicsView, QWidget

from studio.text import human_bytes
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


class QtMinimap(QWidget):
    """The whole scene, small, with the main view's visible area (see the module docstring).

    The scene is rendered into a pixmap when it has been still for ``delay_ms`` (and the
    minimap is visible), so edits do not pay for a second rendering of every item; the
    visible-area rectangle follows scrolling and zooming at once."""

    def __init__(self, view: QGraphicsView, parent: QWidget | None = None, delay_ms: int = 200) -> None:
        super().__init__(parent)
        self.view = view
        self.pixmap: QPixmap | None = None
        self.source = QRectF()                    # the scene rectangle the pixmap shows
        self.target = QRectF()                    # where it is drawn
        self.stale = True
        self.setMinimumSize(120, 120)
        self.timer = QTimer(self, singleShot=True, interval=delay_ms)
        self.timer.timeout.connect(self.render_scene)
        for bar in (view.horizontalScrollBar(), view.verticalScrollBar()):
            bar.valueChanged.connect(self.update)
        view.sceneUpdated.connect(self.schedule)   # not QGraphicsScene.changed: that slows every view update

    def schedule(self, *_args) -> None:
        self.stale = True
        self.timer.start()

    def render_scene(self) -> None:
        """Render the scene into the pixmap now (when visible; otherwise on show)."""
        if not self.isVisible() or self.width() < 2 or self.height() < 2:
            return
        scene = self.view.scene()
        self.source = scene.sceneRect()
        scale = min(self.width() / max(1.0, self.source.width()), self.height() / max(1.0, self.source.height()))
        w, h = self.source.width() * scale, self.source.height() * scale
        self.target = QRectF((self.width() - w) / 2, (self.height() - h) / 2, w, h)
        pix = QPixmap(self.size())
        pix.fill(QColor("#fbfbfb"))
        p = QPainter(pix)
        scene.render(p, self.target, self.source, Qt.AspectRatioMode.IgnoreAspectRatio)
        p.end()
        self.pixmap, self.stale = pix, False
        self.update()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self.stale:
            self.render_scene()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.schedule()

    def _to_scene(self, pos) -> QPointF:
        if self.target.width() <= 0 or self.target.height() <= 0:
            return self.source.center()
        sx = self.source.width() / self.target.width()
        sy = self.source.height() / self.target.height()
        return QPointF(self.source.left() + (pos.x() - self.target.left()) * sx,
                       self.source.top() + (pos.y() - self.target.top()) * sy)

    def _from_scene(self, rect: QRectF) -> QRectF:
        if self.source.width() <= 0 or self.source.height() <= 0:
            return QRectF()
        sx = self.target.width() / self.source.width()
        sy = self.target.height() / self.source.height()
        return QRectF(self.target.left() + (rect.left() - self.source.left()) * sx,
                      self.target.top() + (rect.top() - self.source.top()) * sy, rect.width() * sx, rect.height() * sy)

    def seen_rect(self) -> QRectF:
        """The main view's visible area, in minimap coordinates."""
        return self._from_scene(self.view.mapToScene(self.view.viewport().rect()).boundingRect())

    def paintEvent(self, event) -> None:
        p = QPainter(self)
        p.fillRect(self.rect(), QColor("#fbfbfb"))
        if self.pixmap is not None:
            p.drawPixmap(0, 0, self.pixmap)
        pen = QPen(QColor("#d62728"), 2)
        p.setPen(pen)
        p.setBrush(QColor(214, 39, 40, 30))
        p.drawRect(self.seen_rect())

    def mousePressEvent(self, event) -> None:
        self.view.centerOn(self._to_scene(event.position()))
        self.update()

    def mouseMoveEvent(self, event) -> None:
        if event.buttons() & Qt.MouseButton.LeftButton:
            self.view.centerOn(self._to_scene(event.position()))
            self.update()
