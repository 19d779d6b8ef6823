"""The Transformations dock: ranked matches grouped as Selection, Viewport and Whole graph.

Rows show the transformation, where it applies, the predicted bytes saved and its
status; a row "× N" stands for the same match in N structurally equal layers (its bytes are the
N layers' together, and Apply repeats it on the others through a transfer step); matches whose check fails are greyed, with the check's reason (which names
the nodes) as status and tooltip. Hovering a row emits ``hovered`` with the kernels
it would touch; *Preview* shows the diff (the view marks removed and changed
kernels, the pane lists them with the new kernels' IR); *Apply* and *Apply all of
this kind* only emit requests: the window turns them into undo commands. While the listing
was ranked on an earlier graph (``set_stale``), it is italic under an "out of date" note.
"""
from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (QDockWidget, QHBoxLayout, QHeaderView, QLabel, QPlainTextEdit, QPushButton, QSplitter,
                               QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget)

from studio.text import human_bytes
from studio.gui.ranking import GROUPS, Preview, copy_layers
from transforms.engine import Ranked

ROLE = Qt.ItemDataRole.UserRole
MAX_ROWS = 300              # rows listed per group (best first); the rest are counted in a last row
STALE_NOTE = "⟳ out of date: the graph changed, re-ranking"
STALE_TIP = ("These matches were ranked before the last change to the graph; the new ranking replaces "
             "them when it is ready. Applying one that the change removed says so.")


def _class_tips(item: QTreeWidgetItem, r: Ranked) -> None:
    """Tooltips of a row standing for the same match in several equal layers."""
    layers = copy_layers(r)
    item.setToolTip(0, f"the same match in {1 + len(layers)} structurally equal layers; Apply applies it here "
                       f"and repeats it on {', '.join(layers)} (one undoable step)")
    item.setToolTip(2, f"{human_bytes(r.bytes_saved)} per layer × {1 + len(layers)}")
    item.setToolTip(1, "\n".join(r.match.anchors) + f"\n… and the same in {', '.join(layers)}")


class _Tree(QTreeWidget):
    left = Signal()

    def leaveEvent(self, event) -> None:
        super().leaveEvent(event)
        self.left.emit()


