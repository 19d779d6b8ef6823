"""``QtTextLine``: one line of (rich) text that repaints itself without re-laying out the window.

A QLabel whose text changes calls ``updateGeometry``, and inside a QMainWindow that
re-lays out and repaints the whole window (measured: 1.3 Mpx per step for a status
line). This widget keeps a fixed height and an expanding width, and ``set_text``
only repaints its own rectangle.
"""
from __future__ import annotations

from PySide6.QtGui import QPainter, QTextDocument
from PySide6.QtWidgets import QSizePolicy, QWidget


class QtTextLine(QWidget):
    def __init__(self, parent: QWidget | None = None, rich: bool = False) -> None:
        super().__init__(parent)
        self.rich = rich
        self.doc = QTextDocument(self)
        self.doc.setDocumentMargin(2)
        self.setFixedHeight(self.fontMetrics().height() + 6)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self._text = ""

    def set_text(self, text: str) -> None:
        if text != self._text:
            self._text = text
            if self.rich:
                self.doc.setHtml(text)
            else:
                self.doc.setPlainText(text)
            self.setToolTip(self.doc.toPlainText())     # the whole line, where the dock cuts it
            self.update()

    def text(self) -> str:
        return self.doc.toPlainText()

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        self.doc.setDefaultFont(self.font())
        self.doc.drawContents(painter)
