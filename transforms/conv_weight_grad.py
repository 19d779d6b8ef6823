"""``conv_weight_grad`` (level 1): a convolution's weight gradient as one op, in the weights' layout.

Standard ONNX has no weight-gradient op, so a training graph (dcstudio's autodiff, the torch
exporters' traced backward) writes ``dW`` of ``Y = Conv(X, W)`` as a convolution over the batch:
both operands transposed to put the channels first, a Conv with strides and dilations swapped, an
optional Slice to the kernel size, and a transpose back. The copies of ``X`` and ``dY`` cost their
bytes twice, and the result comes out channel-major, so whatever reads it (the optimizer update)
reads it transposed: on 4-d weights with 3×3 or 1×1 kernels that read runs at a fraction of the
bandwidth. This rewrites the chain into ``ai.dcstudio::ConvWeightGrad(X, dY)`` carrying the forward
conv's geometry, which reads ``X`` and ``dY`` once and writes ``dW`` as the weights lie (the CPU
backend: im2col + one GEMM per group, ``codegen/numba_cpu/convolution.py``).

Before → after (a 3×3 conv with stride 2; ``group=1``)::

    %tx = Transpose(x) {perm=[1, 0, 2, 3]} -> (xt)          %tdy = Transpose(dy) {perm=[1, 0, 2, 3]} -> (dyt)
    %cv = Conv(xt, dyt) {strides=[1, 1], dilations=[2, 2], pads=[1, 1, 1, 1]} -> (raw)
    %sl = Slice(raw, [0, 0], [3, 3], [2, 3]) -> (cut)        %tw = Transpose(cut) {perm=[1, 0, 2, 3]} -> (dW)
    →
    %conv_weight_grad:cv = ai.dcstudio::ConvWeightGrad(x, dy)
        {kernel_shape=[3, 3], strides=[2, 2], dilations=[1, 1], pads=[1, 1, 1, 1], group=1} -> (dW)

A grouped conv (``G`` groups of ``cg`` channels) regroups ``X`` instead of transposing it, so that
group ``g`` of the weight-gradient Conv reads its own channels of every image::

    %r1 = Reshape(x) -> (N, G, cg, H, W)    %t = Transpose(r1) {perm=[2, 1, 0, 3, 4]}
    %r2 = Reshape(t) -> (cg, G·N, H, W)

and the same rewrite applies with ``group=G``. For a depthwise conv this is where the time went: the
Conv computes a (1, C, kh', kw') window over a (1, N·C, H, W) image with dY as a (Ho, Wo) kernel, 16
taps where the weights have 9 in EfficientNet's 3×3/2 case, after copying both operands.

The copies of ``X`` and ``dY`` are removed only when nothing else reads their results.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterable, Iterator

import numpy as np

from ir.graph import Graph
from ir.memlet import Memlet
from ir.nodes import OpNode
from transforms.base import OK, Match, MatchResult, Touched, Transformation, fail, scope
from transforms.fusion import drop_dead, swap_kernels
from transforms.layouts import transpose_of
from transforms.views import view_of
from transforms.registry import register

OP = "ConvWeightGrad"
DOMAIN = "ai.dcstudio"


@dataclass(frozen=True)
class Chain:
    conv: OpNode
    x: str                     # the forward input X (before its transpose)
    dy: str                    # the output gradient dY (before its transpose)
    dw: str                    # the gradient in W's layout (the final transpose's output)
    inner: tuple[str, ...]     # the Slice (if any) and the final transpose
    removable: tuple[str, ...]  # the operand transposes (and regrouping reshapes) nothing else reads
    attrs: dict


def _regrouped(graph: Graph, xt: str, group: int) -> tuple[str, list] | str:
    """For ``xt`` = Reshape(Transpose(Reshape(x) to (N, G, cg, *S)) by [2, 1, 0, ...]) to (cg, G·N, *S): x and
    the three nodes (last first); else why not."""
    chain, name = [], xt
    for _ in range(3):
        node = graph.producer(name)
        chain.append(node)
        if node is None:
            return f"'{name}' has no producer"
        step = view_of(graph, node) if len(chain) != 2 else transpose_of(graph, node)
        if step is None:
            return f"'{node.id}' is not a {'transpose' if len(chain) == 2 else 'reshape'}"
        name = step.source
    shape = lambda n: graph.container(n).concrete_shape(graph.bindings)  # noqa: E731
    x, (n, c), sp = name, shape(name)[:2], shape(name)[2:]
    cg = c // group
    t = transpose_of(graph, chain[1])
    if c % group or shape(chain[2].output_names()[0]) != (n, group, cg) + sp \
            or tuple(t.perm) != (2, 1, 0) + tuple(range(3, 3 + len(sp))) or shape(xt) != (cg, group * n) + sp:
        return f"'{xt}' is not '{x}' regrouped into {group} groups of {cg} channels with the images inside"
    return x, chain


def _swap(graph: Graph, node, rank: int) -> bool:
    t = transpose_of(graph, node) if node is not None else None
    return t is not None and tuple(t.perm) == (1, 0) + tuple(range(2, rank))


def _leading_crop(graph: Graph, node) -> bool:
    """A Slice with constant starts 0 and steps 1 (it cuts the ends only)."""
    if not isinstance(node, OpNode) or node.domain or node.op_type != "Slice" or len(node.inputs) < 3:
        return False
    consts = [graph.values.get(m.container) if m is not None else None for m in node.inputs[1:]]
    starts = consts[0]
    steps = consts[3] if len(consts) > 3 else None
    if starts is None or any(m is not None and c is None for m, c in zip(node.inputs[1:], consts)):
        return False
    return not np.asarray(starts).any() and (steps is None or bool((np.asarray(steps) == 1).all()))


def chain(graph: Graph, conv) -> Chain | str:
    """The weight-gradient chain around ``conv``, or why it is not one (naming the nodes)."""
    if not isinstance(conv, OpNode) or conv.domain or conv.op_type != "Conv":
        return f"'{conv.id}' is not a Conv"
    if len(conv.inputs) > 2 and conv.inputs[2] is not None:
        return f"Conv '{conv.id}' has a bias: it is not a weight gradient"
    group = int(conv.attrs.get("group", 1))
    if conv.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
        return f"Conv '{conv.id}' uses auto_pad; only explicit pads are rewritten"
    xt, dyt = conv.inputs[0].container, conv.inputs[1].container
    rank = len(graph.container(xt).shape)
    px, pdy = graph.producer(xt), graph.producer(dyt)
    if group != 1:
        found = _regrouped(graph, xt, group)
        if isinstance(found, str):
            return f"grouped Conv '{conv.id}' (group={group}): {found}"
        x, x_nodes = found
    elif _swap(graph, px, rank):
        x, x_nodes = transpose_of(graph, px).source, [px]
    else:
        return f"'{xt}', the input of Conv '{conv.id}', is not a transpose of a tensor's first two axes"
    if not _swap(graph, pdy, rank):
        return f"'{dyt}', the kernel of Conv '{conv.id}', is not a transpose of a tensor's first two axes"
    raw = conv.outputs[0].container
    readers = graph.consumers(raw)
    if len(readers) != 1 or raw in graph.outputs:
        return f"'{raw}' (Conv '{conv.id}') must be read by one node, a transpose or a cropping Slice"
    inner = [readers[0]]
    if _leading_crop(graph, inner[0]):
        cut = inner[0].outputs[0].container
        after = graph.consumers(cut)
        if len(after) != 1 or cut in graph.outputs:
            return f"'{cut}' (Slice '{inner[0].id}') must be read by one transpose"
        inner.append(after[0])
    if not _swap(graph, inner[-1], rank):
        return f"'{inner[-1].id}' does not transpose the first two axes of Conv '{conv.id}''s result back"
    t_dy = transpose_of(graph, pdy)
    dw = transpose_of(graph, inner[-1]).target
    nd = rank - 2
    shape = lambda name: graph.container(name).concrete_shape(graph.bindings)  # noqa: E731
    cg = shape(x)[1] // group
    if shape(dw)[:2] != (shape(t_dy.source)[1], cg):
        return f"'{dw}' {shape(dw)} is not a gradient of Conv weights with {shape(t_dy.source)[1]} outputs " \
               f"and {cg} channels per group: '{inner[0].id}' also cuts the channels"
    attrs = {"kernel_shape": list(shape(dw)[2:]),
             "strides": list(conv.attrs.get("dilations") or [1] * nd),
             "dilations": list(conv.attrs.get("strides") or [1] * nd),
             "pads": list(conv.attrs.get("pads") or [0] * (2 * nd)), "group": group}
    removable = []
    for nodes in (x_nodes, [pdy]):            # each operand's copies, from the Conv back, while only they read them
        for node in nodes:
            out = node.output_names()[0]
            if len(graph.consumers(out)) != 1 or out in graph.outputs:
                break
            removable.append(node.id)
    return Chain(conv, x, t_dy.source, dw, tuple(n.id for n in inner), tuple(removable), attrs)


@register
@dataclass(frozen=True)
class ConvWeightGrad(Transformation):
    name: ClassVar[str] = "conv_weight_grad"
    level: ClassVar[int] = 1

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        for node in scope(graph, within):
            if isinstance(node, OpNode) and node.op_type == "Conv" and not node.domain \
                    and isinstance(chain(graph, node), Chain):
                yield self.match(node.id, label=f"weight gradient '{node.id}' as one op in W's layout")

    def _chain(self, graph: Graph, match: Match) -> Chain | MatchResult:
        if len(match.anchors) != 1:
            return fail(f"{self.name} needs one anchor (the weight-gradient Conv)")
        conv = graph.nodes.get(match.anchors[0])
        if conv is None:
            return fail(f"no node '{match.anchors[0]}'", match.anchors[0])
        found = chain(graph, conv)
        return fail(found, conv.id) if isinstance(found, str) else found

    def prepare(self, graph: Graph, match: Match) -> tuple[MatchResult, Chain | None]:
        """The check and the chain it found, which ``rewrite_prepared`` rewrites without finding it again."""
        found = self._chain(graph, match)
        return (found, None) if isinstance(found, MatchResult) else (OK, found)

    def check(self, graph: Graph, match: Match) -> MatchResult:
        return self.prepare(graph, match)[0]

    def affected(self, graph: Graph, match: Match) -> tuple[str, ...]:
        found = self._chain(graph, match)
        if isinstance(found, MatchResult):
            return match.anchors
        return (found.conv.id,) + found.inner + found.removable

    def rewrite(self, graph: Graph, match: Match, step: int) -> Touched:
        return self.rewrite_prepared(graph, match, step, None)

    def rewrite_prepared(self, graph: Graph, match: Match, step: int, prepared: Chain | None) -> Touched:
        c = prepared if prepared is not None else self._chain(graph, match)
        assert isinstance(c, Chain), c
        node = OpNode(f"conv_weight_grad:{c.conv.id}", OP, [Memlet(c.x), Memlet(c.dy)], [Memlet(c.dw)],
                      domain=DOMAIN, attrs=c.attrs, opset=c.conv.opset)
        old = (c.conv.id,) + c.inner + c.removable
        dead = [n for ident in old for n in graph.nodes[ident].input_names() + graph.nodes[ident].output_names()
                if n is not None and n != c.dw]
        swap_kernels(graph, old, node, (self.name, step))
        drop_dead(graph, dead)
        return Touched(created=(node.id,), removed=old)
