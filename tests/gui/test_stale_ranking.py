"""The Transformations dock marks a listing ranked on an earlier graph as out of date, without waiting.

After an apply the listing on show was ranked before it: the dock says so (a note above the
list, italic rows, a tooltip) while the new ranking runs, and the mark goes when the ranking of
the new graph arrives; undo back to a ranked graph shows its cached listing, unmarked.
"""
from __future__ import annotations

from studio.gui.qt_transformations import STALE_NOTE
from tests.gui.test_session_flow import LOAD_MS, _open, _selection_rows


def test_listing_of_an_earlier_graph_is_marked_until_reranked(qtbot, make_window, bert_model):
    w = make_window(rank_delay_ms=60_000)            # the ranking runs when the test asks for it
    _open(qtbot, w, bert_model)
    s = w.session
    w.view.select([i for i in s.graph.nodes if i.startswith("/layer/attention/self/")])
    w.ranker.schedule(0)
    best = next(r for r in _selection_rows(qtbot, w) if r.ok)
    dock = w.transformations
    assert not dock.stale and not dock.status.text().startswith(STALE_NOTE)
    before = s.graph

    assert w.apply(best) and s.cursor == 1
    w.refresh()                                      # schedules the ranking 60 s out: the old listing stays
    assert dock.stale and dock.status.text().startswith(STALE_NOTE)
    assert dock.tree.font().italic() and dock.tree.toolTip()
    assert dock.rows(), "the old listing stays usable while it is out of date"

    w.ranker.schedule(0)
    qtbot.waitUntil(lambda: not dock.stale, timeout=LOAD_MS)
    assert w.ranker.shown is s.graph and not dock.tree.font().italic()
    assert not dock.status.text().startswith(STALE_NOTE)
    assert not any(r.ok and r.match.anchors == best.match.anchors and r.transformation.name == best.transformation.name
                   for r in dock.rows()), "the applied match is no longer listed as applicable"

    w.actions_.undo.trigger()
    w.refresh()
    assert s.graph is before and dock.stale         # marked until the ranker shows the cached listing
    w.ranker.schedule(0)
    qtbot.waitUntil(lambda: not dock.stale, timeout=LOAD_MS)
    assert w.ranker.shown is before


def test_long_groups_are_cut_and_a_zoomed_out_viewport_waits(qtbot, make_window, bert_model, monkeypatch):
    """A group lists its best MAX_ROWS matches and counts the rest (building thousands of rows
    blocked the window for 220 ms at 12 layers); zoomed out over more than VIEWPORT_MAX kernels,
    the Viewport group says to zoom in instead of ranking nearly the whole graph again."""
    from studio.gui import qt_ranking, qt_transformations
    monkeypatch.setattr(qt_transformations, "MAX_ROWS", 40)
    monkeypatch.setattr(qt_ranking, "VIEWPORT_MAX", 50)
    w = make_window(rank_delay_ms=60_000)
    _open(qtbot, w, bert_model)
    w.actions_.fit.trigger()
    assert len(w.view.viewport_ids()) > 50
    w.ranker.schedule(0)
    dock = w.transformations

    def whole():
        return next((dock.tree.topLevelItem(k) for k in range(dock.tree.topLevelItemCount())
                     if dock.tree.topLevelItem(k).text(0) == "Whole graph"), None)
    qtbot.waitUntil(lambda: whole() is not None and w.ranker.task is None, timeout=LOAD_MS)
    head = whole()
    total = int(head.text(1).split(" of ")[1])
    assert total > 40 and head.childCount() == 41
    assert head.child(40).text(0) == f"… {total - 40} more" and head.child(40).data(0, 0x0100) is None
    viewport = dock.tree.topLevelItem(1)
    assert viewport.text(0) == "Viewport" and viewport.childCount() == 0
    assert viewport.text(1).startswith("zoom in to rank the ") and "kernels in view" in viewport.text(1)
    assert all(r is not None for r in dock.rows()) and len(dock.rows()) <= 80


def test_closing_the_window_stops_its_ranking(qtbot, make_window, bert_model):
    w = make_window(rank_delay_ms=60_000)
    _open(qtbot, w, bert_model)
    w.actions_.fit.trigger()
    w.ranker.schedule(0)
    qtbot.waitUntil(lambda: w.ranker.task is not None, timeout=LOAD_MS)
    task = w.ranker.task
    w.close()
    assert task.token.cancelled and not w.ranker.timer.isActive()
