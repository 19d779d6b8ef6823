"""``map_fusion`` (level 2): fuse a producer map into its consumer map over the same space.

Before → after (bias add then GELU, both expanded)::

    %add = map[i0=0:8, i1=0:128, i2=0:3072] { h[i0, i1, i2] = x[i0, i1, i2] + b[i2] }
    %gelu = map[j0=0:8, j1=0:128, j2=0:3072] { y[j0, j1, j2] = 0.5 * h[j0, j1, j2] * (1 + erf(…)) }
    →
    %fused:add = map[i0=0:8, i1=0:128, i2=0:3072] {
      local _h
      _h = x[i0, i1, i2] + b[i2]
      y[i0, i1, i2] = 0.5 * _h * (1 + erf(…))
    }

Algebra: for every point p, C(P(p)) computed in one iteration — valid when C reads
``h`` only at the point P writes it. ``h`` becomes a local (0 bytes) unless other
kernels read it or it is a graph output, in which case it is still stored.
Saves ``2 × bytes(h)`` (one write, one read) when ``h`` dies, plus the re-reads of
operands the two maps share.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterable, Iterator

from ir.graph import Graph
from ir.nodes import MapNode
from transforms.base import Match, MatchResult, Touched, fail, scope
from transforms.fusion import creates_cycle, fuse_point
from transforms.planned import PlannedFusion, two_maps
from transforms.registry import register


def fused_id(graph: Graph, producer_id: str) -> str:
    """Deterministic id of a fused kernel: ``fused:<first kernel's base id>``."""
    base = producer_id[len("fused:"):] if producer_id.startswith("fused:") else producer_id
    return "fused:" + base


def edges(graph: Graph, within: Iterable[str] | None):
    """(producer map, consumer map, container) for every map→map dataflow edge in scope."""
    wanted = None if within is None else set(within)
    for c in scope(graph, None):
        if not isinstance(c, MapNode):
            continue
        for mem in c.inputs:
            p = graph.producer(mem.container)
            if isinstance(p, MapNode) and p.id != c.id and (wanted is None or p.id in wanted or c.id in wanted):
                yield p, c, mem.container


@register
@dataclass(frozen=True)
class MapFusion(PlannedFusion):
    name: ClassVar[str] = "map_fusion"
    level: ClassVar[int] = 2

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        seen = set()
        for p, c, _ in edges(graph, within):
            if (p.id, c.id) not in seen:
                seen.add((p.id, c.id))
                yield self.match(p.id, c.id, label=f"fuse {p.label} → {c.label}")

    def _plan(self, graph: Graph, match: Match) -> tuple[MapNode, MapNode, str] | MatchResult:
        maps = two_maps(graph, match, self.name)
        if isinstance(maps, MatchResult):
            return maps
        p, c = maps
        shared = [m.container for m in c.inputs if graph.producer(m.container) is p]
        if not shared:
            return fail(f"'{c.id}' reads nothing that '{p.id}' writes", p.id, c.id)
        if len(shared) > 1:
            return fail(f"'{c.id}' reads several results of '{p.id}' ({', '.join(shared)})", p.id, c.id)
        if creates_cycle(graph, p.id, c.id):
            return fail(f"'{c.id}' also depends on '{p.id}' through another kernel; fusing would "
                        "create a cycle", p.id, c.id)
        return p, c, shared[0]

    def _build(self, graph: Graph, plan) -> MapNode:
        p, c, container = plan
        return fuse_point(graph, p, c, container, fused_id(graph, p.id))

    def rewrite_prepared(self, graph: Graph, match: Match, step: int, prepared) -> Touched:
        """Put the kernel the check built in place of the pair. Its id is claimed only once the
        pair is gone (fusing ``fused:x`` again keeps ``fused:x``; a taken id gets a ``~k``
        suffix): the kernel built before depends on its id only through ``id`` and ``name``."""
        if prepared is None:
            plan = self._plan(graph, match)
            prepared = (plan, None)
        (p, c, container), fused = prepared
        graph.remove_node(p.id)
        graph.remove_node(c.id)
        new_id = graph.ids.claim(fused_id(graph, p.id))
        graph.ids.release(new_id)
        if fused is None:
            fused = fuse_point(graph, p, c, container, new_id)
        elif fused.id != new_id:
            fused.id = fused.name = new_id
        fused.provenance = (self.name, step)
        graph.splice((), (fused,))
        if container not in graph.outputs and not graph.consumers(container) and graph.producer(container) is None:
            graph.remove_container(container)
        return _touched(match, fused.id)


def _touched(match: Match, new_id: str) -> Touched:
    removed = tuple(a for a in match.anchors if a != new_id)
    changed = (new_id,) if new_id in match.anchors else ()
    created = () if changed else (new_id,)
    return Touched(created=created, removed=removed, changed=changed)
