"""Node data in the studio (``studio.session.overlay``): File → Load node data… and Export node data….

``load_overlay(window, path)`` colours the graph with a node-data file's values (the view's heat
metric "node data", its legend and tooltips); ``save_overlay(window, path)`` writes bytes moved
per kernel, and the last profile's medians beside it when that profile is current. Errors go to
the window's ``say`` (a dialog naming the file and the key), never a traceback.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog

from ir.errors import StudioError
from studio.session.overlay import map_values, read_values
from studio.session.overlay import save_overlay as write_node_data


def choose_overlay(w) -> None:
    if w.session is None:
        return
    path, _ = QFileDialog.getOpenFileName(w, "Load node data", "", "Node data (*.json)")
    if path:
        load_overlay(w, path)


def load_overlay(w, path: str) -> bool:
    """Colour the graph with the values of node-data file ``path`` (heat metric "node data"). Keys of the
    opened graph colour the kernels made from them (the sum of their origins' values); the colouring
    follows every later edit (``follow_overlay``)."""
    try:
        keyed = read_values(Path(path), w.session.graph)
    except StudioError as e:
        w.say(f"Could not load node data from {path}", error=True, detail=str(e))
        return False
    w.node_data = (w.session, keyed, Path(path).stem)
    data = follow_overlay(w)
    w.actions_.heat_metric["overlay"].setEnabled(True)
    w.set_heat_metric("overlay")
    w.statusBar().showMessage(f"node data {data.describe()}", 10000)
    return True


def follow_overlay(w):
    """Map the loaded node data onto the session's current graph through its lineage (after an edit)."""
    if w.node_data is None or w.node_data[0] is not w.session:
        return None
    s, keyed, name = w.node_data
    data = map_values(keyed, s.graph, name, lineage=(s.graph_at(0), s.origins))
    label = f"{name} ({data.aggregate} over the original kernels each was made from)" if data.aggregate else name
    w.view.set_overlay(data.values, label)
    return data


def choose_save_overlay(w) -> None:
    if w.session is None:
        return
    path, _ = QFileDialog.getSaveFileName(w, "Export node data", f"{Path(w.session.model_name).stem}"
                                          ".bytes_moved.json", "Node data (*.json)")
    if path:
        save_overlay(w, path)


def save_overlay(w, path: str) -> list[str]:
    """Write bytes moved per kernel to ``path``, and the last profile's medians (µs) beside it
    (``….measured_us.json``) when there is a current one; returns the files written."""
    s, written = w.session, []
    try:
        written.append(str(write_node_data(path, s.graph, {k: e.bytes for k, e in s.ledger.kernels.items()},
                                        "bytes moved")))
        r = w.profiling.report
        if r is not None and not r.is_stale(s.graph):
            base = Path(path)
            stem = base.name[:-len(".bytes_moved.json")] if base.name.endswith(".bytes_moved.json") else base.stem
            written.append(str(write_node_data(base.with_name(f"{stem}.measured_us.json"), s.graph,
                                            r.times_us(), "measured time (µs)")))
    except OSError as e:
        w.say(f"Could not write node data to {path}", error=True, detail=str(e))
        return written
    w.statusBar().showMessage("wrote " + ", ".join(written), 10000)
    return written
