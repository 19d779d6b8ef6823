"""The central graph view: the scope tree, collapsed and expanded, laid out per group.

``set_graph(graph, ledger)`` brings the scope tree up to date (keeping which groups are
open): from the cache when the graph was shown before (undo, redo), else updated from
the current tree for the kernels that differ (``graph_diff``), and redraws at once
from cached, patched or quick layered layouts; only boxes whose kernels or groups
changed get new text (the others keep theirs, and move if their place changed); when a layout is
missing, ``dot`` runs in a subprocess on a pool thread (``QtTask``) and the scene is
redrawn when it answers. A layout that times out or crashes leaves the quick layout
in place and emits ``layoutMessage``. Double-click a collapsed group to open it, an
open group's title to close it; the wheel zooms. Zoomed out below ``overview.LOD_TEXT``
the view draws a summary plate on each group big enough to hold one (``plates``: name,
kernels, bytes moved, share, measured time), so Fit is readable at any size;
``zoom_to`` frames kernels at a readable zoom (the selection, a Find hit). The view never edits the graph: it
reports the selection (``selectionChangedIds``, kernel ids; a group stands for its
kernels) and shows marks (hover, search, preview), the heatmap and the legend.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Iterable

from PySide6.QtCore import QEvent, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QGraphicsView, QToolTip, QWidget

from ir.graph import Graph
from ir.movement import Ledger
from studio.gui import graph_diff, layout as lay
from studio.gui.describe import edge_tooltip, kernel_tooltip
from studio.gui.heatmap import box_values, color, grey, normalize, number_label
from studio.gui.overview import LOD_TEXT, Level, place_plates, plate_levels, plate_text, readable_zoom
from studio.gui.placement import Placement, place
from studio.gui.qt_graph_items import QtBoxItem, QtEdgeItem, QtFrameItem, Style
from studio.gui.qt_overlays import QtLegend
from studio.gui.qt_scene import QtGraphScene
from studio.gui.qt_workers import QtTask
from studio.gui.scope_tree import ROOT, ScopeTree
from studio.gui.timings import human_seconds

MIN_FIT_SCALE = 0.6                   # a fit below this and below every plate's zoom starts at the top-left
READ_ZOOM = 1.0                       # zoom_to never zooms in further than this (kernel labels read well)
FIT_MARGIN = 8.0                      # scene units around the content when fitting


class QtGraphView(QGraphicsView):
    """See the module docstring."""

    selectionChangedIds = Signal(list)
    currentChanged = Signal(str)
    layoutMessage = Signal(str)
    layoutSettled = Signal()
    sceneUpdated = Signal()                         # items, marks or heat changed (for the minimap)
    groupToggled = Signal(str, bool)                # a group was opened (True) or closed by the user
    zoomed = Signal(float)                          # the wheel zoomed by this factor
    hoveredKernel = Signal(str)                     # the kernel under the mouse ("" when none)
    taskStarted = Signal(object)

    def __init__(self, parent: QWidget | None = None, layout_timeout_s: float = 20.0) -> None:
        super().__init__(parent)
        self.setScene(QtGraphScene(self))
        self.setRenderHints(QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing)
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.SmartViewportUpdate)
        self.setOptimizationFlag(QGraphicsView.OptimizationFlag.DontSavePainterState)
        self.setBackgroundBrush(QColor("#ffffff"))
        self.viewport().setMouseTracking(True)      # hover without a button pressed (hoveredKernel)
        self.layout_timeout_s = layout_timeout_s
        self.tree_options: dict = {}                # ScopeTree options (max_children, chunk, stack)
        self._trees: OrderedDict = OrderedDict()
        self._tree_options: tuple = ()
        self.book = lay.LayoutBook()
        self.graph: Graph | None = None
        self.ledger: Ledger | None = None
        self.tree: ScopeTree | None = None
        self.expanded: set[str] = set()
        self.placement: Placement | None = None
        self.marks: dict[str, set[str]] = {}
        self.heat_scale: str | None = None
        self.heat_metric = "bytes"                  # or "time": the last profile's medians (µs per kernel)
        self.heat_times: dict[str, float] = {}
        self.heat_note = "no profile yet"           # "N of M kernels measured", stale note
        self.heat_stale = False
        self.overlay_values: dict[str, float] = {}  # heat metric "overlay": loaded node data (studio.session.overlay)
        self.overlay_name = ""
        self.task: QtTask | None = None
        self._stale = None                          # boxes whose text may be out of date (None: all)
        self._wanted: list[str] | None = None       # kernels to select once drawn (set_graph's select)
        self._drawing = False
        self._fit_next = True
        self._center_on: str | None = None
        self._zoom_on = False                       # zoom in on _center_on once it is drawn
        self.levels: dict[str, Level] = {}         # summary plates per group (overview)
        self._plate_text: dict[str, tuple[str, str]] = {}
        self._hovered = ""
        self._legend_right = False
        self.origins_of = None     # a weakref.WeakMethod: kernel id -> the original kernels it was made from
        self.legend = QtLegend(self.viewport())
        self.scene().selectionChanged.connect(self._on_selection)

    # --- content ----------------------------------------------------------------------
    def set_graph(self, graph: Graph, ledger: Ledger, *, keep_expanded: bool = True,
                  select: list[str] | None = None) -> None:
        """Show ``graph`` (figures from ``ledger``); keep open groups that still exist; ``select``: the kernels
        to select once drawn (the selection followed through an edit), kept through background layouts."""
        self._wanted = None if select is None else list(select)
        fresh = self.tree is None or not keep_expanded
        old_tree, touched = self.tree, None
        if not fresh and self.graph is not None:
            change = graph_diff.changes(self.graph, graph)
            touched = change.touched | graph_diff.refigured(self.ledger, ledger, graph.nodes)
        tree = self._tree_for(graph, touched)
        self.graph, self.ledger, self.tree = graph, ledger, tree
        self.expanded = tree.initial_expansion() if fresh else {k for k in self.expanded if k in tree.groups}
        self._stale = None if touched is None else _stale_keys(old_tree, tree, touched)
        self._fit_next = self._fit_next or fresh
        self.relayout()

    def set_stacking(self, on: bool) -> None:
        """View → Stack layers: a training step's kernels by layer (each with its forward, grad and update),
        the root a grid (the default); off, by their names alone (forward, grad and update side by side)."""
        if on:
            self.tree_options.pop("stack", None)
        else:
            self.tree_options["stack"] = False
        if self.graph is not None:
            self.set_graph(self.graph, self.ledger, keep_expanded=False)

    def cached_tree(self, graph: Graph) -> ScopeTree | None:
        """``graph``'s scope tree with the current options, if this view has built it (undo keeps 32)."""
        hit = self._trees.get((id(graph), tuple(sorted(self.tree_options.items()))))
        return hit[1] if hit is not None and hit[0] is graph else None

    def seed_tree(self, graph: Graph, tree: ScopeTree) -> None:
        """Take ``graph``'s scope tree built elsewhere (a loading worker) with the current options."""
        self._trees[(id(graph), tuple(sorted(self.tree_options.items())))] = (graph, tree)

    def _tree_for(self, graph: Graph, touched: set[str] | None = None) -> ScopeTree:
        """The scope tree of ``graph`` (cached per graph object: undo and redo return to old graphs);
        updated from the current tree when only ``touched`` kernels differ from its graph."""
        options = tuple(sorted(self.tree_options.items()))
        key = (id(graph), options)
        hit = self._trees.get(key)
        if hit is not None and hit[0] is graph:
            self._trees.move_to_end(key)
            return hit[1]
        if touched is not None and self.tree is not None and self._tree_options == options:
            tree = self.tree.updated(graph, touched)
        else:
            tree = ScopeTree(graph, **self.tree_options)
        self._tree_options = options
        self._trees[key] = (graph, tree)
        while len(self._trees) > 32:
            self._trees.popitem(last=False)
        return tree

    def relayout(self) -> None:
        """Draw now from the layouts at hand; lay out what is missing in the background."""
        shapes = lay.shapes(self.tree, self.expanded)
        port = self.viewport()
        if port.width() > 100 and port.height() > 100:    # a stacked tree's grid takes the view's shape
            self.book.grid_aspect = port.width() / port.height()
        layouts, missing = self.book.resolve(shapes)
        self._draw(place(shapes, layouts, not missing))
        if missing:
            self._start_layout(shapes)
        else:
            self.layoutSettled.emit()

    def _start_layout(self, shapes) -> None:
        if self.task is not None:
            self.task.cancel()
        request, ids = self.book.request(shapes)
        timeout = self.layout_timeout_s
        n = sum(len(g["items"]) for g in request["groups"])
        task = QtTask(f"Laying out {len(request['groups'])} groups ({n} boxes)",
                      lambda token, progress: lay.run_layout(request, timeout, token), (request, ids))
        task.succeeded.connect(self._layout_done)
        task.failed.connect(self._layout_failed)
        self.task = task
        self.taskStarted.emit(task)
        task.start()

    def _layout_done(self, reply: dict) -> None:
        task = self.sender()
        self.book.store(reply, task.context[1])
        if task is self.task:
            self.task = None
            self.relayout()

    def _layout_failed(self, message: str) -> None:
        task = self.sender()
        self.book.store_layered(*task.context)
        if task is self.task:
            self.task = None
            self.layoutMessage.emit(message)
            self.relayout()

    # --- drawing ----------------------------------------------------------------------
    @property
    def boxes(self) -> dict[str, QtBoxItem]:
        return self.scene().boxes

    @property
    def frames(self) -> dict[str, QtFrameItem]:
        return self.scene().frames

    def _draw(self, placement: Placement) -> None:
        self._drawing = True
        try:
            self.scene().sync(placement, self.tree, self.graph, self.ledger, self._stale)
        finally:
            self._drawing = False
        self._stale = set()                         # drawn: later redraws (layouts, expanding) keep the text
        if self._wanted is not None:                # the followed selection, on the boxes drawn so far
            wanted = self._wanted
            self._wanted = None if placement.exact else wanted
            self.select(wanted)
        self.sceneUpdated.emit()
        self.placement = placement
        self.levels, self._plate_text = plate_levels(placement, self.tree), {}
        self._apply_marks()
        self._apply_heat()
        if self._fit_next and self._sized():
            self._fit_next = False
            self.fit(readable=True)
        if self._center_on and (item := self.boxes.get(self.tree.visible(self._center_on, self.expanded))):
            if self._zoom_on:
                self.zoom_to_rect(item.sceneBoundingRect())
            else:
                self.centerOn(item.sceneBoundingRect().center())
            if placement.exact:
                self._center_on, self._zoom_on = None, False
        if self.transform().m11() < LOD_TEXT:
            self.viewport().update()                # the plates follow the new placement

    def fit(self, readable: bool = False) -> None:
        """Fit the graph in the view (the groups' plates name what is where). ``readable``: when
        even the largest group is too small for its plate at that zoom, zoom to where the first
        plates show (at most ``MIN_FIT_SCALE``), top first."""
        if self.placement is None:
            return
        m = FIT_MARGIN                              # the content, not the scene's scrolling margin
        rect = QRectF(-m, -m, self.placement.width + 2 * m, self.placement.height + 2 * m)
        self.fitInView(rect, Qt.AspectRatioMode.KeepAspectRatio)
        zoom, first = readable_zoom(self.levels)
        wanted = min(zoom, MIN_FIT_SCALE)
        if readable and self.transform().m11() < wanted:
            self.resetTransform()
            self.scale(wanted, wanted)
            half_h = self.viewport().height() / (2 * wanted)
            if first is not None and first.own <= wanted:      # the group whose plate shows first, its top
                self.centerOn(first.x + first.w / 2, first.y - 20 + half_h)
            else:
                half_w = self.viewport().width() / (2 * wanted)
                self.centerOn(min(rect.center().x(), rect.left() + half_w), rect.top() + half_h)

    def zoom_to_rect(self, rect: QRectF) -> None:
        """Show scene ``rect`` whole, zoomed in to at most ``READ_ZOOM`` (never out of a closer zoom
        that already shows it)."""
        seen = self.mapToScene(self.viewport().rect()).boundingRect()
        if seen.contains(rect) and self.transform().m11() >= LOD_TEXT:
            self.centerOn(rect.center())
            return
        self.fitInView(rect.adjusted(-40, -40, 40, 40), Qt.AspectRatioMode.KeepAspectRatio)
        if self.transform().m11() > READ_ZOOM:
            self.resetTransform()
            self.scale(READ_ZOOM, READ_ZOOM)
        self.centerOn(rect.center())
        self.zoomed.emit(1.0)

    def zoom_to(self, ids: Iterable[str]) -> bool:
        """Frame the boxes showing kernels ``ids`` (the selection when empty); False when none is shown."""
        keys = {self.tree.visible(i, self.expanded) for i in ids if i in self.tree.parent} if ids else \
            set(self.selected_keys())
        rects = [self.boxes[k].sceneBoundingRect() for k in keys if k in self.boxes]
        if not rects:
            return False
        rect = rects[0]
        for r in rects[1:]:
            rect = rect.united(r)
        self.zoom_to_rect(rect)
        return True

    def zoom_to_selection(self) -> None:
        self.zoom_to(())

    # --- overview plates ------------------------------------------------------------------
    def plates(self, zoom: float | None = None) -> list[tuple[str, QRectF, str, str]]:
        """(group, viewport rectangle of its plate, name, summary line) of every plate shown at
        ``zoom`` (the current one) over the visible part of the scene (``overview.place_plates``)."""
        if self.tree is None or self.ledger is None:
            return []
        zoom = self.transform().m11() if zoom is None else zoom
        if zoom >= LOD_TEXT:                        # every paint asks: no plate shows this close in
            return []
        seen = self.viewport().rect()
        f = Style.get()
        groups, widths = [], {}
        for lv in self.levels.values():
            if not lv.shows(zoom):
                continue
            area = self.mapFromScene(QRectF(lv.x, lv.y, lv.w, lv.h)).boundingRect()
            if not area.intersects(seen):
                continue
            text = self._plate_text.get(lv.key)
            if text is None:
                text = self._plate_text[lv.key] = plate_text(self.tree, self.ledger, lv.key, self.heat_times)
            widths[lv.key] = max(f.plate_title_metrics.horizontalAdvance(text[0]),
                                 f.plate_line_metrics.horizontalAdvance(text[1])) + 14
            groups.append((lv.key, lv.depth, (area.x(), area.y(), area.width(), area.height())))
        placed = place_plates(groups, widths)
        return [(k, QRectF(*r), *self._plate_text[k]) for k, r in placed.items()]

    def drawForeground(self, painter: QPainter, rect: QRectF) -> None:
        super().drawForeground(painter, rect)
        plates = self.plates()
        if not plates:
            return
        f = Style.get()
        painter.save()
        painter.resetTransform()                    # viewport pixels: the plates keep their size
        for _key, plate, name, line in plates:
            painter.setPen(f.plate_border)
            painter.setBrush(f.plate_fill)
            painter.drawRoundedRect(plate, 4, 4)
            inner = plate.adjusted(7, 2, -7, -2)
            painter.setPen(f.text)
            painter.setFont(f.plate_title)
            painter.drawText(QRectF(inner.x(), inner.y(), inner.width(), 16), Qt.AlignmentFlag.AlignVCenter,
                             f.plate_title_metrics.elidedText(name, Qt.TextElideMode.ElideMiddle, inner.width()))
            painter.setFont(f.plate_line)
            painter.drawText(QRectF(inner.x(), inner.y() + 15, inner.width(), 15), Qt.AlignmentFlag.AlignVCenter,
                             f.plate_line_metrics.elidedText(line, Qt.TextElideMode.ElideRight, inner.width()))
        painter.restore()

    # --- groups -------------------------------------------------------------------------
    def expand(self, key: str) -> None:
        self.expanded |= {g for g in self.tree.chain.get(key, ()) if g != ROOT} | {key}
        self.relayout()

    def collapse(self, key: str) -> None:
        self.expanded.discard(key)
        self.relayout()

    def reveal(self, ident: str, zoom: bool = False) -> None:
        """Open the groups around kernel ``ident`` and centre on it; ``zoom``: and zoom in until
        its label reads (``zoom_to_rect``)."""
        self._center_on, self._zoom_on = ident, zoom
        wanted = {g for g in self.tree.chain.get(ident, ()) if g != ROOT}
        if wanted - self.expanded:
            self.expanded |= wanted
            self.relayout()
        elif (item := self.boxes.get(ident)) is not None:
            if zoom:
                self.zoom_to_rect(item.sceneBoundingRect())
            else:
                self.centerOn(item.sceneBoundingRect().center())

    # --- marks, heat, selection ------------------------------------------------------------
    def set_marks(self, kind: str, ids: Iterable[str]) -> None:
        """Mark kernels (``hover``, ``search``, ``current``, ``removed``, ``changed``, ``added``)."""
        self.marks[kind] = set(ids)
        self._apply_marks()

    def clear_marks(self, *kinds: str) -> None:
        for k in kinds or list(self.marks):
            self.marks.pop(k, None)
        self._apply_marks()

    def _apply_marks(self) -> None:
        per_item: dict[str, set[str]] = {}
        for kind, ids in self.marks.items():
            for ident in ids:
                if self.tree is not None and ident in self.tree.parent:
                    per_item.setdefault(self.tree.visible(ident, self.expanded), set()).add(kind)
        for key, item in self.boxes.items():
            item.set_marks(per_item.get(key, set()))
        self.sceneUpdated.emit()

    def set_heatmap(self, scale: str | None) -> None:
        """Colour boxes by the heat metric (``linear``/``log``/``rank``), or by pass (None)."""
        self.heat_scale = scale
        self._apply_heat()

    def set_heat_metric(self, metric: str) -> None:
        """``bytes`` (bytes moved) or ``time`` (measured time, from ``set_heat_times``)."""
        self.heat_metric = metric
        self._apply_heat()

    def set_heat_times(self, times_us: dict[str, float], note: str, stale: bool = False) -> None:
        """The last profile's median per kernel (µs); ``note`` goes in the legend; stale is drawn grey."""
        self.heat_times, self.heat_note, self.heat_stale = dict(times_us), note, stale
        self._plate_text = {}                       # the plates show the measured time too
        if self.transform().m11() < LOD_TEXT:
            self.viewport().update()
        if self.heat_metric == "time":
            self._apply_heat()

    def _apply_heat(self) -> None:
        if not self.heat_scale or self.tree is None:
            for item in self.boxes.values():
                item.set_heat(None)
            self.legend.hide()
            return
        if self.heat_metric == "time":
            self._apply_time_heat()
            return
        if self.heat_metric == "overlay":
            self._apply_overlay_heat()
            return
        kernels = self.ledger.kernels
        values = {k: float(sum(kernels[i].bytes for i in self.tree.members(k) if i in kernels)) for k in self.boxes}
        for key, t in normalize(values, self.heat_scale).items():
            self.boxes[key].set_heat(QColor(*color(t)))
        counted = sum(1 for i in self.graph.nodes if i in kernels)
        self.legend.set_values(values, self.heat_scale, f"bytes moved per box · {self.heat_scale} scale · "
                                                        f"{counted} of {len(self.graph.nodes)} kernels counted")
        self.sceneUpdated.emit()
        self._place_legend()

    def _apply_time_heat(self) -> None:
        values = box_values(self.boxes, self.tree.members, self.heat_times)
        shade = grey if self.heat_stale else tuple
        heat = {key: QColor(*shade(color(t))) for key, t in normalize(values, self.heat_scale).items()}
        for key, item in self.boxes.items():
            item.set_heat(heat.get(key, QColor("#ededed")))       # not measured: plain light grey
        self.legend.set_values(values, self.heat_scale, f"measured time per box · {self.heat_scale} scale · "
                                                        f"{self.heat_note}", _human_us, show_empty=True)
        self._place_legend()

    def _apply_overlay_heat(self) -> None:
        values = box_values(self.boxes, self.tree.members, self.overlay_values)
        heat = {key: QColor(*color(t)) for key, t in normalize(values, self.heat_scale).items()}
        for key, item in self.boxes.items():
            item.set_heat(heat.get(key, QColor("#ededed")))       # no value for it: plain light grey
        covered = sum(1 for i in self.graph.nodes if i in self.overlay_values)
        self.legend.set_values(values, self.heat_scale, f"{self.overlay_name} per box · {self.heat_scale} scale · "
                                                        f"{covered} of {len(self.graph.nodes)} kernels have a value",
                               number_label, show_empty=True)
        self._place_legend()

    def set_overlay(self, values: dict[str, float], name: str) -> None:
        """Node data loaded from a file (``studio.session.overlay``), shown with the heat metric ``overlay``."""
        self.overlay_values, self.overlay_name = dict(values), name
        if self.heat_metric == "overlay":
            self._apply_heat()

    def _place_legend(self) -> None:
        """Bottom left, or bottom right after the pointer came near it (it never covers what the
        user points at)."""
        x = self.viewport().width() - self.legend.width() - 10 if self._legend_right else 10
        self.legend.move(max(0, x), self.viewport().height() - self.legend.height() - 10)

    def select(self, ids: Iterable[str]) -> None:
        """Select the boxes showing kernels ``ids``."""
        keys = {self.tree.visible(i, self.expanded) for i in ids if i in self.tree.parent}
        self._drawing = True
        try:
            self.scene().clearSelection()
            for k in keys:
                if k in self.boxes:
                    self.boxes[k].setSelected(True)
        finally:
            self._drawing = False
        self._on_selection()

    def selected_keys(self) -> list[str]:
        return [i.key for i in self.scene().selectedItems() if isinstance(i, QtBoxItem)]

    def selected_ids(self) -> list[str]:
        out: list[str] = []
        for key in self.selected_keys():
            out.extend(self.tree.members(key))
        return out

    def _on_selection(self) -> None:
        if self._drawing:
            return
        self.selectionChangedIds.emit(self.selected_ids())
        keys = self.selected_keys()
        if keys:
            self.currentChanged.emit(keys[0])

    def viewport_ids(self) -> list[str]:
        """Kernels whose boxes are (partly) visible."""
        seen = self.mapToScene(self.viewport().rect()).boundingRect()
        out: list[str] = []
        for item in self.scene().items(seen):
            if isinstance(item, QtBoxItem):
                out.extend(self.tree.members(item.key))
        return out

    # --- events -------------------------------------------------------------------------
    def mouseDoubleClickEvent(self, event) -> None:
        pos = self.mapToScene(event.position().toPoint())
        for item in self.scene().items(pos):
            if isinstance(item, QtBoxItem) and item.is_group:
                self.expand(item.key)
                self.groupToggled.emit(item.key, True)
                return
            if isinstance(item, QtFrameItem) and item.in_title(pos):
                self.collapse(item.key)
                self.groupToggled.emit(item.key, False)
                return
        super().mouseDoubleClickEvent(event)

    def tooltip_at(self, pos) -> str:
        """The tooltip for viewport position ``pos``: a kernel's op, shape, bytes, FLOPs, measured time
        and origin (``describe.kernel_tooltip``); a group's summary; an edge's containers."""
        for item in self.items(pos):
            if isinstance(item, QtBoxItem):
                if item.is_group:
                    name, line = plate_text(self.tree, self.ledger, item.key, self.heat_times)
                    return f"{name}\n{line}\ndouble-click to open"
                origins = self.origins_of() if self.origins_of is not None else None
                tip = kernel_tooltip(self.graph, self.ledger, item.key, self.heat_times.get(item.key),
                                     origins(item.key) if origins is not None else ())
                if item.key in self.overlay_values:
                    tip += f"\n{self.overlay_name}: {self.overlay_values[item.key]:.6g}"
                return tip
            if isinstance(item, QtEdgeItem):
                return edge_tooltip(self.graph, self.tree.edges[item.group][(item.src, item.dst)])
        return ""

    def viewportEvent(self, event) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            text = self.tooltip_at(event.pos())
            if text:
                QToolTip.showText(event.globalPos(), text, self.viewport())
            else:
                QToolTip.hideText()
            return True
        return super().viewportEvent(event)

    def mouseMoveEvent(self, event) -> None:
        super().mouseMoveEvent(event)
        if self.legend.isVisible() and self.legend.geometry().adjusted(-8, -8, 8, 8).contains(event.position().toPoint()):
            self._legend_right = not self._legend_right      # the legend steps aside from the pointer
            self._place_legend()
        key = next((i.key for i in self.items(event.position().toPoint())
                    if isinstance(i, QtBoxItem) and not i.is_group), "")
        if key != self._hovered:
            self._hovered = key
            self.hoveredKernel.emit(key)

    def leaveEvent(self, event) -> None:
        super().leaveEvent(event)
        if self._hovered:
            self._hovered = ""
            self.hoveredKernel.emit("")

    def wheelEvent(self, event) -> None:
        steps = event.angleDelta().y() / 120.0
        factor = 1.2 ** steps
        scale = self.transform().m11() * factor
        if 0.01 <= scale <= 8.0:
            self.scale(factor, factor)
            self.zoomed.emit(factor)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._place_legend()
        if self._fit_next and self.placement is not None and self._sized():
            self._fit_next = False                 # a first fit waits for the view's real size
            self.fit(readable=True)

    def _sized(self) -> bool:
        """Shown at a real size: a fit before that (a window being built) zooms out to nothing."""
        return self.isVisible() and self.viewport().width() >= 200 and self.viewport().height() >= 120

    def scrollContentsBy(self, dx: int, dy: int) -> None:
        super().scrollContentsBy(dx, dy)           # scrolling moves the viewport's child widgets too:
        self._place_legend()                       # keep the legend in its corner


def _human_us(us: float) -> str:
    return human_seconds(us * 1e-6)

def _stale_keys(old: ScopeTree | None, new: ScopeTree, touched: set[str]) -> set[str] | None:
    """Boxes whose text may differ from ``old``: touched kernels and the groups not shared with ``old``
    (a group is shared only when nothing below it changed; see ``ScopeTree.updated``)."""
    if old is None:
        return None
    return touched | {k for k, g in new.groups.items() if old.groups.get(k) is not g}
