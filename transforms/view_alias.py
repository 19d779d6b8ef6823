"""``view_alias`` (level 3): a view that stays a node reads and writes nothing — its output is its input's bytes.

``reshape_elimination`` removes a view by re-indexing its readers or its producer. Where it cannot (the
attention heads' ``Reshape`` (8, 128, 768) → (8, 128, 12, 64) splits an axis an Einsum reads, and its
producer is a GEMM, not a map) the view stays as a node, and the byte count charges it a copy:
``2 × bytes(Y)``. No backend makes that copy: the program of every backend (``codegen.program``)
gives ``Y`` as ``X.reshape(shape)``, a view of ``X``'s buffer, and the memory plan (``ir.memory``)
already lets ``Y`` share ``X``'s storage. This transformation records that choice on the node
(``OpNode.impl = "alias"``), and the count (``ir.movement``) then charges it nothing — what DaCe
does with a ``View`` data descriptor.

Before → after::

    %r = Reshape(q, [8, 128, 12, 64]) -> (q4)           6.3 MB (a copy)
    →
    %r = Reshape(q, [8, 128, 12, 64]) -> (q4) impl=alias   0 B (q4 is q's bytes)

The check refuses a view whose input is not laid out densely in row-major order, i.e. one that reads,
directly or through other views, the output of an ``Expand`` (the program gives that as a broadcast
view with zero strides; reshaping it copies), and a view whose input or output has a symbolic or
unknown shape. Values do not change, and neither does anything the program runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterable, Iterator

from ir.graph import Graph
from ir.memory import ALIAS, VIEW_OPS, is_alias
from ir.nodes import OpNode
from transforms.base import OK, Match, MatchResult, Touched, Transformation, fail, scope
from transforms.registry import register
from transforms.views import view_reason


def dense_source_reason(graph: Graph, node: OpNode) -> str | None:
    """None when ``node``'s data input is a dense row-major buffer in every backend's program (not
    an ``Expand``'s broadcast, directly or through views), else why not."""
    seen: set[str] = set()
    name = node.inputs[0].container
    while name not in seen:
        seen.add(name)
        prod = graph.producer(name)
        if not isinstance(prod, OpNode) or prod.domain:
            return None
        if prod.op_type == "Expand":
            return (f"'{node.id}' reads '{name}', the broadcast '{prod.id}' (Expand) makes: reshaping it copies; "
                    "expand or fuse the broadcast first")
        if prod.op_type not in VIEW_OPS or not prod.inputs or prod.inputs[0] is None:
            return None
        name = prod.inputs[0].container
    return None


@register
@dataclass(frozen=True)
class ViewAlias(Transformation):
    name: ClassVar[str] = "view_alias"
    level: ClassVar[int] = 3

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        for node in scope(graph, within):
            if isinstance(node, OpNode) and not node.domain and node.op_type in VIEW_OPS and not is_alias(node):
                yield self.match(node.id, label=f"{node.op_type} '{node.id}' as an alias of its input (no copy)")

    def check(self, graph: Graph, match: Match) -> MatchResult:
        ident = match.anchors[0] if match.anchors else ""
        node = graph.nodes.get(ident)
        if not isinstance(node, OpNode):
            return fail(f"no library node '{ident}'", ident)
        if is_alias(node):
            return fail(f"'{ident}' is already an alias of its input", ident)
        reason = view_reason(graph, node) or dense_source_reason(graph, node)
        return fail(reason, ident) if reason else OK

    def rewrite(self, graph: Graph, match: Match, step: int) -> Touched:
        graph.nodes[match.anchors[0]].impl = ALIAS
        return Touched(changed=(match.anchors[0],))
