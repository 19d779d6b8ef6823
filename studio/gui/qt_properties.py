"""The Properties dock: the selected kernel's attributes, memlets with shapes and dtypes, figures and IR.

The HTML comes from ``studio.gui.describe`` (escaped; names come from model files);
a map kernel shows its printed body (``ir.printer.node_to_text``).
"""
from __future__ import annotations

from PySide6.QtWidgets import QDockWidget, QTextBrowser, QWidget

from ir.graph import Graph
from ir.movement import Ledger
from studio.gui.describe import group_html, kernel_html
from studio.gui.scope_tree import ScopeTree


class QtPropertiesDock(QDockWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Properties", parent)
        self.setObjectName("dock.properties")
        self.text = QTextBrowser()
        self.text.setOpenLinks(False)
        self.text.setPlaceholderText("Select a kernel or a group in the graph.")
        self.setWidget(self.text)
        self.key: str | None = None
        self.html = ""

    def show_item(self, graph: Graph, tree: ScopeTree, ledger: Ledger, key: str | None,
                  origins: tuple[str, ...] = ()) -> None:
        """Describe kernel or group ``key`` (clears when it is gone); ``origins``: the original kernels
        a kernel was made from (``Session.origins``)."""
        if key is None or (key not in graph.nodes and not tree.is_group(key)):
            key, html = None, ""
        elif tree.is_group(key):
            html = group_html(graph, tree, ledger, key)
        else:
            html = kernel_html(graph, tree, ledger, key, origins)
        self.key = key
        if html != self.html:                       # unchanged text: no repaint (nor a window re-layout)
            self.html = html
            self.text.setHtml(html)
