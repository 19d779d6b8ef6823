"""``expand`` (level 1): lower a library node into one map of tasklets.

Before → after (a LayerNormalization over rows of 768)::

    %ln = LayerNormalization(h, gamma, beta) {axis=-1} -> (y)
    →
    %ln/expanded = map[i0=0:1024] {
      local _sum, _mean, _sq_sum, _inv
      map[r0=0:768] { _sum (wcr=sum) = h[i0, r0] }
      _mean = _sum / 768.0
      …
      map[r2=0:768] { y[i0, r2] = ((h[i0, r2] - _mean) * _inv) * gamma[r2] + beta[r2] }
    }

``impl`` picks the expansion's implementation (e.g. Softmax ``two_pass`` or
``online``; training-mode BatchNormalization expands only with ``batch_stats``);
empty means the node's current choice or the default. Bytes moved
do not change (one kernel becomes one kernel); expansion is what lets the
fusions see inside the op.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterable, Iterator

from ir import lowering
from ir.graph import Graph
from ir.pacing import paced
from ir.movement import Estimate, kernel_estimate
from ir.nodes import OpNode
from transforms.base import OK, Match, MatchResult, Touched, Transformation, fail, scope
from transforms.registry import register


@register
@dataclass(frozen=True)
class Expand(Transformation):
    name: ClassVar[str] = "expand"
    level: ClassVar[int] = 1
    impl: str = ""

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        for node in paced(scope(graph, within)):
            if isinstance(node, OpNode) and (not self.impl or self.impl in lowering.impls(node)) \
                    and lowering.can_expand(graph, node, self.impl or None) is None:
                yield self.match(node.id, label=f"expand {node.op_type} '{node.id}'")

    def check(self, graph: Graph, match: Match) -> MatchResult:
        node = graph.nodes.get(match.anchors[0])
        if node is None:
            return fail(f"no node '{match.anchors[0]}'", match.anchors[0])
        if not isinstance(node, OpNode):
            return fail(f"'{node.id}' is already a map", node.id)
        if self.impl and self.impl not in lowering.impls(node):
            return fail(f"'{node.id}' ({node.op_type}) has no implementation '{self.impl}' "
                        f"(choices: {', '.join(lowering.impls(node)) or 'none'})", node.id)
        reason = lowering.can_expand(graph, node, self.impl or None)
        if reason is not None:
            return fail(reason, node.id)
        return OK

    def predict(self, graph: Graph, match: Match) -> Estimate:
        """The map's figures less the op's: the expansion ``rewrite`` inserts, built without the graph copy."""
        node = graph.nodes[match.anchors[0]]
        return kernel_estimate(graph, lowering.expand(graph, node, self.impl or None)) - kernel_estimate(graph, node)

    def rewrite(self, graph: Graph, match: Match, step: int) -> Touched:
        m = lowering.expand_node(graph, match.anchors[0], self.impl or None)
        m.provenance = (self.name, step)
        return Touched(created=(m.id,), removed=(match.anchors[0],))
