"""Bad input to ``dcstudio inspect``: one clear line, exit code 2, no traceback, no file written."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from studio.cli import main

REPO = Path(__file__).resolve().parents[3]


def _save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "bad", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, dt=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dt, shape)


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main(["inspect", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("dcstudio: error: ")
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return tmp_path


def _snapshot(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


def test_garbage_bytes(work, capsys):
    f = work / "garbage.onnx"
    f.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    before = _snapshot(work)
    code, out, err = _run(capsys, f)
    _assert_one_line_error(code, err, str(f), "not a valid ONNX", "Re-export")
    assert _snapshot(work) == before and out == ""


def test_truncated_file(work, capsys, fixtures_dir):
    blob = (fixtures_dir / "ort_artifacts/mlp/legacy/forward.onnx").read_bytes()
    f = work / "truncated.onnx"
    f.write_bytes(blob[: len(blob) // 3])
    code, _, err = _run(capsys, f)
    _assert_one_line_error(code, err, str(f))
    assert "truncated" in err or "not a valid ONNX" in err


def test_missing_initializer(work, capsys):
    m = _model([helper.make_node("MatMul", ["x", "W"], ["y"], name="proj")], [_vi("x", [2, 3])], [_vi("y", [2, 4])])
    code, _, err = _run(capsys, _save(m, work / "missing.onnx"))
    _assert_one_line_error(code, err, "'proj'", "MatMul", "'W'", "missing an initializer")


def test_unsupported_op_is_named(work, capsys):
    m = _model([helper.make_node("FancyOp", ["x"], ["y"], name="fancy", domain="com.example")],
               [_vi("x", [2])], [_vi("y", [2])])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    code, _, err = _run(capsys, _save(m, work / "unsupported.onnx"))
    _assert_one_line_error(code, err, "unsupported op com.example::FancyOp", "'fancy'")


def test_cycle(work, capsys):
    nodes = [helper.make_node("Add", ["x", "z"], ["y"], name="first"),
             helper.make_node("Relu", ["y"], ["z"], name="second")]
    m = _model(nodes, [_vi("x", [2])], [_vi("y", [2])])
    code, _, err = _run(capsys, _save(m, work / "cycle.onnx"))
    _assert_one_line_error(code, err, "cycle", "Add" if "first" in err else "Relu")


def test_external_data_outside_folder_is_refused(work, capsys):
    secret = work / "secret.bin"
    secret.write_bytes(np.ones(4, np.float32).tobytes())
    inner = work / "model"
    inner.mkdir()
    w = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    for k, v in (("location", "../secret.bin"), ("offset", "0"), ("length", "16")):
        entry = w.external_data.add()
        entry.key, entry.value = k, v
    m = _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [_vi("x", [4])], [_vi("y", [4])], [w])
    code, _, err = _run(capsys, _save(m, inner / "ext.onnx"))
    _assert_one_line_error(code, err, "'w'", "outside the model's folder", "refused")


def test_unbound_symbolic_dimension_then_bound(work, capsys):
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="act")], [_vi("x", ["batch", 4])],
               [_vi("y", ["batch", 4])])
    f = _save(m, work / "sym.onnx")
    code, _, err = _run(capsys, f)
    _assert_one_line_error(code, err, "'batch'", "unbound", "--bind batch=")
    code, out, err = _run(capsys, f, "--bind", "batch=8")
    assert code == 0 and err == ""
    assert "total moved" in out and "256 B" in out  # 8*4 floats read + written


def test_bad_bind_syntax(work, capsys):
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [4])], [_vi("y", [4])])
    code, _, err = _run(capsys, _save(m, work / "ok.onnx"), "--bind", "batch")
    _assert_one_line_error(code, err, "--bind expects NAME=POSITIVE_INT")


def test_shape_mismatch(work, capsys):
    w = numpy_helper.from_array(np.zeros((4, 5), np.float32), "W")
    m = _model([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], [_vi("x", [2, 3])],
               [_vi("y", [2, 5])], [w])
    code, _, err = _run(capsys, _save(m, work / "mismatch.onnx"))
    _assert_one_line_error(code, err, "mismatch", "MatMul")


def test_missing_file(work, capsys):
    code, _, err = _run(capsys, work / "nope.onnx")
    _assert_one_line_error(code, err, "file not found")


def test_debug_shows_traceback(work):
    f = work / "garbage.onnx"
    f.write_bytes(b"\x00\x01garbage")
    proc = subprocess.run([sys.executable, "-m", "studio.cli", "--debug", "inspect", str(f)],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr and "not a valid ONNX" in proc.stderr


def test_console_exit_code_is_2(work):
    f = work / "garbage.onnx"
    f.write_bytes(b"\xff" * 100)
    proc = subprocess.run([sys.executable, "-m", "studio.cli", "inspect", str(f)],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
