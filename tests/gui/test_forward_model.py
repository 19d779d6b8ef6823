"""Opening a forward model: the offer to generate its training step (loss, optimizer, …), or to open it as is.

Uses the MLP forward model of ``../shared/fixtures`` (the one ``dcstudio train-graph`` is tested on).
"""
from __future__ import annotations

import json
import shutil

import pytest
from PySide6.QtCore import Qt
from shiboken6 import isValid

from studio.gui.qt_training_dialog import QtTrainingDialog
from studio.session import Session
from tests.gui.conftest import crash_marker, export_and_check
from transforms.registry import create

LOAD_MS = 60000


@pytest.fixture
def forward(fixtures_dir, tmp_path):
    path = tmp_path / "mlp_forward.onnx"
    shutil.copy(fixtures_dir / "ort_artifacts/mlp/legacy/forward.onnx", path)
    return path


def _offer(qtbot, w, model) -> QtTrainingDialog:
    w.open_model(str(model))
    qtbot.waitUntil(lambda: w.training_dialog is not None and w.training_dialog.isVisible(), timeout=LOAD_MS)
    return w.training_dialog


def _settled(qtbot, w):
    qtbot.waitUntil(lambda: w.session is not None and not w.tasks - {w.rank_task}, timeout=LOAD_MS)


def test_generate_the_training_graph_with_chosen_loss_and_optimizer(qtbot, make_window, forward):
    w = make_window()
    d = _offer(qtbot, w, forward)
    assert w.session is None and "mlp_forward.onnx</b> is a forward model" in d.intro.text()
    assert (d.loss.currentData(), d.optimizer.currentData(), d.lr.value()) == ("cross_entropy", "adamw", 1e-3)
    assert d.output.currentText() == "output" and not d.momentum.isEnabled()
    plan = d.plan.toPlainText()     # the parameter plan: what is trained and what is kept constant
    assert plan.startswith("trains 4 parameters (") and "fc1.weight, fc1.bias, fc2.weight, fc2.bias" in plan
    assert d.trainable.currentData() == "parameters"
    d.optimizer.setCurrentIndex(d.optimizer.findData("sgd"))
    assert d.momentum.isEnabled()
    d.lr.setValue(0.1)
    qtbot.mouseClick(d.generate_button, Qt.MouseButton.LeftButton)
    _settled(qtbot, w)
    s = w.session
    assert s.training == {"loss": "cross_entropy", "optimizer": "sgd", "lr": 0.1, "weight_decay": 0.0,
                          "momentum": 0.9, "trainable": "parameters"}
    assert s.graph.meta["training"] == "generated" and "fc1.weight.new" in s.graph.outputs
    assert s.graph.containers["fc1.weight"].role.value == "parameter"
    assert w.recent.list() == [str(forward)]
    export_and_check(qtbot, w, forward.parent, "mlp_step")           # the generated step exports and checks


def test_open_the_forward_pass_as_it_is(qtbot, make_window, forward):
    w = make_window()
    d = _offer(qtbot, w, forward)
    qtbot.mouseClick(d.forward_button, Qt.MouseButton.LeftButton)
    _settled(qtbot, w)
    assert w.session.graph.meta["kind"] == "forward" and w.session.training is None
    assert w.session.graph.outputs == ["output"]


def test_cancel_opens_nothing_and_bad_options_are_named(qtbot, make_window, forward):
    w = make_window()
    d = _offer(qtbot, w, forward)
    d.lr.setValue(0.0)
    qtbot.mouseClick(d.generate_button, Qt.MouseButton.LeftButton)
    assert d.isVisible() and "lr" in d.error.text()                   # stays open, names the option
    qtbot.mouseClick(d.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not d.isVisible(), timeout=LOAD_MS)
    qtbot.wait(50)
    assert w.session is None and not w.tasks


def test_a_history_of_a_generated_step_regenerates_it_without_asking(qtbot, make_window, forward, tmp_path):
    options = {"loss": "mse", "optimizer": "lion", "lr": 0.01, "weight_decay": 0.0}
    s = Session.open(forward, training=options)                       # autosaves beside the copy
    s.apply("expand", next(iter(create("expand").matches(s.graph))).anchors)
    s.save_history(tmp_path / "h.json")
    assert json.loads((tmp_path / "h.json").read_text())["training"] == options

    w = make_window()
    w.open_model(str(forward), str(tmp_path / "h.json"))
    _settled(qtbot, w)
    assert w.session.training == options and w.session.cursor == 1 and w.training_dialog is None

    crash_marker(forward)                                             # and a crash restores it the same way
    w2 = make_window(restore_policy="always")
    w2.open_model(str(forward))
    _settled(qtbot, w2)
    assert w2.session.training == options and w2.session.cursor == 1 and w2.training_dialog is None


