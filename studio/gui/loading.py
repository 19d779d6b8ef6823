"""Opening a model and replaying histories into a new Session, off the GUI thread: no Qt here.

``open_session`` imports the model, then replays the given histories as undoable
steps (each a ``History`` value or a history file), reporting progress per step and
stopping when the token is cancelled. A step that cannot be replayed does not lose
the others: the session keeps the steps before it, and ``Opened.error`` names the
history, the step, the transformation and the reason, for the GUI's dialog.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Sequence

from ir.errors import StudioError
from studio.gui.jobs import CancelToken, Progress, no_progress
from studio.session import Session
from transforms.history import History, HistoryError, check_model, load


@dataclass
class Opened:
    session: Session
    steps: int                      # steps replayed
    error: str | None = None        # why replaying stopped early


def _replay_value(session: Session, hist: History, token: CancelToken, progress: Progress, done: int,
                  total: int) -> int:
    check_model(hist, session.model_sha256, session.model_name)
    for k, step in enumerate(hist.steps, start=1):
        token.check("replaying the history")
        try:
            session.apply(step.transformation, step.anchors, step.params)
        except StudioError as e:
            raise HistoryError(f"step {k} ({step.transformation}): {e.summary}") from None
        progress(done + k, total, f"step {k}: {step.transformation}")
    return len(hist.steps)


def open_session(model: str | os.PathLike, histories: Sequence[History | str | os.PathLike] = (), *,
                 bindings: Mapping[str, int] | None = None, autosave: bool = True,
                 token: CancelToken | None = None, progress: Progress = no_progress) -> Opened:
    """Import ``model`` and replay ``histories`` in order (see the module docstring)."""
    token = token or CancelToken()
    progress(0, 0, f"importing {os.path.basename(str(model))}")
    session = Session.open(model, bindings=bindings, autosave=autosave)
    values = [h if isinstance(h, History) else load(h) for h in histories]
    total = sum(len(h.steps) for h in values)
    done = 0
    for source, hist in zip(histories, values):
        where = "the current session" if isinstance(source, History) else str(source)
        try:
            done += _replay_value(session, hist, token, progress, done, total)
        except HistoryError as e:
            return Opened(session, session.cursor, f"{where}: {e.summary}")
    return Opened(session, session.cursor)
