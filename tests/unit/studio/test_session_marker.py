"""Crash detection: the session marker beside the autosave (``studio.session.marker``)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from studio.session import marker as sm
from studio.session import Session


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"not read")
    yield path
    while sm._held.get(sm.marker_for(path)):               # a failing test must not leak a claim
        sm.release(path)


def dead_pid() -> int:
    """The id of a process that has just exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def write_marker(model, **fields) -> None:
    doc = {"pid": os.getpid(), "host": socket.gethostname(), "started": sm.process_start(os.getpid()), **fields}
    sm.marker_for(model).parent.mkdir(parents=True, exist_ok=True)
    sm.marker_for(model).write_text(json.dumps(doc))


def test_marker_lives_beside_the_autosave(model):
    assert sm.marker_for(model) == Session.autosave_for(model).with_suffix(".lock")
    assert sm.marker_for(model).name.startswith("m.onnx-")


def test_claim_then_clean_release_leaves_no_marker(model):
    assert not sm.crashed(model)                                 # never opened
    marker = sm.claim(model)
    assert marker.exists() and json.loads(marker.read_text())["pid"] == os.getpid()
    assert not sm.crashed(model)                                 # open here and now: not a crash
    sm.release(model)
    assert not marker.exists() and not sm.crashed(model)


def test_a_marker_of_a_dead_process_is_a_crash(model):
    write_marker(model, pid=dead_pid())
    assert sm.crashed(model)


def test_a_reused_pid_is_a_crash(model):
    started = sm.process_start(os.getpid())
    if started is None:
        pytest.skip("no /proc: process start times are unknown here")
    write_marker(model, started=started - 1)                    # this pid, but an older process wrote it
    assert sm.crashed(model)


def test_unreadable_marker_is_a_crash(model):
    sm.marker_for(model).parent.mkdir(parents=True, exist_ok=True)
    sm.marker_for(model).write_text("{broken")
    assert sm.crashed(model)
    sm.marker_for(model).write_text(json.dumps({"host": socket.gethostname()}))
    assert sm.crashed(model)


def test_windows_of_one_process_share_the_marker(model):
    sm.claim(model)
    sm.claim(model)
    sm.release(model)
    assert sm.marker_for(model).exists()                         # the other window still has it open
    sm.release(model)
    assert not sm.marker_for(model).exists()


def test_release_never_removes_another_process_marker(model):
    sm.claim(model)
    write_marker(model, pid=os.getppid(), started=sm.process_start(os.getppid()))   # another studio took over
    sm.release(model)
    assert sm.marker_for(model).exists() and not sm.crashed(model)


def test_the_marker_goes_to_the_state_dir_never_beside_the_model(tmp_path, _user_state_dir):
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "m.onnx").write_bytes(b"x")
    marker = sm.claim(folder / "m.onnx")
    try:
        assert marker.parent == _user_state_dir / "dcstudio" / "autosave" and marker.exists()
        assert [p.name for p in folder.iterdir()] == ["m.onnx"]
    finally:
        sm.release(folder / "m.onnx")
    assert not marker.exists()


def test_a_hold_claims_one_model_at_a_time(model, tmp_path):
    other = tmp_path / "other.onnx"
    other.write_bytes(b"x")
    hold = sm.Hold()
    hold.set(model)
    assert sm.marker_for(model).exists()
    hold.set(other)
    assert not sm.marker_for(model).exists() and sm.marker_for(other).exists()
    hold.set(None)
    assert not sm.marker_for(other).exists() and hold.model_path is None
