"""The command palette (Ctrl+Shift+P): every enabled menu action, filtered as you type.

Enter (or a click) triggers the chosen action and closes the palette; Escape
closes it. The palette is a child of the main window (no stray top-level windows).
"""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDialog, QLineEdit, QListWidget, QListWidgetItem, QVBoxLayout, QWidget


class QtCommandPalette(QDialog):
    def __init__(self, actions: list[QAction], parent: QWidget) -> None:
        super().__init__(parent, Qt.WindowType.Popup)
        self.setObjectName("commandPalette")
        self.actions_ = actions
        self.field = QLineEdit()
        self.field.setPlaceholderText("Type a command…")
        self.list = QListWidget()
        col = QVBoxLayout(self)
        col.setContentsMargins(4, 4, 4, 4)
        col.addWidget(self.field)
        col.addWidget(self.list)
        self.resize(460, 320)
        self.field.textChanged.connect(self._fill)
        self.field.returnPressed.connect(self._run_current)
        self.list.itemActivated.connect(self._run)
        self._fill("")

    def _fill(self, text: str) -> None:
        self.list.clear()
        words = text.lower().split()
        for action in self.actions_:
            name = action.text().replace("&", "")
            if action.isEnabled() and all(w in name.lower() for w in words):
                shortcut = action.shortcut().toString()
                item = QListWidgetItem(f"{name}    {shortcut}" if shortcut else name)
                item.setData(Qt.ItemDataRole.UserRole, action)
                self.list.addItem(item)
        if self.list.count():
            self.list.setCurrentRow(0)

    def _run_current(self) -> None:
        if self.list.currentItem() is not None:
            self._run(self.list.currentItem())

    def _run(self, item: QListWidgetItem) -> None:
        action = item.data(Qt.ItemDataRole.UserRole)
        self.close()
        action.trigger()

    def popup(self) -> None:
        parent = self.parentWidget()
        self.move(parent.mapToGlobal(parent.rect().center()) - self.rect().center())
        self.show()
        self.field.setFocus()
