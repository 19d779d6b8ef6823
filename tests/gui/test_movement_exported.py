"""The Data movement dock counts bytes as exported on request: a background task builds the CPU
program, the dock shows both counts for the graph shown, keeps them for undo and redo, and says
when the graph shown has not been counted."""
from __future__ import annotations

from codegen.numba_cpu.backend import program
from codegen.program.traffic import traffic
from studio.text import human_bytes
from transforms.registry import create

LOAD_MS, TASK_MS = 60_000, 60_000


def test_count_as_exported_follows_the_graph_shown(qtbot, make_window, bert_model):
    w = make_window()
    w.open_model(str(bert_model))
    qtbot.waitUntil(lambda: w.session is not None and w.view.placement is not None, timeout=LOAD_MS)
    dock = w.movement
    assert "not counted" in dock.exported.text() and dock.exported_button.isEnabled()
    first = w.session.graph
    dock.exported_button.click()
    qtbot.waitUntil(lambda: "as exported (cpu)" in dock.exported.text(), timeout=TASK_MS)
    want = traffic(program(first))
    assert human_bytes(want.exported) in dock.exported.text() and human_bytes(want.fused) in dock.exported.text()
    worst = want.largest_differences(1)[0]
    assert worst.node_id in dock.exported.toolTip() and worst.why in dock.exported.toolTip()
    m = next(iter(create("expand").matches(w.session.graph)))
    assert w.apply_step("expand", m.anchors)
    w.refresh()
    assert "not counted" in dock.exported.text()                  # another graph: not counted yet
    w.actions_.undo.trigger()
    qtbot.waitUntil(lambda: w.session.graph is first, timeout=TASK_MS)
    w.refresh()
    assert human_bytes(want.exported) in dock.exported.text()    # kept for the graph it was counted on


def test_a_failed_peak_task_says_so_and_the_next_refresh_tries_again(qtbot, make_window, bert_model, monkeypatch):
    from studio.session import Session
    w = make_window()
    w.open_model(str(bert_model))
    qtbot.waitUntil(lambda: w.session is not None and w.view.placement is not None, timeout=LOAD_MS)
    real = Session.peak_bytes

    def broken(self, graph=None):
        raise MemoryError("no room for the lifetimes")
    monkeypatch.setattr(Session, "peak_bytes", broken)
    m = next(iter(create("expand").matches(w.session.graph)))
    assert w.apply_step("expand", m.anchors)
    w.refresh()
    qtbot.waitUntil(lambda: "peak memory n/a" in w.movement.summary.text(), timeout=TASK_MS)
    assert "no room for the lifetimes" in w.movement.summary.toolTip()
    monkeypatch.setattr(Session, "peak_bytes", real)
    w.refresh()
    want = f"peak memory {human_bytes(w.session.peak_bytes())} "
    qtbot.waitUntil(lambda: want in w.movement.summary.text(), timeout=TASK_MS)
    assert "not computed" not in w.movement.summary.toolTip()
