"""``layout_select`` (level 3): store a tensor with its dimensions permuted.

An intermediate ``C`` is stored as ``C' = transpose(C, perm)`` (same name, permuted
shape), and every kernel that touches it is rewritten to match (``layouts.relayout``):
its producer writes permuted indices (a map), swaps operands or flags (a GEMM) or
composes permutations (a Transpose); its readers read permuted indices, toggle
transposition flags or compose. A Transpose reader whose permutation becomes the
identity vanishes — its readers read ``C'`` directly. Graph inputs and outputs keep
their layout (the interface is fixed).

The anchors name ``C``: ``(producer,)``, or ``(producer, reader)`` when the producer
writes several tensors. ``perm`` empty (the default) lets the match choose, so
matches only offer layouts that pay off (Substation: the layout is chosen per tensor):

- anchors ``(producer, transpose)``: the layout of a Transpose reading ``C``, which
  makes that transpose vanish (saves its ``2 × bytes(C)``);
- anchors ``(producer[, reader])``: the layout in which every map access of ``C`` is
  unit-stride (the innermost parameter indexes the last dimension); bytes equal.

``contraction_only=True`` offers only tensors a contraction produces: a GEMM or Einsum
writes any layout at the same cost (it swaps operands or flags), so only the readers
change — on BERT-base the fused AdamW of the FFN weights read its gradient transposed
and ran 4x faster once the weight-gradient Einsum wrote it in the weight's layout
(12 → 3 ms). A map producer's own writes are not weighed by the unit-stride rule, and a
map the code generator runs column-blocked (a bias-gradient sum) got 10x slower when
relaid out, so the Substation recipe uses this restricted form.

Before → after (K is written head-major but read with the sequence axis innermost)::

    %add = map[i0=0:8, i1=0:128, i2=0:768] { kt[i0, (i2 // 64), (i2 % 64), i1] = … }   kt: [8, 12, 64, 128]
    %mm = MatMul(q, kt) -> (s)
    →  (perm = (0, 1, 3, 2))
    %add = map[…] { kt[i0, (i2 // 64), i1, (i2 % 64)] = … }                           kt: [8, 12, 128, 64]
    %mm = com.microsoft::FusedMatMul(q, kt) {transB=1} -> (s)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Iterable, Iterator

from ir import expr as E
from ir.containers import Role
from ir.graph import Graph
from ir.pacing import paced
from ir.nodes import MapNode
from transforms.base import Match, MatchResult, Touched, fail, scope
from transforms.contractions import is_contraction
from transforms.layouts import LayoutError, Perm, Transpose, inverse, is_identity, perm_after, permuted_shape, \
    relayout, transpose_of
from transforms.planned import Planned
from transforms.registry import register
from transforms.rewiring import accessors, copy_node, drop_unused, refresh, rename, replace
from transforms.scopes import accesses
from transforms.views import static_shape


def _lowest(e: E.Expr) -> str | None:
    """The parameter that moves an index expression by one element (Horner's last digit)."""
    if isinstance(e, E.Var):
        return e.name
    if isinstance(e, E.Bin) and e.op == "mod":
        return _lowest(e.a)
    if isinstance(e, E.Bin) and e.op == "add":
        return _lowest(e.b)
    return None


def _unit_dims(graph: Graph, container: str) -> list[int] | None:
    """For every map access of ``container``: the dimension its innermost parameter indexes
    with unit step (None if some access has no such dimension, or there is no map access)."""
    dims = []
    for node in accessors(graph, container):
        if not isinstance(node, MapNode):
            continue
        for acc in accesses(node, container):
            inner = acc.scopes[-1].param_names[-1:] if acc.scopes[-1].params else []
            hits = [k for k, ix in enumerate(acc.memlet.subset or ()) if inner and _lowest(ix) == inner[0]]
            if len(hits) != 1:
                return None
            dims.append(hits[0])
    return dims or None


def unit_stride_perm(graph: Graph, container: str) -> Perm | None:
    """The layout that makes every map access of ``container`` unit-stride, if it differs."""
    shape = static_shape(graph, container)
    dims = _unit_dims(graph, container) if shape and len(shape) > 1 else None
    if not dims or len(set(dims)) != 1 or all(d == 1 for d in shape[dims[0] + 1:]):
        return None   # disagreeing accesses, or already innermost (trailing size-1 dims are free)
    return tuple(k for k in range(len(shape)) if k != dims[0]) + (dims[0],)


def _relayable(graph: Graph, name: str) -> bool:
    """Cheap precheck: every kernel touching ``name`` is a map, a contraction or a Transpose."""
    return all(isinstance(n, MapNode) or is_contraction(n) or (n.op_type == "Transpose" and not n.domain)
               for n in [graph.producer(name)] + graph.consumers(name) if n is not None)


@dataclass
class Plan:
    container: str
    perm: Perm
    nodes: dict = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def _anchored(graph: Graph, anchors: tuple[str, ...]) -> tuple[str, Transpose | None] | MatchResult:
    """The tensor the anchors name — ``(producer,)``, or ``(producer, reader)`` — and the reader
    if it is a (non-identity) transpose of it."""
    prod = graph.nodes.get(anchors[0]) if anchors else None
    if prod is None:
        return fail(f"no node '{anchors[0] if anchors else ''}'", *anchors[:1])
    outs = [m.container for m in prod.outputs if m is not None]
    if len(anchors) == 1:
        return (outs[0], None) if len(outs) == 1 else fail(
            f"'{prod.id}' writes {len(outs)} tensors: name one of its readers as a second anchor", prod.id)
    reader = graph.nodes.get(anchors[1])
    shared = [o for o in outs if reader is not None and o in {m.container for m in reader.inputs if m}]
    if not shared:
        return fail(f"'{anchors[1]}' reads nothing that '{prod.id}' writes", *anchors[:2])
    t = transpose_of(graph, reader)
    return shared[0], (t if t is not None and t.source == shared[0] and not is_identity(t.perm) else None)


@register
@dataclass(frozen=True)
class LayoutSelect(Planned):
    name: ClassVar[str] = "layout_select"
    level: ClassVar[int] = 3
    perm: tuple[int, ...] = ()
    einsum: bool = True
    contraction_only: bool = False

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        for node in paced(scope(graph, within)):
            if self.contraction_only and not is_contraction(node):
                continue
            outs = [m.container for m in node.outputs if m is not None]
            for name in outs:
                if graph.container(name).role is Role.TRANSIENT:
                    yield from self._candidates(graph, node.id, name, len(outs) == 1)

    def _candidates(self, graph: Graph, prod: str, name: str, only: bool) -> Iterator[Match]:
        shape = static_shape(graph, name)
        if shape is None or len(shape) < 2 or name in graph.outputs or not _relayable(graph, name):
            return
        vanishing = [t for c in graph.consumers(name) if (t := transpose_of(graph, c)) is not None
                     and t.source == name and not is_identity(t.perm)]
        others = [c.id for c in graph.consumers(name) if c.id not in {t.node_id for t in vanishing}]
        plain = (prod,) if only else (prod, others[0]) if others else None
        unit = unit_stride_perm(graph, name)
        if self.perm:
            for t in vanishing:
                if t.perm == self.perm:
                    yield self.match(prod, t.node_id, label=f"store '{name}' as transpose(…, {list(self.perm)})")
            if unit == self.perm and plain is not None:
                yield self.match(*plain, label=f"store '{name}' as transpose(…, {list(self.perm)})")
            return
        for t in vanishing:
            yield self.match(prod, t.node_id, label=f"store '{name}' as '{t.node_id}' reads it "
                             "(the transpose vanishes)")
        if unit is not None and plain is not None:
            yield self.match(*plain, label=f"store '{name}' so that every map accesses it unit-stride")

    def _choose(self, graph: Graph, match: Match) -> tuple[str, Perm] | MatchResult:
        found = _anchored(graph, match.anchors)
        if isinstance(found, MatchResult):
            return found
        name, t = found
        if self.perm:
            return name, tuple(self.perm)
        if t is not None:
            return name, t.perm
        perm = unit_stride_perm(graph, name)
        return (name, perm) if perm is not None else fail(f"every map access of '{name}' is already "
                                                          "unit-stride (or they disagree)", match.anchors[0])

    def _plan(self, graph: Graph, match: Match) -> Plan | MatchResult:
        chosen = self._choose(graph, match)
        if isinstance(chosen, MatchResult):
            return chosen
        name, perm = chosen
        c, shape = graph.container(name), static_shape(graph, name)
        if c.role is not Role.TRANSIENT or name in graph.outputs or graph.producer(name) is None:
            return fail(f"'{name}' is not a transient intermediate: its layout is part of the interface",
                        match.anchors[0])
        if shape is None or sorted(perm) != list(range(len(shape))) or is_identity(perm):
            return fail(f"{list(perm)} is not a non-trivial permutation of the {len(shape or ())} "
                        f"dimensions of '{name}'", match.anchors[0])
        plan, q = Plan(name, perm), inverse(perm)
        vanishing = []
        for node in accessors(graph, name):
            try:
                plan.nodes[node.id] = relayout(graph, node, name, name, q, self.einsum)
            except LayoutError as e:
                return fail(f"'{name}' cannot be stored as transpose(…, {list(perm)}): {e}", node.id)
            t = transpose_of(graph, node)
            if t is not None and t.source == name and is_identity(perm_after(t, name, q)) \
                    and t.target not in graph.outputs:
                vanishing.append(t)
        for t in vanishing:      # after every relayout: a reader of both C and the transpose keeps both edits
            self._vanish(graph, plan, t.node_id, t.target)
        return plan

    def _vanish(self, graph: Graph, plan: Plan, ident: str, target: str) -> None:
        plan.nodes.pop(ident, None)
        plan.removed.append(ident)
        plan.dropped.append(target)
        for reader in graph.consumers(target):
            plan.nodes[reader.id] = rename(copy_node(plan.nodes.get(reader.id, reader)), target, plan.container)

    def _prepared(self, graph: Graph, match: Match) -> Plan | MatchResult:
        prod = graph.nodes.get(match.anchors[0]) if match.anchors else None
        if self.contraction_only and prod is not None and not is_contraction(prod):
            return fail(f"'{prod.id}' is not a contraction (contraction_only)", prod.id)
        return self._plan(graph, match)

    def affected(self, graph: Graph, match: Match) -> tuple[str, ...]:
        found = _anchored(graph, match.anchors)
        if isinstance(found, MatchResult):
            return match.anchors
        name = found[0]
        near = [n.id for n in accessors(graph, name)]
        for node in accessors(graph, name):
            t = transpose_of(graph, node)
            near += [r.id for r in graph.consumers(t.target)] if t is not None and t.source == name else []
        return tuple(dict.fromkeys(near))

    def _carry_out(self, graph: Graph, match: Match, step: int, plan: Plan) -> Touched:
        c = graph.container(plan.container)
        for ident in plan.removed:
            graph.remove_node(ident)
        graph.set_container(c.with_shape(permuted_shape(c.shape, plan.perm)))
        for new in plan.nodes.values():
            replace(graph, refresh(graph, new))
        drop_unused(graph, plan.dropped)
        graph.sort()
        return Touched(removed=tuple(plan.removed), changed=tuple(plan.nodes))


__all__ = ["LayoutSelect", "unit_stride_perm"]
