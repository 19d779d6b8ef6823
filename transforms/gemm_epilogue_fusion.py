"""``gemm_epilogue_fusion`` (level 2): run a pointwise map on a contraction's output as it is produced.

Before → after (bias + GELU on a MatMul, both maps expanded and fused)::

    %mm = MatMul(x, w) -> (h)
    %fused:bias/expanded = map[i0=0:8, i1=0:128, i2=0:3072] {
      local _u
      _u = h[i0, i1, i2] + b[i2]
      y[i0, i1, i2] = 0.5 * _u * (1 + erf(_u * 0.7071))
    }
    →
    %epilogue:mm = ai.dcstudio::MatMul(x, w, b) {acc_dtype='float32', acc_shape=[8, 128, 3072], …} -> (y)
      epilogue map[i0=0:8, i1=0:128, i2=0:3072] {
        local _h, _u
        _h = @acc[i0, i1, i2]
        _u = _h + @in2[i2]
        @out0[i0, i1, i2] = 0.5 * _u * (1 + erf(_u * 0.7071))
      }

Algebra: ``E(A·B)`` with ``E`` pointwise is computed element by element as each element of
the product ``@acc`` is finished (a GEMM epilogue: bias, activation, scale, residual,
dropout, or an optimizer update). The map may read the product at a permutation of its
own indices (``y[j, i] = f(@acc[i, j])``: a transpose is free here). Bytes: the product's
write and read disappear (unless other kernels read it, then it is still written: only
its read is saved), and operands the contraction and the map share are read once.
Chaining: a second pointwise consumer of an op with an epilogue extends the epilogue
(it may read several of the op's outputs). FLOPs: unchanged, except that until
``ir.movement`` counts epilogues (see ``ir.flops.fused_flops``) the epilogue's
operations drop out of the total.

The result is a ``ai.dcstudio::MatMul|Gemm|FusedMatMul`` library node (``ir.fused_ops``)
with the contraction's attributes and implementation, and the ``epilogue`` map.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterable, Iterator

from ir import fused_ops
from ir.graph import Graph
from ir.nodes import MapNode, OpNode
from transforms.base import Match, MatchResult, Touched, fail, scope
from transforms.fusion import creates_cycle, drop_dead, fuse_epilogue, swap_kernels, touched
from transforms.planned import PlannedFusion
from transforms.registry import register


def epilogue_id(gemm_id: str) -> str:
    """``epilogue:<contraction id>`` (chained epilogues keep the id)."""
    return gemm_id if gemm_id.startswith("epilogue:") else "epilogue:" + gemm_id


def contraction_edges(graph: Graph, within: Iterable[str] | None):
    """(contraction, map) pairs where the map reads an output of the contraction."""
    wanted = None if within is None else set(within)
    seen = set()
    for g in scope(graph, None):
        if not fused_ops.is_contraction(g):
            continue
        for c in graph.successors(g):
            if isinstance(c, MapNode) and (wanted is None or g.id in wanted or c.id in wanted) \
                    and (g.id, c.id) not in seen:
                seen.add((g.id, c.id))
                yield g, c


def plan_epilogue(graph: Graph, match: Match, what: str) -> tuple[OpNode, MapNode] | MatchResult:
    """The contraction and map of a (contraction, map) match, or the reason it is not one."""
    if len(match.anchors) != 2:
        return fail(f"{what} needs two anchors (contraction, map)")
    g, c = (graph.nodes.get(a) for a in match.anchors)
    for ident, node in zip(match.anchors, (g, c)):
        if node is None:
            return fail(f"no node '{ident}'", ident)
    if not fused_ops.is_contraction(g):
        return fail(f"'{g.id}' ({getattr(g, 'op_type', 'map')}) is not a MatMul/Gemm/FusedMatMul", g.id)
    if not isinstance(c, MapNode):
        return fail(f"'{c.id}' is a library node, not a map; expand it first", c.id)
    if not any(graph.producer(m.container) is g for m in c.inputs):
        return fail(f"'{c.id}' reads nothing that '{g.id}' writes", g.id, c.id)
    if creates_cycle(graph, g.id, c.id):
        return fail(f"'{c.id}' also depends on '{g.id}' through another kernel; fusing would "
                    "create a cycle", g.id, c.id)
    return g, c


@register
@dataclass(frozen=True)
class GemmEpilogueFusion(PlannedFusion):
    name: ClassVar[str] = "gemm_epilogue_fusion"
    level: ClassVar[int] = 2

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        for g, c in contraction_edges(graph, within):
            yield self.match(g.id, c.id, label=f"epilogue {c.label} into {g.op_type} '{g.id}'")

    def _plan(self, graph: Graph, match: Match) -> tuple[OpNode, MapNode] | MatchResult:
        return plan_epilogue(graph, match, self.name)

    def _build(self, graph: Graph, plan: tuple[OpNode, MapNode]) -> MapNode:
        g, c = plan
        return fuse_epilogue(graph, g, c, epilogue_id(g.id))

    def _swap(self, graph: Graph, match: Match, step: int, plan, fused: MapNode) -> Touched:
        g, c = plan
        swap_kernels(graph, (g.id, c.id), fused, (self.name, step))
        drop_dead(graph, g.output_names() + c.input_names())
        return touched(match.anchors, fused.id)
