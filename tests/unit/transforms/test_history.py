"""History files: schema validation, atomic save, round trip."""
from __future__ import annotations

import json

import pytest

from transforms.history import FORMAT, History, HistoryError, Step, check_model, from_json, load, save


def _doc(**over):
    d = {"format": FORMAT, "version": 1, "model": {"sha256": "ab" * 32, "name": "m.onnx"},
         "bindings": {"batch": 8}, "training": None,
         "steps": [{"transformation": "expand", "params": {"impl": "online"}, "anchors": ["sm"],
                    "expect": {"bytes_after": 10}}]}
    d.update(over)
    return d


def test_round_trip(tmp_path):
    h = from_json(_doc())
    assert h.steps[0] == Step("expand", {"impl": "online"}, ("sm",), 10)
    save(h, tmp_path / "h.json")
    assert load(tmp_path / "h.json") == h
    assert json.loads((tmp_path / "h.json").read_text())["format"] == FORMAT


def test_version_1_training_options_keep_their_trainable_default():
    """Version-1 files were recorded when an unnamed trainable set meant every float initializer."""
    old = from_json(_doc(training={"loss": "mse", "optimizer": "adamw"}))
    assert old.training == {"loss": "mse", "optimizer": "adamw", "trainable": "all"}
    new = from_json(_doc(version=2, training={"loss": "mse", "optimizer": "adamw"}))
    assert new.training == {"loss": "mse", "optimizer": "adamw"}          # today's default applies
    assert from_json(_doc(training={"loss": "mse", "trainable": "parameters"})).training["trainable"] == "parameters"


@pytest.mark.parametrize("change, message", [
    ({"format": "other"}, "'format' must be 'dcstudio-history'"),
    ({"version": 5}, "version 5 is newer than this dcstudio understands"),
    ({"version": "1"}, "'version' must be an integer"),
    ({"model": {"name": "m"}}, "'model' must hold"),
    ({"bindings": {"batch": "8"}}, "'bindings' must map names to integers"),
    ({"steps": {}}, "'steps' must be a list"),
    ({"steps": [{"params": {}, "anchors": []}]}, "step 1: needs a 'transformation' name"),
    ({"steps": [{"transformation": "expand", "anchors": "sm"}]}, "step 1: 'anchors' must be a list"),
    ({"steps": [{"transformation": "x", "anchors": [], "params": {"f": {"__class__": object.__name__}}},
                {"transformation": "x", "anchors": [], "expect": {"bytes_after": -1}}]},
     "step 2: 'expect.bytes_after' must be a non-negative integer"),
])
def test_schema_errors_say_what_and_where(change, message):
    with pytest.raises(HistoryError, match=message.replace("(", r"\(").replace(")", r"\)")):
        from_json(_doc(**change))


def test_garbage_and_missing_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\x00\xffnot json")
    with pytest.raises(HistoryError, match="bad.json: (not valid JSON|cannot read)"):
        load(bad)
    with pytest.raises(HistoryError, match="file not found"):
        load(tmp_path / "missing.json")


def test_wrong_model_hash():
    h = from_json(_doc())
    with pytest.raises(HistoryError, match="recorded on a different model"):
        check_model(h, "cd" * 32, "other.onnx")


def test_save_is_atomic_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "h.json"
    target.write_text("previous")
    h = History("s", "m", (Step("expand", {}, ("a",)),))
    monkeypatch.setattr(History, "dumps", lambda self: (_ for _ in ()).throw(RuntimeError("disk full")))
    with pytest.raises(RuntimeError):
        save(h, target)
    assert target.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["h.json"]


def test_pass_steps_round_trip_and_are_validated(tmp_path):
    h = from_json(_doc(version=3, steps=[{"transformation": "map_fusion", "params": {},
                                          "pass": {"applications": 12, "graph_hash": "0f" * 32},
                                          "expect": {"bytes_after": 7}}]))
    step = h.steps[0]
    assert step.is_pass and step.anchors == () and step.applications == 12 and step.bytes_after == 7
    save(h, tmp_path / "p.json")
    assert load(tmp_path / "p.json") == h
    assert "anchors" not in json.loads((tmp_path / "p.json").read_text())["steps"][0]
    for bad, message in [({"applications": -1, "graph_hash": None}, "'pass.applications' must be"),
                         ({"applications": 3, "graph_hash": "xyz"}, "'pass.graph_hash' must be a sha256"),
                         ({"applications": True}, "'pass.applications' must be")]:
        with pytest.raises(HistoryError, match=message):
            from_json(_doc(version=3, steps=[{"transformation": "expand", "pass": bad}]))
    with pytest.raises(HistoryError, match="a pass step has no anchors"):
        from_json(_doc(version=3, steps=[{"transformation": "expand", "anchors": ["a"],
                                          "pass": {"applications": 1, "graph_hash": None}}]))


def test_transfer_and_scoped_pass_steps_round_trip_and_are_validated(tmp_path):
    steps = [{"transformation": "map_fusion", "params": {},
              "pass": {"applications": 3, "graph_hash": None, "scope": "layer.0"}},
             {"transformation": "transfer", "params": {"layer": "layer.0", "steps": 1, "to": ["layer.1"]},
              "transfer": {"applications": 3, "graph_hash": "0f" * 32}}]
    h = from_json(_doc(version=4, steps=steps))
    scoped, transfer = h.steps
    assert scoped.is_pass and scoped.scope == "layer.0" and not scoped.is_transfer
    assert transfer.is_transfer and not transfer.is_pass and transfer.applications == 3
    save(h, tmp_path / "t.json")
    assert load(tmp_path / "t.json") == h
    for params, message in [({"layer": "layer.0", "steps": 0, "to": ["layer.1"]}, "'params.steps' must be"),
                            ({"layer": "", "steps": 1, "to": ["layer.1"]}, "'params.layer' must name"),
                            ({"layer": "layer.0", "steps": 1, "to": []}, "'params.to' must list")]:
        with pytest.raises(HistoryError, match=message):
            from_json(_doc(version=4, steps=[{**steps[1], "params": params}]))
    with pytest.raises(HistoryError, match="needs 'transfer.applications'"):
        from_json(_doc(version=4, steps=[{"transformation": "transfer", "params": steps[1]["params"]}]))
