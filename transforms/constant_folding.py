"""``constant_folding`` (level 3): evaluate kernels whose results are known before the step runs.

A library node folds when every input is a constant initializer (role ``constant``,
in ``graph.values`` and not a graph input, so no feed can override it), or when it
is ``Shape``/``Size`` of a statically shaped tensor (they read metadata only). Its
results become ``constant`` containers with their values in ``graph.values``; the
kernel disappears, and so do constant inputs nothing else reads. The evaluation
uses ``fold_rules`` (the shape-computing ops; see there for the supported set).
Results larger than ``max_bytes`` are not folded: a broadcast ``Expand`` would turn
a cheap kernel into a large initializer.

Before → after (the ReduceMean gradient's scale in the BERT training graph)::

    %s0 = Size(x) -> (n)                        x: float32[8, 128, 768]
    %s1 = Size(g) -> (one)                      g: float32[] constant
    %d = Div(n, one) -> (k)
    %sc = com.microsoft::Scale(g, k) {scale_down=1} -> (gk)
    →
    container gk: float32[] constant = 1/786432       (4 kernels removed)

Saves the folded kernels' bytes (their writes; ``Shape``/``Size`` read nothing).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterable, Iterator

import numpy as np

from ir import dtypes
from ir.containers import Role
from ir.graph import Graph
from ir.nodes import OpNode
from transforms.base import OK, Match, MatchResult, Touched, Transformation, fail, scope
from transforms.fold_rules import FOLD_RULES, METADATA, evaluate
from transforms.registry import register
from transforms.rewiring import drop_unused
from transforms.views import static_shape


def is_constant(graph: Graph, name: str) -> bool:
    """A constant initializer that no feed can override."""
    return name in graph.values and name not in graph.inputs and graph.container(name).role is Role.CONSTANT


def _foldable(graph: Graph, node) -> bool:
    """Cheap precheck for ``matches``: metadata of a static shape, or constants only."""
    if not isinstance(node, OpNode):
        return False
    ins = [m.container for m in node.inputs if m is not None]
    if not node.domain and node.op_type in METADATA:
        return bool(ins) and static_shape(graph, ins[0]) is not None
    return bool(ins) and all(is_constant(graph, n) for n in ins)


def _label(node: OpNode) -> str:
    return f"'{node.id}' ({node.qualified_type})"


@register
@dataclass(frozen=True)
class ConstantFolding(Transformation):
    name: ClassVar[str] = "constant_folding"
    level: ClassVar[int] = 3
    max_bytes: int = 65536

    def matches(self, graph: Graph, within: Iterable[str] | None = None) -> Iterator[Match]:
        for node in scope(graph, within):
            if _foldable(graph, node):
                yield self.match(node.id, label=f"fold {node.op_type} '{node.id}' into a constant")

    def _fold(self, graph: Graph, match: Match) -> list[np.ndarray] | MatchResult:
        ident = match.anchors[0] if match.anchors else ""
        node = graph.nodes.get(ident)
        if not isinstance(node, OpNode):
            return fail(f"'{ident}' is not a library node" if node else f"no node '{ident}'", ident)
        if (node.domain, node.op_type) not in FOLD_RULES:
            return fail(f"{_label(node)} has no folding rule (supported: "
                        f"{', '.join(sorted(op for _, op in FOLD_RULES))})", ident)
        if not node.domain and node.op_type in METADATA and node.inputs and node.inputs[0] is not None \
                and static_shape(graph, node.inputs[0].container) is None:
            return fail(f"{_label(node)} reads '{node.inputs[0].container}', whose shape is not static", ident)
        if not _foldable(graph, node):
            return fail(f"{_label(node)} reads a tensor that is not a constant initializer "
                        "(a graph input, a parameter, or computed at run time)", ident)
        outs = [m.container for m in node.outputs if m is not None]
        for name in outs:
            if name in graph.outputs:
                return fail(f"{_label(node)} writes graph output '{name}'", ident)
            shape = static_shape(graph, name)
            size = None if shape is None else int(np.prod(shape, dtype=np.int64)) * \
                dtypes.itemsize(graph.container(name).dtype)
            if size is not None and size > self.max_bytes:
                return fail(f"{_label(node)} would become a {size:,}-byte constant '{name}' "
                            f"(> max_bytes={self.max_bytes:,})", ident)
        return self._evaluate(graph, node)

    def _evaluate(self, graph: Graph, node: OpNode) -> list[np.ndarray] | MatchResult:
        values = [graph.values.get(m.container) if m is not None else None for m in node.inputs]
        shapes = [static_shape(graph, m.container) if m is not None else None for m in node.inputs]
        try:
            results = evaluate(node.domain, node.op_type, values, shapes, node.attrs, node.opset)
        except (ValueError, TypeError, IndexError, KeyError) as e:
            return fail(f"{_label(node)} could not be evaluated: {type(e).__name__}: {e}", node.id)
        out = []
        for m, value in zip(node.outputs, results):
            if m is None:
                continue
            c = graph.container(m.container)
            value = np.asarray(value).astype(dtypes.to_numpy(c.dtype))
            want = static_shape(graph, m.container)
            if want is not None and tuple(value.shape) != want:
                return fail(f"{_label(node)} evaluates to shape {list(value.shape)} but '{m.container}' "
                            f"is {list(want)}", node.id)
            out.append(value)
        if len(out) != len([m for m in node.outputs if m is not None]):
            return fail(f"{_label(node)}: the rule gave fewer results than the node has outputs", node.id)
        return out

    def check(self, graph: Graph, match: Match) -> MatchResult:
        res = self._fold(graph, match)
        return res if isinstance(res, MatchResult) else OK

    def affected(self, graph: Graph, match: Match) -> tuple[str, ...]:
        """The node and its readers: a reader's figures depend on which inputs are constants
        (an expansion folds 1-element constants into its expressions)."""
        node = graph.nodes.get(match.anchors[0]) if match.anchors else None
        if node is None:
            return match.anchors
        return (node.id,) + tuple(n.id for n in graph.successors(node))

    def rewrite(self, graph: Graph, match: Match, step: int) -> Touched:
        values = self._fold(graph, match)
        readers = tuple(n.id for n in graph.successors(graph.nodes[match.anchors[0]]))
        node = graph.remove_node(match.anchors[0])
        for m, value in zip([m for m in node.outputs if m is not None], values):
            c = graph.container(m.container)
            graph.set_container(c.with_shape(value.shape).with_role(Role.CONSTANT))
            graph.values[m.container] = value
        drop_unused(graph, [m.container for m in node.inputs if m is not None])
        return Touched(removed=(node.id,), changed=readers)


__all__ = ["ConstantFolding", "is_constant"]
