"""``dcstudio train-graph``: a standard-ONNX training step that plain onnxruntime runs; errors write nothing."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from ir.containers import Role
from ir.onnx_import import import_model
from studio.cli import main


def test_train_graph_from_fixture_forward(fixtures_dir, tmp_path, capsys):
    out = tmp_path / "mlp_train.onnx"
    code = main(["train-graph", str(fixtures_dir / "ort_artifacts/mlp/legacy/forward.onnx"), "-o", str(out),
                 "--loss", "cross_entropy", "--optimizer", "lion", "--lr", "0.01"])
    assert code == 0 and "lion optimizer" in capsys.readouterr().out
    model = onnx.load(str(out))
    assert {o.domain for o in model.opset_import} <= {"", "ai.onnx"}
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    g = import_model(out)
    roles = {n: g.containers[n].role for n in g.outputs}
    assert Role.GRADIENT in roles.values() and Role.OPTIMIZER_STATE in roles.values()
    feeds = {"input": np.random.default_rng(0).standard_normal((8, 784)).astype(np.float32),
             "labels": np.arange(8, dtype=np.int64) % 10}
    for i in sess.get_inputs():
        if i.name.endswith(".m"):
            feeds[i.name] = np.zeros([d for d in i.shape], np.float32)
        elif i.name == "learning_rate":
            feeds[i.name] = np.array(0.01, np.float32)
    loss = sess.run(["loss"] if "loss" in [o.name for o in sess.get_outputs()] else None, feeds)[0]
    assert np.isfinite(loss).all()


def test_unsupported_op_writes_nothing(tmp_path, capsys):
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Round", ["h"], ["y"], name="rounding")]
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "W")
    g = helper.make_graph(nodes, "f", [helper.make_tensor_value_info("x", 1, [2, 4])],
                          [helper.make_tensor_value_info("y", 1, [2, 3])], [w])
    src = tmp_path / "fwd.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
    out = tmp_path / "train.onnx"
    code = main(["train-graph", str(src), "-o", str(out), "--loss", "mse"])
    err = capsys.readouterr().err
    assert code == 2 and "Round" in err and "'rounding'" in err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["fwd.onnx"]
