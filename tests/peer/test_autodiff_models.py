"""Generated training graphs of real models against external oracles.

- The ORT-artifact fixtures (mlp, tiny_resnet, bert_layer_small): the forward model
  exported by torch; loss and gradients recorded with onnxruntime-training
  (``reference.npz``). The generated graph runs in plain onnxruntime and in the NumPy
  reference executor, and both must match the recording.
- Models the fixtures do not cover, exported here with the legacy exporter from random
  weights: a GPT-2-style decoder block (causal mask, tanh GELU, tied embedding) and a
  MobileNet/EfficientNet-style block (depthwise conv, HardSwish/SiLU, squeeze-excitation,
  BatchNorm in training mode), checked against torch autograd.
"""
from __future__ import annotations

import io
import math
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from codegen.numpy_ref.executor import run
from ir.onnx_import import import_proto
from transforms.autodiff import build_training_graph

FIXTURES = {  # name -> (folder, loss, tolerance); deep BatchNorm nets in fp32 can differ by ~1 % (FACTS.md)
    "mlp": ("mlp/legacy", "cross_entropy", 1e-4),
    "tiny_resnet": ("tiny_resnet/legacy", "cross_entropy", 1e-4),   # measured 6e-6; 2e-2 would be allowed
    "bert_layer_small": ("bert_layer_small/legacy_ln3", "mse", 1e-4),
}


def ort_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def assert_gradients(got: dict[str, np.ndarray], want: dict[str, np.ndarray], rtol: float, label: str) -> None:
    """Per-parameter max error relative to max(|want_p|, 1 % of the largest gradient of the model)."""
    overall = max(float(np.abs(w).max()) for w in want.values())
    worst = {}
    for name, w in want.items():
        scale = max(float(np.abs(w).max()), 1e-2 * overall)
        worst[name] = float(np.abs(got[name] - w).max()) / scale
    bad = {n: e for n, e in worst.items() if e > rtol}
    assert not bad, f"{label}: gradients off by more than {rtol}: {bad}"


def _fixture(fixtures_dir, name: str):
    folder, loss, tol = FIXTURES[name]
    path = fixtures_dir / "ort_artifacts" / folder
    return onnx.load(str(path / "forward.onnx")), np.load(path / "reference.npz"), loss, tol


def _fixture_feeds(ref) -> dict[str, np.ndarray]:
    feeds = {"input": ref["input0"], "labels": ref["labels"]}
    feeds.update({k[len("param0/"):]: ref[k] for k in ref.files if k.startswith("param0/")})
    return feeds


def _check_against_recording(model: onnx.ModelProto, ref, tol: float) -> None:
    onnx.checker.check_model(model, full_check=True)
    feeds = _fixture_feeds(ref)
    want = {k[len("grad/"):]: ref[k] for k in ref.files if k.startswith("grad/")}
    for label, out in (("onnxruntime", ort_outputs(model, feeds)), ("executor", run(import_proto(model), feeds))):
        np.testing.assert_allclose(out["loss"], ref["loss"], rtol=tol, err_msg=label)
        assert_gradients({p: out[f"{p}_grad"] for p in want}, want, tol, label)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture_model_matches_recorded_loss_and_gradients(fixtures_dir, name):
    forward, ref, loss, tol = _fixture(fixtures_dir, name)
    model = build_training_graph(forward, loss=loss, optimizer=None)
    _check_against_recording(model, ref, tol)


def test_inference_mode_batchnorm_is_trained_with_batch_statistics(fixtures_dir):
    """An eval-mode export (BatchNormalization training_mode=0) still trains like the recording."""
    forward, ref, loss, tol = _fixture(fixtures_dir, "tiny_resnet")
    for node in forward.graph.node:
        if node.op_type == "BatchNormalization":
            del node.output[1:]
            for a in node.attribute:
                if a.name == "training_mode":
                    a.i = 0
    _check_against_recording(build_training_graph(forward, loss=loss, optimizer=None), ref, tol)


def test_fixture_training_step_agrees_between_onnxruntime_and_executor(fixtures_dir):
    """A whole SGD step (AdamW/Lion would amplify the float noise of the key bias's zero gradient)."""
    forward, ref, loss, _ = _fixture(fixtures_dir, "bert_layer_small")
    model = build_training_graph(forward, loss=loss, optimizer="sgd", momentum=0.9, weight_decay=0.01)
    feeds = _fixture_feeds(ref)
    feeds["learning_rate"] = np.asarray(0.1, np.float32)
    for p in [k[len("param0/"):] for k in ref.files if k.startswith("param0/")]:
        feeds[f"{p}.momentum"] = np.full_like(ref[f"param0/{p}"], 0.01)
    a, b = ort_outputs(model, feeds), run(import_proto(model), feeds)
    assert set(a) == set(b)
    for suffix in ("_grad", ".momentum.new", ".new"):
        picked = [n for n in a if n.endswith(suffix) and not (suffix == ".new" and n.endswith(".momentum.new"))]
        assert picked
        assert_gradients({n: b[n] for n in picked}, {n: a[n] for n in picked}, 1e-4, f"executor vs ORT, {suffix}")
    np.testing.assert_allclose(b["loss"], a["loss"], rtol=1e-5)


