"""``dcstudio inspect``: the kernel table, totals, bound and ratio, as text and JSON."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ir.movement import report
from ir.onnx_import import import_model
from studio.cli import main
from studio.text import parse_bindings

REPO = Path(__file__).resolve().parents[3]


def test_inspect_prints_table_totals_bound_and_ratio(fixtures_dir, capsys):
    path = fixtures_dir / "ort_artifacts/bert_layer_base/legacy16/train_step_adamw.onnx"
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    rep = report(import_model(path))
    header = out.splitlines()[1]
    for col in ("id", "op", "read", "written", "FLOPs", "FLOP/B"):
        assert col in header
    assert f"({rep.total.bytes} B:" in out
    assert f"({rep.bound_bytes} B:" in out
    assert f"moved / bound    {rep.ratio:>11.2f}x" in out
    assert "/layer/attention/self/Softmax" in out
    assert len(out.splitlines()) > len(rep.kernels)


def test_inspect_json(fixtures_dir, capsys):
    path = fixtures_dir / "ort_artifacts/mlp/legacy/training_model.onnx"
    assert main(["inspect", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "ort-artifacts"
    assert doc["total"]["bytes"] == sum(k["bytes"] for k in doc["kernels"])
    assert doc["ratio"] == pytest.approx(doc["total"]["bytes"] / doc["bound_bytes"], rel=1e-5)
    gemm = next(k for k in doc["kernels"] if k["op"] == "Gemm")
    assert gemm["flops"] > 0 and {"id", "bytes_read", "bytes_written", "intensity"} <= gemm.keys()


def test_inspect_top(fixtures_dir, capsys):
    path = fixtures_dir / "ort_artifacts/bert_layer_base/legacy16/train_step_adamw.onnx"
    assert main(["inspect", str(path), "--top", "5"]) == 0
    out = capsys.readouterr().out
    assert "(top 5 kernels by bytes moved)" in out


def test_ops_lists_claimed_ops(capsys):
    assert main(["ops"]) == 0
    out = capsys.readouterr().out
    assert "MatMul" in out and "com.microsoft" in out and "AdamW" in out


def test_parse_bindings():
    assert parse_bindings(["batch=8", " seq = 128"]) == {"batch": 8, "seq": 128}



def test_a_reader_that_goes_away_gets_no_traceback(fixtures_dir):
    """``dcstudio inspect MODEL | head``: the reader closes the pipe (here ``true`` closes it before
    the table is written, after its ~1 s start-up); exit 141 as a shell reports SIGPIPE, no traceback."""
    model = fixtures_dir / "ort_artifacts/mlp/legacy/train_step_adamw.onnx"
    proc = subprocess.run(f"{sys.executable} -m studio.cli inspect {model} | true; echo ${{PIPESTATUS[0]}}",
                          shell=True, cwd=REPO, capture_output=True, text=True, executable="/bin/bash")
    assert proc.stdout.strip() == "141" and proc.stderr == "", proc.stdout + proc.stderr


def test_inspect_and_replay_count_bytes_as_exported(tmp_path, capsys):
    """``--exported cpu``: the bytes the CPU program moves beside the bytes as fused, per ``traffic``."""
    from codegen.numba_cpu.backend import program
    from codegen.program.traffic import traffic
    from studio.session.exporting import load_with_history
    model = REPO / "resources/examples/bert_layer_base_train.onnx"
    history = REPO / "resources/examples/bert_layer_base_train.history.json"
    assert main(["inspect", str(model), "--exported", "cpu", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["exported"]["bytes_as_fused"] == pytest.approx(doc["total"]["bytes"], rel=1e-6)   # lowered: within bytes
    assert doc["exported"]["bytes_as_exported"] < doc["total"]["bytes"]          # views move nothing
    report_path = tmp_path / "r.json"
    assert main(["replay", str(model), str(history), "--quiet", "--exported", "cpu", "--json", str(report_path)]) == 0
    out = capsys.readouterr().out
    graph, _ = load_with_history(str(model), str(history), [])
    want = traffic(program(graph))
    assert want.summary() in out and "each member of the group reads its operands" in out
    summary = json.loads(report_path.read_text())["summary"]
    assert summary["exported"] == {"backend": "cpu", "bytes_as_fused": want.fused, "bytes_as_exported": want.exported}
    assert want.fused == pytest.approx(summary["bytes_after"], rel=1e-6)
