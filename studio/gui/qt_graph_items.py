"""Scene items of the graph view: boxes (kernels, collapsed groups), open-group frames, edges.

Level of detail: below ``LOD_TEXT`` (zoomed out) boxes are drawn as plain filled
rectangles without text and frames without their title (the view draws summary plates
on the groups instead, ``overview``), and below ``LOD_SIMPLE`` edges become straight lines
without arrowheads. Items carry their key (a kernel id or a group key) and a set
of *marks* that the view sets: ``hover`` (affected by the hovered match),
``search``/``current`` (find), ``removed``/``changed``/``added`` (preview; Compare also
marks ``merged``: part of a kernel on the other side). Hover wins over the other marks. A box's
fill is its pass colour, or its heat colour when the heatmap is on.
"""
from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import (QBrush, QColor, QFont, QFontMetricsF, QPainter, QPainterPath, QPainterPathStroker, QPen,
                           QPolygonF)
from PySide6.QtWidgets import QGraphicsItem, QGraphicsPathItem, QStyleOptionGraphicsItem

from studio.gui.describe import fit_title
from studio.gui.overview import LOD_TEXT
from studio.gui.passes import Pass

LOD_SIMPLE = 0.25
PASS_COLORS = {Pass.FORWARD: ("#dbe9f6", "#4a7bb7"), Pass.BACKWARD: ("#fde2c8", "#c2772c"),
               Pass.OPTIMIZER: ("#dcefd9", "#4f9a4a"), None: ("#ececec", "#8a8a8a")}
MARK_COLORS = {"removed": "#d62728", "merged": "#8e44ad", "changed": "#ff9f1c", "added": "#2ca02c",
               "current": "#1f4fff", "search": "#5b8cff", "hover": "#17becf"}
MARK_ORDER = ("hover", "removed", "merged", "changed", "added", "current", "search")


class Style:
    """Fonts and pens of the graph view's items and plates, made once a QGuiApplication exists."""

    made = False

    @classmethod
    def get(cls) -> type["Style"]:
        if not cls.made:
            cls.title = QFont("DejaVu Sans", 8, QFont.Weight.Bold)
            cls.small = QFont("DejaVu Sans", 7)
            cls.title_metrics, cls.small_metrics = QFontMetricsF(cls.title), QFontMetricsF(cls.small)
            cls.frame_font = QFont("DejaVu Sans", 8, QFont.Weight.Bold)
            cls.edge = QPen(QColor("#7a7a7a"), 1.2)
            cls.edge_hover = QPen(QColor("#1f4fff"), 3.0)
            cls.text = QPen(QColor("#1b1b1b"))
            cls.light_text = QPen(QColor("#ffffff"))
            cls.plate_title = QFont("DejaVu Sans", 9, QFont.Weight.Bold)       # the view's overview plates
            cls.plate_line = QFont("DejaVu Sans", 8)
            cls.plate_title_metrics = QFontMetricsF(cls.plate_title)
            cls.plate_line_metrics = QFontMetricsF(cls.plate_line)
            cls.plate_fill, cls.plate_border = QColor(255, 255, 255, 232), QPen(QColor("#7d8793"))
            cls.made = True
        return cls


_ELIDED: dict[tuple[bool, str, float], str] = {}


def _elided(bold: bool, text: str, width: float) -> str:
    """Elided label text, cached (eliding costs ~60 µs a call; labels repeat across redraws)."""
    key = (bold, text, width)
    if key not in _ELIDED:
        st = Style.get()
        if len(_ELIDED) > 50_000:
            _ELIDED.clear()
        metrics = st.title_metrics if bold else st.small_metrics
        if bold:                              # a title: cut at " + " joints, else keep its start (never mid-name)
            short = fit_title(text, lambda t: metrics.horizontalAdvance(t) <= width)
            _ELIDED[key] = short or metrics.elidedText(text, Qt.TextElideMode.ElideRight, width)
        else:
            _ELIDED[key] = metrics.elidedText(text, Qt.TextElideMode.ElideMiddle, width)
    return _ELIDED[key]


