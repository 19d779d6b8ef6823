"""Which initializers of a forward model are its parameters: ``choose_parameters(model)``.

A forward export holds the model's parameters and the exporter's constants side by side
(causal masks, attention scales, shape vectors, folded positions). Only the parameters
are trained by default. Evidence, strongest first:

1. **torch dynamo exporter**: the value info of each initializer carries
   ``pkg.torch.export.graph_signature.InputSpec.kind`` (``PARAMETER``, ``BUFFER``,
   ``CONSTANT_TENSOR``). An initializer the onnxscript optimizer folded from exactly one
   parameter (``pkg.onnxscript.optimizer.folded_from``, e.g. a transposed Linear weight
   ``val_13``) is that parameter in another layout: trained under its ONNX name, listed
   with its source. Folds that mix a parameter with other values (an embedding gathered
   at constant positions) stay constant and are listed as such.
2. **legacy TorchScript exporter** (producer ``pytorch``): parameter names (module paths,
   ``encoder.layer.0.…``) are kept; ``onnx::…``, ``Constant_…`` and numeric names are the
   exporter's own, for which the use pattern (3) decides (``onnx::MatMul_N`` is a folded,
   transposed weight). A dynamo export whose value metadata was stripped (nodes still carry
   ``pkg.torch.onnx.*``) is read the same way.
3. **use pattern** (any model): weights of MatMul/Gemm/Conv/ConvTranspose/Einsum,
   normalization scales and biases, embedding tables (``Gather`` data), PRelu slopes and
   biases added to the output of such a weighted op.

Never trained: integer and bool tensors, scalars (one element), BatchNorm running
statistics, masks (values at or below -1e30, or only {0, v <= -100}), values that do not
reach the loss. A copy of another parameter in another layout (a tied ``lm_head`` folded
to ``onnx::MatMul_N`` or ``val_N`` = ``wte.T``) is *tied*: the training graph computes it
from its source (``Transpose``/``Reshape``), so the tie survives training.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
from onnx import GraphProto, ModelProto, TensorProto, numpy_helper

from transforms.autodiff.emitter import FLOAT_ELEMS

KIND_KEY = "pkg.torch.export.graph_signature.InputSpec.kind"
FOLDED_KEY = "pkg.onnxscript.optimizer.folded_from"
_DYNAMO_NODE_KEY = "pkg.torch.onnx."
GENERATED_NAME = re.compile(r"^(onnx::|Constant_|_?val_\d+$|\d+$|/|const_)|_const")
_VIEWS = frozenset({"Transpose", "Reshape", "Cast", "Identity", "Squeeze", "Unsqueeze", "Flatten"})
_WEIGHTED = {"MatMul": (0, 1), "Gemm": (0, 1), "Conv": (1,), "ConvTranspose": (1,), "Einsum": None,
             "PRelu": (1,)}
_AFFINE = {"Gemm": (2,), "Conv": (2,), "ConvTranspose": (2,), "LayerNormalization": (1, 2),
           "BatchNormalization": (1, 2), "InstanceNormalization": (1, 2), "GroupNormalization": (1, 2),
           "RMSNormalization": (1,), "SimplifiedLayerNormalization": (1,)}


@dataclass(frozen=True, slots=True)
class Choice:
    """One float initializer: trained or kept constant, and why."""

    name: str
    trainable: bool
    reason: str
    source: str | None = None     # the torch parameter it was folded from (dynamo)


@dataclass(frozen=True, slots=True)
class Tie:
    """Initializer ``name`` equals ``op`` applied to parameter ``source`` (``perm``/``shape``)."""

    name: str
    source: str
    op: str
    perm: tuple[int, ...] = ()
    value: "np.ndarray | None" = None    # Expand: the new parameter (the source, which the exporter folded)


@dataclass(slots=True)
class ParameterChoice:
    """The verdict for every float initializer, plus ties (see the module docstring)."""

    exporter: str
    choices: list[Choice] = field(default_factory=list)
    ties: list[Tie] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)   # exporter_repair notes

    def trainable(self) -> list[str]:
        return [c.name for c in self.choices if c.trainable]

    def frozen(self) -> list[Choice]:
        return [c for c in self.choices if not c.trainable]


def exporter_of(model: ModelProto) -> str:
    """``"torch-dynamo"``, ``"torch-legacy"`` or ``"other"``."""
    g = model.graph
    if any(p.key in (KIND_KEY, FOLDED_KEY) for vi in list(g.value_info) + list(g.input) for p in vi.metadata_props):
        return "torch-dynamo"
    if any(p.key.startswith(_DYNAMO_NODE_KEY) for n in g.node[:20] for p in n.metadata_props):
        return "torch-dynamo"
    return "torch-legacy" if model.producer_name == "pytorch" else "other"


def choose_parameters(model: ModelProto) -> ParameterChoice:
    """Classify every float initializer of ``model`` (reachability to the loss is checked later)."""
    g = model.graph
    exporter = exporter_of(model)
    meta = {vi.name: {p.key: p.value for p in vi.metadata_props} for vi in list(g.value_info) + list(g.input)}
    inits = {t.name: t for t in g.initializer}
    uses = _UsePattern(g, inits)
    out = ParameterChoice(exporter)
    for name, t in inits.items():
        if t.data_type not in FLOAT_ELEMS:
            continue
        out.choices.append(_verdict(name, t, exporter, meta.get(name, {}), uses))
    out.ties = _ties(out, inits) + _unbroadcasts(out, inits)
    tied = {t.name: t for t in out.ties}
    out.choices = [Choice(c.name, False, f"tied, computed from its source: {tied[c.name].op} of "
                          f"{tied[c.name].source}") if c.name in tied else c for c in out.choices]
    out.choices += [Choice(t.source, True, f"torch parameter, un-broadcast from: {t.name}")
                    for t in out.ties if t.value is not None]
    return out


def _verdict(name: str, t: TensorProto, exporter: str, meta: dict[str, str], uses: "_UsePattern") -> Choice:
    numel = int(np.prod(t.dims)) if t.dims else 1
    if numel <= 1:
        return Choice(name, False, "scalar")
    if uses.only_running_stats(name):
        return Choice(name, False, "BatchNorm running statistic")
    if exporter == "torch-dynamo":
        kind = meta.get(KIND_KEY)
        if kind == "PARAMETER":
            return Choice(name, True, "torch parameter")
        if kind:
            return Choice(name, False, f"torch {kind.lower().replace('_', ' ')}")
        sources = folded_sources(meta.get(FOLDED_KEY, ""))
        if len(sources) == 1 and uses.weight_like(name):
            return Choice(name, True, f"folded from: {sources[0]}", sources[0])
        named = [n for n in sources if not GENERATED_NAME.search(n)]
        if len(named) == 1 and _broadcast_axes(t) and not _uniform(t):
            return Choice(name, False, f"broadcast of {named[0]}", named[0])
        if sources:
            return Choice(name, False, f"exporter constant folded from other values: {', '.join(sources[:3])}"
                          f"{', …' if len(sources) > 3 else ''}")
        if _is_mask(t):
            return Choice(name, False, "mask")
        if not kind and "." in name and not GENERATED_NAME.search(name):
            return Choice(name, True, "torch parameter")     # metadata stripped: a module path
        if uses.weight_like(name):
            return Choice(name, True, uses.role(name))
        return Choice(name, False, "exporter constant")
    if _is_mask(t):
        return Choice(name, False, "mask")
    if exporter == "torch-legacy" and not GENERATED_NAME.search(name) and ("." in name or uses.weight_like(name)):
        return Choice(name, True, "torch parameter")
    if uses.weight_like(name):
        return Choice(name, True, uses.role(name))
    return Choice(name, False, "exporter constant" if exporter != "other" else "constant (not used as a weight)")


def folded_sources(text: str) -> list[str]:
    return re.findall(r"'([^']*)'", text)


def _is_mask(t: TensorProto) -> bool:
    arr = numpy_helper.to_array(t)
    if arr.size == 0 or not np.all(np.isfinite(arr)) or float(arr.min()) <= -1e30:
        return True
    values = np.unique(arr) if arr.size <= 1 << 20 else np.unique(arr.reshape(-1)[:4096])
    return len(values) == 2 and values[1] == 0 and values[0] <= -100


class _UsePattern:
    """Where each initializer (through view ops) is consumed."""

    def __init__(self, g: GraphProto, inits: dict[str, TensorProto]) -> None:
        self.inits = inits
        self.consumers: dict[str, list[tuple]] = {}
        self.producer = {o: n for n in g.node for o in n.output}
        for n in g.node:
            for k, i in enumerate(n.input):
                self.consumers.setdefault(i, []).append((n, k))

    def _final_uses(self, name: str, depth: int = 0) -> list[tuple]:
        out = []
        for node, k in self.consumers.get(name, []):
            if node.op_type in _VIEWS and k == 0 and depth < 4:
                out.extend(self._final_uses(node.output[0], depth + 1))
            else:
                out.append((node, k))
        return out

    def only_running_stats(self, name: str) -> bool:
        uses = self.consumers.get(name, [])
        return bool(uses) and all(n.op_type == "BatchNormalization" and k in (3, 4) for n, k in uses)

    def role(self, name: str) -> str:
        for node, k in self._final_uses(name):
            if node.op_type == "Gather" and k == 0:
                return "embedding table"
            if node.op_type == "Add":
                return "bias"
            return f"{node.op_type} {'weight' if node.op_type in _WEIGHTED else 'scale/bias'}"
        return "weight"

    def weight_like(self, name: str) -> bool:
        return any(self._uses_as_weight(node, k, name) for node, k in self._final_uses(name))

    def _uses_as_weight(self, node, k: int, name: str) -> bool:
        op = node.op_type
        if op in _WEIGHTED and (_WEIGHTED[op] is None or k in _WEIGHTED[op]):
            return True
        if k in _AFFINE.get(op, ()):
            return True
        if op == "Gather" and k == 0:
            return True
        if op == "Add" and len(node.input) == 2:
            return self._is_bias(name, node.input[1 - k])
        return False

    def _is_bias(self, name: str, other: str) -> bool:
        dims = [d for d in self.inits[name].dims if d != 1]
        if len(dims) != 1:
            return False
        for _ in range(4):
            node = self.producer.get(other)
            if node is None:
                return False
            if node.op_type in _VIEWS:
                other = node.input[0]
                continue
            weights = _WEIGHTED.get(node.op_type, ())
            return node.op_type in _WEIGHTED and any(
                i in self.inits or self._produced_from_init(i)
                for j, i in enumerate(node.input) if weights is None or j in weights)
        return False

    def _produced_from_init(self, name: str) -> bool:
        node = self.producer.get(name)
        return node is not None and node.op_type in _VIEWS and node.input[0] in self.inits


def _uniform(t: TensorProto) -> bool:
    """One value everywhere (a zero initial state): a constant, never a parameter's broadcast."""
    arr = numpy_helper.to_array(t)
    return arr.size > 0 and float(arr.min()) == float(arr.max())


