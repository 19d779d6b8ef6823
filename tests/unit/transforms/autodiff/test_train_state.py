"""Training state of a generated step: BatchNorm running statistics (``running_stats``), dropout masks as
inputs (``dropout_masks``), the recorded forward part and its eval-mode cut (``deploy``), all run by
onnxruntime (the oracle of every generated graph) and checked against NumPy's statement of PyTorch's rules."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from ir.containers import Role
from ir.errors import GraphError
from ir.onnx_import import FORWARD_KEY, import_proto
from tests.unit.transforms.autodiff.forward_models import bn_dropout_net, mlp
from transforms.autodiff import build_training_graph
from transforms.autodiff.deploy import eval_forward
from transforms.autodiff.training_graph import plan_parameters


def _run(model, feeds, plain=False):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if plain:      # no graph rewrites: weights as inputs or initializers run the same kernels, to the bit
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _feeds(model, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {"input": rng.standard_normal((4, 2, 5, 5)).astype(np.float32), "labels": np.array([0, 1, 2, 1]),
             "learning_rate": np.asarray(0.1, np.float32)}
    for vi in model.graph.input:
        if vi.name.endswith(".momentum"):
            feeds[vi.name] = np.zeros([d.dim_value for d in vi.type.tensor_type.shape.dim], np.float32)
    return feeds


def test_running_statistics_are_inputs_and_outputs_with_pytorchs_update():
    fwd = bn_dropout_net(momentum=0.8)
    model = build_training_graph(fwd, optimizer="sgd", lr=0.1)
    inputs, outputs = [i.name for i in model.graph.input], [o.name for o in model.graph.output]
    assert {"bn.running_mean", "bn.running_var"} <= set(inputs)
    assert {"bn.running_mean.new", "bn.running_var.new"} <= set(outputs)
    assert {"bn.running_mean", "bn.running_var"} <= {t.name for t in model.graph.initializer}   # the defaults
    feeds = _feeds(model)
    feeds["d_mask"] = np.ones((4, 27), bool)
    out = _run(model, feeds)
    inits = {t.name: numpy_helper.to_array(t) for t in fwd.graph.initializer}
    w, bias = inits["conv.weight"].astype(np.float64), inits["conv.bias"].astype(np.float64)
    x = feeds["input"].astype(np.float64)
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))          # n, i, h, w, 3, 3
    conv = np.einsum("nihwkl,oikl->nohw", windows, w) + bias[None, :, None, None]
    mean, var = conv.mean(axis=(0, 2, 3)), conv.var(axis=(0, 2, 3), ddof=1)      # PyTorch: unbiased
    np.testing.assert_allclose(out["bn.running_mean.new"], 0.8 * inits["bn.running_mean"] + 0.2 * mean, rtol=1e-5)
    np.testing.assert_allclose(out["bn.running_var.new"], 0.8 * inits["bn.running_var"] + 0.2 * var, rtol=1e-5)
    again = _run(model, feeds)       # onnxruntime ran BatchNorm in place once: the defaults must not change
    np.testing.assert_array_equal(again["bn.running_var.new"], out["bn.running_var.new"])
    graph = import_proto(model)
    assert graph.containers["bn.running_var"].role is Role.STATISTIC
    assert graph.containers["bn.running_var.new"].role is Role.STATISTIC
    assert graph.containers["bn.weight"].role is Role.PARAMETER


def test_statistics_stay_constant_without_an_optimizer_and_the_plan_says_which():
    fwd = bn_dropout_net()
    grads_only = build_training_graph(fwd, optimizer=None)
    assert "bn.running_mean.new" not in {o.name for o in grads_only.graph.output}
    lines = "\n".join(plan_parameters(fwd, optimizer="adamw").lines())
    assert "updates 2 BatchNorm running statistics every step" in lines and "bn.running_var" in lines
    assert "keeps" in lines and "BatchNorm running statistic:" not in lines


def test_a_training_dropout_takes_its_mask_as_an_input():
    model = build_training_graph(bn_dropout_net(ratio=0.25), optimizer="sgd", lr=0.1)
    assert not any(n.op_type == "Dropout" for n in model.graph.node)
    (mask,) = [i for i in model.graph.input if i.name == "d_mask"]
    assert mask.type.tensor_type.elem_type == onnx.TensorProto.BOOL
    record = json.loads({p.key: p.value for p in model.metadata_props}[FORWARD_KEY])
    assert record["dropout"]["d_mask"] == {"ratio": pytest.approx(0.25), "x": "f", "y": "d", "node": "/drop/Dropout"}
    feeds = _feeds(model)
    keep = np.random.default_rng(1).random((4, 27)) >= 0.25
    out_keep = _run(model, {**feeds, "d_mask": keep})
    out_none = _run(model, {**feeds, "d_mask": np.zeros((4, 27), bool)})
    assert np.all(out_none["fc.weight_grad"] == 0)                 # every activation dropped: no weight gradient
    kept_cols = keep.any(axis=0)
    assert np.all(out_keep["fc.weight_grad"][:, ~kept_cols] == 0) and np.any(out_keep["fc.weight_grad"][:, kept_cols])


def test_eval_forward_cuts_the_deployable_model():
    fwd = bn_dropout_net()
    model = build_training_graph(fwd, optimizer="adamw")
    ev = eval_forward(model)
    assert ev.data == ("input",) and set(ev.state) == {"conv.weight", "conv.bias", "bn.weight", "bn.bias",
                                                       "bn.running_mean", "bn.running_var", "fc.weight", "fc.bias"}
    ops = [n.op_type for n in ev.deploy.graph.node]
    assert ops == ["Conv", "BatchNormalization", "Relu", "Flatten", "Identity", "Gemm"], ops
    bn = next(n for n in ev.deploy.graph.node if n.op_type == "BatchNormalization")
    assert list(bn.input)[3:] == ["bn.running_mean", "bn.running_var"] and len(bn.output) == 1
    assert not ev.deploy.graph.initializer or all(t.name not in ev.state for t in ev.deploy.graph.initializer)
    deploy = onnx.ModelProto()
    deploy.CopyFrom(ev.deploy)
    deploy.graph.initializer.extend(t for t in fwd.graph.initializer if t.name in ev.state)
    x = np.random.default_rng(2).standard_normal((4, 2, 5, 5)).astype(np.float32)
    want = _run(_eval_mode(fwd), {"input": x}, plain=True)["output"]
    np.testing.assert_array_equal(_run(deploy, {"input": x}, plain=True)["output"], want)
    program = _run(ev.program, {"input": x, **{t.name: numpy_helper.to_array(t) for t in fwd.graph.initializer
                                               if t.name in ev.state}}, plain=True)["output"]
    np.testing.assert_array_equal(program, want)


def _eval_mode(fwd):
    """The forward model with BatchNorm in inference mode and Dropout off (what PyTorch's eval() runs)."""
    out = onnx.ModelProto()
    out.CopyFrom(fwd)
    for node in out.graph.node:
        if node.op_type == "BatchNormalization":
            del node.output[1:]
            for a in list(node.attribute):
                if a.name == "training_mode":
                    node.attribute.remove(a)
        if node.op_type == "Dropout":
            node.input[2] = "off"
    out.graph.initializer.append(numpy_helper.from_array(np.asarray(False), "off"))
    return out


def test_steps_without_a_forward_record_have_no_eval_forward():
    assert eval_forward(mlp()) is None
    model = build_training_graph(mlp(), optimizer="sgd")
    del model.metadata_props[:]
    assert eval_forward(model) is None
    bad = build_training_graph(mlp(), optimizer="sgd")
    for p in bad.metadata_props:
        if p.key == FORWARD_KEY:
            p.value = '{"outputs": 7, "statistics": "x"}'              # wrong kinds are ignored, never evaluated
    assert eval_forward(bad) is None
    assert import_proto(bad).containers["fc1.weight"].role is Role.PARAMETER


def test_a_batchnorm_the_exporter_folded_into_a_convolution_is_refused_for_batch_statistics(tmp_path, capsys):
    """The dynamo exporter's optimizer folds a BatchNorm that follows a convolution into it and says so in the
    node's metadata; training with batch statistics refuses it, naming the node, the BatchNorm and what to do."""
    model = bn_dropout_net()
    conv = model.graph.node[0]
    onnx.helper.set_metadata_props(conv, {
        "pkg.onnxscript.rewriter.rule_name": "RemoveOptionalBiasFromConv, FuseBatchNormIntoConv",
        "pkg.torch.onnx.name_scopes": "['', 'features', 'features.norm0', '_native_batch_norm_legit_functional']"})
    with pytest.raises(GraphError) as err:
        build_training_graph(model, optimizer="sgd")
    text = str(err.value)
    assert "node '/conv/Conv'" in text and "folded BatchNorm features.norm0 into this convolution" in text, text
    assert "optimize=False" in text and "--batchnorm eval" in text, text
    assert build_training_graph(model, optimizer="sgd", batchnorm="eval").graph.node
    from studio.cli import main
    onnx.save(model, tmp_path / "folded.onnx")
    assert main(["train-graph", str(tmp_path / "folded.onnx"), "-o", str(tmp_path / "t.onnx")]) == 2
    assert "FuseBatchNormIntoConv" in capsys.readouterr().err and not (tmp_path / "t.onnx").exists()
    assert main(["train-graph", str(tmp_path / "folded.onnx"), "-o", str(tmp_path / "t.onnx"), "--batchnorm", "eval"]) == 0
    assert "BatchNorm running statistics" not in capsys.readouterr().out and (tmp_path / "t.onnx").exists()
