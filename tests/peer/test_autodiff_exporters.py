"""What ``train-graph`` trains by default, on models exported by torch's exporters.

Small GPT-2, BERT and ViT models written Hugging Face style (``hf_style_models``) with
random weights, exported by the dynamo exporter with its default optimizer (which folds
transposed Linear weights into ``val_N`` constants, the ViT class token's batch broadcast
into ``expand`` and GPT-2's tied ``lm_head`` transpose into ``val_N``):

- the default trainable set is ``named_parameters()`` (a tied tensor once, under any of its
  names; a folded weight under its ONNX name, traced to its source);
- the exporter's constants (causal mask fill, attention scales, BERT's extended mask) are
  kept constant;
- loss and gradients of the generated graph, run by onnxruntime, match torch.autograd.

The legacy exporter in training mode without constant folding keeps every parameter name:
there the trained set is exactly ``named_parameters()`` for the same models and a Swin stage
(window partition with ``Pad``, ``torch.roll`` as Slice+Concat, the relative position bias
table gathered by an index buffer; the shifted-window mask buffer stays constant).
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import numpy_helper

from tests.peer.hf_style_models import BertClassifier, GPT2LMHead, SwinClassifier, ViTClassifier, export, randomize
from transforms.autodiff import build_training_graph
from transforms.autodiff.training_graph import plan_parameters


def _gpt2():
    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    return GPT2LMHead(), (ids, torch.arange(16).unsqueeze(0)), ("input_ids", "position_ids")


def _bert():
    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(2))
    return BertClassifier(), (ids, torch.zeros_like(ids), torch.arange(16).unsqueeze(0)), (
        "input_ids", "token_type_ids", "position_ids")


def _vit():
    return ViTClassifier(), (torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(3)),), (
        "pixel_values",)


def _swin():
    return SwinClassifier(), (torch.randn(2, 3, 20, 20, generator=torch.Generator().manual_seed(5)),), (
        "pixel_values",)


MODELS = {"gpt2": (_gpt2, 64), "bert": (_bert, 3), "vit": (_vit, 5)}
LEGACY = {**MODELS, "swin": (_swin, 5)}


def _aliases(module) -> list[set[str]]:
    """One set of names per parameter tensor (a tied tensor has several)."""
    by_id: dict[int, set[str]] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), set()).add(name)
    return list(by_id.values())


def _source(plan, name: str) -> str:
    reason = plan.reasons[name]
    return reason.split(": ", 1)[1] if reason.startswith("folded from") else name


@pytest.fixture(scope="module", params=[(m, w) for m in sorted(MODELS) for w in ("random", "fresh")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def exported(request):
    """``random``: distinct weights (as trained ones); ``fresh``: torch's initial values, whose ones and
    zeros the exporter's optimizer merges (LayerNorm weights) or drops (zero Gemm biases)."""
    name, weights = request.param
    torch.manual_seed(0)
    make, n_classes = MODELS[name]
    module, args, names = make()
    if weights == "random":
        randomize(module)
    forward = export(module, args, dynamo=True, names=names)
    return name, module, args, names, n_classes, forward


def test_default_trainable_set_is_named_parameters(exported):
    label, module, _, _, _, forward = exported
    plan = plan_parameters(forward, loss="cross_entropy", optimizer=None)
    sources = [_source(plan, n) for n in plan.trained]
    groups = _aliases(module)
    hits = [[g for g in groups if s in g] for s in sources]
    assert all(len(h) == 1 for h in hits), f"{label}: trained names that are no torch parameter: " + str(
        [s for s, h in zip(sources, hits) if len(h) != 1])
    covered = [id(h[0]) for h in hits]
    assert len(covered) == len(set(covered)), f"{label}: a parameter is trained twice: {sources}"
    missing = [sorted(g) for g in groups if id(g) not in set(covered)]
    assert not missing, f"{label}: parameters not trained: {missing}"
    for name in plan.frozen():
        assert not any(name in g for g in groups), f"{label}: parameter {name} kept constant"


def test_generated_gradients_match_torch_autograd(exported):
    _check_gradients(*exported)


@pytest.mark.parametrize("label", sorted(LEGACY))
def test_legacy_training_export_trains_exactly_named_parameters(label):
    torch.manual_seed(0)
    make, n_classes = LEGACY[label]
    module, args, names = make()
    randomize(module)
    forward = export(module, args, dynamo=False, names=names, training=True)
    plan = plan_parameters(forward, loss="cross_entropy", optimizer=None)
    assert sorted(plan.trained) == sorted(n for n, _ in module.named_parameters())
    if label == "swin":
        assert plan.reasons["layers.0.blocks.1.attn_mask"] == "mask"
        assert {"Pad", "Gather"} <= {n.op_type for n in forward.graph.node}
    _check_gradients(label, module, args, names, n_classes, forward)


def _check_gradients(label, module, args, names, n_classes, forward):
    rows = args[0].numel() if label == "gpt2" else args[0].shape[0]
    labels = torch.randint(0, n_classes, (rows,), generator=torch.Generator().manual_seed(4))
    module.zero_grad()
    loss = torch.nn.functional.cross_entropy(module(*args), labels)
    loss.backward()
    want = {n: p.grad.numpy() for n, p in module.named_parameters()}
    params = {n: p.detach().numpy() for n, p in module.named_parameters()}
    inits = {t.name: numpy_helper.to_array(t) for t in forward.graph.initializer}
    plan = plan_parameters(forward, loss="cross_entropy", optimizer=None)
    model = build_training_graph(forward, loss="cross_entropy", optimizer=None)
    so = ort.SessionOptions()
    so.log_severity_level = 3   # parameters are graph inputs with default values, as intended
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {n: a.numpy() for n, a in zip(names, args)}
    feeds["labels"] = labels.numpy()
    outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    np.testing.assert_allclose(outs["loss"], loss.item(), rtol=1e-5)
    scale = max(float(np.abs(g).max()) for g in want.values())
    groups = _aliases(module)
    for name in plan.trained:
        src = next(iter(g for g in groups if _source(plan, name) in g))
        torch_name = next(n for n in src if n in want)
        ref = want[torch_name]
        got = outs[f"{name}_grad"]
        if name != torch_name and name in inits and np.array_equal(inits[name], params[torch_name].T):
            ref = ref.T     # a Linear weight the exporter folded into its transpose
        assert got.shape == ref.shape, f"{label}: {name} gradient shape {got.shape} vs torch {ref.shape}"
        err = float(np.abs(got - ref).max()) / scale
        assert err < 1e-4, f"{label}: {name} gradient off by {err:.2g} of the largest gradient"
