"""Find (Ctrl+F): kernels whose id, name or op type contain the text, or that write or read a
container whose name contains it, with next/previous and a results list.

``QtFindBar`` owns the text field, the count and the *results* button, which lists every hit
(kernel, op, and the container that matched, if any); choosing one makes it the current hit.
The window reveals the current hit in the view (opening its groups, zooming in until its label
reads), marks all hits and selects the current one.
"""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QListWidget, QListWidgetItem, QToolButton, QWidget

from ir.graph import Graph
from ir.nodes import OpNode


def find_hits(graph: Graph, text: str) -> list[tuple[str, str]]:
    """(kernel id, why) for ``text`` (case-insensitive substring), in graph order: the kernels whose
    id, name or op type contains it (why ''); when none does, the kernels that write or read a
    container whose name contains it (why: "writes NAME" / "reads NAME")."""
    needle = text.strip().lower()
    if not needle:
        return []
    out = []
    for ident, node in graph.nodes.items():
        kind = node.qualified_type if isinstance(node, OpNode) else "map"
        if needle in ident.lower() or needle in node.name.lower() or needle in kind.lower():
            out.append((ident, ""))
    if out:
        return out
    named = {c for c in graph.containers if needle in c.lower()}
    for ident, node in graph.nodes.items() if named else ():
        wrote = next((m.container for m in node.outputs if m is not None and m.container in named), None)
        read = wrote or next((m.container for m in node.inputs if m is not None and m.container in named), None)
        if read is not None:
            out.append((ident, f"{'writes' if wrote else 'reads'} {read}"))
    return out


def find(graph: Graph, text: str) -> list[str]:
    """Kernel ids of ``find_hits``."""
    return [ident for ident, _why in find_hits(graph, text)]


MAX_LISTED = 500


class QtFindBar(QWidget):
    """The find field with previous/next buttons and "k of n"."""

    hitChanged = Signal(list, int)      # all hits, index of the current one (-1: none)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.field = QLineEdit()
        self.field.setPlaceholderText("Find kernels (Ctrl+F): id, name, op or container")
        self.field.setClearButtonEnabled(True)
        self.field.setMinimumWidth(260)
        self.prev_button = QToolButton(text="◀")
        self.next_button = QToolButton(text="▶")
        self.prev_button.setToolTip("Previous match (Shift+Enter)")
        self.next_button.setToolTip("Next match (Enter)")
        self.count = QLabel("")
        self.list_button = QToolButton(text="≡")
        self.list_button.setToolTip("List every match (kernels, and kernels reading or writing a matching container)")
        self.list_button.clicked.connect(self.show_results)
        self.results = QListWidget(self)             # a popup list of the hits (owned: closed with the bar)
        self.results.setWindowFlags(self.results.windowFlags() | Qt.WindowType.Popup)
        self.results.itemActivated.connect(self._chosen)
        self.results.itemClicked.connect(self._chosen)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for w in (self.field, self.prev_button, self.next_button, self.list_button, self.count):
            row.addWidget(w)
        self.graph: Graph | None = None
        self.hits: list[str] = []
        self.why: list[str] = []
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
        found = find_hits(self.graph, text) if self.graph is not None else []
        self.hits, self.why = [i for i, _w in found], [w for _i, w in found]
        self.index = 0 if self.hits else -1
        self._emit()

    def show_results(self) -> None:
        """Pop up the list of hits under the field (at most ``MAX_LISTED``)."""
        self.results.clear()
        graph = self.graph
        for k, (ident, why) in enumerate(zip(self.hits[:MAX_LISTED], self.why)):
            node = graph.nodes[ident]
            kind = node.qualified_type if isinstance(node, OpNode) else "map"
            item = QListWidgetItem(f"{ident}  ·  {kind}" + (f"  ·  {why}" if why else ""))
            item.setData(Qt.ItemDataRole.UserRole, k)
            self.results.addItem(item)
        if len(self.hits) > MAX_LISTED:
            self.results.addItem(f"… {len(self.hits) - MAX_LISTED} more: refine the text")
        if not self.hits:
            self.results.addItem("no match")
        self.results.resize(max(420, self.field.width()), min(360, 22 * (self.results.count() + 1)))
        self.results.move(self.field.mapToGlobal(self.field.rect().bottomLeft()))
        self.results.show()

    def _chosen(self, item: QListWidgetItem) -> None:
        k = item.data(Qt.ItemDataRole.UserRole)
        self.results.hide()
        if k is not None:
            self.index = int(k)
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
