"""``Session.validate``: the current graph against the original model's oracle (cached per session)."""
from __future__ import annotations

import shutil

import pytest

from studio.session import Session
from tests.replay.test_replay_oracle import GemmAlphaDrift
from transforms.registry import TRANSFORMATIONS, create


@pytest.fixture
def session(tmp_path, fixtures_dir):
    path = tmp_path / "mlp_joint_adamw.onnx"
    shutil.copy(fixtures_dir / "joint_standard/mlp_joint_adamw.onnx", path)
    return Session.open(path, autosave=False)


def test_validate_passes_after_exact_rewrites_and_names_a_wrong_one(session, monkeypatch):
    for m in list(create("expand").matches(session.graph))[:20]:
        session.apply("expand", m.anchors)
    ok = session.validate()
    assert ok.ok and ok.mismatches == ()
    assert ok.summary.startswith("9 outputs compared with the original model (onnxruntime fp32 vs float64 truth): "
                                 "all within tolerance"), ok.summary
    oracle = session.oracle()
    monkeypatch.setitem(TRANSFORMATIONS, GemmAlphaDrift.name, GemmAlphaDrift)
    session.apply("gemm_alpha_drift", ["node_addmm"])
    bad = session.validate()
    assert not bad.ok and "loss" in {m.output for m in bad.mismatches}
    assert all(m.error > m.tolerance for m in bad.mismatches) and "outside tolerance" in bad.summary
    session.undo()
    assert session.validate().ok and session.oracle() is oracle          # built once per session


def test_validate_a_given_graph_and_the_original_itself(session):
    assert session.validate(session.graph_at(0)).ok
