"""Message boxes that never block: errors name the node or step, never show a traceback.

``show_error`` and ``show_info`` open a non-modal QMessageBox (deleted on close) and
return it, so tests can read and close it; ``ask`` is the only modal question
(restore an autosave), and the window skips it when its policy says so.
"""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QWidget


def _box(parent: QWidget, icon: QMessageBox.Icon, title: str, text: str, detail: str = "") -> QMessageBox:
    box = QMessageBox(icon, title, text, QMessageBox.StandardButton.Ok, parent)
    box.setObjectName("dcstudioMessage")
    if detail:
        box.setInformativeText(detail)
    box.setModal(False)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.show()
    return box


def show_error(parent: QWidget, title: str, text: str, detail: str = "") -> QMessageBox:
    return _box(parent, QMessageBox.Icon.Warning, title, text, detail)


def show_info(parent: QWidget, title: str, text: str, detail: str = "") -> QMessageBox:
    return _box(parent, QMessageBox.Icon.Information, title, text, detail)


def ask(parent: QWidget, title: str, text: str) -> bool:
    answer = QMessageBox.question(parent, title, text, QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                  QMessageBox.StandardButton.Yes)
    return answer == QMessageBox.StandardButton.Yes
