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
             helper.make_node("Selu", ["h"], ["y"], name="rounding")]
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "W")
    g = helper.make_graph(nodes, "f", [helper.make_tensor_value_info("x", 1, [2, 4])],
                          [helper.make_tensor_value_info("y", 1, [2, 3])], [w])
    src = tmp_path / "fwd.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
    out = tmp_path / "train.onnx"
    code = main(["train-graph", str(src), "-o", str(out), "--loss", "mse"])
    err = capsys.readouterr().err
    assert code == 2 and "Selu" in err and "'rounding'" in err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["fwd.onnx"]


def _if_model(tmp_path):
    """y = If(cond, then: MatMul(x, W_then), else: x @ W); W_then is used only inside the branch."""
    w = numpy_helper.from_array(np.full((4, 4), 0.5, np.float32), "W")
    w_then = numpy_helper.from_array(np.full((4, 4), 2.0, np.float32), "W_then")
    out_vi = helper.make_tensor_value_info("b", 1, [2, 4])
    then_g = helper.make_graph([helper.make_node("MatMul", ["h", "W_then"], ["b"], name="then_mm")], "then_branch",
                               [], [out_vi])
    else_g = helper.make_graph([helper.make_node("Identity", ["h"], ["b"], name="else_id")], "else_branch",
                               [], [out_vi])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "f", [helper.make_tensor_value_info("x", 1, [2, 4]),
                                       helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", 1, [2, 4])], [w, w_then])
    src = tmp_path / "fwd_if.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
    return src


def test_a_parameter_used_only_inside_an_if_branch_is_refused(tmp_path, capsys):
    src = _if_model(tmp_path)
    for trainable in ("parameters", "W,W_then", "all"):
        out = tmp_path / "train.onnx"
        code = main(["train-graph", str(src), "-o", str(out), "--loss", "mse", "--trainable", trainable])
        err = capsys.readouterr().err
        assert code == 2, trainable
        assert "'branch' (If" in err and "then_branch reads the float initializers W_then" in err
        assert "without data-dependent control flow" in err
        assert not out.exists()


def test_an_unclaimed_op_inside_a_subgraph_is_named(tmp_path, capsys):
    from transforms.autodiff.support import check_supported
    import pytest
    from ir.errors import UnsupportedOpError
    inner = helper.make_graph([helper.make_node("Foo", ["h"], ["b"], name="odd", domain="")], "then_branch", [],
                              [helper.make_tensor_value_info("b", 1, [2])])
    loop_body = helper.make_graph([helper.make_node("If", ["c"], ["z"], name="inner_if", then_branch=inner,
                                                    else_branch=inner)], "body", [], [])
    g = helper.make_graph([helper.make_node("Loop", ["n", "c"], ["z"], name="loop", body=loop_body)], "f", [],
                          [helper.make_tensor_value_info("z", 1, [2])])
    with pytest.raises(UnsupportedOpError) as info:
        check_supported(helper.make_model(g))
    assert "'loop' (Loop" in str(info.value)


def test_train_graph_prints_what_it_trains_and_keeps_constant(tmp_path, capsys):
    """A hand-built attention head: the weights and the bias train; the mask and the scale stay constant."""
    rng = np.random.default_rng(0)
    mask = np.triu(np.full((3, 3), -3.4e38, np.float32), 1)
    inits = {"Wq": rng.standard_normal((4, 4)), "Wk": rng.standard_normal((4, 4)), "bq": rng.standard_normal(4),
             "mask": mask, "scale": np.asarray([0.5]), "shape": np.asarray([3, 4], np.int64)}
    nodes = [helper.make_node("MatMul", ["x", "Wq"], ["q0"]), helper.make_node("Add", ["q0", "bq"], ["q"]),
             helper.make_node("MatMul", ["x", "Wk"], ["k"]), helper.make_node("Transpose", ["k"], ["kt"]),
             helper.make_node("MatMul", ["q", "kt"], ["s0"]), helper.make_node("Mul", ["s0", "scale"], ["s1"]),
             helper.make_node("Add", ["s1", "mask"], ["s"]), helper.make_node("Softmax", ["s"], ["p"]),
             helper.make_node("MatMul", ["p", "x"], ["y0"]), helper.make_node("Reshape", ["y0", "shape"], ["y"])]
    g = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("x", 1, [3, 4])],
                          [helper.make_tensor_value_info("y", 1, [3, 4])],
                          [numpy_helper.from_array(v.astype(np.float32) if v.dtype.kind == "f" else v, k)
                           for k, v in inits.items()])
    src = tmp_path / "attn.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
    assert main(["train-graph", str(src), "-o", str(tmp_path / "t.onnx"), "--loss", "mse"]) == 0
    text = capsys.readouterr().out
    assert "trains 3 parameters (36 values; other export):\n  Wq, Wk, bq\n" in text
    assert "  1 mask: mask\n" in text and "  1 scalar: scale\n" in text
    assert main(["train-graph", str(src), "--list-parameters"]) == 0
    assert capsys.readouterr().out.split() == ["Wq", "Wk", "bq"]
    names = tmp_path / "names.txt"
    names.write_text("# the query side only\nWq\nbq  # and its bias\n")
    assert main(["train-graph", str(src), "-o", str(tmp_path / "t.onnx"), "--loss", "mse",
                 "--trainable", f"@{names}"]) == 0
    text = capsys.readouterr().out
    assert "trains 2 parameters" in text and "1 not listed in trainable: Wk" in text
    assert main(["train-graph", str(src), "--list-parameters", "--trainable", "@missing.txt"]) == 2
    assert "cannot read the trainable-name file 'missing.txt'" in capsys.readouterr().err
