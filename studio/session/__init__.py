"""The headless studio: a ``Session`` (states, history, undo, autosave), its recipes, reports, overlays and
exports. It imports no command and no window."""
from studio.session.core import Session, state_dir  # noqa: F401
from studio.session.loading import load_graph, load_original, original_model  # noqa: F401
from studio.session.exporting import load_with_history  # noqa: F401
