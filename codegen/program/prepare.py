"""The graph a backend compiles: every op that has a map form is expanded first.

``lower_for_codegen(graph)`` returns a clone in which each ``OpNode`` that can be
expanded (``ir.lowering.can_expand``) is replaced by its map, with the node's own
``impl`` choice — the progressive lowering of DESIGN §2 carried to its end, so a
backend only meets maps (fused kernels) and library calls (contractions, convolution,
pooling, losses, shape ops). Kernel boundaries do not change: one op becomes one map,
so bytes moved and the history's ids stay meaningful (a map's id is ``<op id>/expanded``).
``Identity`` is kept: a backend aliases it instead of copying.
"""
from __future__ import annotations

from ir import lowering
from ir.graph import Graph
from ir.nodes import OpNode

KEEP_AS_LIBRARY = frozenset({"Identity"})


def lower_for_codegen(graph: Graph) -> Graph:
    """A clone of ``graph`` with every expandable op expanded (see the module docstring)."""
    g = graph.clone()
    for node in list(g.nodes.values()):
        if isinstance(node, OpNode) and node.op_type not in KEEP_AS_LIBRARY and lowering.can_expand(g, node) is None:
            lowering.expand_node(g, node.id)
    return g
