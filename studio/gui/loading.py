"""Opening a model and replaying histories into a new Session, off the GUI thread: no Qt here.

``open_session`` imports the model, then replays the given histories as undoable
steps (each a ``History`` value or a history file), reporting progress per step and
stopping when the token is cancelled. A step that cannot be replayed does not lose
the others: the session keeps the steps before it, and ``Opened.error`` names the
history, the step, the transformation and the reason, for the GUI's dialog.

A forward model can be opened as its generated training step (``training`` options, see
``transforms.autodiff.TrainingOptions``); a history recorded on such a step carries its
options, so replaying it (or restoring its autosave) regenerates the same graph.
The imported graph and every 25 replayed steps are moved out of the garbage collector's
generations (``gc.freeze``): otherwise each full collection rescans the growing session while
holding the GIL, and the window froze for up to 0.9 s at a time while a 500-step history of a
12-layer model replayed. ``needs_training`` tells the GUI when to offer that generation; ``training_options`` turns
the dialog's choices into validated options.
Automatic cycle collection is off while the model imports: a collection triggered by the import's
allocations ran on this worker thread and finalized Qt objects there, which crashed the process (3 of 5
runs of the event-loop bench's profiling test right after its Compare test; 0 of 6 with it off).
"""
from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ir.containers import Role
from ir.errors import StudioError
from studio.gui.jobs import CancelToken, Progress, no_progress
from studio.session.core import Session
from transforms.history import History, HistoryError, check_model, load


FREEZE_EVERY = 25       # replayed steps between gc.freeze() calls


@dataclass
class Opened:
    session: Session
    steps: int                      # steps replayed
    error: str | None = None        # why replaying stopped early
    prepared: Any = None            # what ``prepare(session)`` made in the worker (the view's scope tree)


def _replay_value(session: Session, hist: History, token: CancelToken, progress: Progress, done: int,
                  total: int) -> int:
    check_model(hist, session.model_sha256, session.model_name)
    for k, step in enumerate(hist.steps, start=1):
        token.check("replaying the history")
        try:
            session.apply_step(step)
        except StudioError as e:
            raise HistoryError(f"step {k} ({step.transformation}): {e.summary}") from None
        progress(done + k, total, f"step {k}: {step.transformation}")
        if k % FREEZE_EVERY == 0:
            gc.freeze()
    return len(hist.steps)


def open_session(model: str | os.PathLike, histories: Sequence[History | str | os.PathLike] = (), *,
                 bindings: Mapping[str, int] | None = None, autosave: bool = True,
                 training: Mapping[str, Any] | None = None, start: Session | None = None,
                 prepare: Callable[[Session], Any] | None = None,
                 token: CancelToken | None = None, progress: Progress = no_progress) -> Opened:
    """Import ``model`` (as its training step when ``training`` or the first history that records
    training options say so) and replay ``histories`` in order (see the module docstring). With
    ``start`` (the session already open on ``model``), its imported graph is reused: a state's graph
    is never edited, so the new session starts from the same one without importing again.
    ``prepare(session)`` runs last, in the worker (the window builds the view's scope tree and the
    peak memory there, not on the GUI thread); its result is ``Opened.prepared``."""
    token = token or CancelToken()
    values = [h if isinstance(h, History) else load(h) for h in histories]
    training = training or next((h.training for h in values if h.training), None)
    what = "generating the training step of" if training else "importing"
    progress(0, 0, f"{what} {os.path.basename(str(model))}")
    if start is not None:            # the same model again (a history opened onto a session): no re-import
        session = Session(start.graph_at(0), model_path=start.model_path, autosave=autosave)
        session.training, session._oracle = start.training, start._oracle
    else:
        gc.disable()                 # no cycle collection on this worker while it imports (see the module)
        try:
            session = Session.open(model, bindings=bindings, autosave=autosave, training=training)
        finally:
            gc.enable()
    gc.freeze()
    total = sum(len(h.steps) for h in values)
    done = 0
    for source, hist in zip(histories, values):
        where = "the current session" if isinstance(source, History) else str(source)
        try:
            done += _replay_value(session, hist, token, progress, done, total)
        except HistoryError as e:
            return Opened(session, session.cursor, f"{where}: {e.summary}", _prepared(prepare, session))
    return Opened(session, session.cursor, None, _prepared(prepare, session))


def _prepared(prepare: Callable[[Session], Any] | None, session: Session) -> Any:
    return prepare(session) if prepare is not None else None


def needs_training(session: Session) -> bool:
    """True for a plain forward model opened as-is (no gradients, no optimizer, no steps) that has
    parameters to train."""
    g = session.graph
    return (g.meta.get("kind") == "forward" and not session.training and session.cursor == 0
            and any(c.role is Role.PARAMETER for c in g.containers.values()))


def training_options(loss: str, optimizer: str | None, lr: float, weight_decay: float = 0.0,
                     momentum: float = 0.9, output: str | None = None, trainable: str = "parameters"
                     ) -> dict[str, Any]:
    """The options for ``Session.open(training=…)``, validated (``OptionError`` names the bad one).
    Only what was chosen is recorded: defaults stay implicit, momentum only for SGD; ``trainable``
    is always recorded (its default changed from ``all`` to ``parameters``)."""
    from transforms.autodiff import TrainingOptions
    options: dict[str, Any] = {"loss": loss, "optimizer": optimizer, "lr": float(lr),
                               "weight_decay": float(weight_decay), "trainable": trainable}
    if optimizer == "sgd":
        options["momentum"] = float(momentum)
    if output:
        options["output"] = output
    TrainingOptions(**options)
    return options
