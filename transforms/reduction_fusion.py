"""``reduction_fusion`` (level 2): fuse elementwise producers and consumers into a reduction kernel.

A *reduction kernel* is a map with nested maps or wcr outputs: an expanded Softmax,
LayerNormalization, ReduceSum, SoftmaxGrad, LayerNormalizationGrad, …

**Producer side** — pointwise ``P`` writes ``T``, reduction ``C`` reads it (Substation's
``softmax``: scale·x + mask before the softmax; ``bdrln``: bias + dropout + residual
before the layernorm; the loss gradient or residual-gradient sum before a layernorm
gradient). Before → after::

    %mul = map[i0=0:8, i1=0:12, i2=0:128, i3=0:128] { s[i0, i1, i2, i3] = x[i0, i1, i2, i3] * 0.125 }
    %sm = map[i0=0:8, i1=0:12, i2=0:128] {
      local _max, _sum
      map[r0=0:128] { _max (wcr=max) = s[i0, i1, i2, r0] }
      map[r1=0:128] { _sum (wcr=sum) = exp(s[i0, i1, i2, r1] - _max) }
      map[r2=0:128] { y[i0, i1, i2, r2] = exp(s[i0, i1, i2, r2] - _max) / _sum }
    }
    →
    %fused:mul = map[i0=0:8, i1=0:12, i2=0:128] {
      local _max, _sum
      map[r0=0:128] { local _s; _s = x[i0, i1, i2, r0] * 0.125; _max (wcr=max) = _s }
      map[r1=0:128] { local _s_1; _s_1 = x[i0, i1, i2, r1] * 0.125; _sum (wcr=sum) = exp(_s_1 - _max) }
      map[r2=0:128] { … }
    }

Algebra: with ``T = P(x)`` pointwise, ``C(T)`` equals ``C`` with ``P(x[idx])`` substituted at
every read ``T[idx]``. Bytes: −(``T``'s write and read) − ``P``'s operand reads, + ``C``'s reads of
``P``'s operands; FLOPs rise by ``P``'s work × (reads of ``T`` in ``C`` − 1) — both are reported in
the Δ. If ``T`` (or another result of ``P``) is still read elsewhere, ``C`` stores it at its
*covering* read (one visiting each element once, e.g. layernorm's first sweep), so ``P``
always disappears.

**Consumer side** — reduction ``P`` writes ``T`` and ``C`` reads it: a pointwise epilogue (a
scale after SoftmaxGrad, the residual copies of a layernorm gradient), or a single-sweep
reduction (a bias-gradient ReduceSum of a layernorm gradient's dX, Substation's ``blnrd``
with ``baob``). Before → after::

    %lng = map[i0=0:8, i1=0:128] { …; map[r2=0:768] { dx[i0, i1, r2] = … } }
    %db = map[j0=0:768] { map[s0=0:8, s1=0:128] { db[j0] (wcr=sum) = dx[s0, s1, j0] } }
    →
    %fused:lng = map[i0=0:8, i1=0:128] { …; map[r2=0:768] { local _dx; _dx = …; db[r2] (wcr=sum) = _dx } }

Algebra: each point of ``C`` reads one element of ``T``, which ``P`` has just computed, so
``C`` runs there; a wcr reduction over ``C``'s points becomes one over ``P``'s (the same sum in
another order). A wcr of ``P`` into ``T`` in a nested map is first made a local accumulator
(``T[i] = acc`` after the sweep), so a consumer runs once per reduced element. Bytes:
−(``T``'s write and read) when ``T`` dies, else −(its read); FLOPs unchanged.

``side`` restricts the matches to "producer" or "consumer" fusions ("any": both).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterable, Iterator

from ir.graph import Graph
from ir.nodes import MapNode, Tasklet
from transforms.base import Match, MatchResult, Touched, fail
from transforms.fusion import (absorb_consumer, creates_cycle, drop_dead, inline_producer,
                               swap_kernels, touched)
from transforms.map_fusion import edges, fused_id
from transforms.planned import PlannedFusion, two_maps
from transforms.registry import register

SIDES = ("any", "producer", "consumer")


def is_reduction(m: MapNode) -> bool:
    """Nested maps or a wcr output at the top level (cheap; ``check`` validates the rest)."""
    return any(isinstance(s, MapNode) or (isinstance(s, Tasklet) and s.output.wcr) for s in m.body)


def side_of(p: MapNode, c: MapNode) -> str | None:
    """'producer' (pointwise into a reduction), 'consumer' (out of a reduction) or None."""
    if is_reduction(p):
        return "consumer"
    return "producer" if is_reduction(c) else None


@register
@dataclass(frozen=True)
class ReductionFusion(PlannedFusion):
    name: ClassVar[str] = "reduction_fusion"
    level: ClassVar[int] = 2
    side: str = "any"

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        seen = set()
        for p, c, _ in edges(graph, within):
            side = side_of(p, c)
            if side is None or (p.id, c.id) in seen or self.side not in ("any", side):
                continue
            seen.add((p.id, c.id))
            yield self.match(p.id, c.id, label=f"{side}: fuse {p.label} → {c.label}")

    def _plan(self, graph: Graph, match: Match) -> tuple[MapNode, MapNode, list[str], str] | MatchResult:
        if self.side not in SIDES:
            return fail(f"unknown side '{self.side}' (choose one of {', '.join(SIDES)})")
        maps = two_maps(graph, match, self.name)
        if isinstance(maps, MatchResult):
            return maps
        p, c = maps
        side = side_of(p, c)
        if side is None:
            return fail(f"neither '{p.id}' nor '{c.id}' is a reduction kernel (use map_fusion)", p.id, c.id)
        if self.side not in ("any", side):
            return fail(f"'{p.id}' → '{c.id}' is a {side}-side fusion, not {self.side}-side", p.id, c.id)
        shared = [m.container for m in c.inputs if graph.producer(m.container) is p]
        if not shared:
            return fail(f"'{c.id}' reads nothing that '{p.id}' writes", p.id, c.id)
        if side == "producer" and len(shared) > 1:
            return fail(f"'{c.id}' reads several results of '{p.id}' ({', '.join(shared)})", p.id, c.id)
        if creates_cycle(graph, p.id, c.id):
            return fail(f"'{c.id}' also depends on '{p.id}' through another kernel; fusing would "
                        "create a cycle", p.id, c.id)
        return p, c, shared, side

    def _build(self, graph: Graph, plan, new_id: str | None = None) -> MapNode:
        p, c, shared, side = plan
        new_id = new_id or fused_id(graph, p.id)
        if side == "producer":
            return inline_producer(graph, p, c, shared[0], new_id)
        return absorb_consumer(graph, p, c, shared, new_id)

    def _swap(self, graph: Graph, match: Match, step: int, plan, fused) -> Touched:
        p, c, shared, _ = plan
        swap_kernels(graph, (p.id, c.id), fused, (self.name, step))
        drop_dead(graph, shared + p.output_names())
        return touched(match.anchors, fused.id)

