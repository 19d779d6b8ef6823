"""Lineage and tooltips in the window: Properties says what a fused kernel was made from, and the
hover text of a kernel gives its shape, bytes, FLOPs, measured time and origin (before: the op
name twice and no figures)."""
from __future__ import annotations

from studio.gui.describe import kernel_tooltip
from studio.gui.timings import human_seconds
from tests.gui.test_session_flow import _open
from transforms.registry import create


def test_properties_and_tooltip_name_the_originals(qtbot, make_window, bert_model):
    w = make_window()
    _open(qtbot, w, bert_model)
    s = w.session
    s.apply_pass("expand")
    mf = create("map_fusion")
    m = next(m for m in mf.matches(s.graph) if mf.check(s.graph, m).ok)
    app = s.apply("map_fusion", m.anchors)
    w.refresh()
    qtbot.waitUntil(lambda: w.view.task is None, timeout=60_000)
    fused = (app.created + app.changed)[0]
    originals = s.origins(fused)
    assert len(originals) == 2

    w._show_properties(fused)
    text = w.properties.text.toPlainText()
    assert "made from 2 original kernels" in text and originals[0] in text and originals[1] in text

    w.view.reveal(fused, zoom=True)
    qtbot.waitUntil(lambda: w.view.task is None and fused in w.view.boxes, timeout=60_000)
    box = w.view.boxes[fused]
    tip = w.view.tooltip_at(w.view.mapFromScene(box.sceneBoundingRect().center()))
    assert tip.startswith(f"{box.title} · {fused}")
    assert "\nout " in tip and "moved " in tip and "FLOPs" in tip
    assert f"made from 2 original kernels: {originals[0]}, {originals[1]}" in tip
    assert tip.count(box.title) == 1, "the op name is not repeated"

    timed = kernel_tooltip(s.graph, s.ledger, fused, 1234.0, originals)
    assert f"measured {human_seconds(1234e-6)} (median of the last profile)" in timed
    plain = next(i for i in s.graph.nodes if s.origins(i) == (i,))
    assert "made from" not in kernel_tooltip(s.graph, s.ledger, plain, None, s.origins(plain))
