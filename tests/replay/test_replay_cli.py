"""``dcstudio replay``: reports, exit codes, bad history files, bit-stable replays."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from studio.cli import main
from studio.session import Session
from transforms.registry import create

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, fixtures_dir):
    """A copy of the MLP AdamW training step and a history: expand all, then fuse a few maps."""
    d = tmp_path_factory.mktemp("replay")
    model = d / "mlp_step.onnx"
    shutil.copy(fixtures_dir / "ort_artifacts/mlp/legacy/train_step_adamw.onnx", model)
    s = Session.open(model, autosave=False)
    for m in list(create("expand").matches(s.graph)):
        s.apply("expand", m.anchors)
    mf = create("map_fusion")
    for _ in range(6):
        m = next(m for m in mf.matches(s.graph) if mf.check(s.graph, m).ok)
        s.apply("map_fusion", m.anchors)
    s.save_history(d / "good.json")
    return model, d / "good.json", s


def _replay(capsys, *args) -> tuple[int, str, str]:
    code = main(["replay", *map(str, args), "--quiet"])
    out, err = capsys.readouterr()
    return code, out, err


def test_replay_ok_with_reports(recorded, capsys, tmp_path):
    model, hist, session = recorded
    code, out, err = _replay(capsys, model, hist, "--check", "--json", tmp_path / "r.json",
                             "--junit", tmp_path / "j.xml")
    assert code == 0, err
    doc = json.loads((tmp_path / "r.json").read_text())
    assert len(doc["steps"]) == session.cursor + 1
    assert doc["summary"]["bytes_after"] == session.metrics().bytes
    assert doc["summary"]["bytes_after"] < doc["summary"]["bytes_before"]
    for key in ("bytes", "bound", "ratio", "flops", "peak_bytes", "graph_hash"):
        assert key in doc["steps"][1]
    suite = ET.parse(tmp_path / "j.xml").getroot()
    assert suite.get("tests") == str(session.cursor) and suite.get("failures") == "0"
    assert "replayed" in out


def test_recipe_history_replays_on_the_model_moved_and_renamed(fixtures_dir, capsys, tmp_path):
    """A recipe's pass steps record graph hashes; the model file's path is not part of them, so the
    history replays on the same bytes elsewhere (another checkout, a CI workspace, a renamed file)."""
    here = tmp_path / "a" / "step.onnx"
    here.parent.mkdir()
    shutil.copy(fixtures_dir / "joint_standard/mlp_joint_adamw.onnx", here)
    assert main(["recipe", str(here), "-o", str(tmp_path / "h.json"), "--quiet"]) == 0
    assert any(s.get("pass", {}).get("graph_hash") for s in json.loads((tmp_path / "h.json").read_text())["steps"])
    there = tmp_path / "b" / "renamed.onnx"
    there.parent.mkdir()
    shutil.move(here, there)
    capsys.readouterr()
    code, out, err = _replay(capsys, there, tmp_path / "h.json")
    assert code == 0, err
    assert "replayed" in out


def _history_doc(hist: Path) -> dict:
    return json.loads(hist.read_text())


@pytest.mark.parametrize("mutate, message", [
    (lambda d: "{not json", "not valid JSON"),
    (lambda d: {**d, "model": {**d["model"], "sha256": "0" * 64}}, "recorded on a different model"),
    (lambda d: {**d, "version": 99}, "version 99 is newer"),
    (lambda d: {**d, "steps": [{**d["steps"][0], "transformation": "warp_drive"}]},
     "step 1 (warp_drive): unknown transformation 'warp_drive'"),
    (lambda d: {**d, "steps": d["steps"][:1] + [{**d["steps"][1], "anchors": ["no/such/node"]}]},
     "step 2 (expand): stale anchor 'no/such/node'"),
    (lambda d: {**d, "steps": d["steps"] + [{"transformation": "select_impl", "params": {"impl": "online"},
                                              "anchors": ["/fc1/Gemm"]}]},
     "select_impl does not apply: '/fc1/Gemm' (Gemm) has no implementation 'online'"),
])
def test_bad_histories_exit_2_and_touch_nothing(recorded, capsys, tmp_path, mutate, message):
    model, hist, _ = recorded
    before = model.read_bytes()
    doc = mutate(_history_doc(hist))
    bad = tmp_path / "bad.json"
    bad.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    code, _, err = _replay(capsys, model, bad, "--json", tmp_path / "r.json")
    assert code == 2, err
    assert message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert model.read_bytes() == before
    assert not (tmp_path / "r.json").exists()


def test_regression_against_baseline_exits_1(recorded, capsys, tmp_path):
    model, hist, _ = recorded
    doc = _history_doc(hist)
    base = tmp_path / "base.json"
    assert _replay(capsys, model, hist, "--json", base)[0] == 0
    shorter = tmp_path / "short.json"
    shorter.write_text(json.dumps({**doc, "steps": doc["steps"][:-3]}))
    code, _, err = _replay(capsys, model, shorter, "--baseline", base, "--tolerance", "0%")
    assert code == 1 and "exceed the baseline" in err
    assert _replay(capsys, model, shorter, "--baseline", base, "--tolerance", "50%")[0] == 0


def test_recorded_bytes_regression_exits_1(recorded, capsys, tmp_path):
    model, hist, _ = recorded
    doc = _history_doc(hist)
    doc["steps"][-1]["expect"]["bytes_after"] -= 4
    lying = tmp_path / "lying.json"
    lying.write_text(json.dumps(doc))
    code, _, err = _replay(capsys, model, lying)
    assert code == 1 and "bytes regressed" in err


def test_replay_is_bit_stable_across_hash_seeds(recorded, tmp_path):
    model, hist, _ = recorded
    hashes = []
    for seed in ("0", "4242"):
        out = tmp_path / f"r{seed}.json"
        env = dict(os.environ, PYTHONHASHSEED=seed)
        subprocess.run([sys.executable, "-m", "studio.cli", "replay", str(model), str(hist), "--quiet",
                        "--json", str(out)], check=True, cwd=REPO, env=env, capture_output=True)
        doc = json.loads(out.read_text())
        for step in doc["steps"]:
            step.pop("seconds")
        hashes.append(doc)
    assert hashes[0] == hashes[1]