# ---- models exported here ---------------------------------------------------------------

def _export(module, example, names=("input",)) -> onnx.ModelProto:
    """Legacy exporter, opset 17, training mode, no constant folding (as the fixtures were made)."""
    import torch
    f = io.BytesIO()
    with warnings.catch_warnings():   # deprecation and tracer notices of the legacy exporter
        warnings.simplefilter("ignore")
        torch.onnx.export(module, example, f, dynamo=False, opset_version=17, input_names=list(names),
                          output_names=["logits"], do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
    return onnx.load_from_string(f.getvalue())


def gpt2_block(vocab: int = 50, seq: int = 8, width: int = 16, heads: int = 2):
    """A GPT-2 decoder block: causal attention, tanh GELU, logits tied to the token embedding."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(seq, width)
            self.ln1, self.ln2, self.lnf = nn.LayerNorm(width), nn.LayerNorm(width), nn.LayerNorm(width)
            self.attn, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.fc, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
            self.register_buffer("causal", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

        def forward(self, idx):
            b, t = idx.shape
            x = self.wte(idx) + self.wpe(torch.arange(t))
            q, k, v = (z.view(b, t, heads, -1).transpose(1, 2) for z in self.attn(self.ln1(x)).split(width, 2))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(width // heads))
            att = F.softmax(att.masked_fill(self.causal[:, :, :t, :t] == 0, float("-inf")), dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, width))
            x = x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
            return (self.lnf(x) @ self.wte.weight.T).view(b * t, vocab)
    return Block()


def mobilenet_block(n_classes: int = 5):
    """Stem, inverted residual (depthwise, HardSwish/SiLU, squeeze-excitation), head."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int = 8, exp: int = 16) -> None:
            super().__init__()
            self.stem, self.bn0 = nn.Conv2d(3, cin, 3, 1, 1, bias=False), nn.BatchNorm2d(cin)
            self.expand, self.bn1 = nn.Conv2d(cin, exp, 1, bias=False), nn.BatchNorm2d(exp)
            self.dw, self.bn2 = nn.Conv2d(exp, exp, 3, 2, 1, groups=exp, bias=False), nn.BatchNorm2d(exp)
            self.se1, self.se2 = nn.Conv2d(exp, exp // 4, 1), nn.Conv2d(exp // 4, exp, 1)
            self.project, self.bn3 = nn.Conv2d(exp, cin, 1, bias=False), nn.BatchNorm2d(cin)
            self.dw2 = nn.Conv2d(cin, cin, 3, 1, 1, groups=cin)
            self.head = nn.Linear(cin, n_classes)

        def forward(self, x):
            x = F.hardswish(self.bn0(self.stem(x)))
            y = F.silu(self.bn2(self.dw(F.hardswish(self.bn1(self.expand(x))))))
            y = y * F.hardsigmoid(self.se2(F.relu(self.se1(F.adaptive_avg_pool2d(y, 1)))))
            y = self.bn3(self.project(y))
            y = y + F.silu(self.dw2(y))
            return self.head(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))
    return Block()


def _torch_reference(module, x, labels):
    import torch
    module.zero_grad()
    loss = torch.nn.functional.cross_entropy(module(x), labels)
    loss.backward()
    return loss.item(), {n: p.grad.numpy().copy() for n, p in module.named_parameters()}


@pytest.mark.parametrize("build,make_input,tol", [
    (gpt2_block, lambda g: __import__("torch").randint(0, 50, (2, 8), generator=g), 1e-4),
    (mobilenet_block, lambda g: __import__("torch").randn(4, 3, 8, 8, generator=g), 1e-3),
], ids=["gpt2_block", "mobilenet_block"])
def test_exported_model_matches_torch_autograd(build, make_input, tol):
    import torch
    torch.manual_seed(0)
    module = build().train()
    gen = torch.Generator().manual_seed(1)
    x = make_input(gen)
    forward = _export(module, (x,))
    n_rows = 16 if x.dtype == torch.int64 else 4
    n_classes = 50 if x.dtype == torch.int64 else 5
    labels = torch.randint(0, n_classes, (n_rows,), generator=gen)
    torch.manual_seed(0)
    module = build().train()   # fresh BatchNorm buffers: the export ran the model once
    loss, grads = _torch_reference(module, x, labels)
    model = build_training_graph(forward, loss="cross_entropy", optimizer=None)
    onnx.checker.check_model(model, full_check=True)
    feeds = {"input": x.numpy(), "labels": labels.numpy()}
    assert set(grads) == {o.name[:-len("_grad")] for o in model.graph.output if o.name.endswith("_grad")}
    for label, out in (("onnxruntime", ort_outputs(model, feeds)), ("executor", run(import_proto(model), feeds))):
        np.testing.assert_allclose(out["loss"], loss, rtol=tol, err_msg=label)
        assert_gradients({p: out[f"{p}_grad"] for p in grads}, grads, tol, label)
