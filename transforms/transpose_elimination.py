"""``transpose_elimination`` (level 3): never materialize a transposed copy.

A transpose ``Y = transpose(X, p)`` (a ``Transpose`` library node, or its expanded
map) is folded away on one side:

- **into its producer** (preferred; when ``X`` is a transient that only the transpose
  reads): the producer writes ``Y`` directly — a map writes permuted indices, a
  GEMM swaps its operands (``(A·B)ᵀ = Bᵀ·Aᵀ``), a Transpose composes permutations;
- **into its consumers** (when ``Y`` is not a graph output): each reads ``X``
  instead — a GEMM toggles ``transA/transB`` (MatMul becomes Gemm/FusedMatMul), a
  map reads permuted indices, a Transpose composes (and vanishes at identity).
Contractions whose new layout no flag can express become an ``Einsum`` (``einsum``
parameter; the attention transposes ``(0, 2, 1, 3)`` need it).

Before → after (weight transpose into its two GEMM readers)::

    %T = Transpose(W) {perm=[1, 0]} -> (Wt)
    %mm = MatMul(x, Wt) -> (y)
    %g = com.microsoft::FusedMatMul(dy, Wt) {transB=1} -> (dx)
    →
    %mm = com.microsoft::FusedMatMul(x, W) {transB=1} -> (y)
    %g = MatMul(dy, W) -> (dx)

Before → after (weight-gradient transpose into its producer)::

    %gemm = Gemm(A, dY) {transA=1} -> (dWt)          %T = Transpose(dWt) {perm=[1, 0]} -> (dW)
    →
    %gemm = Gemm(dY, A) {transA=1} -> (dW)

Saves the transposed copy's write and read: ``2 × bytes(Y)`` (the readers read ``X``,
of the same size, instead).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Iterable, Iterator

from ir.containers import Role
from ir.graph import Graph
from ir.nodes import MapNode
from transforms.base import Match, MatchResult, Touched, fail, scope
from transforms.layouts import LayoutError, Transpose, inverse, is_identity, perm_after, relayout, transpose_of
from transforms.planned import Planned
from transforms.registry import register
from transforms.rewiring import copy_node, drop_unused, refresh, rename, replace


@dataclass
class Plan:
    """The edited copies of the kernels a fold changes, and what disappears."""

    side: str
    t: Transpose
    nodes: dict = field(default_factory=dict)        # id -> edited copy
    removed: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # containers that may become unused


def _producer_plan(graph: Graph, t: Transpose, einsum: bool) -> Plan | str:
    x = t.source
    prod = graph.producer(x)
    if prod is None:
        return f"'{x}' has no producer (a graph input or initializer)"
    if graph.container(x).role is not Role.TRANSIENT or x in graph.outputs:
        return f"'{x}' is not a transient intermediate"
    readers = [n.id for n in graph.consumers(x)]
    if readers != [t.node_id]:
        return f"'{x}' is also read by {', '.join(repr(r) for r in readers if r != t.node_id)}"
    try:
        new = relayout(graph, prod, x, t.target, inverse(t.perm), einsum)
    except LayoutError as e:
        return str(e)
    return Plan("producer", t, {prod.id: new}, [t.node_id], [x])


def _consumer_plan(graph: Graph, t: Transpose, einsum: bool) -> Plan | str:
    y, x = t.target, t.source
    if y in graph.outputs:
        return f"'{y}' is a graph output"
    plan = Plan("consumer", t, {}, [t.node_id], [y])
    for node in graph.consumers(y):
        try:
            plan.nodes[node.id] = relayout(graph, plan.nodes.get(node.id, node), y, x, t.perm, einsum)
        except LayoutError as e:
            return str(e)
        inner = transpose_of(graph, node)
        if inner is not None and is_identity(perm_after(inner, y, t.perm)) and inner.target not in graph.outputs:
            _vanish(graph, plan, inner, x)
    return plan


def _vanish(graph: Graph, plan: Plan, inner: Transpose, x: str) -> None:
    """A consumer transpose became the identity: drop it, its readers read ``x``."""
    plan.nodes.pop(inner.node_id, None)
    plan.removed.append(inner.node_id)
    plan.dropped.append(inner.target)
    for reader in graph.consumers(inner.target):
        plan.nodes[reader.id] = rename(copy_node(plan.nodes.get(reader.id, reader)), inner.target, x)


def _describe(t: Transpose) -> str:
    return f"transpose '{t.node_id}' (perm={list(t.perm)})"


@register
@dataclass(frozen=True)
class TransposeElimination(Planned):
    name: ClassVar[str] = "transpose_elimination"
    level: ClassVar[int] = 3
    einsum: bool = True

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        for node in scope(graph, within):
            t = transpose_of(graph, node)
            if t is not None and not (isinstance(node, MapNode) and is_identity(t.perm)):  # a copy: a view
                yield self.match(node.id, label=f"fold {_describe(t)} away")

    def _prepared(self, graph: Graph, match: Match) -> Plan | MatchResult:
        ident = match.anchors[0] if match.anchors else ""
        node = graph.nodes.get(ident)
        if node is None:
            return fail(f"no node '{ident}'", ident)
        t = transpose_of(graph, node)
        if t is None:
            return fail(f"'{ident}' is not a transpose (a Transpose op or a pure permuting copy map) "
                        "with static shapes", ident)
        up = _producer_plan(graph, t, self.einsum)
        if isinstance(up, Plan):
            return up
        down = _consumer_plan(graph, t, self.einsum)
        if isinstance(down, Plan):
            return down
        return fail(f"{_describe(t)} folds into neither side: producer: {up}; consumers: {down}", ident)

    def affected(self, graph: Graph, match: Match) -> tuple[str, ...]:
        node = graph.nodes.get(match.anchors[0]) if match.anchors else None
        t = transpose_of(graph, node) if node is not None else None
        if t is None:
            return match.anchors
        near = [node.id] + [n.id for n in graph.consumers(t.target)]
        prod = graph.producer(t.source)
        near += [prod.id] if prod is not None else []
        for c in graph.consumers(t.target):
            inner = transpose_of(graph, c)
            near += [n.id for n in graph.consumers(inner.target)] if inner is not None else []
        return tuple(dict.fromkeys(near))

    def _carry_out(self, graph: Graph, match: Match, step: int, plan: Plan) -> Touched:
        for ident in plan.removed:
            graph.remove_node(ident)
        for new in plan.nodes.values():
            replace(graph, refresh(graph, new))
        drop_unused(graph, plan.dropped)
        graph.sort()
        return Touched(removed=tuple(plan.removed), changed=tuple(plan.nodes))


__all__ = ["TransposeElimination"]
