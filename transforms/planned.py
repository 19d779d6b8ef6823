"""Fusions that plan, then build: the check they share.

A planned fusion has ``_plan(graph, match)`` — cheap structural checks that return
the plan or ``fail(reason, *ids)`` naming the nodes — and ``_build(graph, plan)``,
which builds the fused kernel off the graph or raises ``FusionError`` with the
reason. ``check`` is the plan plus a trial build, so a match is offered only when
its rewrite will succeed; ``two_maps`` is the common first step of map fusions.
"""
from __future__ import annotations

from ir.graph import Graph
from ir.nodes import MapNode
from transforms.base import OK, Match, MatchResult, Transformation, fail
from transforms.fusion import FusionError


class PlannedFusion(Transformation):
    """Base of map_fusion, reduction_fusion, horizontal_fusion and optimizer_fusion."""

    def _plan(self, graph: Graph, match: Match):
        raise NotImplementedError

    def _build(self, graph: Graph, plan):
        raise NotImplementedError

    def check(self, graph: Graph, match: Match) -> MatchResult:
        plan = self._plan(graph, match)
        if isinstance(plan, MatchResult):
            return plan
        try:
            self._build(graph, plan)
        except FusionError as e:
            return fail(str(e), *match.anchors)
        return OK


def two_maps(graph: Graph, match: Match, name: str) -> tuple[MapNode, MapNode] | MatchResult:
    """The (producer, consumer) maps named by a two-anchor match, or why they are not."""
    if len(match.anchors) != 2:
        return fail(f"{name} needs two anchors (producer, consumer)")
    p, c = (graph.nodes.get(a) for a in match.anchors)
    for ident, node in zip(match.anchors, (p, c)):
        if node is None:
            return fail(f"no node '{ident}'", ident)
        if not isinstance(node, MapNode):
            return fail(f"'{ident}' is a library node, not a map; expand it first", ident)
    return p, c
