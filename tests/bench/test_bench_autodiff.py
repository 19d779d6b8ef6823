"""Benchmark: training-graph generation for a BERT-base layer (hidden 768, 12 heads, ffn 3072,
seq 128, batch 8) must take under 2 s.

The forward model is exported here from random weights (28 MB, too large to store): a plain-torch
layer equivalent to ``transformers.BertLayer`` (eager attention, erf GELU, LayerNorm eps 1e-12,
dropout 0), exported with the legacy exporter at opset 17 as ``gen_ort_artifacts.py`` exports the
fixtures' forward models (training mode, no constant folding). In eval mode with its default
constant folding the legacy exporter ties equal-valued parameters (the second LayerNorm's weight
becomes ``Identity`` of the first) and renames transposed weights ``onnx::MatMul_*``, which is
not a faithful training source. Run on demand: ``bash .ci/test tests/bench -s``. Reports the
median of 5 runs of ``build_training_graph`` (AdamW, MSE) and checks the result in onnxruntime.
"""
from __future__ import annotations

import io
import math
import statistics
import time
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from transforms.autodiff import build_training_graph

pytestmark = pytest.mark.bench

HIDDEN, HEADS, FFN, SEQ, BATCH = 768, 12, 3072, 128, 8


def bert_layer(hidden: int = HIDDEN, heads: int = HEADS, ffn: int = FFN):
    """The computation of ``transformers.BertLayer`` (self-attention, output, intermediate, output)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class BertLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
            self.attn_out, self.attn_norm = nn.Linear(hidden, hidden), nn.LayerNorm(hidden, eps=1e-12)
            self.intermediate, self.output = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
            self.out_norm = nn.LayerNorm(hidden, eps=1e-12)

        def split(self, t):
            b, s, _ = t.shape
            return t.view(b, s, heads, hidden // heads).transpose(1, 2)

        def forward(self, x):
            q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hidden // heads), dim=-1)
            ctx = (att @ v).transpose(1, 2).reshape(x.shape)
            h = self.attn_norm(self.attn_out(ctx) + x)
            return self.out_norm(self.output(F.gelu(self.intermediate(h))) + h)
    return BertLayer()


@pytest.fixture(scope="module")
def bert_base_forward() -> onnx.ModelProto:
    import torch
    torch.manual_seed(0)
    module = bert_layer().train()
    x = torch.randn(BATCH, SEQ, HIDDEN, generator=torch.Generator().manual_seed(1))
    f = io.BytesIO()
    with warnings.catch_warnings():   # the legacy exporter's deprecation notices
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), f, dynamo=False, opset_version=17, input_names=["input"],
                          output_names=["output"], training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False)
    return onnx.load_from_string(f.getvalue())


def test_bert_base_generation_under_two_seconds(bert_base_forward):
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        model = build_training_graph(bert_base_forward, loss="mse", optimizer="adamw")
        times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    t0 = time.perf_counter()
    blob = model.SerializeToString()
    t_serialize = time.perf_counter() - t0
    n_params = sum(int(np.prod(t.dims)) for t in bert_base_forward.graph.initializer)
    print(f"\nBERT-base layer ({n_params / 1e6:.1f} M parameters, {len(bert_base_forward.graph.node)} forward "
          f"nodes -> {len(model.graph.node)} training nodes): generation median {median * 1e3:.0f} ms "
          f"(min {min(times) * 1e3:.0f}, max {max(times) * 1e3:.0f}) over {len(times)} runs; "
          f"serializing {len(blob) / 2**20:.0f} MB: {t_serialize * 1e3:.0f} ms")
    assert median < 2.0
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
    names = {o.name for o in sess.get_outputs()}
    assert {"loss", "query.weight.new", "query.weight_grad", "out_norm.weight_grad"} <= names
    assert sum(n.endswith("_grad") for n in names) == len(bert_base_forward.graph.initializer)
