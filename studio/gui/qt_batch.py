""""Apply all of this kind": applications one per event-loop turn, as one undoable macro.

``QtBatchApply`` applies the first applicable match of a transformation kind, lets
the event loop turn (the window stays responsive, the progress dialog's Cancel
works), and repeats until no match applies, the user cancels or a step fails (a
dialog names it). All steps form one macro on the undo stack, so one undo takes
them all back (each child command calls ``Session.undo``). The window refreshes
once at the end, not after every step.
"""
from __future__ import annotations

from PySide6.QtCore import QObject, Qt, QTimer
from PySide6.QtWidgets import QMainWindow, QProgressDialog

from transforms.base import Transformation


class QtBatchApply(QObject):
    def __init__(self, window: QMainWindow, t: Transformation, max_steps: int = 10000) -> None:
        super().__init__(window)
        self.window, self.t, self.max_steps = window, t, max_steps
        self.count = 0
        self.open = False
        self.timer = QTimer(self, interval=0)
        self.timer.timeout.connect(self.step)
        self.dialog = QProgressDialog(f"Applying every {t.name} match…", "Cancel", 0, 0, window)
        self.dialog.setWindowTitle("Apply all")
        self.dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.dialog.setMinimumDuration(400)
        self.dialog.setModal(False)
        self.dialog.canceled.connect(self.finish)

    def start(self) -> "QtBatchApply":
        self.window.refresh_suspended = True
        self.timer.start()
        return self

    def step(self) -> None:
        graph = self.window.session.graph
        match = next((m for m in self.t.matches(graph) if self.t.check(graph, m).ok), None)
        if match is None or self.count >= self.max_steps:
            self.finish()
            return
        if not self.open:
            self.window.stack.beginMacro(f"apply all {self.t.name}")
            self.open = True
        if not self.window.apply_step(self.t.name, match.anchors, self.t.params()):
            self.finish()
            return
        self.count += 1
        self.dialog.setLabelText(f"Applying every {self.t.name} match… {self.count} applied")

    def finish(self) -> None:
        if not self.timer.isActive():
            return
        self.timer.stop()
        if self.open:
            self.window.stack.endMacro()
            self.open = False
        self.window.refresh_suspended = False
        self.window.statusBar().showMessage(f"applied {self.t.name} {self.count} times", 8000)
        self.dialog.close()
        self.window.refresh()
        self.deleteLater()
