"""The headless Session: apply/undo/redo/revert, live figures, observers, autosave and restore."""
from __future__ import annotations

import shutil

import pytest

from ir.errors import StudioError
from ir.movement import report
from ir.serialize import graph_hash
from studio.session import Session
from transforms.registry import create


@pytest.fixture
def model(tmp_path, fixtures_dir):
    path = tmp_path / "step.onnx"
    shutil.copy(fixtures_dir / "ort_artifacts/mlp/legacy/train_step_adamw.onnx", path)
    return path


def _expand_some(s: Session, n: int = 4) -> list[str]:
    ids = [m.anchors[0] for m in create("expand").matches(s.graph)][:n]
    for ident in ids:
        s.apply("expand", [ident])
    return ids


def test_apply_updates_figures_incrementally(model):
    s = Session.open(model, autosave=False)
    before = s.metrics().bytes
    _expand_some(s, 100)
    m = next(m for m in create("map_fusion").matches(s.graph) if create("map_fusion").check(s.graph, m).ok)
    app = s.apply("map_fusion", m.anchors)
    assert s.metrics().bytes == report(s.graph).total.bytes
    assert s.metrics().bytes == s.trend()[-2] + app.delta.bytes and app.delta.bytes < 0
    assert s.trend()[0] == before and s.trend()[-1] == s.metrics().bytes


def test_states_share_untouched_nodes_and_earlier_states_stay_intact(model):
    """Each step copies only the kernels it may touch (``Graph.clone_sharing``): earlier states
    keep their hash after many fusions, and untouched kernels are one object across states."""
    s = Session.open(model, autosave=False)
    h0 = s.original_hash
    _expand_some(s, 1000)
    mf = create("map_fusion")
    while (m := next((m for m in mf.matches(s.graph) if mf.check(s.graph, m).ok), None)) is not None:
        s.apply("map_fusion", m.anchors)
    assert s.cursor > 20
    mid = s.cursor // 2
    h_mid = graph_hash(s.graph_at(mid))
    s.revert_to(mid)
    s.apply("map_fusion", next(m for m in create("map_fusion").matches(s.graph)
                               if create("map_fusion").check(s.graph, m).ok).anchors)
    assert graph_hash(s.graph_at(0)) == h0 and graph_hash(s.graph_at(mid)) == h_mid
    first, last = s.graph_at(1), s.graph
    shared = [i for i in first.nodes if i in last.nodes and first.nodes[i] is last.nodes[i]]
    assert shared and len(shared) < len(last.nodes)


def test_undo_redo_revert(model):
    s = Session.open(model, autosave=False)
    h0 = s.original_hash
    _expand_some(s, 3)
    h3 = graph_hash(s.graph)
    s.undo()
    s.undo()
    assert s.cursor == 1 and s.can_redo()
    s.redo()
    s.redo()
    assert graph_hash(s.graph) == h3
    s.revert_to(0)
    assert graph_hash(s.graph) == h0 and s.metrics().bytes == report(s.graph).total.bytes
    s.revert_to(3)
    assert graph_hash(s.graph) == h3
    s.revert_to(1)
    ident = next(m.anchors[0] for m in create("expand").matches(s.graph))
    s.apply("expand", [ident])                     # a new step drops the redo tail
    assert s.cursor == 2 and not s.can_redo() and len(s.steps) == 2
    with pytest.raises(StudioError, match="no step 9"):
        s.revert_to(9)


def test_failed_apply_changes_nothing(model):
    s = Session.open(model, autosave=False)
    h0 = graph_hash(s.graph)
    with pytest.raises(StudioError, match="'nope' is no longer in the graph.*re-rank the matches") as e:
        s.apply("expand", ["nope"])
    assert "history" not in str(e.value)      # worded for the studio, not for replay
    with pytest.raises(StudioError, match="unknown transformation"):
        s.apply("teleport", ["/fc1/Gemm"])
    assert s.cursor == 0 and graph_hash(s.graph) == h0


def test_observers_hear_every_change(model):
    s = Session.open(model, autosave=False)
    events = []
    unsubscribe = s.subscribe(lambda event, payload: events.append(event))
    _expand_some(s, 2)
    s.undo()
    s.redo()
    s.revert_to(0)
    unsubscribe()
    s.redo()
    assert events == ["applied", "applied", "undone", "redone", "reverted"]