def test_after_a_crash_the_restore_question_comes_once(qtbot, make_window, forward, monkeypatch):
    """Declining the restore, then generating the training step, must not ask again (the autosave
    was recorded on the forward graph, not on the generated one)."""
    from studio.gui import qt_dialogs
    s = Session.open(forward)
    s.apply("expand", next(iter(create("expand").matches(s.graph))).anchors)
    crash_marker(forward)
    asked = []
    monkeypatch.setattr(qt_dialogs, "ask", lambda parent, title, text: asked.append(text) or False)
    w = make_window(restore_policy="ask")
    d = _offer(qtbot, w, forward)
    assert len(asked) == 1
    d.generate_button.click()
    _settled(qtbot, w)
    assert len(asked) == 1 and w.session.training and w.session.cursor == 0


def test_the_dialog_reports_a_parameter_read_by_two_modules(qtbot, make_window, tmp_path):
    """A weight two modules read (a tie, or tensors an exporter merged) trains as one: the plan says so and
    names ``--untie``."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32), "a.weight")
    nodes = [helper.make_node("MatMul", ["x", "a.weight"], ["h"], name="/a/MatMul"),
             helper.make_node("Relu", ["h"], ["r"], name="/act/Relu"),
             helper.make_node("MatMul", ["r", "a.weight"], ["y"], name="/b/MatMul")]
    g = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], initializer=[w])
    path = tmp_path / "shared.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    d = _offer(qtbot, make_window(), path)
    plan = d.plan.toPlainText()
    assert "a.weight: shared by 2 modules: a, b; if your model does not tie them, pass --untie a.weight" in plan


def _shrink_model(path):
    """y = x·a + Shrink(x·b): b reaches the loss through Shrink, which has no gradient rule."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), n) for n in ("a.weight", "b.weight")]
    nodes = [helper.make_node("MatMul", ["x", "a.weight"], ["h"], name="/a/MatMul"),
             helper.make_node("MatMul", ["x", "b.weight"], ["g"], name="/b/MatMul"),
             helper.make_node("Shrink", ["g"], ["r"], name="/b/Shrink", lambd=0.5),
             helper.make_node("Add", ["h", "r"], ["y"], name="/add/Add")]
    g = helper.make_graph(nodes, "shrink", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], initializer=inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_a_failed_generation_keeps_the_dialog_and_the_parameters_are_checkable(qtbot, make_window, tmp_path,
                                                                              monkeypatch):
    """Generating fails on an op without a gradient rule: the dialog stays open and says so (no "Could not
    open" box); unchecking the parameter that reaches it trains the rest, and the dialog closes."""
    said = []
    w = make_window()
    monkeypatch.setattr(w, "say", lambda text, **kw: said.append(text))
    d = _offer(qtbot, w, _shrink_model(tmp_path / "shrink.onnx"))
    assert d.checked() == ["a.weight", "b.weight"] and d.trainable.currentData() == "parameters"
    d.loss.setCurrentIndex(d.loss.findData("mse"))
    qtbot.mouseClick(d.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "could not generate the training step" in d.error.text(), timeout=LOAD_MS)
    assert d.isVisible() and "no gradient rule for op Shrink" in d.error.text() and d.generate_button.isEnabled()
    assert w.session is None and not said
    d.parameters.item(1).setCheckState(Qt.CheckState.Unchecked)          # leave b.weight out
    assert d.trainable.currentData() == "custom" and d.options()["trainable"] == ("a.weight",)
    qtbot.mouseClick(d.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not isValid(d) or not d.isVisible(), timeout=LOAD_MS)
    _settled(qtbot, w)
    s = w.session
    assert list(s.training["trainable"]) == ["a.weight"]
    assert s.graph.containers["a.weight"].role.value == "parameter" and "a.weight.new" in s.graph.outputs
    assert "b.weight.new" not in s.graph.outputs and not said


def test_presets_and_checks_follow_each_other(qtbot, make_window, forward):
    w = make_window()
    d = _offer(qtbot, w, forward)
    assert d.checked() == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    d.parameters.item(0).setCheckState(Qt.CheckState.Unchecked)
    assert d.trainable.currentData() == "custom"
    d.parameters.item(0).setCheckState(Qt.CheckState.Checked)             # back to the preset's set
    assert d.trainable.currentData() == "parameters"
    for k in range(d.parameters.count()):
        d.parameters.item(k).setCheckState(Qt.CheckState.Unchecked)
    qtbot.mouseClick(d.generate_button, Qt.MouseButton.LeftButton)
    assert d.isVisible() and "no parameter is checked" in d.error.text()
    d.trainable.setCurrentIndex(d.trainable.findData("parameters"))
    assert len(d.checked()) == 4
