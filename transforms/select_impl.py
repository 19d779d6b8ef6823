"""``select_impl`` (level 1): choose the implementation of a library node.

Before → after::

    %sm = Softmax(x) {axis=-1} -> (y)                  impl=default (two_pass)
    →
    %sm = Softmax(x) {axis=-1} -> (y) impl=online      (expands to a single-sweep map)

    %mm = MatMul(a, b) -> (c)                           impl=blas
    →
    %mm = MatMul(a, b) -> (c) impl=blocked             (reduction dimension in panels)

The choice is recorded on the op (``OpNode.impl``); the reference executor,
``expand`` and the code generators honour it. Bytes moved do not change.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterable, Iterator

from ir import lowering
from ir.graph import Graph
from ir.nodes import OpNode
from transforms.base import OK, Match, MatchResult, Touched, Transformation, fail, scope
from transforms.registry import register


def _current(node: OpNode) -> str:
    choices = lowering.impls(node)
    return node.impl if node.impl in choices else choices[0]


@register
@dataclass(frozen=True)
class SelectImpl(Transformation):
    name: ClassVar[str] = "select_impl"
    level: ClassVar[int] = 1
    impl: str = ""

    @classmethod
    def instances(cls) -> list[Transformation]:
        names = {i for rule in lowering.EXPANSIONS.values() for i in rule.impls}
        names |= {i for choices in lowering.LIBRARY_IMPLS.values() for i in choices}
        return [cls(impl=name) for name in sorted(names)]

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        for node in scope(graph, within):
            if not isinstance(node, OpNode):
                continue
            choices = lowering.impls(node)
            if len(choices) > 1 and (self.impl in choices and self.impl != _current(node)):
                yield self.match(node.id, label=f"{node.op_type} '{node.id}': {_current(node)} → {self.impl}")

    def check(self, graph: Graph, match: Match) -> MatchResult:
        node = graph.nodes.get(match.anchors[0])
        if not isinstance(node, OpNode):
            return fail(f"'{match.anchors[0]}' is not a library node", match.anchors[0])
        choices = lowering.impls(node)
        if self.impl not in choices:
            return fail(f"'{node.id}' ({node.op_type}) has no implementation '{self.impl}' "
                        f"(choices: {', '.join(choices) or 'none'})", node.id)
        if self.impl == _current(node):
            return fail(f"'{node.id}' already uses '{self.impl}'", node.id)
        return OK

    def rewrite(self, graph: Graph, match: Match, step: int) -> Touched:
        graph.nodes[match.anchors[0]].impl = self.impl
        return Touched(changed=(match.anchors[0],))
