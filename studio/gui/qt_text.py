"""``QtTextLine``: one line of (rich) text that repaints itself without re-laying out the window.

A QLabel whose text changes calls ``updateGeometry``, and inside a QMainWindow that
re-lays out and repaints the whole window (measured: 1.3 Mpx per step for a status
line). This widget keeps a fixed height and an expanding width, and ``set_text``
only repaints its own rectangle. ``lines`` > 1 makes room for that many lines and wraps the text
at the widget's width (a warning beside a button was cut by it); ``fits()`` says whether the text
is wholly shown.
"""
from __future__ import annotations

from PySide6.QtGui import QPainter, QTextDocument
from PySide6.QtWidgets import QSizePolicy, QWidget


class QtTextLine(QWidget):
    def __init__(self, parent: QWidget | None = None, rich: bool = False, lines: int = 1) -> None:
        super().__init__(parent)
        self.rich, self.lines = rich, lines
        self.doc = QTextDocument(self)
        self.doc.setDocumentMargin(2)
        self.setFixedHeight(lines * self.fontMetrics().lineSpacing() + 6)
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

    def _lay_out(self) -> None:
        self.doc.setDefaultFont(self.font())
        self.doc.setTextWidth(self.width() if self.lines > 1 else -1)

    def fits(self) -> bool:
        """The whole text shows: no wider and no taller than the widget."""
        self._lay_out()
        size = self.doc.size()
        return size.width() <= self.width() + 0.5 and size.height() <= self.height() + 0.5

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        self._lay_out()
        self.doc.drawContents(painter)
