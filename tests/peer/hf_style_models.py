"""Small torch models written the way Hugging Face / torchvision write them, for exporter tests.

The parameter and buffer names follow the originals (``transformer.h.0.attn.c_attn.weight``,
``encoder.layer.0.attention.self.query.weight``, ``layers.0.blocks.1.attn.relative_position_bias_table``)
and so do the exporter-visible details: GPT-2's boolean causal-mask buffer and ``finfo.min``
fill, tanh-GELU with ``pow``, the tied ``lm_head``; BERT's extended attention mask built from
an all-ones mask; ViT's patch-embedding conv, class token and 1/sqrt(d) attention scale; a
Swin stage with window partition (``F.pad`` to a multiple of the window), ``torch.roll``
shifted windows, a relative position bias table gathered by an index buffer and the
shifted-window attention mask. ``export(module, args, dynamo=…)`` exports with either
torch exporter at opset 17 (dynamo: 18, its lowest).
"""
from __future__ import annotations

import io
import math
import warnings

import onnx
import torch
import torch.nn.functional as F
from torch import nn


def export(module: nn.Module, args: tuple, dynamo: bool, names: tuple[str, ...] = ("input",),
           training: bool = False, optimize: bool = True) -> onnx.ModelProto:
    """Export ``module`` to a ModelProto: in eval mode with the exporter's defaults, or (legacy exporter,
    ``training``) in training mode without constant folding, which keeps every parameter. ``optimize``
    False turns the dynamo exporter's optimizer off (it folds BatchNorms into convolutions)."""
    module.train(training)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            prog = torch.onnx.export(module, args, dynamo=True, opset_version=18, input_names=list(names),
                                     output_names=["logits"], verbose=False, optimize=optimize)
            return prog.model_proto
        f = io.BytesIO()
        mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
        torch.onnx.export(module, args, f, dynamo=False, opset_version=17, input_names=list(names),
                          output_names=["logits"], training=mode, do_constant_folding=not training)
        return onnx.load_from_string(f.getvalue())


def randomize(module: nn.Module, seed: int = 0) -> nn.Module:
    """Give every parameter distinct random values, as trained weights have (initial ones and zeros
    would be merged or dropped by the exporter's optimizer)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return module


# ---- GPT-2 -------------------------------------------------------------------------------

class Conv1D(nn.Module):
    """GPT-2's linear layer: weight stored (in, out), ``addmm``."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        shape = x.size()[:-1] + (self.weight.size(-1),)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(shape)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, width: int, heads: int, ctx: int) -> None:
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)).view(1, 1, ctx, ctx),
                             persistent=False)
        self.register_buffer("masked_bias", torch.tensor(-1e4), persistent=False)
        self.heads, self.width = heads, width
        self.c_attn, self.c_proj = Conv1D(3 * width, width), Conv1D(width, width)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.c_attn(x).split(self.width, 2))
        w = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], v.size(-1) ** 0.5, dtype=q.dtype)
        mask = self.bias[:, :, :t, :t]
        w = torch.where(mask, w, torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype))
        a = torch.matmul(F.softmax(w, dim=-1), v).transpose(1, 2).reshape(b, t, self.width)
        return self.c_proj(a)


class GPT2Block(nn.Module):
    def __init__(self, width: int, heads: int, ctx: int) -> None:
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(width), GPT2Attention(width, heads, ctx)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Module()
        self.mlp.c_fc, self.mlp.c_proj = Conv1D(4 * width, width), Conv1D(width, 4 * width)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp.c_proj(gelu_new(self.mlp.c_fc(self.ln_2(x))))


class GPT2LMHead(nn.Module):
    def __init__(self, vocab: int = 64, ctx: int = 16, width: int = 16, heads: int = 2, layers: int = 2) -> None:
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte, self.transformer.wpe = nn.Embedding(vocab, width), nn.Embedding(ctx, width)
        self.transformer.h = nn.ModuleList(GPT2Block(width, heads, ctx) for _ in range(layers))
        self.transformer.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight    # tied

    def forward(self, input_ids, position_ids=None):
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.transformer.wte(input_ids) + self.transformer.wpe(position_ids)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return logits.reshape(-1, logits.shape[-1])


# ---- BERT --------------------------------------------------------------------------------

