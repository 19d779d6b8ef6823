"""``horizontal_fusion`` (level 2): sibling kernels that read the same tensor become one kernel.

Contractions (plain, with an epilogue, or already grouped) sharing an operand — the Q/K/V
projections of one activation; the dX = dY·Wᵀ and dW = Xᵀ·dY of one dY — become one
grouped library node (``ai.dcstudio::GroupedGemm``, ``ir.fused_ops``). Before → after::

    %q = MatMul(x, wq) -> (q)
    %k = MatMul(x, wk) -> (k)
    →
    %group:q = ai.dcstudio::GroupedGemm(x, wq, wk) -> (q, k)
      member 0: MatMul(inputs [0, 1]) -> (outputs [0])
      member 1: MatMul(inputs [0, 2]) -> (outputs [1])

Maps sharing an input: over the same space, one map runs both bodies; otherwise a
single-sweep sibling (pointwise, or a reduction with all statements in its innermost map)
runs inside the other, right after the other's read that visits each element of the
shared tensor once (a bias-gradient ReduceSum beside a copy of the same gradient).
Before → after::

    %copy = map[i0=0:1024, i1=0:768] { dx[i0, i1] = dy[i0, i1] }
    %db = map[j0=0:768] { map[r0=0:1024] { db[j0] (wcr=sum) = dy[r0, j0] } }
    →
    %fused:copy = map[i0=0:1024, i1=0:768] { dx[i0, i1] = dy[i0, i1]; db[i1] (wcr=sum) = dy[i0, i1] }

Algebra: independent computations (neither depends on the other, even transitively) may
run in one launch, in either order. Bytes: each shared operand is read once instead of
once per sibling (−bytes(shared) per extra reader); FLOPs unchanged (a grouped node counts
0 FLOPs until ``ir.movement`` counts fused nodes, see ``ir.flops.fused_flops``).
Single-element operands (a learning rate, a step size) do not make siblings.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterable, Iterator

from ir import fused_ops
from ir.graph import Graph
from ir.nodes import MapNode
from transforms.base import Match, MatchResult, Touched, fail
from transforms.fusion import FusionError, host_sibling, merge_siblings, reaches, swap_kernels, touched
from transforms.map_fusion import fused_id
from transforms.planned import PlannedFusion
from transforms.registry import register
from transforms.scopes import same_space


def kind(node) -> str | None:
    """'map', 'gemm' (contraction or group) or None (other library nodes do not group)."""
    if isinstance(node, MapNode):
        return "map"
    return "gemm" if fused_ops.is_contraction(node) or fused_ops.is_group(node) else None


def shared_inputs(graph: Graph, a, b) -> list[str]:
    """Containers of more than one element that both ``a`` and ``b`` read."""
    theirs = {m.container for m in b.inputs if m is not None}
    names = dict.fromkeys(m.container for m in a.inputs if m is not None and m.container in theirs)
    return [n for n in names if graph.container(n).numel(graph.bindings) > 1]


def group_id(a, b) -> str:
    """An existing group keeps its id when it takes in a sibling; else ``group:<first id>``."""
    return next((n.id for n in (a, b) if fused_ops.is_group(n)), "group:" + a.id)


@register
@dataclass(frozen=True)
class HorizontalFusion(PlannedFusion):
    name: ClassVar[str] = "horizontal_fusion"
    level: ClassVar[int] = 2

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        ids = None if within is None else list(within)
        wanted = None if ids is None else set(ids)
        order = {ident: k for k, ident in enumerate(graph.nodes)}
        seen = set()
        names = graph.containers if ids is None else dict.fromkeys(     # ``within``'s order: deterministic
            m.container for i in ids if i in graph.nodes for m in graph.nodes[i].inputs if m is not None)
        for name in names:
            cont = graph.container(name)
            readers = graph.consumers(name)
            if len(readers) < 2 or cont.numel(graph.bindings) <= 1:
                continue
            for k in ("map", "gemm"):
                same = sorted((n for n in readers if kind(n) == k), key=lambda n: order[n.id])
                for a, b in zip(same, same[1:]):
                    if (a.id, b.id) not in seen and (wanted is None or a.id in wanted or b.id in wanted):
                        seen.add((a.id, b.id))
                        yield self.match(a.id, b.id, label=f"siblings '{a.id}' + '{b.id}' (read {name})")

    def _plan(self, graph: Graph, match: Match) -> tuple | MatchResult:
        if len(match.anchors) != 2:
            return fail("horizontal_fusion needs two anchors (two sibling kernels)")
        a, b = (graph.nodes.get(x) for x in match.anchors)
        for ident, node in zip(match.anchors, (a, b)):
            if node is None:
                return fail(f"no node '{ident}'", ident)
            if kind(node) is None:
                return fail(f"'{ident}' ({node.op_type}) is neither a map nor a contraction", ident)
        if kind(a) != kind(b):
            return fail(f"'{a.id}' and '{b.id}' are a map and a library node; expand the library node "
                        "or fuse it into a map first", a.id, b.id)
        shared = shared_inputs(graph, a, b)
        if not shared:
            return fail(f"'{a.id}' and '{b.id}' read no tensor in common", a.id, b.id)
        for x, y in ((a, b), (b, a)):
            if reaches(graph, x.id, y.id):
                return fail(f"'{y.id}' depends on '{x.id}'; siblings must be independent", a.id, b.id)
        return a, b, shared

    def _build(self, graph: Graph, plan):
        a, b, shared = plan
        if kind(a) == "gemm":
            return fused_ops.group_op(group_id(a, b), [a, b])
        if same_space(a, b, graph):
            return merge_siblings(graph, a, b, fused_id(graph, a.id))
        errors = []
        for host, guest in ((a, b), (b, a)):
            for name in shared:
                try:
                    return host_sibling(graph, host, guest, name, fused_id(graph, host.id))
                except FusionError as e:
                    errors.append(str(e))
        raise FusionError(f"'{a.id}' and '{b.id}' have different iteration spaces, and neither runs "
                          f"inside the other: {errors[0]}")

    def _swap(self, graph: Graph, match: Match, step: int, plan, fused) -> Touched:
        swap_kernels(graph, match.anchors, fused, (self.name, step))
        return touched(match.anchors, fused.id)
