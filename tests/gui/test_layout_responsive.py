"""Layout never blocks the GUI: ``dot`` runs in a subprocess, and one that is too slow is stopped at its
timeout with a message while the event loop keeps turning (a QTimer fires throughout)."""
from __future__ import annotations

import time

from PySide6.QtCore import QTimer

from studio.gui.qt_graph_view import QtGraphView
from studio.session import Session
from tests.gui.synthetic import dense_group, flat_group

TIMEOUT_S = 5.0


def test_slow_layout_times_out_with_a_message_and_the_loop_keeps_turning(qtbot):
    session = Session(dense_group(120, 1200), autosave=False)     # dot needs well over a minute for this
    view = QtGraphView(layout_timeout_s=TIMEOUT_S)
    qtbot.addWidget(view)
    view.resize(900, 700)
    view.show()
    ticks: list[float] = []
    timer = QTimer(interval=20)
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    timer.start()
    t0 = time.monotonic()
    view.set_graph(session.graph, session.ledger)
    assert time.monotonic() - t0 < 1.0, "set_graph must not wait for the layout"
    assert view.boxes and not view.placement.exact                  # the quick layered layout, at once
    with qtbot.waitSignal(view.layoutMessage, timeout=int((TIMEOUT_S + 20) * 1000)) as msg:
        pass
    elapsed = time.monotonic() - t0
    timer.stop()
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + 10
    assert "took longer than 5 s" in msg.args[0] and "simple layered layout" in msg.args[0]
    during = [t for t in ticks if t < t0 + TIMEOUT_S]
    gaps = [b - a for a, b in zip(during, during[1:])]
    assert len(during) >= TIMEOUT_S / 0.02 * 0.5 and max(gaps) < 0.5  # the timer kept firing, no long stall
    assert view.placement.exact and len(view.boxes) == 120              # the fallback is kept (no retry loop)


def test_expanding_a_group_lays_it_out_in_the_background(qtbot):
    session = Session(flat_group(60), autosave=False)
    view = QtGraphView()
    qtbot.addWidget(view)
    view.show()
    view.set_graph(session.graph, session.ledger, keep_expanded=False)
    qtbot.waitUntil(lambda: view.placement.exact, timeout=20000)
    group = "group:wide"
    view.collapse(group)
    assert group in view.boxes and not any(k.startswith("/wide/") for k in view.boxes)
    view.expand(group)
    qtbot.waitUntil(lambda: view.placement.exact, timeout=20000)
    assert group in view.frames and sum(k.startswith("/wide/") for k in view.boxes) == 60
