"""The autosave is offered back only after an unclean exit (``studio.session.marker``)."""
from __future__ import annotations

from studio.gui import qt_dialogs
from studio.session import Session
from studio.session.marker import marker_for
from tests.gui.conftest import crash_marker
from transforms.registry import create

LOAD_MS = 60000


def _open(qtbot, w, model):
    w.open_model(str(model))
    qtbot.waitUntil(lambda: w.session is not None and not w.tasks - {w.rank_task}, timeout=LOAD_MS)


def _autosave_one_step(model) -> None:
    s = Session.open(model)
    s.apply("expand", next(iter(create("expand").matches(s.graph))).anchors)
    assert Session.autosave_for(model).exists()


def test_restore_is_offered_after_a_crash_and_not_after_a_clean_close(qtbot, make_window, bert_model, monkeypatch):
    asked = []
    monkeypatch.setattr(qt_dialogs, "ask", lambda parent, title, text: asked.append(text) or True)
    _autosave_one_step(bert_model)
    crash_marker(bert_model)                                        # the studio holding it died

    w = make_window(restore_policy="ask")
    _open(qtbot, w, bert_model)
    assert len(asked) == 1 and "did not close cleanly" in asked[0] and "1 steps" in asked[0]
    assert w.session.cursor == 1 and w.stack.count() == 1            # restored
    assert marker_for(bert_model).exists()                           # now held by this window
    w.close()
    assert not marker_for(bert_model).exists()                       # a clean close removes it
    assert Session.autosave_for(bert_model).exists()                 # and keeps the autosave

    w2 = make_window(restore_policy="ask")
    _open(qtbot, w2, bert_model)
    assert len(asked) == 1 and w2.session.cursor == 0                # no offer after a clean close


def test_no_offer_while_another_window_has_the_model_open(qtbot, make_window, bert_model, monkeypatch):
    asked = []
    monkeypatch.setattr(qt_dialogs, "ask", lambda parent, title, text: asked.append(text) or True)
    w = make_window(restore_policy="ask")
    _open(qtbot, w, bert_model)
    w.apply_step("expand", next(iter(create("expand").matches(w.session.graph))).anchors)
    w2 = make_window(restore_policy="ask")
    _open(qtbot, w2, bert_model)
    assert not asked and w2.session.cursor == 0                      # w is alive: not a crash
    w2.close()
    assert marker_for(bert_model).exists()                           # w still holds it
    w.close()
    assert not marker_for(bert_model).exists()


def test_declining_the_offer_opens_the_model_as_it_is(qtbot, make_window, bert_model, monkeypatch):
    monkeypatch.setattr(qt_dialogs, "ask", lambda parent, title, text: False)
    _autosave_one_step(bert_model)
    crash_marker(bert_model)
    w = make_window(restore_policy="ask")
    _open(qtbot, w, bert_model)
    assert w.session.cursor == 0 and w.stack.count() == 0


def test_the_models_folder_stays_untouched(qtbot, make_window, bert_model, tmp_path, _user_state_dir):
    """Opening, tuning and closing write the autosave and the marker to the state dir only (a
    checkout of resources/examples stays clean; a read-only folder works)."""
    (tmp_path / "models").mkdir()
    bert_model = bert_model.rename(tmp_path / "models" / bert_model.name)
    listing = sorted(p.name for p in bert_model.parent.iterdir())
    w = make_window()
    _open(qtbot, w, bert_model)
    assert marker_for(bert_model).parent == _user_state_dir / "dcstudio" / "autosave"
    w.apply_step("expand", next(iter(create("expand").matches(w.session.graph))).anchors)
    assert Session.autosave_for(bert_model).exists() and w.session.cursor == 1
    w.close()
    assert sorted(p.name for p in bert_model.parent.iterdir()) == listing
