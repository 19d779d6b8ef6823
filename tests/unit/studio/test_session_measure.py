"""Session.profile / ab / export / graph_at: the headless API the GUI's Timings dock, Export
dialog and compare view call (DESIGN §7)."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from ir.errors import StudioError
from ir.serialize import graph_hash
from studio.session import Session
from transforms.registry import create

pytest.importorskip("numba", reason="numba (the cpu extra) is not installed")


@pytest.fixture
def session(tmp_path, fixtures_dir):
    path = tmp_path / "step.onnx"
    shutil.copy(fixtures_dir / "ort_artifacts/mlp/legacy/train_step_adamw.onnx", path)
    s = Session.open(path, autosave=False)
    for m in list(create("expand").matches(s.graph))[:6]:
        s.apply("expand", m.anchors)
    return s


def test_graph_at_gives_every_recorded_state(session):
    original = session.graph_at(0)
    assert graph_hash(original) == session.original_hash
    assert session.graph_at(session.cursor) is session.graph
    session.undo()
    assert session.graph_at(session.cursor + 1) is not session.graph     # the redo tail is reachable
    with pytest.raises(StudioError, match="there is no step 99"):
        session.graph_at(99)


def test_profile_measures_the_current_graph_with_progress(session):
    seen = []
    prof = session.profile(reps=2, warmup=0, threads=1, on_progress=lambda d, t: seen.append((d, t)))
    # the step is lowered for code generation first, so kernel ids are the expanded maps' ids
    assert len(prof.kernels) >= len(session.graph.nodes) and all(k.ok for k in prof.kernels)
    assert prof.peaks is not None and prof.peaks.bandwidth > 0 and seen
    only = session.profile([prof.kernels[0].node_id], reps=1, warmup=0, threads=1)
    assert [k.node_id for k in only.kernels] == [prof.kernels[0].node_id]


def test_ab_against_the_original(session):
    ab = session.ab(0, reps=3, warmup=1, threads=1)
    assert ab.a.n == ab.b.n == 3 and ab.ratio > 0


def test_export_writes_a_package_whose_check_passes(session, tmp_path):
    res = session.export(tmp_path / "mlp_step")
    text = (res.path / "model.py").read_text(encoding="utf-8")
    assert f"# history: {session.cursor} steps" in text
    proc = subprocess.run([sys.executable, "-m", "mlp_step", "--check"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    again = session.export(tmp_path / "mlp_step")         # an earlier export may be replaced
    assert again.path == res.path


def test_export_never_deletes_a_foreign_folder(session, tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("user work", encoding="utf-8")
    with pytest.raises(StudioError, match="not an earlier dcstudio export"):
        session.export(target)
    assert (target / "notes.txt").read_text(encoding="utf-8") == "user work"
    with pytest.raises(StudioError, match="unknown backend"):
        session.export(tmp_path / "x", backend="tpu")
