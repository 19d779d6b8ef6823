"""The BERT-base layer (hidden 768, 12 heads, ffn 3072, seq 128, batch 8), exported here with random
weights (the fixtures ship its graphs without weights): the generated training step runs in plain
onnxruntime and its loss and gradients match torch.autograd (MSE loss, fp32, rtol 1e-4 at the scale of
all gradients)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from tests.bench.test_bench_autodiff import BATCH, HIDDEN, SEQ, bert_layer
from tests.peer.fixture_feeds import assert_close
from tests.peer.test_autodiff_models import _export
from transforms.autodiff import build_training_graph


@pytest.mark.slow
def test_bert_base_training_graph_matches_torch():
    import torch
    torch.manual_seed(0)
    module = bert_layer().train()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, SEQ, HIDDEN, generator=gen)
    target = torch.randn(BATCH, SEQ, HIDDEN, generator=gen)
    forward = _export(module, (x,))
    model = build_training_graph(forward, loss="mse", optimizer=None)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    out = dict(zip(names, sess.run(names, {"input": x.numpy(), "labels": target.numpy()})))
    module.zero_grad()
    loss = torch.nn.functional.mse_loss(module(x), target)
    loss.backward()
    grads = {n: p.grad.numpy() for n, p in module.named_parameters()}
    assert_close(out["loss"], loss.detach().numpy(), 1e-4, "loss")
    scale = max(float(np.abs(g).max()) for g in grads.values())
    matched = 0
    for name, g in grads.items():
        key = f"{name}_grad"
        if key in out:
            assert_close(out[key], g, 1e-4, key, scale=scale)
            matched += 1
    assert matched == len(grads), f"only {matched} of {len(grads)} parameters have gradients"
