"""The bundled example: its Substation-style history replays, cuts bytes ≥30 %, and is bit-stable."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from transforms.history import load

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "resources/examples/bert_layer_base_train.onnx"
HISTORY = REPO / "resources/examples/bert_layer_base_train.history.json"


def _replay(out: Path, seed: str, *extra: str) -> dict:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    proc = subprocess.run([sys.executable, "-m", "studio.cli", "replay", str(MODEL), str(HISTORY), "--quiet",
                           "--json", str(out), *extra], cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    doc["stdout"] = proc.stdout
    return doc


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    d = tmp_path_factory.mktemp("bundled")
    return _replay(d / "a.json", "0", "--check"), _replay(d / "b.json", "98765")


def test_history_holds_the_substation_recipe():
    names = {s.transformation for s in load(HISTORY).steps}
    assert {"expand", "map_fusion", "reduction_fusion", "gemm_epilogue_fusion", "horizontal_fusion",
            "optimizer_fusion"} <= names


def test_bytes_fall_at_least_30_percent(reports):
    summary = reports[0]["summary"]
    assert summary["reduction"] >= 0.30, summary
    assert summary["failures"] == 0
    assert "moved/bound" in reports[0]["stdout"]
    print(f"\nbundled recipe: {summary['bytes_before'] / 1e6:.1f} MB -> {summary['bytes_after'] / 1e6:.1f} MB "
          f"({-summary['reduction']:.1%}), bound {summary['bound'] / 1e6:.1f} MB, ratio {summary['ratio']:.2f}x")


def test_replay_is_bit_stable(reports):
    a, b = ([{k: v for k, v in s.items() if k != "seconds"} for s in r["steps"]] for r in reports)
    assert a == b
    assert reports[0]["summary"]["graph_hash"] == reports[1]["summary"]["graph_hash"]


def test_per_step_hashes_are_full_hashes():
    """``replay`` hashes each step incrementally (digests of untouched nodes reused); after every
    tenth step and at the end the figure equals a from-scratch ``graph_hash``."""
    from ir.onnx_import import import_model
    from ir.serialize import graph_hash
    from transforms.replay import replay
    graph = import_model(MODEL)
    hist = load(HISTORY)
    seen = []
    reports = replay(graph, hist, on_step=lambda r: seen.append(r.graph_hash == graph_hash(graph))
                     if r.step % 10 == 0 else None, every_peak=False)
    assert seen and all(seen)
    assert reports[-1].graph_hash == graph_hash(graph)
    assert reports[-1].peak_bytes is not None and reports[1].peak_bytes is None
