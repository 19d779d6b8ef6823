"""The roofline plot of the Timings dock (QPainter; the geometry lives in ``roofline.py``).

Log-log: arithmetic intensity (FLOP/B) against achieved FLOP/s. The bandwidth roof
(the calibrated triad) rises to the ridge point and meets the compute roof (the
calibrated GEMM). Above it, dashed, the cache roof (the triad resident in L2): kernels whose
data stays in the caches (AdamW's per-parameter updates) plot between the two. Each measured kernel is a dot; kernels without counted FLOPs sit
hollow on the floor. Selected kernels are drawn larger in red and named. Hovering a
dot shows a tooltip naming the kernel and its figures; clicking it emits
``pointClicked(node_id)``. A stale profile is drawn grey with a note.
"""
from __future__ import annotations

import math

from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QToolTip, QWidget

from studio.gui import roofline as rf
from studio.gui.timings import human_rate, human_seconds

MARGIN = (74, 24, 14, 34)      # left, top, right, bottom
BLUE, RED, GREY, ROOF = QColor("#1f77b4"), QColor("#d62728"), QColor("#9a9a9a"), QColor("#2ca02c")
CACHE_ROOF = QColor("#8c6d1f")


class QtRooflinePlot(QWidget):
    """See the module docstring."""

    pointClicked = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.points: list[rf.Point] = []
        self.by_id: dict = {}
        self.peak_bw = self.peak_flops = self.cache_bw = 0.0
        self.highlight: set[str] = set()
        self.note = ""
        self.setMouseTracking(True)
        self.setMinimumSize(260, 180)

    def set_data(self, kernels, peak_bw: float, peak_flops: float, note: str = "", cache_bw: float = 0.0) -> None:
        self.points = rf.points(kernels)
        self.by_id = {k.node_id: k for k in kernels}
        self.peak_bw, self.peak_flops, self.note, self.cache_bw = peak_bw, peak_flops, note, cache_bw
        self.update()

    def set_note(self, note: str) -> None:
        self.note = note
        self.update()

    def set_highlight(self, ids) -> None:
        self.highlight = set(ids)
        self.update()

    # --- geometry -------------------------------------------------------------------------
    def plot_rect(self) -> rf.Rect:
        left, top, right, bottom = MARGIN
        return rf.Rect(left, top, max(10, self.width() - left - right), max(10, self.height() - top - bottom))

    def axes(self) -> rf.Axes:
        return rf.axes(self.points, self.peak_bw, self.peak_flops)

    def placed(self) -> list[tuple[float, float]]:
        ax, rect = self.axes(), self.plot_rect()
        return [rf.place(ax, rect, p.intensity, p.flops_s) for p in self.points]

    # --- painting ---------------------------------------------------------------------------
    def paintEvent(self, event) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.fillRect(self.rect(), QColor("#ffffff"))
        p.setFont(QFont("DejaVu Sans", 7))
        r = self.plot_rect()
        area = QRectF(r.left, r.top, r.width, r.height)
        if not self.points:
            p.setPen(QColor("#444444"))
            p.drawText(area, Qt.AlignmentFlag.AlignCenter, self.note or "no profile yet")
            return
        ax = self.axes()
        self._grid(p, ax, r)
        self._roofs(p, ax, r)
        self._dots(p, ax, r)
        if self.note:
            p.setPen(QColor("#b35900"))
            p.drawText(QRectF(r.left, r.top - 18, r.width, 14), Qt.AlignmentFlag.AlignLeft, self.note)

    def _grid(self, p: QPainter, ax: rf.Axes, r: rf.Rect) -> None:
        for x in rf.decades(ax.x_lo, ax.x_hi):
            px, _ = rf.place(ax, r, x, ax.y_lo)
            p.setPen(QPen(QColor("#eeeeee"), 1))
            p.drawLine(QPointF(px, r.top), QPointF(px, r.top + r.height))
            p.setPen(QColor("#444444"))
            p.drawText(QRectF(px - 30, r.top + r.height + 2, 60, 12), Qt.AlignmentFlag.AlignHCenter, f"{x:g}")
        for y in rf.decades(ax.y_lo, ax.y_hi):
            _, py = rf.place(ax, r, ax.x_lo, y)
            p.setPen(QPen(QColor("#eeeeee"), 1))
            p.drawLine(QPointF(r.left, py), QPointF(r.left + r.width, py))
            p.setPen(QColor("#444444"))
            p.drawText(QRectF(0, py - 7, r.left - 4, 14), Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                       human_rate(y, "FLOP/s"))
        p.setPen(QPen(QColor("#bbbbbb"), 1))
        p.drawRect(QRectF(r.left, r.top, r.width, r.height))
        p.setPen(QColor("#444444"))
        p.drawText(QRectF(r.left, r.top + r.height + 16, r.width, 14), Qt.AlignmentFlag.AlignHCenter,
                   "arithmetic intensity (FLOP / byte)")

    def _roofs(self, p: QPainter, ax: rf.Axes, r: rf.Rect) -> None:
        pts = [rf.place(ax, r, x, y) for x, y in rf.roof(ax, self.peak_bw, self.peak_flops)]
        if not pts:
            return
        if self.cache_bw > self.peak_bw:
            self._slope(p, [rf.place(ax, r, x, y) for x, y in rf.roof(ax, self.cache_bw, self.peak_flops)],
                        QPen(GREY if self.note else CACHE_ROOF, 1.5, Qt.PenStyle.DashLine),
                        f"L2 triad {human_rate(self.cache_bw, 'B/s')} (cache roof)")
        self._slope(p, pts, QPen(GREY if self.note else ROOF, 2), f"triad {human_rate(self.peak_bw, 'B/s')}")
        knee = rf.ridge(self.peak_bw, self.peak_flops)
        if ax.x_lo <= knee <= ax.x_hi:
            kx, ky = rf.place(ax, r, knee, self.peak_flops)
            p.setPen(QPen(QColor("#999999"), 1, Qt.PenStyle.DashLine))
            p.drawLine(QPointF(kx, ky), QPointF(kx, r.top + r.height))
        p.setPen(QColor("#2b6e2b"))                 # the compute roof's caption, above the plot
        p.drawText(QRectF(r.left, r.top - 18, r.width, 14), Qt.AlignmentFlag.AlignRight,
                   f"roofs: GEMM {human_rate(self.peak_flops, 'FLOP/s')} · ridge {knee:.3g} FLOP/B")

    @staticmethod
    def _slope(p: QPainter, pts: list[tuple[float, float]], pen: QPen, label: str) -> None:
        """A roof polyline in pixels, its label along the bandwidth slope."""
        if not pts:
            return
        path = QPainterPath(QPointF(*pts[0]))
        for q in pts[1:]:
            path.lineTo(QPointF(*q))
        p.setPen(pen)
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.drawPath(path)
        (x0, y0), (x1, y1) = pts[0], pts[1] if len(pts) > 1 else (pts[0][0] + 1, pts[0][1])
        p.save()
        p.setPen(pen.color())
        p.translate(x0 + 8, y0 - 4)
        p.rotate(math.degrees(math.atan2(y1 - y0, x1 - x0)))
        p.drawText(QPointF(0, -3), label)
        p.restore()

    def _dots(self, p: QPainter, ax: rf.Axes, r: rf.Rect) -> None:
        base = GREY if self.note else BLUE
        chosen = []
        for pt, (x, y) in zip(self.points, (rf.place(ax, r, q.intensity, q.flops_s) for q in self.points)):
            if pt.node_id in self.highlight:
                chosen.append((pt, x, y))
                continue
            p.setPen(QPen(base, 1))
            p.setBrush(Qt.BrushStyle.NoBrush if pt.clamped else base)
            p.drawEllipse(QPointF(x, y), 3, 3)
        metrics = p.fontMetrics()
        for pt, x, y in chosen:                     # selected kernels on top, named (inside the plot)
            p.setPen(QPen(QColor("#000000"), 1))
            p.setBrush(RED)
            p.drawEllipse(QPointF(x, y), 5, 5)
            name = metrics.elidedText(pt.node_id, Qt.TextElideMode.ElideLeft, 180)
            width = metrics.horizontalAdvance(name)
            tx = x + 8 if x + 8 + width <= r.left + r.width else x - 8 - width
            ty = y - 6 if y - 6 > r.top + 10 else y + 16         # below the dot when at the top
            p.setPen(RED)
            p.drawText(QPointF(tx, ty), name)

    # --- interaction ------------------------------------------------------------------------
    def point_at(self, x: float, y: float) -> rf.Point | None:
        k = rf.nearest(self.placed(), x, y)
        return self.points[k] if k is not None else None

    def tooltip_for(self, pt: rf.Point) -> str:
        k = self.by_id.get(pt.node_id)
        text = f"{pt.node_id} ({pt.label})"
        if k is not None and k.ok:
            text += (f"\nmedian {human_seconds(k.samples.median_s)} · {k.gbps:.3g} GB/s · "
                     f"{k.gflops:.3g} GFLOP/s\nintensity {pt.intensity:.3g} FLOP/B · "
                     f"roofline efficiency {100 * k.efficiency:.1f} %")
        if pt.clamped:
            text += "\nno FLOPs counted: drawn on the floor"
        return text

    def mouseMoveEvent(self, event) -> None:
        pos = event.position()
        pt = self.point_at(pos.x(), pos.y())
        if pt is None:
            QToolTip.hideText()
        else:
            QToolTip.showText(event.globalPosition().toPoint(), self.tooltip_for(pt), self)

    def mousePressEvent(self, event) -> None:
        pos = event.position()
        pt = self.point_at(pos.x(), pos.y())
        if pt is not None:
            self.pointClicked.emit(pt.node_id)
