"""``dcstudio recipe --recipe auto|cnn|substation``: ``auto`` (the default) picks ``cnn`` for a graph with
convolutions and ``substation`` otherwise, the chosen name leads the summary, and the history holds the
``conv_weight_grad`` pass only where it ran; the recipe's history replays with ``--check``."""
from __future__ import annotations

import json

import onnx

from studio.cli import main
from studio.session.recipe import RECIPES, pick_for_model
from tests.conftest import FIXTURES
from tests.unit.transforms.test_conv_weight_grad import training_model

MLP = FIXTURES / "joint_standard/mlp_joint_adamw.onnx"


def _passes(path) -> list[str]:
    return [s["transformation"] for s in json.loads(path.read_text())["steps"] if "pass" in s]


def test_auto_picks_cnn_for_convolutions_and_replays(tmp_path, capsys):
    model = tmp_path / "convs.onnx"
    onnx.save(training_model(), model)
    assert main(["recipe", str(model), "-o", str(tmp_path / "h.json"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cnn: ") and "conv_weight_grad ×2" in out
    assert _passes(tmp_path / "h.json")[0] == "conv_weight_grad"
    assert main(["replay", str(model), str(tmp_path / "h.json"), "--check", "--quiet"]) == 0
    assert "all within tolerance" in capsys.readouterr().out


def test_a_named_recipe_is_run_as_named(tmp_path, capsys):
    model = tmp_path / "convs.onnx"
    onnx.save(training_model(), model)
    assert main(["recipe", str(model), "-o", str(tmp_path / "h.json"), "--recipe", "substation", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("substation: ")
    assert "conv_weight_grad" not in _passes(tmp_path / "h.json")
    assert main(["recipe", str(MLP), "-o", str(tmp_path / "m.json"), "--quiet"]) == 0    # auto, no conv
    assert capsys.readouterr().out.startswith("substation: ")


def test_pick_for_model_reads_the_node_list(tmp_path):
    model = tmp_path / "convs.onnx"
    onnx.save(training_model(), model)
    assert pick_for_model(model) == "cnn" and pick_for_model(MLP) == "substation"
    assert pick_for_model(model, "fuse") == "fuse"
    cnn, substation = RECIPES["cnn"], RECIPES["substation"]     # Substation, with the BatchNorm gradients' sweeps
    assert cnn[2:-2] == substation[:-1] and cnn[-2].transformation == "broadcast_fusion" and cnn[-1] == substation[-1]
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage")
    assert pick_for_model(bad) == "substation"          # the caller's own load names what is wrong
