"""Tools → Tune this scope… (``studio/gui/qt_tune.py``): a real search on the MLP AdamW step from the
graph as it stands, with progress; Cancel keeps the best found so far; applying a result is one undo
macro (one Undo takes every pass back, Redo puts them back); with Measure, the best are timed as whole
exported steps against the recipe's and the table shows the measured ratio."""
from __future__ import annotations

import pytest

from codegen.cupy_cuda.profile import device_reason
from studio.gui.qt_tune import SessionRef, TuneDialog, scope_of
from studio.session import Session


@pytest.fixture
def window(make_window, fixtures_dir):
    w = make_window()
    w.set_session(Session.open(fixtures_dir / "joint_standard" / "mlp_joint_adamw.onnx", autosave=False))
    return w


def _dialog(w) -> TuneDialog:
    w.actions_.tune.trigger()
    dialogs = w.findChildren(TuneDialog)
    assert len(dialogs) == 1 and dialogs[0].isVisible()
    return dialogs[0]


def test_search_then_apply_as_one_undoable_group(qtbot, window):
    w, s = window, window.session
    d = _dialog(w)
    d.budget.setValue(12)
    d.start_button.click()
    assert not d.start_button.isEnabled() and d.cancel_button.isEnabled()
    qtbot.waitUntil(lambda: d.task is None, timeout=120000)
    assert d.result is not None and not d.result.stopped
    assert d.progress.value() == 12 and d.table.rowCount() >= 1
    assert d.status.text().startswith("done: 12 sequences evaluated")
    before, moved, entries = s.cursor, s.metrics().bytes, w.stack.count()
    recorded = d.apply_selected()
    assert recorded >= 1 and s.cursor == before + recorded
    assert w.stack.count() == entries + 1 and w.stack.text(entries).startswith("tune: ")
    assert s.metrics().bytes == d.result.score.bytes < moved
    w.actions_.undo.trigger()
    assert s.cursor == before and s.metrics().bytes == moved
    w.actions_.redo.trigger()
    assert s.cursor == before + recorded and s.metrics().bytes == d.result.score.bytes
    d.close()


def test_cancel_keeps_the_best_found_so_far(qtbot, window):
    d = _dialog(window)
    d.budget.setValue(5000)
    d.start_button.click()
    qtbot.waitUntil(lambda: d.progress.value() >= 3, timeout=120000)
    d.cancel_button.click()
    qtbot.waitUntil(lambda: d.task is None, timeout=120000)
    assert d.result is not None and d.result.stopped and d.result.progress.evaluated < 5000
    assert d.table.rowCount() >= 1 and d.status.text().startswith("stopped early")
    assert d.apply_button.isEnabled()
    d.close()


def test_scope_is_the_layer_the_selection_shares():
    assert scope_of(["encoder/layer.2/attn/MatMul", "encoder/layer.2/ffn/Add"]) == "layer.2"
    assert scope_of(["encoder/layer.2/attn/MatMul", "encoder/layer.3/ffn/Add"]) is None
    assert scope_of(["loss/ReduceMean"]) is None and scope_of([]) is None


@pytest.mark.slow
def test_the_best_are_timed_as_whole_steps_against_the_recipe(qtbot, window):
    d = _dialog(window)
    d.budget.setValue(6)
    d.measure.setValue(1)
    d.start_button.click()
    qtbot.waitUntil(lambda: d.task is None, timeout=600000)
    res = d.result
    assert res is not None and not res.stopped and len(res.measured) == 1
    m = res.measured[0]
    assert m.ratio > 0 and m.recipe_ms > 0 and m.candidate_ms > 0 and m.threads >= 1 and not m.note
    cells = {d.table.item(r, 3).text(): d.table.item(r, 2).text() for r in range(d.table.rowCount())}
    measured = [c for c in cells.values() if c.startswith(f"{m.ratio:.3f}x: ") and c.endswith(" ms")]
    assert len(measured) == 1 and "the recipe (baseline)" in cells.values()
    assert sum(1 for c in cells.values() if c) == 2          # only the timed rows say anything
    assert "Timed 1 of the best as whole steps against the recipe's on the CPU" in d.status.text()
    h = res.headroom                                     # the recipe's step profiled: what any sequence could gain
    assert h is not None and h.bound >= 1.0 and f"no history can make this step more than {h.bound:.3f}x" \
        in d.status.text()
    assert d.progress.maximum() == 1 and d.progress.value() == 1
    d.close()


@pytest.mark.skipif(device_reason() is None, reason="a CUDA device is present: this checks the message where there is none")
def test_timing_on_a_missing_gpu_says_why(qtbot, window):
    d = _dialog(window)
    item = d.time_on.model().item(1)
    qtbot.waitUntil(lambda: not item.isEnabled(), timeout=60000)    # found out off the GUI thread
    assert device_reason() in item.toolTip()
    d.budget.setValue(3)
    d.measure.setValue(1)
    d.time_on.setCurrentIndex(1)
    d.start_button.click()
    qtbot.waitUntil(lambda: d.task is None, timeout=120000)
    assert d.result is None
    assert d.status.text().startswith("The search failed: ") and "CUDA device" in d.status.text()
    d.close()


def test_a_scope_session_checks_against_the_same_original(window):
    """A package measured from the dialog (the GPU's is checked against the original model) must compare
    with the model the window's session compares with: a forward model's generated training step."""
    s = window.session
    s.training = {"loss": "mse", "optimizer": "adamw"}
    opened = SessionRef(s, None).open()
    assert opened.training == s.training and opened.model_path == s.model_path
    assert opened.graph is not s.graph and opened.metrics().bytes == s.metrics().bytes
