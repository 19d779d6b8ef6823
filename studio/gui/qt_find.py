"""Find (Ctrl+F): kernels whose id, name or op type contain the text, with next/previous.

``QtFindBar`` owns the text field and the count; the window reveals the current
hit in the view (opening its groups), marks all hits and selects the current one.
"""
from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QToolButton, QWidget

from ir.graph import Graph
from ir.nodes import OpNode


def find(graph: Graph, text: str) -> list[str]:
    """Kernel ids matching ``text`` (case-insensitive substring of id, name or op type), in graph order."""
    needle = text.strip().lower()
    if not needle:
        return []
    out = []
    for ident, node in graph.nodes.items():
        kind = node.qualified_type if isinstance(node, OpNode) else "map"
        if needle in ident.lower() or needle in node.name.lower() or needle in kind.lower():
            out.append(ident)
    return out


class QtFindBar(QWidget):
    """The find field with previous/next buttons and "k of n"."""

    hitChanged = Signal(list, int)      # all hits, index of the current one (-1: none)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.field = QLineEdit()
        self.field.setPlaceholderText("Find kernels (Ctrl+F): id, name or op")
        self.field.setClearButtonEnabled(True)
        self.field.setMinimumWidth(260)
        self.prev_button = QToolButton(text="◀")
        self.next_button = QToolButton(text="▶")
        self.prev_button.setToolTip("Previous match (Shift+Enter)")
        self.next_button.setToolTip("Next match (Enter)")
        self.count = QLabel("")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for w in (self.field, self.prev_button, self.next_button, self.count):
            row.addWidget(w)
        self.graph: Graph | None = None
        self.hits: list[str] = []
        self.index = -1
        self.field.textChanged.connect(self.search)
        self.field.returnPressed.connect(self.next)
        self.next_button.clicked.connect(self.next)
        self.prev_button.clicked.connect(self.previous)

    def set_graph(self, graph: Graph) -> None:
        self.graph = graph
        if self.field.text():
            self.search(self.field.text())

    def search(self, text: str) -> None:
        self.hits = find(self.graph, text) if self.graph is not None else []
        self.index = 0 if self.hits else -1
        self._emit()

    def next(self) -> None:
        self._step(1)

    def previous(self) -> None:
        self._step(-1)

    def _step(self, d: int) -> None:
        if self.hits:
            self.index = (self.index + d) % len(self.hits)
            self._emit()

    def _emit(self) -> None:
        text = self.field.text().strip()
        self.count.setText("" if not text else "no match" if not self.hits else f"{self.index + 1} of {len(self.hits)}")
        self.hitChanged.emit(self.hits, self.index)

    def focus(self) -> None:
        self.field.setFocus()
        self.field.selectAll()
