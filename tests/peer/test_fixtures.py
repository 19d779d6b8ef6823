"""The reference executor against real references: every training graph in ../shared/fixtures.

- ORT artifacts (training_model + optimizer_model, made functional on import),
  gradient_model and train_step_adamw reproduce reference.npz: loss, gradients
  and parameters after one AdamW step (rtol 1e-4; BatchNorm nets 2e-2).
- joint_standard graphs reproduce their .npz and agree with plain onnxruntime.
- The BERT-base layer (no stored weights): training_model+optimizer and
  train_step_adamw agree with each other on the same random inputs.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from codegen.numpy_ref.executor import run
from ir.containers import Role
from ir.onnx_import import import_model
from ir.verify import verify
from tests.peer.fixture_feeds import BATCHNORM, ORT_MODELS, assert_close, ort_feeds, random_feeds

JOINT = ["mlp_joint", "mlp_joint_sgd", "mlp_joint_adamw", "tiny_resnet_joint", "tiny_resnet_joint_adamw",
         "bert_layer_small_joint", "bert_layer_small_joint_adamw"]


def _check_training_outputs(graph, out, ref, rtol):
    loss_name = graph.outputs[0]
    assert_close(out[loss_name], ref["loss"], rtol, "loss")
    grads = [n for n in graph.outputs if graph.containers[n].role is Role.GRADIENT]
    scale = max(float(np.abs(ref[f"grad/{n[:-5]}"]).max()) for n in grads) if grads else 0
    for n in grads:
        assert_close(out[n], ref[f"grad/{n[:-5]}"], rtol, f"gradient {n}", scale=scale)
    return grads


@pytest.mark.parametrize("model", sorted(ORT_MODELS))
@pytest.mark.parametrize("artifact", ["training_model", "gradient_model", "train_step_adamw"])
def test_ort_artifacts_reproduce_reference(fixtures_dir, model, artifact):
    folder = fixtures_dir / "ort_artifacts" / ORT_MODELS[model]
    ref = np.load(folder / "reference.npz")
    graph = import_model(folder / f"{artifact}.onnx")
    verify(graph)
    out = run(graph, ort_feeds(graph, ref))
    rtol = 2e-2 if model in BATCHNORM else 1e-4
    grads = _check_training_outputs(graph, out, ref, rtol) if artifact != "train_step_adamw" else []
    if artifact == "train_step_adamw":
        assert_close(out[graph.outputs[0]], ref["loss"], rtol, "loss")
    if artifact == "gradient_model":
        assert len(grads) == len([k for k in ref.files if k.startswith("grad/")])
        return
    news = [n for n in graph.outputs if n.endswith(".new") and graph.containers[n].role is Role.PARAMETER]
    assert len(news) == len([k for k in ref.files if k.startswith("param1/")])
    for n in news:
        p = n[:-4]
        # one AdamW step moves each weight by ≈ lr; compare the update itself at the test tolerance
        upd, want = out[n] - ref[f"param0/{p}"], ref[f"param1/{p}"] - ref[f"param0/{p}"]
        assert_close(upd, want, max(rtol, 1e-3), f"AdamW update of {p}", scale=1e-3)


def test_training_artifact_has_functional_interface(fixtures_dir):
    graph = import_model(fixtures_dir / "ort_artifacts/mlp/legacy/training_model.onnx")
    roles = {n: graph.containers[n].role for n in graph.outputs}
    assert not any("accumulation" in n for n in graph.inputs + graph.outputs)
    assert roles["fc1.weight_grad"] is Role.GRADIENT
    assert roles["fc1.weight.new"] is Role.PARAMETER and roles["fc1.weight.m.new"] is Role.OPTIMIZER_STATE
    assert graph.containers["fc1.weight.v"].role is Role.OPTIMIZER_STATE
    assert graph.meta["kind"] == "ort-artifacts"
    assert sum(n.op_type == "AdamW" for n in graph.nodes.values()) == 4


def _ort_run(path, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    want = {i.name for i in sess.get_inputs()}
    return dict(zip(names, sess.run(names, {k: v for k, v in feeds.items() if k in want})))


@pytest.mark.parametrize("name", JOINT)
def test_joint_graphs_reproduce_npz_and_onnxruntime(fixtures_dir, name):
    path = fixtures_dir / "joint_standard" / f"{name}.onnx"
    ref = np.load(path.with_suffix(".npz"))
    graph = import_model(path)
    verify(graph)
    feeds = {"input": ref["input"], "labels": ref["labels"]}
    feeds.update({n: ref[f"param/{n}"] for n in graph.inputs if f"param/{n}" in ref.files})
    out = run(graph, feeds)
    rtol = 2e-2 if "resnet" in name else 1e-4
    _check_training_outputs(graph, out, ref, rtol)
    for n in graph.outputs:
        if n.endswith(".new"):
            assert_close(out[n], ref[f"new/{n[:-4]}"], rtol, f"updated {n}", scale=1.0)
    oracle = _ort_run(path, feeds)
    grads = [n for n in graph.outputs if graph.containers[n].role is Role.GRADIENT]
    grad_scale = max(float(np.abs(oracle[n]).max()) for n in grads)
    for n in graph.outputs:
        scale = grad_scale if n in grads else None  # a gradient that is truly zero compares at the grads' scale
        assert_close(out[n], oracle[n], 1e-4 if "resnet" not in name else 2e-3, f"{n} vs onnxruntime", scale)


@pytest.mark.slow
def test_bert_base_training_model_matches_train_step(fixtures_dir):
    folder = fixtures_dir / "ort_artifacts/bert_layer_base/legacy16"
    a = import_model(folder / "training_model.onnx")
    b = import_model(folder / "train_step_adamw.onnx")
    feeds = random_feeds(a, seed=3)
    feeds["target"] = np.random.default_rng(4).standard_normal(a.containers["target"].concrete_shape()).astype(np.float32)
    fb = {k: (v.reshape(()) if k in ("learning_rate", "step") else v) for k, v in feeds.items()}
    fb["step"] = fb["step"].astype(np.float32)
    out_a, out_b = run(a, feeds), run(b, {k: v for k, v in fb.items() if k in b.inputs})
    assert_close(out_a[a.outputs[0]], out_b[b.outputs[0]], 1e-5, "loss")
    news = [n for n in b.outputs if n.endswith(".new")]
    assert len(news) == 3 * 16
    for n in news:
        assert_close(out_a[n], out_b[n], 1e-4, n)