class QtTransformationsDock(QDockWidget):
    """See the module docstring."""

    hovered = Signal(object)              # Ranked or None
    previewRequested = Signal(object)     # Ranked
    applyRequested = Signal(object)       # Ranked
    applyAllRequested = Signal(object)    # Ranked (its transformation is the kind)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Transformations", parent)
        self.setObjectName("dock.transformations")
        self.tree = _Tree()
        self.tree.setHeaderLabels(["Transformation", "Where", "Saves", "Status"])
        self.tree.setMouseTracking(True)
        self.tree.setRootIsDecorated(True)
        self.tree.setUniformRowHeights(True)
        head = self.tree.header()               # "Where" takes what is left: Saves and Status are never cut
        head.setStretchLastSection(False)
        head.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        head.setMinimumSectionSize(48)
        self.tree.setColumnWidth(0, 150)
        self.tree.setColumnWidth(2, 78)
        self.tree.setColumnWidth(3, 64)
        self.status = QLabel("no model")
        self.status.setWordWrap(True)           # a long status line wraps: it widened the dock 470 → 677 px
        self.preview_button = QPushButton("Preview")
        self.apply_button = QPushButton("Apply")
        self.apply_all_button = QPushButton("Apply all of this kind")
        self.diff = QPlainTextEdit(readOnly=True)
        self.diff.setPlaceholderText("Preview shows what a match would add, remove and change.")
        self.diff.setFont(QFont("DejaVu Sans Mono", 8))
        buttons = QHBoxLayout()
        for b in (self.preview_button, self.apply_button, self.apply_all_button):
            buttons.addWidget(b)
        top = QWidget()
        col = QVBoxLayout(top)
        col.setContentsMargins(2, 2, 2, 2)
        col.addWidget(self.status)
        col.addWidget(self.tree)
        col.addLayout(buttons)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(top)
        split.addWidget(self.diff)
        split.setSizes([420, 200])
        self.setWidget(split)
        self.tree.itemEntered.connect(lambda item, _c: self.hovered.emit(item.data(0, ROLE)))
        self.tree.left.connect(lambda: self.hovered.emit(None))
        self.tree.currentItemChanged.connect(self._on_current)
        self.tree.itemDoubleClicked.connect(lambda item, _c: self._request(self.applyRequested, item))
        self.preview_button.clicked.connect(lambda: self._request(self.previewRequested))
        self.apply_button.clicked.connect(lambda: self._request(self.applyRequested))
        self.apply_all_button.clicked.connect(lambda: self._request(self.applyAllRequested))
        self.wanted: tuple | None = None        # the row the user chose; kept across re-listings
        self.stale, self.status_text = False, "no model"
        self.viewport_note = ""                 # why the Viewport group is empty (zoomed out), from the ranker
        self._filling = False
        self._doomed: list[QTreeWidgetItem] = []   # groups taken out of the tree, deleted by the reaper
        self._reaper = QTimer(self, singleShot=True, interval=0)
        self._reaper.timeout.connect(self._doomed.clear)
        self._update_buttons()

    def _on_current(self, *_args) -> None:
        if not self._filling and (r := self.current()) is not None:
            self.wanted = (r.transformation.name, r.match.anchors)
        self._update_buttons()

    def current(self) -> Ranked | None:
        item = self.tree.currentItem()
        return item.data(0, ROLE) if item is not None else None

    def _request(self, signal, item: QTreeWidgetItem | None = None) -> None:
        r = (item or self.tree.currentItem()).data(0, ROLE) if (item or self.tree.currentItem()) else None
        if r is not None and r.ok:
            signal.emit(r)

    def _update_buttons(self) -> None:
        r = self.current()
        for b in (self.preview_button, self.apply_button, self.apply_all_button):
            b.setEnabled(r is not None and r.ok)

    def set_status(self, text: str) -> None:
        self.status_text = text
        self.status.setText(f"{STALE_NOTE} · {text}" if self.stale else text)

    def set_stale(self, stale: bool) -> None:
        """Mark the listing as ranked on an earlier graph (italic, a note above it), or clear the
        mark. The rows stay usable: applying one that the change removed says so and asks to re-rank."""
        if stale == self.stale:
            return
        self.stale = stale
        font = self.tree.font()
        font.setItalic(stale)
        self.tree.setFont(font)
        self.tree.setToolTip(STALE_TIP if stale else "")
        self.set_status(self.status_text)

    def show_groups(self, groups: dict[str, list[Ranked]]) -> None:
        """Replace the listing (keeps the current match selected when it is still there); the
        ranker shows only listings of the current graph, so this clears the out-of-date mark."""
        self.set_stale(False)
        self._filling = True
        self._clear()
        grey = QBrush(QColor("#9a9a9a"))
        for label in GROUPS:
            rows = groups.get(label, [])
            ok = sum(1 for r in rows if r.ok)
            count = f"{ok} applicable of {len(rows)}" if rows or label != "Viewport" or not self.viewport_note \
                else self.viewport_note
            head = QTreeWidgetItem(self.tree, [f"{label}", count, "", ""])
            head.setFirstColumnSpanned(False)
            head.setFlags(Qt.ItemFlag.ItemIsEnabled)
            items = [self._item(r, grey) for r in rows[:MAX_ROWS]]
            if len(rows) > MAX_ROWS:
                more = QTreeWidgetItem([f"… {len(rows) - MAX_ROWS} more",
                                        "narrow the selection, or Apply all of this kind", "", ""])
                more.setFlags(Qt.ItemFlag.ItemIsEnabled)
                for c in range(4):
                    more.setForeground(c, grey)
                items.append(more)
            head.addChildren(items)                  # made outside the tree, added at once: one insertion
            current = next((item for item, r in zip(items, rows)
                            if self.wanted == (r.transformation.name, r.match.anchors)), None)
            if current is not None:
                self.tree.setCurrentItem(current)
            head.setExpanded(label != "Whole graph" or ok <= 200)
        self._filling = False
        self._update_buttons()

    def _clear(self) -> None:
        """Empty the tree; its rows are deleted in the next turn of the event loop, not in this one. Deleting
        900 rows took 25-80 ms beside a running worker: with the new rows' filling, one stall over 100 ms."""
        self._doomed.extend(self.tree.takeTopLevelItem(0) for _ in range(self.tree.topLevelItemCount()))
        self._reaper.start()

    @staticmethod
    def _item(r: Ranked, grey: QBrush) -> QTreeWidgetItem:
        """A row of ``r``, not yet in the tree (its setters emit nothing)."""
        saved = human_bytes(r.total_saved) if r.delta is not None else "…" if r.ok else ""
        name = f"{r.transformation.name} × {1 + len(r.copies)}" if r.copies else r.transformation.name
        item = QTreeWidgetItem([name, r.match.label or ", ".join(r.match.anchors), saved, "ok" if r.ok else r.reason])
        item.setData(0, ROLE, r)
        item.setToolTip(3, r.reason or "applicable")
        item.setToolTip(1, "\n".join(r.match.anchors))
        if r.copies:
            _class_tips(item, r)
        if not r.ok:
            for c in range(4):
                item.setForeground(c, grey)
        return item

    def rows(self) -> list[Ranked]:
        """All listed matches, in display order."""
        out = []
        for k in range(self.tree.topLevelItemCount()):
            head = self.tree.topLevelItem(k)
            out.extend(r for j in range(head.childCount()) if (r := head.child(j).data(0, ROLE)) is not None)
        return out

    def select_row(self, r: Ranked) -> None:
        for k in range(self.tree.topLevelItemCount()):
            head = self.tree.topLevelItem(k)
            for j in range(head.childCount()):
                if head.child(j).data(0, ROLE) is r:
                    self.tree.setCurrentItem(head.child(j))
                    self.wanted = (r.transformation.name, r.match.anchors)
                    return

    def show_preview(self, p: Preview | None, error: str = "") -> None:
        self.diff.setPlainText(error if p is None else p.text)
