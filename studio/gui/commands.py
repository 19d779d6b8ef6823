"""Undoable edits: QUndoCommands that call one ``Session`` method each (widgets never edit the graph).

``ApplyCommand`` applies a transformation on its first ``redo`` (``Session.apply``, or the
``first`` callable it is given: a pass, a transfer),
re-applies it with ``Session.redo`` afterwards, and ``undo`` is ``Session.undo``.
A command made for a step the session already holds (a replayed history) starts
*done*: pushing it does not apply it again. When the first apply fails, the command
keeps the error and marks itself obsolete, so ``QUndoStack.push`` drops it; the
window then shows the error. Reverting to a step is ``QUndoStack.setIndex``.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from PySide6.QtGui import QUndoCommand

from ir.errors import StudioError
from studio.session.core import Session
from transforms.history import TRANSFER


def step_text(name: str, anchors: Sequence[str], delta: int | None = None, applications: int | None = None) -> str:
    """A history entry: the change in bytes moved first ("-12.58 MB": saved; a narrow History dock
    elides long anchors at the end, never the figure), then what was applied where."""
    gain = f"{delta / 1e6:+.2f} MB · " if delta else ""
    if name == TRANSFER:                              # a transfer step (transforms.transfer)
        return f"{gain}repeat on equal layers ×{applications}"
    if applications is not None:                      # a pass step (transforms.passes)
        return f"{gain}{name} pass ×{applications}"
    where = anchors[0] if len(anchors) == 1 else f"{anchors[0]} +{len(anchors) - 1}" if anchors else "graph"
    return f"{gain}{name} @ {where}"


class ApplyCommand(QUndoCommand):
    """Apply transformation ``name`` at ``anchors`` (see the module docstring)."""

    def __init__(self, session: Session, name: str, anchors: Sequence[str],
                 params: Mapping[str, Any] | None = None, *, done: bool = False, text: str = "",
                 first: Callable[[], Any] | None = None) -> None:
        super().__init__(text or step_text(name, anchors))
        self.session, self.name, self.anchors, self.params = session, name, tuple(anchors), dict(params or {})
        self.custom_text = bool(text)
        self.first = first or (lambda: self.session.apply(self.name, self.anchors, self.params))
        self.pending = not done          # the first redo applies; later ones re-apply the kept state
        self.skip_redo = done            # a replayed step: push() must not apply it again
        self.error: StudioError | None = None
        self.application = None

    def redo(self) -> None:
        if self.skip_redo:
            self.skip_redo = False
        elif self.pending:
            try:
                self.application = self.first()
                self.pending = False
                if not self.custom_text:
                    self.setText(step_text(self.name, self.anchors, self.application.delta.bytes))
            except StudioError as e:
                self.error = e
                self.setObsolete(True)
        else:
            self.session.redo()

    def undo(self) -> None:
        if self.error is None and not self.pending:      # a command that never applied has nothing to undo
            self.session.undo()