class QtBoxItem(QGraphicsItem):
    """A kernel or a collapsed group."""

    def __init__(self, key: str, rect: QRectF, title: str, subtitle: str, pass_: Pass | None,
                 is_group: bool) -> None:
        super().__init__()
        self.key, self.rect, self.title, self.subtitle = key, rect, title, subtitle
        self.pass_, self.is_group = pass_, is_group
        width = rect.width() - 12
        self.title_text = _elided(True, title, width)
        self.subtitle_text = _elided(False, subtitle, width)
        fill, border = PASS_COLORS.get(pass_, PASS_COLORS[None])
        self.fill, self.border = QColor(fill), QColor(border)
        self.heat: QColor | None = None
        self.marks: set[str] = set()
        self.setPos(rect.topLeft())
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIsSelectable)
        self.setZValue(10)

    def boundingRect(self) -> QRectF:
        return QRectF(-3, -3, self.rect.width() + 6, self.rect.height() + 6)

    def set_marks(self, marks: set[str]) -> None:
        if marks != self.marks:
            self.marks = marks
            self.update()

    def set_heat(self, color: QColor | None) -> None:
        if color != self.heat:
            self.heat = color
            self.update()

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        st = Style.get()
        lod = option.levelOfDetailFromTransform(painter.worldTransform())
        r = QRectF(0, 0, self.rect.width(), self.rect.height())
        fill = self.heat if self.heat is not None else self.fill
        mark = next((m for m in MARK_ORDER if m in self.marks), None)
        if lod < LOD_TEXT:
            painter.fillRect(r, QColor(MARK_COLORS[mark]) if mark else fill)
            if self.isSelected():                     # 3 screen pixels, drawn inside the box: a pen
                w = min(3.0 / max(lod, 0.05), r.height() / 2, r.width() / 2)   # centred on the edge
                painter.setPen(QPen(QColor("#111111"), w))                     # painted outside the
                painter.setBrush(Qt.BrushStyle.NoBrush)                        # bounding rect: debris
                painter.drawRect(r.adjusted(w / 2, w / 2, -w / 2, -w / 2))
            return
        width = 3.0 if mark or self.isSelected() else 1.0
        color = QColor(MARK_COLORS[mark]) if mark else QColor("#111111") if self.isSelected() else self.border
        pen = QPen(color, width)
        if self.is_group:
            pen.setStyle(Qt.PenStyle.DashLine if not mark else Qt.PenStyle.SolidLine)
        painter.setPen(pen)
        painter.setBrush(QBrush(fill))
        painter.drawRoundedRect(r, 6, 6)
        painter.setPen(st.light_text if fill.lightnessF() < 0.45 else st.text)   # readable on dark heat
        painter.setFont(st.title)
        inner = r.adjusted(6, 2, -6, -2)
        top = QRectF(inner.x(), inner.y(), inner.width(), inner.height() / 2)
        bottom = QRectF(inner.x(), inner.y() + inner.height() / 2, inner.width(), inner.height() / 2)
        painter.drawText(top, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, self.title_text)
        painter.setFont(st.small)
        painter.drawText(bottom, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, self.subtitle_text)


class QtFrameItem(QGraphicsItem):
    """An open group: a light frame with a title bar (double-click the title to collapse)."""

    def __init__(self, key: str, rect: QRectF, title: str, depth: int, title_h: float) -> None:
        super().__init__()
        self.key, self.rect, self.title, self.title_h, self.depth = key, rect, title, title_h, depth
        self.marks: set[str] = set()
        shade = max(214, 248 - 7 * depth)
        self.fill = QColor(shade, shade, min(255, shade + 5))
        self.setPos(rect.topLeft())
        self.setZValue(-100 + depth)

    def boundingRect(self) -> QRectF:
        return QRectF(-2, -2, self.rect.width() + 4, self.rect.height() + 4)

    def set_marks(self, marks: set[str]) -> None:
        if marks != self.marks:
            self.marks = marks
            self.update()

    def in_title(self, scene_pos: QPointF) -> bool:
        return self.mapFromScene(scene_pos).y() <= self.title_h

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        st = Style.get()
        lod = option.levelOfDetailFromTransform(painter.worldTransform())
        r = QRectF(0, 0, self.rect.width(), self.rect.height())
        mark = next((m for m in MARK_ORDER if m in self.marks), None)
        painter.setPen(QPen(QColor(MARK_COLORS[mark]) if mark else QColor("#9aa3ad"), 2.0 if mark else 1.0))
        painter.setBrush(self.fill)
        painter.drawRect(r)                           # square and opaque: big rounded translucent rects are slow
        if lod >= LOD_TEXT:
            painter.setPen(st.text)
            painter.setFont(st.frame_font)
            painter.drawText(QRectF(8, 0, r.width() - 16, self.title_h),
                             Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, "▾ " + self.title)


LOD_EDGE_LABEL = 0.8            # from this zoom on, edges carry a label (shape, dtype, bytes)
LABEL_W, LABEL_H = 240.0, 14.0  # the label's box around a point of the edge (scene units)
LABEL_SPOTS = (0.5, 0.35, 0.65, 0.2, 0.8)   # where along the edge a label may sit, first choice first


