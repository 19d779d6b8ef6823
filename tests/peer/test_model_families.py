"""Model families built fresh for these tests (outside the zoo's files), through the pipeline a user runs:
train-graph, then the generated step in onnxruntime trained against PyTorch's optimizer over several steps
(``training_runs.drift``: 32 × PyTorch fp32's own distance from float64).

- A diffusion-style up-sampling decoder: nearest ``nn.Upsample`` (Resize, ``asymmetric``/``floor``), SiLU,
  a ``ConvTranspose`` with ``output_padding`` and groups, bicubic ``F.interpolate`` (Resize cubic) and a skip
  concatenation, by both exporters (dynamo with its optimizer: there is no BatchNorm to fold).
- Recurrent taggers: two-layer bidirectional, batch-first ``nn.GRU``, ``nn.LSTM`` and ``nn.RNN`` (ReLU)
  over embeddings, by both exporters (dynamo with ``optimize=False``: with it on, the exporter packs the
  reordered gate weights into constants and ``train-graph`` refuses them, which is checked too).
"""
from __future__ import annotations

import onnx
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from studio.cli import main
from tests.peer.fresh_models import export_training
from tests.peer.hf_style_models import export
from tests.peer.training_runs import drift, make_batches, ort_run, param_map, torch_run

STEPS = 8
LR = 3e-3


class UpsamplingDecoder(nn.Module):
    def __init__(self, c: int = 6) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, stride=2, padding=1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.deconv = nn.ConvTranspose2d(2 * c, c, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.head = nn.Conv2d(c, 2, 1)

    def forward(self, x):
        s = F.silu(self.stem(x))                                  # (N, c, 8, 8)
        u = F.silu(self.conv(self.up(s)))                         # nearest up: (N, c, 16, 16)
        d = self.deconv(torch.cat([F.avg_pool2d(u, 2), s], 1))    # (N, c, 16, 16)
        y = F.interpolate(d + u, scale_factor=0.5, mode="bicubic", align_corners=False)
        return self.head(y)


def _inputs(g):
    return (torch.randn(2, 3, 16, 16, generator=g),)


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_upsampling_decoder_trains_like_pytorch(tmp_path, capsys, dynamo):
    torch.manual_seed(0)
    module = UpsamplingDecoder()
    proto = export_training(module, _inputs(torch.Generator().manual_seed(1)), ("input",), dynamo=dynamo)
    resizes = [n for n in proto.graph.node if n.op_type == "Resize"]
    assert {a.s for n in resizes for a in n.attribute if a.name == "mode"} == {b"nearest", b"cubic"}
    onnx.save(proto, tmp_path / "decoder.onnx")
    code = main(["train-graph", str(tmp_path / "decoder.onnx"), "--loss", "mse", "--optimizer", "adamw",
                 "--lr", str(LR), "-o", str(tmp_path / "train.onnx")])
    assert code == 0, capsys.readouterr().err
    batches = make_batches(module, _inputs, ("input",), STEPS, "mse")
    names = param_map(proto, module)
    truth = torch_run(module, batches, "adamw", LR, names, loss="mse", dtype=torch.float64)
    base = torch_run(module, batches, "adamw", LR, names, loss="mse")
    run = ort_run(onnx.load(tmp_path / "train.onnx"), batches)
    assert sorted(run.params) == sorted(truth.params)
    assert drift(truth, base, run, "onnxruntime") == []


class RecurrentTagger(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        extra = {"nonlinearity": "relu"} if kind == "RNN" else {}
        self.rnn = getattr(nn, kind)(8, 6, num_layers=2, batch_first=True, bidirectional=True, **extra)
        self.head = nn.Linear(12, 3)

    def forward(self, ids):
        y, _ = self.rnn(self.embed(ids))
        return self.head(y[:, -1] + y[:, 0])


def _tokens(g):
    return (torch.randint(0, 20, (2, 5), generator=g),)


@pytest.mark.parametrize("kind,dynamo", [("GRU", False), ("GRU", True), ("LSTM", False), ("LSTM", True),
                                         ("RNN", False)], ids=["gru-legacy", "gru-dynamo", "lstm-legacy",
                                                               "lstm-dynamo", "rnn-relu-legacy"])
def test_recurrent_tagger_trains_like_pytorch(tmp_path, capsys, kind, dynamo):
    torch.manual_seed(0)
    module = RecurrentTagger(kind)
    proto = export(module, _tokens(torch.Generator().manual_seed(1)), dynamo=dynamo, names=("ids",),
                   training=not dynamo, optimize=False)
    assert sum(n.op_type == kind for n in proto.graph.node) == 2
    onnx.save(proto, tmp_path / "tagger.onnx")
    code = main(["train-graph", str(tmp_path / "tagger.onnx"), "--optimizer", "adamw", "--lr", str(LR),
                 "-o", str(tmp_path / "train.onnx")])
    assert code == 0, capsys.readouterr().err
    batches = make_batches(module, _tokens, ("ids",), STEPS, "cross_entropy")
    names = param_map(proto, module)
    assert sum(n.startswith("rnn.") for n in names) == 16      # every layer, direction, weight and bias
    truth = torch_run(module, batches, "adamw", LR, names, dtype=torch.float64)
    base = torch_run(module, batches, "adamw", LR, names)
    run = ort_run(onnx.load(tmp_path / "train.onnx"), batches)
    assert sorted(run.params) == sorted(truth.params)
    assert drift(truth, base, run, "onnxruntime") == []


def test_recurrent_weights_packed_by_the_dynamo_optimizer_are_refused(tmp_path, capsys):
    torch.manual_seed(0)
    proto = export(RecurrentTagger("GRU"), _tokens(torch.Generator().manual_seed(1)), dynamo=True, names=("ids",))
    onnx.save(proto, tmp_path / "tagger.onnx")
    code = main(["train-graph", str(tmp_path / "tagger.onnx"), "-o", str(tmp_path / "train.onnx")])
    err = capsys.readouterr().err
    assert code != 0 and not (tmp_path / "train.onnx").exists()
    assert "packed this layer's weights" in err and "rnn.weight_ih_l0" in err and "optimize=False" in err
