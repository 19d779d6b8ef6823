"""The model zoo: whole models nobody on the team wrote, at the smallest sizes that still
exercise their ops, each exported by the torch exporter users would use for it.

``ZOO[name]`` is a ``ZooModel``: ``forward()`` returns the exported forward ``ModelProto``
(random weights, fixed seeds), and ``loss`` is what ``dcstudio train-graph`` trains it with.

- torchvision CNNs (``torchvision.models``, random init, 10 classes, 64×64 inputs, so that the
  last stride-32 stage keeps 2×2 pixels: at 32×32 it has one, BatchNorm over a batch of two
  single pixels maps every value to ±1, the gradients upstream of it are pure rounding noise,
  and AdamW's first step turns that noise into ±lr updates no two fp32 runs agree on): ``resnet18``, ``mobilenet_v3_small`` (hardswish,
  squeeze-excitation) and ``efficientnet_b0`` (SiLU, MBConv, squeeze-excitation); the
  TorchScript exporter in training mode, so BatchNorm keeps its batch statistics.
- Hugging Face-style transformers (``tests/peer/hf_style_models``): a GPT-2 block stack
  (tied ``lm_head``, boolean causal mask, tanh-GELU with ``pow``; trained with MSE, the set-up
  in which a Pow-backward map fusion once corrupted the Adam moments), a ViT (patch-embedding
  conv, class token), a BERT encoder by **both** exporters (dynamo at opset 18 with its
  optimizer; TorchScript, whose position ids are a Shape → Gather → Expand subgraph) and a
  Swin stage (windows padded with ``Pad``, ``torch.roll`` shifted windows, a gathered
  relative-position bias).
- ``shufflenet_style``: ShuffleNet-V2 units built here, with the channel split
  (``chunk`` → Split) and the channel shuffle (reshape / transpose / reshape).
- torchvision's DenseNet (two dense blocks of two layers, growth 8: every layer reads the
  concatenation of all features before it) by **both** exporters: the TorchScript one in training
  mode, and dynamo with its optimizer off (``optimize=False``: on, it folds the BatchNorms that
  follow convolutions into them, which ``train-graph`` refuses, and merges the others' running
  statistics with their weights and biases).
- recurrent text classifiers around PyTorch's own cells, unrolled by ``ir.recurrent``: a two-layer
  bidirectional ``nn.GRU`` (batch first, zero initial state) by the TorchScript exporter, and a
  two-layer ``nn.LSTM`` (sequence first, a learned initial state broadcast over the batch) by dynamo
  with ``optimize=False`` (on, it packs the reordered gate weights into constants, which
  ``train-graph`` refuses).
- ``unet_style``: a two-level U-Net built here (BatchNorm conv blocks, MaxPool down, one
  ``ConvTranspose`` and one bilinear ``nn.Upsample`` up, concatenated skips, a per-pixel head
  trained with MSE), by both exporters (dynamo with ``optimize=False``, as for DenseNet).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import onnx
import torch
import torch.nn.functional as F
from torch import nn

from tests.peer.hf_style_models import BertClassifier, GPT2LMHead, SwinClassifier, ViTClassifier, export, randomize
from tests.zoo.torchvision_cpu import models as torchvision_models

IMAGE = (2, 3, 64, 64)


@dataclass(frozen=True)
class ZooModel:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[torch.Generator], tuple]
    names: tuple[str, ...]
    dynamo: bool
    loss: str = "cross_entropy"
    randomize: bool = False
    optimize: bool = True

    def forward(self) -> onnx.ModelProto:
        return self.exported()[1]

    def exported(self) -> tuple[nn.Module, onnx.ModelProto]:
        """The module and its export. The legacy exporter in training mode runs the module once, which moves
        its BatchNorm statistics: the export holds the moved ones, and so does the module returned."""
        torch.manual_seed(0)
        module = self.build()
        if self.randomize:
            randomize(module)
        args = self.inputs(torch.Generator().manual_seed(1))
        return module, export(module, args, dynamo=self.dynamo, names=self.names, training=not self.dynamo,
                              optimize=self.optimize)


def _image(g: torch.Generator) -> tuple:
    return (torch.randn(*IMAGE, generator=g),)


def _tokens(g: torch.Generator) -> tuple:
    ids = torch.randint(0, 64, (2, 16), generator=g)
    return ids, torch.arange(16).unsqueeze(0)


def _bert_tokens(g: torch.Generator) -> tuple:
    ids = torch.randint(0, 64, (2, 16), generator=g)
    return ids, torch.zeros_like(ids), torch.arange(16).unsqueeze(0)


def _torchvision(name: str, **kw) -> Callable[[], nn.Module]:
    return lambda: getattr(torchvision_models(), name)(num_classes=10, **kw)


def _conv_block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class UNetStyle(nn.Module):
    def __init__(self, c: int = 8, classes: int = 3) -> None:
        super().__init__()
        self.enc1, self.enc2, self.mid = _conv_block(3, c), _conv_block(c, 2 * c), _conv_block(2 * c, 4 * c)
        self.pool = nn.MaxPool2d(2)
        self.up2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.dec2 = _conv_block(4 * c, 2 * c)
        self.up1 = nn.Sequential(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
                                 nn.Conv2d(2 * c, c, 1))
        self.dec1 = _conv_block(2 * c, c)
        self.head = nn.Conv2d(c, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        d2 = self.dec2(torch.cat([self.up2(self.mid(self.pool(e2))), e2], 1))
        return self.head(self.dec1(torch.cat([self.up1(d2), e1], 1)))


def _densenet() -> nn.Module:
    return torchvision_models().DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16, bn_size=2,
                                         num_classes=10)


class ShuffleUnit(nn.Module):
    """A ShuffleNet-V2 unit with stride 1: split the channels in two, transform one half
    (1×1 conv, BN, ReLU, depthwise 3×3, BN, 1×1 conv, BN, ReLU), concatenate, shuffle."""

    def __init__(self, c: int) -> None:
        super().__init__()
        h = c // 2
        self.branch = nn.Sequential(nn.Conv2d(h, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU(),
                                    nn.Conv2d(h, h, 3, 1, 1, groups=h, bias=False), nn.BatchNorm2d(h),
                                    nn.Conv2d(h, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU())

    def forward(self, x):
        a, b = x.chunk(2, dim=1)
        y = torch.cat((a, self.branch(b)), dim=1)
        n, c, hh, ww = y.shape
        return y.view(n, 2, c // 2, hh, ww).transpose(1, 2).reshape(n, c, hh, ww)


class ShuffleNetStyle(nn.Module):
    def __init__(self, c: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        self.units = nn.Sequential(ShuffleUnit(c), ShuffleUnit(c))
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.units(self.stem(x)), 1).flatten(1))


class GRUClassifier(nn.Module):
    def __init__(self, vocab: int = 64, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.gru = nn.GRU(width, width, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * width, classes)

    def forward(self, ids):
        y, _ = self.gru(self.embed(ids))
        return self.head(y.mean(1))


class LSTMClassifier(nn.Module):
    def __init__(self, vocab: int = 64, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.lstm = nn.LSTM(width, width, num_layers=2)
        self.h0 = nn.Parameter(torch.zeros(2, 1, width))
        self.head = nn.Linear(width, classes)

    def forward(self, ids):                 # ids: (T, N)
        h0 = self.h0.expand(-1, ids.shape[1], -1).contiguous()
        _, (h, c) = self.lstm(self.embed(ids), (h0, torch.zeros_like(h0)))
        return self.head(torch.tanh(h[-1] + c[-1]))


def _sequences(g: torch.Generator, first: str = "batch") -> tuple:
    ids = torch.randint(0, 64, (2, 8), generator=g)
    return (ids if first == "batch" else ids.T.contiguous(),)


ZOO: dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("resnet18", _torchvision("resnet18"), _image, ("input",), dynamo=False),
    ZooModel("mobilenet_v3_small", _torchvision("mobilenet_v3_small", dropout=0.0), _image, ("input",),
             dynamo=False),
    ZooModel("efficientnet_b0", _torchvision("efficientnet_b0", dropout=0.0, stochastic_depth_prob=0.0), _image,
             ("input",), dynamo=False),
    ZooModel("vit_dynamo", ViTClassifier, lambda g: (torch.randn(2, 3, 16, 16, generator=g),), ("pixel_values",),
             dynamo=True, randomize=True),
    ZooModel("gpt2_dynamo", GPT2LMHead, _tokens, ("input_ids", "position_ids"), dynamo=True, loss="mse",
             randomize=True),
    ZooModel("bert_dynamo", BertClassifier, _bert_tokens, ("input_ids", "token_type_ids", "position_ids"),
             dynamo=True, randomize=True),
    ZooModel("bert_legacy", BertClassifier, lambda g: (torch.randint(0, 64, (2, 16), generator=g),),
             ("input_ids",), dynamo=False),
    ZooModel("swin_legacy", SwinClassifier, lambda g: (torch.randn(2, 3, 20, 20, generator=g),), ("pixel_values",),
             dynamo=False),
    ZooModel("shufflenet_style", ShuffleNetStyle, _image, ("input",), dynamo=False),
    ZooModel("densenet_legacy", _densenet, _image, ("input",), dynamo=False),
    ZooModel("densenet_dynamo", _densenet, _image, ("input",), dynamo=True, optimize=False),
    ZooModel("unet_legacy", UNetStyle, _image, ("input",), dynamo=False, loss="mse"),
    ZooModel("unet_dynamo", UNetStyle, _image, ("input",), dynamo=True, loss="mse", optimize=False),
    ZooModel("gru_legacy", GRUClassifier, _sequences, ("input_ids",), dynamo=False),
    ZooModel("lstm_dynamo", LSTMClassifier, lambda g: _sequences(g, "time"), ("input_ids",), dynamo=True,
             randomize=True, optimize=False),
]}