class QtEdgeItem(QGraphicsPathItem):
    """An aggregated edge of ``group``: a cubic spline with an arrowhead; the view's tooltip lists its
    containers (made when asked: thousands of eager tooltips cost tens of milliseconds). Zoomed in
    (``LOD_EDGE_LABEL``) it is labelled with what it carries (the scene's ``edge_label``, made
    when first painted) in ``label_box``, one of the boxes ``label_spots`` offers along the edge,
    chosen by the scene so that no two labels overlap (None: no room, no label; the tooltip still
    tells). The bounding rect always includes the label's box, so nothing is ever painted outside it."""

    def __init__(self, src: str, dst: str, group: str, points, weight: int) -> None:
        super().__init__()
        self.src, self.dst, self.group, self.points, self.weight = src, dst, group, points, weight
        pts = [QPointF(x, y) for x, y in points]
        path = QPainterPath(pts[0])
        for k in range(1, len(pts) - 2, 3):
            path.cubicTo(pts[k], pts[k + 1], pts[k + 2])
        self._shape: QPainterPath | None = None
        self._bounds: QRectF | None = None
        self.setPath(path)
        self.label_spots = [QRectF(p.x() - LABEL_W / 2, p.y() - LABEL_H / 2, LABEL_W, LABEL_H)
                            for p in map(path.pointAtPercent, LABEL_SPOTS)]
        self._path_bounds = super().boundingRect().adjusted(-4, -4, 4, 4)
        self.label_box: QRectF | None = None
        self.place_label(self.label_spots[0])
        self.first, self.last = pts[0], pts[-1]
        self.before_last = next((p for p in reversed(pts) if p != self.last), pts[0])
        self.hovered = False
        self.width = min(4.0, 1.0 + 0.4 * (weight - 1))
        self.setAcceptHoverEvents(True)
        self.setZValue(0)

    def boundingRect(self) -> QRectF:
        return self._bounds if self._bounds is not None else super().boundingRect()

    def place_label(self, box: QRectF | None) -> None:
        """Put the label in ``box`` (one of ``label_spots``), or show none."""
        if box == self.label_box and self._bounds is not None:
            return
        self.prepareGeometryChange()
        self.label_box = box
        self._bounds = self._path_bounds.united(box) if box is not None else QRectF(self._path_bounds)

    def shape(self) -> QPainterPath:
        if self._shape is None:                      # for hover hit tests only: made on first use
            stroker = QPainterPathStroker()
            stroker.setWidth(8)
            self._shape = stroker.createStroke(self.path())
        return self._shape

    def hoverEnterEvent(self, event) -> None:
        self.hovered = True
        self.update()

    def hoverLeaveEvent(self, event) -> None:
        self.hovered = False
        self.update()

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        st = Style.get()
        lod = option.levelOfDetailFromTransform(painter.worldTransform())
        pen = QPen(st.edge_hover if self.hovered else st.edge)
        if not self.hovered:
            pen.setWidthF(self.width)
        painter.setPen(pen)
        painter.setBrush(Qt.BrushStyle.NoBrush)
        if lod < LOD_SIMPLE:
            painter.drawLine(self.first, self.last)
            return
        painter.drawPath(self.path())
        d = self.last - self.before_last
        n = (d.x() ** 2 + d.y() ** 2) ** 0.5 or 1.0
        ux, uy = d.x() / n, d.y() / n
        a = self.last
        head = QPolygonF([a, QPointF(a.x() - 7 * ux + 3.5 * uy, a.y() - 7 * uy - 3.5 * ux),
                          QPointF(a.x() - 7 * ux - 3.5 * uy, a.y() - 7 * uy + 3.5 * ux)])
        painter.setBrush(pen.color())
        painter.drawPolygon(head)
        if lod >= LOD_EDGE_LABEL and self.label_box is not None and (scene := self.scene()) is not None \
                and hasattr(scene, "edge_label"):
            text = scene.edge_label(self)
            if text:
                width = min(LABEL_W, st.small_metrics.horizontalAdvance(text) + 8)
                box = QRectF(self.label_box.center().x() - width / 2, self.label_box.y(), width, LABEL_H)
                painter.setPen(Qt.PenStyle.NoPen)
                painter.setBrush(QColor(255, 255, 255, 215))
                painter.drawRoundedRect(box, 3, 3)
                painter.setPen(st.text)
                painter.setFont(st.small)
                painter.drawText(box, Qt.AlignmentFlag.AlignCenter,
                                 st.small_metrics.elidedText(text, Qt.TextElideMode.ElideMiddle, LABEL_W - 8))
