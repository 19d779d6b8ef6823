"""``optimizer_fusion`` (level 4): run a parameter's update inside the kernel that produces its gradient.

*Optimizer Fusion* (Pan et al. 2021): the SGD/AdamW/Lion update of a parameter runs where
its gradient is computed, so the gradient is never written to or read from global memory
(unless it is a graph output), and the update is no separate launch.

The update ``U`` is an ``ai.dcstudio::AdamW|SGD|Lion`` op (expanded here into its map) or
a pointwise map that writes a new parameter or optimizer state (the standard-op update
after ``expand`` + ``map_fusion``, possibly still split in parts). The producer ``G`` is

- a map: the update runs at the point where ``G`` writes the gradient; a reduction into
  the gradient (a bias gradient ``db[h] (wcr=sum) = dy[b, l, h]``) is first made a local
  accumulator, so the update runs once per element after the sweep. Before → after::

      %db = map[i0=0:768] { map[r0=0:8, r1=0:128] { db[i0] (wcr=sum) = dy[r0, r1, i0] } }
      %adamw = map[j0=0:768] { m'[j0] = …db[j0]…; v'[j0] = …; p'[j0] = … }
      →
      %fused:db = map[i0=0:768] {
        local _acc, _db
        map[r0=0:8, r1=0:128] { _acc (wcr=sum) = dy[r0, r1, i0] }
        _db = _acc;  m'[i0] = …_db…;  v'[i0] = …;  p'[i0] = …
      }

- a contraction (weight gradients ``dW = Xᵀ·dY``): the update becomes its epilogue (as in
  ``gemm_epilogue_fusion``; a transposed gradient ``dW[j, i] = @acc[i, j]`` is free), giving
  an ``ai.dcstudio::Gemm|MatMul|FusedMatMul`` node with an ``epilogue``; or an update part
  that reads several results of an already fused update (chaining).

Algebra: the update is pointwise in (p, g, state), so it commutes with producing g
element by element. Bytes per fp32 parameter (AdamW): ≈80 op by op, 28 as one fused
update (read p, g, m, v; write p, m, v), 24 when fused into the gradient's producer (g's
read disappears) plus the producer's 4-byte write of g. SGD with momentum and Lion:
20 → 16. FLOPs: unchanged (a contraction's epilogue drops out of the total until
``ir.movement`` counts epilogues; see ``ir.flops.fused_flops``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterable, Iterator

from ir import fused_ops, lowering
from ir.containers import Role
from ir.graph import Graph
from ir.nodes import MapNode, OpNode, Tasklet
from transforms.base import Match, MatchResult, Touched, fail, scope
from transforms.fusion import (absorb_consumer, creates_cycle, drop_dead, fuse_epilogue, swap_kernels,
                               touched)
from transforms.gemm_epilogue_fusion import epilogue_id
from transforms.map_fusion import fused_id
from transforms.planned import PlannedFusion
from transforms.registry import register

OPTIMIZERS = ("AdamW", "SGD", "Lion")
UPDATED = (Role.PARAMETER, Role.OPTIMIZER_STATE)


def is_update(graph: Graph, node) -> bool:
    """An optimizer op, or a map of top-level tasklets writing a new parameter or state."""
    if isinstance(node, OpNode):
        return node.domain == fused_ops.STUDIO and node.op_type in OPTIMIZERS
    return isinstance(node, MapNode) and all(isinstance(s, Tasklet) for s in node.body) and any(
        graph.container(m.container).role in UPDATED for m in node.outputs)


def feeds_update(graph: Graph, g, u) -> bool:
    """``g`` writes an operand of update ``u`` as large as the parameter (not a scalar such as
    a step size, whose producer is no gradient producer)."""
    size = lambda name: graph.container(name).numel(graph.bindings)  # noqa: E731
    first = next(m.container for m in u.outputs if m is not None)
    return any(size(m.container) == size(first) for m in g.outputs if m is not None
               and m.container in {x.container for x in u.inputs if x is not None})


def update_map(graph: Graph, node) -> MapNode:
    """The update as a map; an optimizer op is expanded (the map keeps the op's id)."""
    if isinstance(node, MapNode):
        return node
    m = lowering.expand(graph, node)
    m.id = node.id
    return m


@register
@dataclass(frozen=True)
class OptimizerFusion(PlannedFusion):
    name: ClassVar[str] = "optimizer_fusion"
    level: ClassVar[int] = 4

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        wanted = None if within is None else set(within)
        for u in scope(graph, None):
            if not is_update(graph, u):
                continue
            for g in graph.predecessors(u):
                if (isinstance(g, MapNode) or fused_ops.is_contraction(g)) and \
                        (wanted is None or g.id in wanted or u.id in wanted) and feeds_update(graph, g, u):
                    yield self.match(g.id, u.id, label=f"update '{u.id}' inside '{g.id}'")

    def _plan(self, graph: Graph, match: Match) -> tuple | MatchResult:
        if len(match.anchors) != 2:
            return fail("optimizer_fusion needs two anchors (gradient producer, update)")
        g, u = (graph.nodes.get(a) for a in match.anchors)
        for ident, node in zip(match.anchors, (g, u)):
            if node is None:
                return fail(f"no node '{ident}'", ident)
        if not is_update(graph, u):
            return fail(f"'{u.id}' is not an optimizer update (an AdamW/SGD/Lion op, or a map of "
                        "tasklets writing a new parameter or optimizer state)", u.id)
        reason = lowering.can_expand(graph, u) if isinstance(u, OpNode) else None
        if reason is not None:
            return fail(reason, u.id)
        if not (isinstance(g, MapNode) or fused_ops.is_contraction(g)):
            return fail(f"'{g.id}' ({g.op_type}) is neither a map nor a MatMul/Gemm/FusedMatMul; "
                        "expand it first", g.id)
        shared = [m.container for m in u.inputs if m is not None and graph.producer(m.container) is g]
        if not shared:
            return fail(f"'{u.id}' reads nothing that '{g.id}' writes", g.id, u.id)
        if creates_cycle(graph, g.id, u.id):
            return fail(f"'{u.id}' also depends on '{g.id}' through another kernel; fusing would "
                        "create a cycle", g.id, u.id)
        return g, u, shared

    def _build(self, graph: Graph, plan):
        g, u, shared = plan
        c = update_map(graph, u)
        if isinstance(g, MapNode):
            return absorb_consumer(graph, g, c, shared, fused_id(graph, g.id))
        return fuse_epilogue(graph, g, c, epilogue_id(g.id))

    def _swap(self, graph: Graph, match: Match, step: int, plan, fused) -> Touched:
        g, u, shared = plan
        swap_kernels(graph, (g.id, u.id), fused, (self.name, step))
        drop_dead(graph, shared + [m.container for m in u.inputs if m is not None])
        return touched(match.anchors, fused.id)
