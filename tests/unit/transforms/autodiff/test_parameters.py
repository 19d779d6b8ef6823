"""Parameter detection (``parameters.choose_parameters``) and the plan (``plan.make_plan``): exporter
metadata, legacy names, the use pattern, masks, ties and folded broadcasts, on hand-built models.
(Real exports: tests/peer/test_autodiff_exporters.py.)"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from codegen.numpy_ref.executor import run
from ir.onnx_import import import_proto
from transforms.autodiff import build_training_graph
from transforms.autodiff.parameters import FOLDED_KEY, KIND_KEY, choose_parameters, exporter_of
from transforms.autodiff.training_graph import plan_parameters

F = onnx.TensorProto.FLOAT


def _model(nodes, inits, inputs, output, out_shape, producer="", meta=None):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(output, F, out_shape)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    for name, props in (meta or {}).items():
        vi = helper.make_tensor_value_info(name, F, list(inits[name].shape))
        helper.set_metadata_props(vi, props)
        g.value_info.append(vi)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    m.producer_name = producer
    return m


def _bn_conv(producer=""):
    rng = np.random.default_rng(0)
    f32 = np.float32
    inits = {"conv.weight": rng.standard_normal((4, 3, 3, 3)).astype(f32), "bn.weight": np.ones(4, f32),
             "bn.bias": np.zeros(4, f32), "bn.running_mean": np.zeros(4, f32), "bn.running_var": np.ones(4, f32),
             "onnx::Mul_7": np.asarray([0.5], f32), "head": rng.standard_normal((4, 2)).astype(f32),
             "onnx::Add_9": rng.standard_normal(2).astype(f32)}
    nodes = [helper.make_node("Conv", ["x", "conv.weight"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "bn.weight", "bn.bias", "bn.running_mean",
                                                     "bn.running_var"], ["b"]),
             helper.make_node("Mul", ["b", "onnx::Mul_7"], ["s"]),
             helper.make_node("GlobalAveragePool", ["s"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]), helper.make_node("MatMul", ["f", "head"], ["h"]),
             helper.make_node("Add", ["h", "onnx::Add_9"], ["y"])]
    return _model(nodes, inits, [("x", F, [2, 3, 5, 5])], "y", [2, 2], producer)


def test_use_pattern_without_exporter_names():
    choice = {c.name: c for c in choose_parameters(_bn_conv()).choices}
    assert exporter_of(_bn_conv()) == "other"
    trained = {n for n, c in choice.items() if c.trainable}
    assert trained == {"conv.weight", "bn.weight", "bn.bias", "head", "onnx::Add_9"}
    assert choice["bn.running_mean"].reason == "BatchNorm running statistic"
    assert choice["onnx::Mul_7"].reason == "scalar"
    assert choice["onnx::Add_9"].reason == "bias"


def test_legacy_names_train_parameters_and_plan_reports_the_rest():
    plan = plan_parameters(_bn_conv("pytorch"), loss="mse", optimizer=None)
    assert plan.exporter == "torch-legacy"
    assert plan.trained == ["conv.weight", "bn.weight", "bn.bias", "head", "onnx::Add_9"]
    assert plan.reasons["bn.running_var"] == "BatchNorm running statistic"
    text = "\n".join(plan.lines())
    assert "trains 5 parameters (126 values; torch-legacy export)" in text
    assert "2 BatchNorm running statistic: bn.running_mean, bn.running_var" in text


def _attention(producer="", meta=None, extra=None):
    """q = x @ Wq + bq; scores = q @ (x @ Wk)^T * scale + mask; y = softmax(scores) @ x."""
    rng = np.random.default_rng(1)
    f32 = np.float32
    inits = {"Wq": rng.standard_normal((4, 4)).astype(f32), "Wk": rng.standard_normal((4, 4)).astype(f32),
             "bq": rng.standard_normal(4).astype(f32), "scale": np.full((1, 1), 0.5, f32),
             "causal": np.triu(np.full((3, 3), -100.0, f32), 1), **(extra or {})}
    nodes = [helper.make_node("MatMul", ["x", "Wq"], ["q0"]), helper.make_node("Add", ["bq", "q0"], ["q"]),
             helper.make_node("MatMul", ["x", "Wk"], ["k"]), helper.make_node("Transpose", ["k"], ["kt"]),
             helper.make_node("MatMul", ["q", "kt"], ["s0"]), helper.make_node("Mul", ["s0", "scale"], ["s1"]),
             helper.make_node("Add", ["s1", "causal"], ["s"]), helper.make_node("Softmax", ["s"], ["p"]),
             helper.make_node("MatMul", ["p", "x"], ["y"])]
    return _model(nodes, inits, [("x", F, [3, 4])], "y", [3, 4], producer, meta)


def test_masks_and_scales_are_constants_even_with_parameter_like_names():
    plan = plan_parameters(_attention("pytorch"), loss="mse", optimizer=None)
    assert plan.trained == ["Wq", "Wk", "bq"]
    assert plan.reasons["causal"] == "mask" and plan.reasons["scale"] == "scalar"
    everything = plan_parameters(_attention("pytorch"), loss="mse", optimizer=None, trainable="all")
    assert everything.trained == ["Wq", "Wk", "bq", "scale", "causal"]     # the old behaviour, still available


def test_dynamo_metadata_decides():
    meta = {"Wq": {KIND_KEY: "PARAMETER"}, "Wk": {KIND_KEY: "PARAMETER"}, "bq": {KIND_KEY: "BUFFER"},
            "causal": {KIND_KEY: "PARAMETER"}}
    plan = plan_parameters(_attention(meta=meta), loss="mse", optimizer=None)
    assert plan.exporter == "torch-dynamo"
    assert plan.trained == ["Wq", "Wk", "causal"] and plan.reasons["bq"] == "torch buffer"


def test_a_transposed_copy_is_tied_to_its_source_and_gets_its_gradient():
    """A legacy exporter folds ``wte.T`` for a tied lm_head into ``onnx::MatMul_5``."""
    rng = np.random.default_rng(2)
    wte = rng.standard_normal((6, 4)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["wte", "ids"], ["e"]),
             helper.make_node("MatMul", ["e", "onnx::MatMul_5"], ["y"])]
    model = _model(nodes, {"wte": wte, "onnx::MatMul_5": np.ascontiguousarray(wte.T)},
                   [("ids", onnx.TensorProto.INT64, [3])], "y", [3, 6], "pytorch")
    plan = plan_parameters(model, loss="mse", optimizer=None)
    assert plan.trained == ["wte"] and plan.reasons["onnx::MatMul_5"].startswith("tied")
    train = build_training_graph(model, loss="mse", optimizer=None)
    ids, labels = np.asarray([1, 4, 1]), rng.standard_normal((3, 6)).astype(np.float32)
    got = run(import_proto(train), {"ids": ids, "labels": labels})["wte_grad"]
    e = wte[ids]
    dy = 2 * (e @ wte.T - labels) / labels.size
    want = dy.T @ e                       # through the lm_head
    np.add.at(want, ids, dy @ wte)        # through the embedding
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_folded_broadcast_becomes_its_parameter():
    """dynamo folds ``cls_token.expand(batch, -1, -1)`` into ``expand``: the parameter comes back."""
    cls = np.arange(4, dtype=np.float32).reshape(1, 1, 4)
    expand = np.ascontiguousarray(np.broadcast_to(cls, (2, 1, 4)))
    nodes = [helper.make_node("Concat", ["expand", "x"], ["y"], axis=1)]
    meta = {"expand": {FOLDED_KEY: "['embeddings.cls_token', 'val_6', 'val_7']"}}
    model = _model(nodes, {"expand": expand}, [("x", F, [2, 3, 4])], "y", [2, 4, 4], meta=meta)
    plan = plan_parameters(model, loss="mse", optimizer=None)
    assert plan.trained == ["embeddings.cls_token"]
    train = build_training_graph(model, loss="mse", optimizer=None)
    inputs = {i.name: i for i in train.graph.input}
    assert [d.dim_value for d in inputs["embeddings.cls_token"].type.tensor_type.shape.dim] == [1, 1, 4]
    x, labels = np.zeros((2, 3, 4), np.float32), np.zeros((2, 4, 4), np.float32)
    got = run(import_proto(train), {"x": x, "labels": labels})["embeddings.cls_token_grad"]
    np.testing.assert_allclose(got, 2 * 2 * cls / labels.size, rtol=1e-6)   # summed over the batch copies


def _scoped(node, *scopes, rule=None):
    props = {"pkg.torch.onnx.name_scopes": repr(["", *scopes])}
    if rule:
        props["pkg.onnxscript.rewriter.rule_name"] = rule
    helper.set_metadata_props(node, props)
    return node


def test_dynamo_merged_layer_norm_weights_and_a_dropped_bias_come_back():
    """Two LayerNorms share the merged all-ones ``ln1.weight``; ``fc``'s zero bias was dropped."""
    ones, zeros = np.ones(4, np.float32), np.zeros(4, np.float32)
    w = np.random.default_rng(4).standard_normal((4, 4)).astype(np.float32)
    nodes = [_scoped(helper.make_node("LayerNormalization", ["x", "ln1.weight", "ln1.bias"], ["a"]), "ln1", "ln"),
             _scoped(helper.make_node("Gemm", ["a", "fc.weight"], ["b"], transB=1), "fc", "addmm",
                     rule="RemoveOptionalBiasFromGemm"),
             _scoped(helper.make_node("LayerNormalization", ["b", "ln1.weight", "ln1.bias"], ["y"]), "ln2", "ln")]
    meta = {n: {KIND_KEY: "PARAMETER"} for n in ("ln1.weight", "ln1.bias", "fc.weight")}
    model = _model(nodes, {"ln1.weight": ones, "ln1.bias": zeros, "fc.weight": w}, [("x", F, [2, 4])], "y",
                   [2, 4], meta=meta)
    plan = plan_parameters(model, loss="mse", optimizer=None)
    assert sorted(plan.trained) == ["fc.bias", "fc.weight", "ln1.bias", "ln1.weight", "ln2.bias", "ln2.weight"]
    assert "fc.bias: zero bias restored" in "\n".join(plan.lines())
    assert [n.input[1] for n in model.graph.node if n.op_type == "LayerNormalization"] == ["ln1.weight"] * 2
