"""Fusions that plan, then build: the check they share.

A planned fusion has ``_plan(graph, match)`` — cheap structural checks that return
the plan or ``fail(reason, *ids)`` naming the nodes — and ``_build(graph, plan)``,
which builds the fused kernel off the graph or raises ``FusionError`` with the
reason. ``prepare`` (and ``check``) is the plan plus a trial build, so a match is offered
only when its rewrite will succeed, and ``engine.apply`` hands the built kernel to
``rewrite_prepared``, whose ``_swap`` puts it in place: one plan and one build per applied
match (``map_fusion`` renames its kernel when the id it claims after removing the pair differs);
``two_maps`` is the common first step of map fusions.
"""
from __future__ import annotations

from typing import Any

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

    def prepare(self, graph: Graph, match: Match) -> tuple[MatchResult, Any]:
        """The check and, when it passes, ``(plan, built kernel)`` for ``rewrite_prepared``."""
        plan = self._plan(graph, match)
        if isinstance(plan, MatchResult):
            return plan, None
        try:
            built = self._build(graph, plan)
        except FusionError as e:
            return fail(str(e), *match.anchors), None
        return OK, (plan, built)

    def check(self, graph: Graph, match: Match) -> MatchResult:
        return self.prepare(graph, match)[0]

    def rewrite(self, graph: Graph, match: Match, step: int) -> Touched:
        return self.rewrite_prepared(graph, match, step, None)

    def rewrite_prepared(self, graph: Graph, match: Match, step: int, prepared: Any) -> Touched:
        """Put the built kernel in place of the anchors (``prepared`` from ``prepare`` on this graph:
        the kernel is not built again; None: plan and build now)."""
        if prepared is None:
            plan = self._plan(graph, match)
            prepared = (plan, self._build(graph, plan))
        return self._swap(graph, match, step, *prepared)

    def _swap(self, graph: Graph, match: Match, step: int, plan, built) -> Touched:
        raise NotImplementedError


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