def _broadcast_axes(t: TensorProto) -> list[int]:
    """Axes (of size > 1) along which every slice of ``t`` is equal: the copies of a broadcast."""
    if not t.dims or int(np.prod(t.dims)) > 1 << 22:
        return []
    arr = numpy_helper.to_array(t)
    return [a for a, d in enumerate(arr.shape) if d > 1 and np.array_equal(
        arr, np.broadcast_to(np.take(arr, [0], axis=a), arr.shape))]


def _unbroadcasts(choice: ParameterChoice, inits: dict[str, TensorProto]) -> list[Tie]:
    """Folded broadcasts of one parameter (``expand`` = ``cls_token`` expanded to the batch)."""
    ties = []
    for c in choice.choices:
        if c.reason.startswith("broadcast of ") and c.source and c.source not in inits:
            arr = numpy_helper.to_array(inits[c.name])
            for a in _broadcast_axes(inits[c.name]):
                arr = np.take(arr, [0], axis=a)
            ties.append(Tie(c.name, c.source, "Expand", value=np.ascontiguousarray(arr)))
    return ties


def _ties(choice: ParameterChoice, inits: dict[str, TensorProto]) -> list[Tie]:
    """Trainable exporter-named initializers that are a transposed/reshaped copy of a named parameter."""
    named = [c.name for c in choice.choices if c.trainable and c.source is None
             and not GENERATED_NAME.search(c.name)]
    by_numel: dict[int, list[str]] = {}
    for n in named:
        by_numel.setdefault(int(np.prod(inits[n].dims)), []).append(n)
    ties = []
    for c in choice.choices:
        if not c.trainable or c.name in named:
            continue
        t = inits[c.name]
        for src in by_numel.get(int(np.prod(t.dims)), []):
            if c.source not in (None, src):
                continue
            tie = _same_values(c.name, t, src, inits[src])
            if tie:
                ties.append(tie)
                break
    return ties


def _same_values(name: str, t: TensorProto, src: str, s: TensorProto) -> Tie | None:
    a, b = numpy_helper.to_array(t), numpy_helper.to_array(s)
    if a.dtype != b.dtype or a.size < 2 or float(a.min()) == float(a.max()):
        return None
    if b.ndim == a.ndim and b.ndim >= 2:
        perm = tuple(range(b.ndim - 2)) + (b.ndim - 1, b.ndim - 2)
        if np.transpose(b, perm).shape == a.shape and np.array_equal(np.transpose(b, perm), a):
            return Tie(name, src, "Transpose", perm)
    if a.shape != b.shape and np.array_equal(a.reshape(-1), b.reshape(-1)):
        return Tie(name, src, "Reshape")
    if a.shape == b.shape and np.array_equal(a, b):
        return Tie(name, src, "Identity")
    return None
