"""``reshape_elimination`` (level 3): views cost nothing — drop the copy a view op makes.

A view ``Y = view(X)`` (Reshape, Flatten, Squeeze, Unsqueeze, Identity, or an
expanded Identity copy map) moves ``2 × bytes(Y)`` as a kernel. It disappears, and
``Y`` becomes an *alias* of ``X``'s bytes in one of three ways (``side``):

- **same shape** (Identity): every reader of ``Y`` reads ``X`` (any kernel kind);
  when ``Y`` is a graph output, ``X``'s producer writes ``Y`` instead;
- **producer** (``X``'s producer is a map and the view is ``X``'s only reader): the
  map writes ``Y`` at re-linearized indices, ``X`` is never stored;
- **consumer**: every reader of ``Y`` reads ``X`` —
  maps at re-linearized indices (``views.reindex``), other views by composition
  (``Reshape(Reshape(X)) = Reshape(X)``), and contractions reshape-free: a GEMM whose
  operands are views merging batch or contraction axes becomes an ``Einsum`` over the
  unmerged axes (``einsum`` parameter), absorbing sibling views of the same axes.
``side="auto"`` tries the producer first, unless the producer is a transpose (kept a
pure transpose for ``transpose_elimination``) or a reader is a contraction (which may
absorb sibling views); it saves ``2 × bytes(Y)`` plus the shape operand's read.

Design note (the alias): the IR has no alias table and the reference executor hands
library nodes their containers as stored, so a library reader must be rewritten to
an op that reads ``X``'s shape correctly — a composed view or an Einsum; anything
else keeps the view and the check names the reader.

Before → after (a weight gradient over a (8·128)-row GEMM)::

    %r1 = Reshape(x, [1024, 768]) -> (x2d)          %r2 = Reshape(dy, [1024, 3072]) -> (dy2d)
    %g = Gemm(x2d, dy2d) {transA=1} -> (dW)
    →
    %g = Einsum(x, dy) {equation='cda,cdb->ab'} -> (dW)

Before → after (a map reads through the view)::

    %r = Reshape(h, [8, 128, 12, 64]) -> (h4)
    %m = map[i0=0:8, i1=0:128, i2=0:12, i3=0:64] { y[i0, i1, i2, i3] = h4[i0, i1, i2, i3] * 2.0 }
    →
    %m = map[…] { y[i0, i1, i2, i3] = h[i0, i1, ((i2 * 64) + i3)] * 2.0 }
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Iterable, Iterator

import numpy as np

from ir.containers import Container, Role
from ir.graph import Graph
from ir.memory import VIEW_OPS
from ir.memlet import Memlet
from ir.nodes import MapNode, OpNode
from transforms.base import Match, MatchResult, Touched, fail, scope
from transforms.contractions import ContractionError, absorb_views, emit, is_contraction, spec_of
from transforms.layouts import transpose_of
from transforms.planned import Planned
from transforms.registry import register
from transforms.rewiring import RewireError, copy_node, drop_unused, refresh, reindex_map, rename, replace
from transforms.views import View, reindex, view_of, view_reason

SIDES = ("auto", "producer", "consumer")


@dataclass
class Plan:
    """Edited copies of the kernels that change, and what disappears or is created."""

    side: str
    view: View
    nodes: dict = field(default_factory=dict)              # id -> edited copy
    removed: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)        # containers that may become unused
    constants: dict[str, np.ndarray] = field(default_factory=dict)

    def edit(self, node):
        """The working copy of ``node`` (made on first use)."""
        return self.nodes.setdefault(node.id, copy_node(node))


def _start(v: View, side: str) -> Plan:
    return Plan(side, v, removed=[v.node_id], dropped=list(v.extra_inputs))


def _same_shape_plan(graph: Graph, v: View) -> Plan | str:
    x, y = v.source, v.target
    if y not in graph.outputs:
        plan = _start(v, "consumer")
        for node in graph.consumers(y):
            rename(plan.edit(node), y, x)
        plan.dropped.append(y)
        return plan
    prod = graph.producer(x)
    if graph.container(x).role is not Role.TRANSIENT or x in graph.outputs or prod is None:
        return f"'{y}' is a graph output and '{x}' is not an intermediate its producer could write as '{y}'"
    plan = _start(v, "producer")
    for node in [prod] + [n for n in graph.consumers(x) if n.id != v.node_id]:
        rename(plan.edit(node), x, y)
    plan.dropped.append(x)
    return plan


def _producer_plan(graph: Graph, v: View) -> Plan | str:
    x = v.source
    prod = graph.producer(x)
    if not isinstance(prod, MapNode):
        return f"'{x}' is not written by a map" if prod is not None else f"'{x}' has no producer"
    if graph.container(x).role is not Role.TRANSIENT or x in graph.outputs:
        return f"'{x}' is not a transient intermediate"
    others = [n.id for n in graph.consumers(x) if n.id != v.node_id]
    if others:
        return f"'{x}' is also read by {', '.join(repr(o) for o in others)}"
    plan = _start(v, "producer")
    try:
        reindex_map(plan.edit(prod), x, len(v.source_shape), v.target, reindex(v.source_shape, v.target_shape))
    except RewireError as e:
        return f"map '{prod.id}': {e}"
    plan.dropped.append(x)
    return plan


def _consumer_plan(graph: Graph, v: View, einsum: bool) -> Plan | str:
    y = v.target
    if y in graph.outputs:
        return f"'{y}' is a graph output"
    plan = _start(v, "consumer")
    plan.dropped.append(y)
    to_source = reindex(v.target_shape, v.source_shape)
    for node in graph.consumers(y):
        inner = view_of(graph, node)
        if inner is not None:
            _compose(graph, plan, node, inner)
        elif isinstance(node, MapNode):
            try:
                reindex_map(plan.edit(node), y, len(v.target_shape), v.source, to_source)
            except RewireError as e:
                return f"map '{node.id}': {e}"
        elif is_contraction(node):
            reason = _absorb(graph, plan, node, einsum)
            if reason:
                return reason
        else:
            return f"'{node.id}' ({node.qualified_type}) reads '{y}' and is neither a map, a view nor a " \
                "contraction; expand it first"
    return plan


def _compose(graph: Graph, plan: Plan, node, inner: View) -> None:
    """Reader ``node`` is itself a view of ``Y`` (op or copy map): make it ``Reshape(X)``."""
    v = plan.view
    reshape = isinstance(node, OpNode) and node.op_type == "Reshape" and len(node.inputs) > 1
    shape_in = node.inputs[1].container if reshape else None
    value = graph.values.get(shape_in) if shape_in in graph.values and shape_in not in graph.inputs else None
    if value is not None and (node.attrs.get("allowzero", 0) or 0 not in np.asarray(value).tolist()):
        rename(plan.edit(node), v.target, v.source)
        return
    name = _fresh_name(graph, plan, f"{inner.target}/shape")
    plan.constants[name] = np.asarray(inner.target_shape, dtype=np.int64)
    plan.nodes[node.id] = OpNode(node.id, "Reshape", [Memlet(v.source), Memlet(name)], [Memlet(inner.target)],
                                 opset=graph.opsets.get("", 17), name=node.name, provenance=node.provenance)
    plan.dropped.extend(inner.extra_inputs)


def _fresh_name(graph: Graph, plan: Plan, base: str) -> str:
    name, k = base, 1
    while name in graph.containers or name in plan.constants:
        name, k = f"{base}~{k}", k + 1
    return name


def _absorb(graph: Graph, plan: Plan, node: OpNode, einsum: bool) -> str | None:
    """Contraction ``node`` reads ``X`` (and sibling views' sources) reshape-free."""
    v = plan.view
    try:
        spec = spec_of(graph, node)
    except ContractionError as e:
        return str(e)
    own = {k: v for k, name in enumerate(spec.operands) if name == v.target}
    siblings = {k: s for k, name in enumerate(spec.operands) if k not in own
                and (s := _sibling_view(graph, name)) is not None and s.source != v.target}
    error = ""
    for views in (own, {**own, **siblings}):
        try:
            plan.nodes[node.id] = emit(graph, node, absorb_views(spec, views), einsum)
        except ContractionError as e:
            error = f"'{node.id}' ({node.qualified_type}) cannot read '{v.source}' reshape-free: {e}"
            continue
        for s in (views[k] for k in views if k not in own):
            if all(c.id == node.id for c in graph.consumers(s.target)) and s.target not in graph.outputs:
                plan.removed.append(s.node_id)
                plan.dropped.extend((s.target,) + s.extra_inputs)
        return None
    return error


def _sibling_view(graph: Graph, name: str) -> View | None:
    prod = graph.producer(name)
    v = view_of(graph, prod) if prod is not None else None
    return v if v is not None and not v.same_shape else None


@register
@dataclass(frozen=True)
class ReshapeElimination(Planned):
    name: ClassVar[str] = "reshape_elimination"
    level: ClassVar[int] = 3
    side: str = "auto"
    einsum: bool = True

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        for node in scope(graph, within):
            if isinstance(node, OpNode) and not node.domain and node.op_type in VIEW_OPS:
                yield self.match(node.id, label=f"alias {node.op_type} '{node.id}' (no copy)")
            elif isinstance(node, MapNode) and len(node.body) == 1 and view_of(graph, node) is not None:
                yield self.match(node.id, label=f"alias copy map '{node.id}' (no copy)")

    def _prepared(self, graph: Graph, match: Match) -> Plan | MatchResult:
        ident = match.anchors[0] if match.anchors else ""
        node = graph.nodes.get(ident)
        if node is None:
            return fail(f"no node '{ident}'", ident)
        if self.side not in SIDES:
            return fail(f"unknown side '{self.side}' (choose {', '.join(SIDES)})", ident)
        reason = view_reason(graph, node)
        if reason is not None:
            return fail(reason, ident)
        v = view_of(graph, node)
        if v.same_shape and self.side == "auto":
            found = _same_shape_plan(graph, v)
            return found if isinstance(found, Plan) else fail(f"view '{ident}': {found}", ident)
        reasons = []
        for side in self._sides(graph, v):
            found = _producer_plan(graph, v) if side == "producer" else _consumer_plan(graph, v, self.einsum)
            if isinstance(found, Plan):
                return found
            reasons.append(f"{side}: {found}")
        return fail(f"view '{ident}' ({list(v.source_shape)} → {list(v.target_shape)}) stays: "
                    + "; ".join(reasons), ident)

    def _sides(self, graph: Graph, v: View) -> list[str]:
        if self.side != "auto":
            return [self.side]
        prod = graph.producer(v.source)
        keep_pure = prod is not None and transpose_of(graph, prod) is not None  # fold that one later
        gemm_reader = any(is_contraction(c) for c in graph.consumers(v.target))  # may absorb siblings
        return ["consumer", "producer"] if keep_pure or gemm_reader else ["producer", "consumer"]

    def affected(self, graph: Graph, match: Match) -> tuple[str, ...]:
        node = graph.nodes.get(match.anchors[0]) if match.anchors else None
        v = view_of(graph, node) if node is not None else None
        if v is None:
            return match.anchors
        near = [node.id] + [n.id for n in graph.consumers(v.target)] + [n.id for n in graph.consumers(v.source)]
        prod = graph.producer(v.source)
        near += [prod.id] if prod is not None else []
        for c in graph.consumers(v.target):
            near += [p.id for p in graph.predecessors(c)]
        return tuple(dict.fromkeys(near))

    def _carry_out(self, graph: Graph, match: Match, step: int, plan: Plan) -> Touched:
        for ident in plan.removed:
            graph.remove_node(ident)
        for name, value in plan.constants.items():
            graph.add_container(Container(name, tuple(value.shape), "int64", Role.CONSTANT))
            graph.values[name] = value
        for new in plan.nodes.values():
            replace(graph, refresh(graph, new))
        drop_unused(graph, plan.dropped)
        graph.sort()
        return Touched(removed=tuple(plan.removed), changed=tuple(plan.nodes))


__all__ = ["ReshapeElimination"]