class BertLayer(nn.Module):
    def __init__(self, width: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads = heads
        self.attention = nn.Module()
        self.attention.self = nn.Module()
        for n in ("query", "key", "value"):
            setattr(self.attention.self, n, nn.Linear(width, width))
        self.attention.output = nn.Module()
        self.attention.output.dense, self.attention.output.LayerNorm = nn.Linear(width, width), nn.LayerNorm(width)
        self.intermediate = nn.Module()
        self.intermediate.dense = nn.Linear(width, ffn)
        self.output = nn.Module()
        self.output.dense, self.output.LayerNorm = nn.Linear(ffn, width), nn.LayerNorm(width)

    def forward(self, x, mask):
        b, t, w = x.shape
        s = self.attention.self
        q, k, v = (lin(x).view(b, t, self.heads, -1).transpose(1, 2) for lin in (s.query, s.key, s.value))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(w // self.heads) + mask
        ctx = torch.matmul(F.softmax(scores, -1), v).transpose(1, 2).reshape(b, t, w)
        x = self.attention.output.LayerNorm(self.attention.output.dense(ctx) + x)
        h = self.output.dense(F.gelu(self.intermediate.dense(x)))
        return self.output.LayerNorm(h + x)


class BertClassifier(nn.Module):
    def __init__(self, vocab: int = 64, ctx: int = 16, width: int = 16, heads: int = 2, layers: int = 2,
                 labels: int = 3) -> None:
        super().__init__()
        self.embeddings = nn.Module()
        self.embeddings.word_embeddings = nn.Embedding(vocab, width)
        self.embeddings.position_embeddings = nn.Embedding(ctx, width)
        self.embeddings.token_type_embeddings = nn.Embedding(2, width)
        self.embeddings.LayerNorm = nn.LayerNorm(width)
        self.embeddings.register_buffer("position_ids", torch.arange(ctx).unsqueeze(0))
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList(BertLayer(width, heads, 4 * width) for _ in range(layers))
        self.pooler = nn.Module()
        self.pooler.dense = nn.Linear(width, width)
        self.classifier = nn.Linear(width, labels)

    def forward(self, input_ids, token_type_ids=None, position_ids=None):
        b, t = input_ids.shape
        e = self.embeddings
        types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
        positions = e.position_ids[:, :t] if position_ids is None else position_ids
        x = e.word_embeddings(input_ids) + e.token_type_embeddings(types) + e.position_embeddings(positions)
        x = e.LayerNorm(x)
        attention_mask = torch.ones(b, t)
        mask = (1.0 - attention_mask[:, None, None, :]) * torch.finfo(torch.float32).min
        for layer in self.encoder.layer:
            x = layer(x, mask)
        return self.classifier(torch.tanh(self.pooler.dense(x[:, 0])))


def save_bert_stack(path, layers: int = 3) -> None:
    """A tiny ``layers``-layer BertClassifier (width 16, 2 heads, sequence 8, batch 2), exported by the
    TorchScript exporter in training mode to ``path``: the stack of equal layers the transfer tests tune."""
    torch.manual_seed(0)
    module = randomize(BertClassifier(vocab=40, ctx=8, width=16, heads=2, layers=layers))
    ids = torch.randint(0, 40, (2, 8), generator=torch.Generator().manual_seed(1))
    onnx.save(export(module, (ids,), dynamo=False, names=("input_ids",), training=True), path)


# ---- ViT ---------------------------------------------------------------------------------

class ViTLayer(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.layernorm_before, self.layernorm_after = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = nn.Module()
        self.attention.attention = nn.Module()
        for n in ("query", "key", "value"):
            setattr(self.attention.attention, n, nn.Linear(width, width))
        self.attention.output = nn.Module()
        self.attention.output.dense = nn.Linear(width, width)
        self.intermediate = nn.Module()
        self.intermediate.dense = nn.Linear(width, 2 * width)
        self.output = nn.Module()
        self.output.dense = nn.Linear(2 * width, width)

    def forward(self, x):
        b, t, w = x.shape
        a = self.attention.attention
        h = self.layernorm_before(x)
        q, k, v = (lin(h).view(b, t, self.heads, -1).transpose(1, 2) for lin in (a.query, a.key, a.value))
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(w // self.heads))
        ctx = torch.matmul(F.softmax(scores, -1), v).transpose(1, 2).reshape(b, t, w)
        x = x + self.attention.output.dense(ctx)
        return x + self.output.dense(F.gelu(self.intermediate.dense(self.layernorm_after(x))))


class ViTClassifier(nn.Module):
    def __init__(self, image: int = 16, patch: int = 4, width: int = 16, heads: int = 2, layers: int = 2,
                 labels: int = 5) -> None:
        super().__init__()
        n = (image // patch) ** 2
        self.embeddings = nn.Module()
        self.embeddings.cls_token = nn.Parameter(torch.randn(1, 1, width) * 0.02)
        self.embeddings.position_embeddings = nn.Parameter(torch.randn(1, n + 1, width) * 0.02)
        self.embeddings.patch_embeddings = nn.Module()
        self.embeddings.patch_embeddings.projection = nn.Conv2d(3, width, patch, patch)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList(ViTLayer(width, heads) for _ in range(layers))
        self.layernorm = nn.LayerNorm(width)
        self.classifier = nn.Linear(width, labels)

    def forward(self, pixel_values):
        e = self.embeddings
        x = e.patch_embeddings.projection(pixel_values).flatten(2).transpose(1, 2)
        x = torch.cat([e.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + e.position_embeddings
        for layer in self.encoder.layer:
            x = layer(x)
        return self.classifier(self.layernorm(x)[:, 0])


# ---- Swin --------------------------------------------------------------------------------

def window_partition(x, ws: int):
    b, h, w, c = x.shape
    x = x.view(b, h // ws, ws, w // ws, ws, c)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c)


def window_reverse(windows, ws: int, h: int, w: int):
    c = windows.shape[-1]
    x = windows.view(-1, h // ws, w // ws, ws, ws, c)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, h, w, c)


class WindowAttention(nn.Module):
    def __init__(self, width: int, heads: int, ws: int) -> None:
        super().__init__()
        self.heads, self.ws = heads, ws
        self.relative_position_bias_table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * 0.02)
        coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (ws - 1)
        self.register_buffer("relative_position_index", rel[..., 0] * (2 * ws - 1) + rel[..., 1])
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)

    def forward(self, x, mask):
        bw, n, c = x.shape
        qkv = self.qkv(x).reshape(bw, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = (q * (c // self.heads) ** -0.5) @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        att = att + bias.permute(2, 0, 1).unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            att = att.view(bw // nw, nw, self.heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
            att = att.view(-1, self.heads, n, n)
        out = (att.softmax(-1) @ v).transpose(1, 2).reshape(bw, n, c)
        return self.proj(out)


class SwinBlock(nn.Module):
    def __init__(self, width: int, heads: int, ws: int, shift: int, hw: int) -> None:
        super().__init__()
        self.ws, self.shift = ws, shift
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = WindowAttention(width, heads, ws)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))
        hp = -(-hw // ws) * ws
        if shift:
            img = torch.zeros(1, hp, hp, 1)
            cuts = (slice(0, -ws), slice(-ws, -shift), slice(-shift, None))
            cnt = 0
            for hs in cuts:
                for wsl in cuts:
                    img[:, hs, wsl, :] = cnt
                    cnt += 1
            win = window_partition(img, ws).squeeze(-1)
            mask = win.unsqueeze(1) - win.unsqueeze(2)
            self.register_buffer("attn_mask", mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0))
        else:
            self.attn_mask = None

    def forward(self, x, hw: int):
        b, _, c = x.shape
        shortcut = x
        x = self.norm1(x).view(b, hw, hw, c)
        pad = (self.ws - hw % self.ws) % self.ws
        x = F.pad(x, (0, 0, 0, pad, 0, pad))
        hp = hw + pad
        if self.shift:
            x = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        x = window_reverse(self.attn(window_partition(x, self.ws), self.attn_mask), self.ws, hp, hp)
        if self.shift:
            x = torch.roll(x, shifts=(self.shift, self.shift), dims=(1, 2))
        x = x[:, :hw, :hw, :].reshape(b, hw * hw, c)
        x = shortcut + x
        return x + self.mlp(self.norm2(x))


class SwinClassifier(nn.Module):
    def __init__(self, image: int = 20, patch: int = 4, width: int = 16, heads: int = 2, ws: int = 2,
                 labels: int = 5) -> None:
        super().__init__()
        self.hw = image // patch       # 5: not a multiple of the window, so the block pads
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(3, width, patch, patch)
        self.patch_embed.norm = nn.LayerNorm(width)
        self.layers = nn.ModuleList([nn.Module()])
        self.layers[0].blocks = nn.ModuleList(SwinBlock(width, heads, ws, s, self.hw) for s in (0, ws // 2))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, labels)

    def forward(self, pixel_values):
        x = self.patch_embed.norm(self.patch_embed.proj(pixel_values).flatten(2).transpose(1, 2))
        for block in self.layers[0].blocks:
            x = block(x, self.hw)
        return self.head(self.norm(x).mean(1))
