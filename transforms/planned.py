"""Transformations that plan once: the check is the plan, and the rewrite carries it out (``Planned``).

The eliminations, ``layout_select`` and ``gemm_epilogue_fusion`` plan; fusions plan, then build. A planned fusion has ``_plan(graph, match)`` — cheap structural checks that return
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

from ir.errors import MatchFailure
from ir.graph import Graph
from ir.nodes import MapNode
from transforms.base import OK, Match, MatchResult, Touched, Transformation, fail
from transforms.fusion import FusionError


class Planned(Transformation):
    """A transformation whose check is a plan that its rewrite carries out, planned once per applied match.

    ``_prepared(graph, match)`` returns what the rewrite needs, or a failed ``MatchResult`` saying why the
    match does not apply; ``_carry_out(graph, match, step, prepared)`` rewrites with it. ``prepare`` and
    ``check`` are the plan; ``engine.apply`` hands the plan to ``rewrite_prepared`` on this same graph, and a
    plain ``rewrite`` plans first."""

    def _prepared(self, graph: Graph, match: Match) -> Any:
        raise NotImplementedError

    def _carry_out(self, graph: Graph, match: Match, step: int, prepared) -> Touched:
        raise NotImplementedError

    def prepare(self, graph: Graph, match: Match) -> tuple[MatchResult, Any]:
        found = self._prepared(graph, match)
        return (found, None) if isinstance(found, MatchResult) else (OK, found)

    def check(self, graph: Graph, match: Match) -> MatchResult:
        return self.prepare(graph, match)[0]

    def rewrite(self, graph: Graph, match: Match, step: int) -> Touched:
        return self.rewrite_prepared(graph, match, step, None)

    def rewrite_prepared(self, graph: Graph, match: Match, step: int, prepared: Any) -> Touched:
        """Carry out ``prepared`` (from ``prepare`` on this graph), or a plan made now when it is None."""
        if prepared is None:
            prepared = self._prepared(graph, match)
            if isinstance(prepared, MatchResult):
                node = graph.nodes.get(prepared.nodes[0]) if prepared.nodes else None
                raise MatchFailure(f"{self.name} does not apply: {prepared.reason}", node, graph)
        return self._carry_out(graph, match, step, prepared)


class PlannedFusion(Planned):
    """Base of map_fusion, reduction_fusion, horizontal_fusion and optimizer_fusion: the plan is
    ``(plan, built kernel)``, and ``_swap`` puts the kernel in place."""

    def _plan(self, graph: Graph, match: Match):
        raise NotImplementedError

    def _build(self, graph: Graph, plan):
        raise NotImplementedError

    def _prepared(self, graph: Graph, match: Match):
        """The check's plan and, when it passes, the kernel built from it (a failed build fails the check)."""
        plan = self._plan(graph, match)
        if isinstance(plan, MatchResult):
            return plan
        try:
            return plan, self._build(graph, plan)
        except FusionError as e:
            return fail(str(e), *match.anchors)

    def _carry_out(self, graph: Graph, match: Match, step: int, prepared) -> Touched:
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
