"""Models built for the training-run tests, written the way their families' reference code is,
at the smallest sizes that keep every op (none of them comes from the zoo):

- ``LlamaStyle``: a Llama-style decoder: token embedding, pre-norm blocks with RMSNorm (a weight
  of ones at init: the dynamo exporter merges equal initializers), causal self-attention with
  rotary position embeddings (``rotate_half``: slices, negation, concat) and no biases, a SwiGLU
  MLP, a final RMSNorm and an untied ``lm_head``; logits as (batch · tokens, vocab);
- ``ConvNeXtStyle``: a patchify stem, channels-first LayerNorm, ConvNeXt blocks (7×7 depthwise
  conv, LayerNorm over channels-last, inverted-bottleneck MLP with GELU, layer scale, residual),
  a downsampling layer, global pooling, LayerNorm and a classifier;
- ``RegNetStyle``: RegNetY-style: stem conv + BatchNorm, X blocks (1×1, 3×3 group conv with group
  width 8, squeeze-and-excitation, 1×1) with BatchNorm after every conv and a projected shortcut
  on stride or width changes, global pooling, classifier;
- ``DropoutMLP``: a classifier with ``nn.Dropout`` between its layers (the dropout tests).
``export_training(module, args, dynamo=…)`` exports as the zoo does (legacy: training mode).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tests.peer.hf_style_models import export


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-6, ramp: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, width) if ramp else torch.ones(width))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, width: int, heads: int, ctx: int) -> None:
        super().__init__()
        self.heads, self.head = heads, width // heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(width, width, bias=False) for _ in range(4))
        inv = 1.0 / (10000 ** (torch.arange(0, self.head, 2).float() / self.head))
        angles = torch.outer(torch.arange(ctx).float(), inv)
        emb = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin", emb.sin()[None, None], persistent=False)
        self.register_buffer("mask", torch.full((ctx, ctx), float("-inf")).triu(1), persistent=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, self.heads, self.head).transpose(1, 2) for p in (self.q_proj, self.k_proj,
                                                                                  self.v_proj))
        q = q * self.cos + rotate_half(q) * self.sin
        k = k * self.cos + rotate_half(k) * self.sin
        w = torch.matmul(q, k.transpose(-1, -2)) / self.head ** 0.5 + self.mask[:t, :t]
        a = torch.matmul(F.softmax(w, dim=-1), v).transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(a)


class LlamaMLP(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(width, hidden, bias=False), nn.Linear(width, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, width, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, width: int, heads: int, ctx: int, ramp: bool = False) -> None:
        super().__init__()
        self.input_layernorm, self.self_attn = RMSNorm(width, ramp=ramp), LlamaAttention(width, heads, ctx)
        self.post_attention_layernorm, self.mlp = RMSNorm(width, ramp=ramp), LlamaMLP(width, 2 * width)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaStyle(nn.Module):
    """``tied``: ``lm_head`` is the token embedding (Llama 3.2 1B/3B); ``ramp``: every RMSNorm starts from
    the same non-constant weights (equal tensors the dynamo exporter merges and no repair can tell apart
    from a tie)."""

    def __init__(self, vocab: int = 64, ctx: int = 16, width: int = 32, heads: int = 4, layers: int = 2,
                 tied: bool = False, ramp: bool = False) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList(LlamaLayer(width, heads, ctx, ramp) for _ in range(layers))
        self.norm = RMSNorm(width, ramp=ramp)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        if tied:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x)
        logits = self.lm_head(self.norm(x))
        return logits.reshape(-1, logits.shape[-1])


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor (ConvNeXt's channels-first norm)."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1, self.pwconv2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 0.5))

    def forward(self, x):
        y = self.norm(self.dwconv(x).permute(0, 2, 3, 1))
        y = self.gamma * self.pwconv2(F.gelu(self.pwconv1(y)))
        return x + y.permute(0, 3, 1, 2)


class ConvNeXtStyle(nn.Module):
    def __init__(self, dims: tuple[int, int] = (16, 32), classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, stride=4), LayerNorm2d(dims[0], eps=1e-6))
        self.stage0 = ConvNeXtBlock(dims[0])
        self.downsample = nn.Sequential(LayerNorm2d(dims[0], eps=1e-6), nn.Conv2d(dims[0], dims[1], 2, stride=2))
        self.stage1 = ConvNeXtBlock(dims[1])
        self.norm, self.head = nn.LayerNorm(dims[1], eps=1e-6), nn.Linear(dims[1], classes)

    def forward(self, x):
        x = self.stage1(self.downsample(self.stage0(self.stem(x))))
        return self.head(self.norm(x.mean((2, 3))))


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, squeezed: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, squeezed, 1), nn.Conv2d(squeezed, c, 1)

    def forward(self, x):
        return x * torch.sigmoid(self.fc2(F.relu(self.fc1(F.adaptive_avg_pool2d(x, 1)))))


class RegNetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, group_width: int = 8) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(cout, cout, 3, stride, 1, groups=cout // group_width, bias=False),
                               nn.BatchNorm2d(cout), nn.ReLU())
        self.se = SqueezeExcite(cout, max(cin // 4, 1))
        self.c = nn.Sequential(nn.Conv2d(cout, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.proj = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else None)

    def forward(self, x):
        shortcut = x if self.proj is None else self.proj(x)
        return F.relu(shortcut + self.c(self.se(self.b(self.a(x)))))


class RegNetStyle(nn.Module):
    def __init__(self, widths: tuple[int, int] = (16, 32), classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 2, 1, bias=False), nn.BatchNorm2d(widths[0]),
                                  nn.ReLU())
        self.s1 = RegNetBlock(widths[0], widths[0], 1)
        self.s2 = RegNetBlock(widths[0], widths[1], 2)
        self.fc = nn.Linear(widths[1], classes)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.s2(self.s1(self.stem(x))), 1).flatten(1))


class DropoutMLP(nn.Module):
    def __init__(self, width: int = 32, classes: int = 10, p: float = 0.25) -> None:
        super().__init__()
        self.fc1, self.drop1 = nn.Linear(16, width), nn.Dropout(p)
        self.fc2, self.drop2 = nn.Linear(width, width), nn.Dropout(p)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.drop2(F.gelu(self.fc2(self.drop1(F.gelu(self.fc1(x)))))))


def export_training(module: nn.Module, args: tuple, names: tuple[str, ...], dynamo: bool = False):
    """The forward ONNX as users make it: dynamo (eval mode) or legacy in training mode."""
    return export(module, args, dynamo=dynamo, names=names, training=not dynamo)