def test_autosave_after_every_step_and_restore(model, _user_state_dir):
    listing = sorted(model.parent.iterdir())
    s = Session.open(model)
    target = Session.autosave_for(model)
    assert target.parent == _user_state_dir / "dcstudio" / "autosave" and target.name.startswith(model.name)
    ids = _expand_some(s, 3)
    assert [st["anchors"][0] for st in __import__("json").loads(target.read_text())["steps"]] == ids
    s.undo()
    crashed_hash = graph_hash(s.graph)
    fresh = Session.open(model)
    assert fresh.restore() == 2
    assert graph_hash(fresh.graph) == crashed_hash
    fresh.discard_autosave()
    assert not target.exists()
    assert sorted(model.parent.iterdir()) == listing, "nothing is written beside the model"


def test_an_unwritable_state_dir_turns_autosave_off_and_says_so(model, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))          # mkdir under a file fails, even as root
    s = Session.open(model)
    events = []
    s.subscribe(lambda e, p: events.append((e, p)))
    _expand_some(s, 2)
    assert s.cursor == 2, "the steps stand although the autosave failed"
    failed = [p for e, p in events if e == "autosave-failed"]
    assert len(failed) == 1 and str(blocker) in failed[0] and "Save history" in failed[0]
    assert not s.autosave_enabled and [e for e, _ in events].count("applied") == 2


def test_save_and_load_history(model, tmp_path):
    s = Session.open(model, autosave=False)
    _expand_some(s, 3)
    s.save_history(tmp_path / "h.json")
    other = Session.open(model, autosave=False)
    assert other.load_history(tmp_path / "h.json") == 3
    assert graph_hash(other.graph) == graph_hash(s.graph)
    assert other.steps[-1].bytes_after == s.metrics().bytes


def test_matches_are_grouped_and_ranked(model):
    s = Session.open(model, autosave=False)
    _expand_some(s, 30)
    some_map = next(n.id for n in s.graph.nodes.values() if n.id.endswith("/expanded"))
    groups = s.matches(selection=[some_map], viewport=list(s.graph.nodes)[:10])
    assert list(groups) == ["Selection", "Viewport", "Whole graph"]
    whole = groups["Whole graph"]
    oks = [r for r in whole if r.ok]
    assert oks and all(a.bytes_saved >= b.bytes_saved for a, b in zip(oks, oks[1:]))
    keys = [(r.transformation.name, r.match.anchors) for g in groups.values() for r in g]
    assert len(keys) == len(set(keys))                            # each match listed once
    failed = [r for r in whole if not r.ok]
    assert all(r.reason for r in failed)


def test_open_forward_model_as_training_and_replay(fixtures_dir, tmp_path, capsys):
    from studio.cli import main
    fwd = tmp_path / "mlp_forward.onnx"
    shutil.copy(fixtures_dir / "ort_artifacts/mlp/legacy/forward.onnx", fwd)
    options = {"loss": "cross_entropy", "optimizer": "sgd", "lr": 0.1}
    s = Session.open(fwd, training=options, autosave=False)
    assert s.graph.meta["training"] == "generated"
    assert "fc1.weight.new" in s.graph.outputs and s.graph.containers["fc1.weight"].role.value == "parameter"
    _expand_some(s, 3)
    s.save_history(tmp_path / "h.json")
    assert __import__("json").loads((tmp_path / "h.json").read_text())["training"] == options
    assert main(["replay", str(fwd), str(tmp_path / "h.json"), "--quiet", "--check"]) == 0
    assert "replayed 3 steps" in capsys.readouterr().out


def test_a_pass_is_one_undoable_step_and_its_history_reloads(model, tmp_path):
    s = Session.open(model, autosave=False)
    assert s.apply_pass("expand") is not None
    app = s.apply_pass("map_fusion")
    assert s.cursor == 2 and app.delta.bytes < 0 and app.anchors == ()
    assert s.metrics().bytes == report(s.graph).total.bytes
    assert s.steps[1].is_pass and s.steps[1].applications > 5 and s.steps[1].graph_hash == graph_hash(s.graph)
    assert s.apply_pass("map_fusion") is None and s.cursor == 2        # a fixpoint: nothing to record
    h2 = graph_hash(s.graph)
    s.undo()
    assert s.metrics().bytes == report(s.graph).total.bytes and graph_hash(s.graph) != h2
    s.redo()
    s.save_history(tmp_path / "h.json")
    s2 = Session.open(model, autosave=False)
    assert s2.load_history(tmp_path / "h.json") == 2 and graph_hash(s2.graph) == h2

    from studio.gui.loading import open_session
    opened = open_session(model, [tmp_path / "h.json"], autosave=False)
    assert opened.error is None and opened.steps == 2 and graph_hash(opened.session.graph) == h2
